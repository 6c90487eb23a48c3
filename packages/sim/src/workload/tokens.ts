/**
 * Deterministic token ids for workloads that do not carry token ids: pages for hash-id traces,
 * unique filler for length-only traces, and a text tokenizer for full-text traces.
 */

/** Murmur3's 32-bit finalizer: a bijection on 32-bit integers. *
 * @example
 * ```ts
 * import { mix32 } from '@kvc/sim'
 * mix32(1) !== mix32(2) // true: a bijection on 32-bit integers
 * ```
 */
export function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b)
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35)
  return (x ^ (x >>> 16)) >>> 0
}

/**
 * Expand block ids into token pages: block `b` becomes the `pageTokens` tokens
 * `b·pageTokens … b·pageTokens + pageTokens − 1`. Distinct blocks share no token, equal blocks
 * give equal pages, so a radix cache with a page size dividing `pageTokens` matches exactly the
 * blocks a prefix-hash trace says are shared.
 *
 * @example
 * ```ts
 * import { expandBlockIds } from '@kvc/sim'
 * expandBlockIds([0, 7], 4) // Uint32Array [0, 1, 2, 3, 28, 29, 30, 31]
 * ```
 */
export function expandBlockIds(ids: ArrayLike<number>, pageTokens: number): Uint32Array {
  const out = new Uint32Array(ids.length * pageTokens)
  let k = 0
  for (let i = 0; i < ids.length; i++) {
    const base = ids[i]! * pageTokens
    for (let j = 0; j < pageTokens; j++) out[k++] = base + j
  }
  return out
}

/**
 * `n` filler tokens unique to request `key` (no prefix shared with another key, up to hash
 * collisions of the first token, about 2^-32).
 *
 * @example
 * ```ts
 * import { uniqueTokens } from '@kvc/sim'
 * uniqueTokens(3, 5).length // 5
 * ```
 */
export function uniqueTokens(key: number, n: number): Uint32Array {
  const out = new Uint32Array(n)
  const h = mix32(key + 0x9e3779b9)
  for (let j = 0; j < n; j++) out[j] = mix32(h ^ Math.imul(j + 1, 0x27d4eb2f))
  return out
}

/**
 * How a full-text trace becomes token ids.
 *
 * - `pieces` (default): a GPT-2-like pre-tokenizer (letter runs, digit runs of up to 3, single
 *   punctuation marks, whitespace runs), long pieces cut every 4 characters, each piece hashed to
 *   an id. About 4 characters per token on English and code, like a BPE vocabulary, with no
 *   vocabulary file to ship.
 * - `bytes`: one token per UTF-8 byte (exact, about 4× more tokens than a BPE tokenizer).
 *
 * Both are deterministic and prefix-stable: equal text prefixes give equal token prefixes (up to
 * the piece that straddles the point where two texts diverge).
 *
 * @example
 * ```ts
 * import type { TextTokenizer } from '@kvc/sim'
 * const t: TextTokenizer = 'pieces'
 * ```
 */
export type TextTokenizer = 'pieces' | 'bytes'

const PIECE = /\s+|[A-Za-z]+|[0-9]{1,3}|[^\sA-Za-z0-9]/gu

function fnv1a(s: string, from: number, to: number): number {
  let h = 0x811c9dc5
  for (let i = from; i < to; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/**
 * Tokenize text deterministically (see {@link TextTokenizer}).
 *
 * @example
 * ```ts
 * import { tokenizeText } from '@kvc/sim'
 * tokenizeText('hello world', 'pieces').length // 5: 'hell', 'o', ' ', 'worl', 'd'
 * tokenizeText('hé', 'bytes') // Uint32Array [104, 195, 169]
 * ```
 */
export function tokenizeText(text: string, mode: TextTokenizer = 'pieces'): Uint32Array {
  if (mode === 'bytes') {
    const b = Buffer.from(text, 'utf8')
    const out = new Uint32Array(b.length)
    for (let i = 0; i < b.length; i++) out[i] = b[i]!
    return out
  }
  const ids: number[] = []
  PIECE.lastIndex = 0
  for (let m = PIECE.exec(text); m !== null; m = PIECE.exec(text)) {
    const from = m.index
    const to = from + m[0].length
    for (let p = from; p < to; p += 4) ids.push(fnv1a(text, p, Math.min(to, p + 4)))
  }
  return Uint32Array.from(ids)
}
