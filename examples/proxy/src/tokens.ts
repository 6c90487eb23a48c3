import { type BlockHasher, sglangBlockHasher } from '@kvc/radix-cache'
import { fakeChatTemplate, fakeTokenize } from '@kvc/sglang-emulator'
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

function pieces(text: string): Uint32Array {
  const n = Math.ceil(text.length / 4)
  const out = new Uint32Array(n)
  for (let i = 0; i < n; i++) {
    let h = 0x811c9dc5
    const end = Math.min(text.length, i * 4 + 4)
    for (let j = i * 4; j < end; j++) h = Math.imul(h ^ text.charCodeAt(j), 0x01000193)
    out[i] = h >>> 0
  }
  return out
}

/** The tokenizer of a mode (see {@link PromptTokenizer}). */
export function createTokenizer(mode: TokenizerMode): PromptTokenizer {
  if (mode === 'emulator') {
    return {
      mode,
      chat: (m) => Uint32Array.from(fakeTokenize(fakeChatTemplate(m))),
      text: (t) => Uint32Array.from(fakeTokenize(t)),
    }
  }
  return { mode, chat: (m) => pieces(fakeChatTemplate(m)), text: pieces }
}

/**
 * Chained block hashes of a session's prompts, computed incrementally: the pages a prompt shares
 * with the session's previous prompt are not hashed again (a multi-turn prompt grows by its
 * append, so each turn hashes only its new pages). Uses SGLang's SHA-256 chain, the hash in
 * SGLang's (and the emulator's) KV events; a prompt with a cache salt (a tenant's namespace) seeds
 * the chain with it (`namespaceInSeed`), so its blocks never match another namespace's in the
 * router's residency index (an unsalted prompt hashes exactly as upstream SGLang).
 */
export class BlockHashCache {
  readonly pageSize: number
  readonly #hasher: BlockHasher
  #tokens: Uint32Array = new Uint32Array(0)
  #digests: Uint8Array[] = []
  #ids: bigint[] = []
  #salt: string | undefined

  constructor(pageSize: number, hasher: BlockHasher = sglangBlockHasher({ namespaceInSeed: true })) {
    this.pageSize = pageSize
    this.#hasher = hasher
  }

  /** Block ids of every full page of `tokens`, in the namespace `salt` (none by default). */
  blocks(tokens: Uint32Array, salt?: string): bigint[] {
    const ps = this.pageSize
    const pages = Math.floor(tokens.length / ps)
    const prev = this.#tokens
    let keep = 0
    const limit = salt === this.#salt ? Math.min(pages, this.#ids.length) : 0
    this.#salt = salt
    outer: while (keep < limit) {
      const base = keep * ps
      for (let j = 0; j < ps; j++) if (tokens[base + j] !== prev[base + j]) break outer
      keep++
    }
    const digests = this.#digests.slice(0, keep)
    const ids = this.#ids.slice(0, keep)
    let parent = keep === 0 ? undefined : digests[keep - 1]
    for (let p = keep; p < pages; p++) {
      const d = this.#hasher.hashBlock(parent, tokens.subarray(p * ps, (p + 1) * ps), salt)
      digests.push(d)
      ids.push(this.#hasher.blockId(d))
      parent = d
    }
    this.#tokens = tokens
    this.#digests = digests
    this.#ids = ids
    return ids
  }
}
