import { badRequest } from './errors.js'
import { yieldToEventLoop } from './tokens.js'

const DEPTH_ERROR = (maxDepth: number) =>
  badRequest(
    `request body nests JSON arrays and objects deeper than the limit of ${maxDepth} levels (limits.maxJsonDepth)`,
  )

/**
 * Refuses JSON text that nests arrays and objects deeper than `maxDepth` (400, naming the limit),
 * before it is parsed: a body of 400 KB can nest 200,000 arrays, which takes `JSON.parse` half a
 * second and makes every later `JSON.stringify` (the request forwarded to a worker) throw a
 * `RangeError`. One pass over the text, strings skipped; nothing is allocated.
 *
 * @throws ProxyError `BAD_REQUEST` (400) past `maxDepth`.
 */
export function checkJsonDepth(text: string, maxDepth: number): void {
  const state = { depth: 0, inString: false, skip: 0 }
  if (!scanDepth(text, 0, text.length, maxDepth, state)) throw DEPTH_ERROR(maxDepth)
}

/** Scans `text[from, to)`, carrying the nesting state; `false` once past `maxDepth`. */
function scanDepth(
  text: string,
  from: number,
  to: number,
  maxDepth: number,
  state: { depth: number; inString: boolean; skip: number },
): boolean {
  let { depth, inString } = state
  let i = from
  for (; i < to; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c /* \ */) i++
      else if (c === 0x22 /* " */) inString = false
      continue
    }
    if (c === 0x22) inString = true
    else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > maxDepth) return false
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) depth--
  }
  state.depth = depth
  state.inString = inString
  // An escape at the end of a slice skips the first character of the next one.
  state.skip = i - to
  return true
}

/** Bodies above this many bytes are decoded one at a time, in steps (see {@link decodeJsonBody}). */
export const LARGE_BODY_BYTES = 256 * 1024

const DEPTH_SLICE_CHARS = 256 * 1024

/** Runs the decoding of large bodies one at a time, in arrival order. */
let decodeQueue: Promise<unknown> = Promise.resolve()

/**
 * Decodes a request body's bytes as JSON after {@link checkJsonDepth} (when `maxDepth` is given).
 * A small body is decoded at once. A large one (above {@link LARGE_BODY_BYTES}) is decoded in
 * steps with a yield to the event loop between them (text, depth scan in slices, parse), and one
 * large body at a time: six 4 MB bodies arriving together would otherwise be decoded back to back
 * in one turn of the event loop, stalling every other request for a second or more.
 *
 * @throws ProxyError `BAD_REQUEST` (400): too deep, or not JSON.
 */
export function decodeJsonBody(chunks: readonly Buffer[], size: number, maxDepth?: number): Promise<unknown> {
  const parse = (text: string): unknown => {
    try {
      return JSON.parse(text)
    } catch (e) {
      throw badRequest(`request body is not valid JSON: ${(e as Error).message}`)
    }
  }
  if (size <= LARGE_BODY_BYTES) {
    try {
      const text = Buffer.concat(chunks as Buffer[]).toString('utf8')
      if (maxDepth !== undefined) checkJsonDepth(text, maxDepth)
      return Promise.resolve(parse(text))
    } catch (e) {
      return Promise.reject(e)
    }
  }
  const run = decodeQueue.then(async () => {
    await yieldToEventLoop()
    const text = Buffer.concat(chunks as Buffer[]).toString('utf8')
    if (maxDepth !== undefined) {
      const state = { depth: 0, inString: false, skip: 0 }
      for (let at = 0; at < text.length; at += DEPTH_SLICE_CHARS) {
        await yieldToEventLoop()
        if (!scanDepth(text, at + state.skip, Math.min(text.length, at + DEPTH_SLICE_CHARS), maxDepth, state))
          throw DEPTH_ERROR(maxDepth)
      }
    }
    await yieldToEventLoop()
    return parse(text)
  })
  decodeQueue = run.catch(() => undefined)
  return run
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
