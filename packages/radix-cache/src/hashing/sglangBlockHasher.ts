import { RadixCacheError } from '../errors/radixCacheError.js'
import type { BlockHasher } from './blockHasher.js'
import { sha256, sha256Words } from './sha256.js'

/** Options of {@link sglangBlockHasher}. */
export interface SglangBlockHasherOptions {
  /**
   * Seed the chain with the namespace (`extraKey`). Upstream SGLang does not (default `false`).
   *
   * When `true` and `extraKey` is a non-empty string, the first page of a chain is hashed with the
   * prior digest `sha256(utf8('kvc-ns:' + extraKey))` instead of no prior, so equal token pages in
   * different namespaces (LoRA adapters, cache salts) get different block hashes. This is **our
   * extension**: the resulting ids no longer match an upstream SGLang engine's KV events.
   */
  readonly namespaceInSeed?: boolean
}

/** Length in bytes of a SHA-256 digest, which is also the length of a parent digest. */
const DIGEST_BYTES = 32

/** Byte-swaps a 32-bit value: a token's little-endian bytes read as one big-endian SHA-256 word. */
function bswap32(x: number): number {
  return (x << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24)
}

/**
 * SGLang-compatible block hasher (`get_hash_str` / `hash_str_to_int64` of SGLang's KV events).
 *
 * - Digest of a page: `sha256(parentDigest || t0 || t1 || ...)`, where `parentDigest` is the
 *   32 raw bytes of the previous page's digest (nothing for the first page of a chain) and each
 *   token is written as 4 little-endian bytes (unsigned).
 * - {@link BlockHasher.blockId}: the first 8 bytes of the digest as a big-endian unsigned 64-bit
 *   integer, wrapped to a signed int64 (Python `int(hex[:16], 16)` then two's complement), as
 *   SGLang puts in `BlockStored.block_hashes`.
 * - `extraKey` is ignored unless `namespaceInSeed` is set (see {@link SglangBlockHasherOptions}).
 *
 * Hashing a page allocates only the 32-byte digest: the message is laid out as SHA-256 words in a
 * scratch buffer sized to the largest page seen.
 *
 * @example
 * ```ts
 * import { sglangBlockHasher, computeBlockHashes } from '@kvc/radix-cache'
 * const h = sglangBlockHasher()
 * const ids = computeBlockHashes(h, [1, 2, 3, 4, 5, 6, 7, 8], 4) // two signed int64 bigints
 * // Namespaced chains (our extension, not upstream-compatible):
 * const ns = sglangBlockHasher({ namespaceInSeed: true })
 * computeBlockHashes(ns, [1, 2, 3, 4], 4, 'lora-a') // differs from computeBlockHashes(ns, [1, 2, 3, 4], 4)
 * ```
 */
export function sglangBlockHasher(options: SglangBlockHasherOptions = {}): BlockHasher {
  const namespaceInSeed = options.namespaceInSeed ?? false
  let words = new Int32Array(8 + 64)
  let memoKey: string | undefined
  let memoPrior: Uint8Array | undefined
  const idBytes = new Uint8Array(8)
  const idView = new DataView(idBytes.buffer)

  function namespacePrior(extraKey: string): Uint8Array {
    if (extraKey !== memoKey || memoPrior === undefined) {
      memoPrior = sha256(new TextEncoder().encode(`kvc-ns:${extraKey}`))
      memoKey = extraKey
    }
    return memoPrior
  }

  return {
    name: 'sglang-sha256',
    hashBlock(parent: Uint8Array | undefined, page: Uint32Array, extraKey: string | undefined): Uint8Array {
      let prior = parent
      if (prior === undefined && namespaceInSeed && extraKey !== undefined && extraKey !== '') {
        prior = namespacePrior(extraKey)
      }
      const n = page.length
      const priorWords = prior === undefined ? 0 : 8
      const wordCount = priorWords + n
      if (words.length < wordCount) words = new Int32Array(Math.max(wordCount, 2 * words.length))
      const m = words
      if (prior !== undefined) {
        if (prior.length !== DIGEST_BYTES) {
          throw new RadixCacheError(
            'INVALID_OPTION',
            `sglang-sha256: a parent digest must be ${DIGEST_BYTES} bytes, got ${prior.length}`,
            prior.length,
          )
        }
        for (let i = 0; i < 8; i++) {
          const o = 4 * i
          m[i] = (prior[o]! << 24) | (prior[o + 1]! << 16) | (prior[o + 2]! << 8) | prior[o + 3]!
        }
      }
      for (let j = 0; j < n; j++) m[priorWords + j] = bswap32(page[j]!)
      return sha256Words(m, wordCount, new Uint8Array(DIGEST_BYTES))
    },
    blockId(digest: Uint8Array): bigint {
      if (digest.length !== DIGEST_BYTES) {
        throw new RadixCacheError(
          'INVALID_OPTION',
          `sglang-sha256: a digest must be ${DIGEST_BYTES} bytes, got ${digest.length}`,
          digest.length,
        )
      }
      for (let i = 0; i < 8; i++) idBytes[i] = digest[i]!
      return idView.getBigInt64(0, false)
    },
  }
}
