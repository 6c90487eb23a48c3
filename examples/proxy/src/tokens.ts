import { type BlockHasher, sglangBlockHasher } from '@kvc/radix-cache'
import { TOKEN_OFFSET, fakeChatTemplate } from '@kvc/sglang-emulator'
import type { TokenizerMode } from './config.js'

/** A chat message as the proxy reads it (OpenAI shape; only `role` and text content matter here). */
export interface ChatMessageLike {
  readonly role: string
  readonly content: unknown
}

/**
 * How the proxy counts a prompt's tokens and hashes its blocks (it never sees the model's own
 * tokenizer):
 *
 * - `emulator`: the emulator's byte-level tokenizer over its chat template (`fakeChatTemplate` +
 *   `fakeTokenize` of `@kvc/sglang-emulator`). Exact for the emulator, so the proxy's block hashes
 *   equal the ones in the emulator's KV events and the residency index sees real overlap.
 * - `estimate`: the same template cut into 4-character pieces, each hashed to an id: about a
 *   BPE tokenizer's count, prefix-stable (a shared text prefix gives shared leading blocks), but
 *   not the model's ids — residency then rests on the router's own updates (`predictOnSuccess`)
 *   and session bindings; turn KV events off.
 *
 * Token-id prompts (`/v1/completions` with `prompt: number[]`) are used as given in both modes.
 */
export interface PromptTokenizer {
  readonly mode: TokenizerMode
  chat(messages: readonly ChatMessageLike[]): Uint32Array
  text(prompt: string): Uint32Array
}

/** Token units (pieces or bytes) handled between two yields of {@link tokenizeInSlices}. */
const TOKENIZE_SLICE = 65_536

/**
 * The tokens of `text` in `mode`, computed in slices: the generator yields after each slice of
 * about {@link TOKENIZE_SLICE} tokens (a fraction of a millisecond) and returns the tokens.
 * `PromptTokenizer.text` drains it at once; the proxy lets other requests run between slices.
 */
export function* tokenizeInSlices(mode: TokenizerMode, text: string): Generator<void, Uint32Array> {
  if (mode === 'emulator') {
    // The emulator's tokens (`fakeTokenize`: UTF-8 bytes + `TOKEN_OFFSET`), straight into a typed array.
    const bytes = Buffer.from(text, 'utf8')
    const out = new Uint32Array(bytes.length)
    for (let at = 0; at < bytes.length; at += TOKENIZE_SLICE) {
      const end = Math.min(bytes.length, at + TOKENIZE_SLICE)
      for (let i = at; i < end; i++) out[i] = bytes[i]! + TOKEN_OFFSET
      if (end < bytes.length) yield
    }
    return out
  }
  const n = Math.ceil(text.length / 4)
  const out = new Uint32Array(n)
  for (let at = 0; at < n; at += TOKENIZE_SLICE) {
    const last = Math.min(n, at + TOKENIZE_SLICE)
    for (let i = at; i < last; i++) {
      let h = 0x811c9dc5
      const end = Math.min(text.length, i * 4 + 4)
      for (let j = i * 4; j < end; j++) h = Math.imul(h ^ text.charCodeAt(j), 0x01000193)
      out[i] = h >>> 0
    }
    if (last < n) yield
  }
  return out
}

function drain<T>(g: Generator<void, T>): T {
  let r = g.next()
  while (r.done !== true) r = g.next()
  return r.value
}

/** The tokenizer of a mode (see {@link PromptTokenizer}). */
export function createTokenizer(mode: TokenizerMode): PromptTokenizer {
  const text = (t: string): Uint32Array => drain(tokenizeInSlices(mode, t))
  return { mode, chat: (m) => text(fakeChatTemplate(m)), text }
}

/**
 * Chained block hashes of a session's prompts, computed incrementally: the pages a prompt shares
 * with the session's previous prompt are not hashed again (a multi-turn prompt grows by its
 * append, so each turn hashes only its new pages). Uses SGLang's SHA-256 chain, the hash in
 * SGLang's (and the emulator's) KV events; a prompt with a cache salt (a tenant's namespace) seeds
 * the chain with it (`namespaceInSeed`), so its blocks never match another namespace's in the
 * router's residency index (an unsalted prompt hashes exactly as upstream SGLang).
 *
 * It keeps hashes, not the prompt: per page the chain digest, the block id and a 64-bit
 * fingerprint of the page's tokens (to tell which leading pages the next prompt shares), about
 * 48 bytes per page of 16 tokens where the prompt's tokens took 64 ({@link BlockHashCache.bytes}).
 * Two different pages with one fingerprint (odds about 2^-64) would give the second prompt the
 * first one's block ids from there on: a routing hint off, never a wrong answer.
 */
export class BlockHashCache {
  readonly pageSize: number
  readonly #hasher: BlockHasher
  #pages = 0
  /** Digest length of the hasher (bytes), known after the first page. */
  #stride = 0
  #digests: Uint8Array = new Uint8Array(0)
  #ids: BigUint64Array = new BigUint64Array(0)
  /** The hasher's ids are signed 64-bit integers (SGLang's are): read them back as such. */
  #signed = false
  /** Two 32-bit hashes of each page's tokens. */
  #fingerprints: Uint32Array = new Uint32Array(0)
  /** The namespace of the hashes kept. */
  #salt: string | undefined

  constructor(pageSize: number, hasher: BlockHasher = sglangBlockHasher({ namespaceInSeed: true })) {
    this.pageSize = pageSize
    this.#hasher = hasher
  }

  /** Memory held for the session (bytes, the typed arrays' sizes). */
  get bytes(): number {
    return this.#digests.byteLength + this.#ids.byteLength + this.#fingerprints.byteLength
  }

  /** Block ids of every full page of `tokens`, in the namespace `salt` (none by default). */
  blocks(tokens: Uint32Array, salt?: string): bigint[] {
    const steps = this.#run(tokens, salt, Number.POSITIVE_INFINITY)
    let r = steps.next()
    while (r.done !== true) r = steps.next()
    return r.value
  }

  /**
   * {@link BlockHashCache.blocks} in slices of `pagesPerSlice` pages, letting other work of the
   * event loop run between slices (a 4 MB prompt takes seconds to hash). Calls for one session
   * must not overlap (the proxy runs a session's turns one after the other).
   */
  async blocksAsync(tokens: Uint32Array, salt?: string, pagesPerSlice = 256): Promise<bigint[]> {
    const steps = this.#run(tokens, salt, pagesPerSlice)
    let r = steps.next()
    while (r.done !== true) {
      await yieldToEventLoop()
      r = steps.next()
    }
    return r.value
  }

  *#run(tokens: Uint32Array, salt: string | undefined, slice: number): Generator<void, bigint[]> {
    const ps = this.pageSize
    const pages = Math.floor(tokens.length / ps)
    const fp = new Uint32Array(2 * pages)
    let keep = 0
    let sameSoFar = true
    // Hashes of another namespace are of no use: every page is hashed again.
    const known = salt === this.#salt ? Math.min(pages, this.#pages) : 0
    for (let p = 0; p < pages; p++) {
      fingerprint(tokens, p * ps, ps, fp, 2 * p)
      if (
        sameSoFar &&
        p < known &&
        fp[2 * p] === this.#fingerprints[2 * p] &&
        fp[2 * p + 1] === this.#fingerprints[2 * p + 1]
      )
        keep++
      else sameSoFar = false
      if ((p + 1) % (slice * 16) === 0) yield
    }
    const stride = this.#stride
    const ids = new BigUint64Array(pages)
    ids.set(this.#ids.subarray(0, keep))
    let digests = new Uint8Array(stride * pages)
    digests.set(this.#digests.subarray(0, stride * keep))
    let parent = keep === 0 ? undefined : digests.subarray(stride * (keep - 1), stride * keep)
    for (let p = keep; p < pages; p++) {
      const d = this.#hasher.hashBlock(parent, tokens.subarray(p * ps, (p + 1) * ps), salt)
      if (this.#stride === 0) {
        // The first page this cache hashes (keep is 0): learn the digest length.
        this.#stride = d.length
        digests = new Uint8Array(d.length * pages)
      }
      digests.set(d, this.#stride * p)
      const id = this.#hasher.blockId(d)
      if (id < 0n) this.#signed = true
      ids[p] = BigInt.asUintN(64, id)
      parent = digests.subarray(this.#stride * p, this.#stride * (p + 1))
      if ((p - keep + 1) % slice === 0) yield
    }
    this.#pages = pages
    this.#salt = salt
    this.#digests = digests
    this.#ids = ids
    this.#fingerprints = fp
    const out = new Array<bigint>(pages)
    for (let p = 0; p < pages; p++) out[p] = this.#signed ? BigInt.asIntN(64, ids[p]!) : ids[p]!
    return out
  }
}

/** Two independent 32-bit hashes (FNV-1a and a multiply-rotate mix) of `n` tokens at `from`. */
function fingerprint(t: Uint32Array, from: number, n: number, out: Uint32Array, at: number): void {
  let a = 0x811c9dc5
  let b = 0x9e3779b9 ^ n
  for (let i = from, end = from + n; i < end; i++) {
    const x = t[i]!
    a = Math.imul(a ^ x, 0x01000193)
    b = Math.imul(b ^ x, 0x85ebca6b)
    b = (b << 13) | (b >>> 19)
  }
  out[at] = a >>> 0
  out[at + 1] = b >>> 0
}

/** Lets the event loop run pending I/O (other requests) before going on. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}
