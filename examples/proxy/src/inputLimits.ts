import { badRequest } from './errors.js'

/**
 * Refuses JSON text that nests arrays and objects deeper than `maxDepth` (400, naming the limit),
 * before it is parsed: a body of 400 KB can nest 200,000 arrays, which takes `JSON.parse` half a
 * second and makes every later `JSON.stringify` (the request forwarded to a worker) throw a
 * `RangeError`. One pass over the text, strings skipped; nothing is allocated.
 *
 * @throws ProxyError `BAD_REQUEST` (400) past `maxDepth`.
 */
export function checkJsonDepth(text: string, maxDepth: number): void {
  let depth = 0
  let inString = false
  for (let i = 0, n = text.length; i < n; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c /* \ */) i++
      else if (c === 0x22 /* " */) inString = false
      continue
    }
    if (c === 0x22) inString = true
    else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > maxDepth)
        throw badRequest(
          `request body nests JSON arrays and objects deeper than the limit of ${maxDepth} levels (limits.maxJsonDepth)`,
        )
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) depth--
  }
}

/**
 * The prompt's size in characters as the proxy will tokenize it (message contents, text parts,
 * or the completion prompt), counted without building the prompt. Checked against
 * `limits.maxPromptChars` before tokenizing, so a prompt that can never fit is refused (400)
 * without spending the CPU to count its tokens.
 */
export function promptChars(
  messages: readonly { readonly content: unknown }[] | undefined,
  promptText: string | undefined,
): number {
  if (promptText !== undefined) return promptText.length
  let n = 0
  for (const m of messages ?? []) {
    const c = m.content
    if (typeof c === 'string') n += c.length
    else if (Array.isArray(c)) {
      for (const p of c) {
        const t = typeof p === 'object' && p !== null ? (p as { text?: unknown }).text : undefined
        if (typeof t === 'string') n += t.length
      }
    }
  }
  return n
}
