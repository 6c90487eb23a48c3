/**
 * The emulator's deterministic fake model: a byte-level tokenizer, a chat template whose
 * rendering of an assistant turn reproduces the previous prompt plus output exactly (so
 * multi-turn chats hit the prefix cache as real templates do), and a next-token function that
 * depends only on the prompt and the step.
 *
 * @module
 */

/**
 * Token ids 0–2 are special; byte `b` is token `b + 3`.
 *
 * @example
 * ```ts
 * import { TOKEN_OFFSET } from '@kvc/sglang-emulator'
 * const tokenOfByte = (b: number) => b + TOKEN_OFFSET
 * ```
 */
export const TOKEN_OFFSET = 3
/**
 * Padding / health-check token.
 *
 * @example
 * ```ts
 * import { PAD_TOKEN } from '@kvc/sglang-emulator'
 * const healthProbe = { input_ids: [PAD_TOKEN], sampling_params: { max_new_tokens: 1 } }
 * ```
 */
export const PAD_TOKEN = 0
/**
 * @example
 * ```ts
 * import { BOS_TOKEN } from '@kvc/sglang-emulator'
 * const withBos = [BOS_TOKEN, 10, 11]
 * ```
 */
export const BOS_TOKEN = 1
/**
 * @example
 * ```ts
 * import { EOS_TOKEN } from '@kvc/sglang-emulator'
 * const ended = (ids: number[]) => ids.at(-1) === EOS_TOKEN
 * ```
 */
export const EOS_TOKEN = 2
/**
 * Vocabulary size of the fake tokenizer.
 *
 * @example
 * ```ts
 * import { VOCAB_SIZE } from '@kvc/sglang-emulator'
 * VOCAB_SIZE // 259
 * ```
 */
export const VOCAB_SIZE = 256 + TOKEN_OFFSET

const encoder = new TextEncoder()
const decoder = new TextDecoder()
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz     '

/**
 * Token ids of a text: its UTF-8 bytes, each offset by {@link TOKEN_OFFSET}.
 *
 * @example
 * ```ts
 * import { fakeTokenize } from '@kvc/sglang-emulator'
 * fakeTokenize('hi') // [107, 108]
 * ```
 */
export function fakeTokenize(text: string): number[] {
  const bytes = encoder.encode(text)
  const out = new Array<number>(bytes.length)
  for (let i = 0; i < bytes.length; i++) out[i] = bytes[i]! + TOKEN_OFFSET
  return out
}

/**
 * Text of token ids (special tokens are skipped; ids beyond the vocabulary render as `�`).
 *
 * @example
 * ```ts
 * import { fakeDetokenize, fakeTokenize } from '@kvc/sglang-emulator'
 * fakeDetokenize(fakeTokenize('héllo')) // 'héllo'
 * ```
 */
export function fakeDetokenize(ids: readonly number[]): string {
  const bytes: number[] = []
  for (const t of ids) if (t >= TOKEN_OFFSET && t < VOCAB_SIZE) bytes.push(t - TOKEN_OFFSET)
  return decoder.decode(Uint8Array.from(bytes))
}

/**
 * The fake chat template: each message as `<|role|>\n{content}\n`, then `<|assistant|>\n` as the
 * generation prompt. Rendering an assistant message reproduces "previous prompt + generated
 * text" byte for byte, so turn t+1's prompt extends turn t's prompt and output.
 *
 * @example
 * ```ts
 * import { fakeChatTemplate } from '@kvc/sglang-emulator'
 * fakeChatTemplate([{ role: 'user', content: 'Hi' }]) // '<|user|>\nHi\n<|assistant|>\n'
 * ```
 */
export function fakeChatTemplate(
  messages: readonly { readonly role: string; readonly content: unknown }[],
  addGenerationPrompt = true,
): string {
  let s = ''
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!
    const content = contentText(m.content)
    // The assistant turn that ends the conversation continues the generation prompt.
    s += `<|${m.role}|>\n${content}\n`
  }
  if (addGenerationPrompt) s += '<|assistant|>\n'
  return s
}

function contentText(c: unknown): string {
  if (typeof c === 'string') return c
  if (Array.isArray(c)) {
    return c
      .map((p) =>
        typeof p === 'object' && p !== null && typeof (p as { text?: unknown }).text === 'string'
          ? (p as { text: string }).text
          : '',
      )
      .join('')
  }
  return ''
}

/**
 * The deterministic "model": output token `step` of a prompt is a letter or a space chosen by a
 * hash of the prompt's hash and the step, so the same prompt always yields the same text.
 *
 * @example
 * ```ts
 * import { fakeNextToken, fakePromptHash } from '@kvc/sglang-emulator'
 * const h = fakePromptHash([1, 2, 3])
 * fakeNextToken(h, 0) === fakeNextToken(h, 0) // true
 * ```
 */
export function fakeNextToken(promptHash: number, step: number): number {
  let h = Math.imul(promptHash ^ (step + 0x9e3779b9), 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  const ch = ALPHABET.charCodeAt((h >>> 0) % ALPHABET.length)
  return ch + TOKEN_OFFSET
}

/**
 * FNV-1a hash of a token sequence (32 bits).
 *
 * @example
 * ```ts
 * import { fakePromptHash } from '@kvc/sglang-emulator'
 * fakePromptHash([1, 2]) !== fakePromptHash([2, 1]) // true
 * ```
 */
export function fakePromptHash(tokens: ArrayLike<number>): number {
  let h = 0x811c9dc5
  for (let i = 0; i < tokens.length; i++) h = Math.imul(h ^ tokens[i]!, 0x01000193)
  return h >>> 0
}
