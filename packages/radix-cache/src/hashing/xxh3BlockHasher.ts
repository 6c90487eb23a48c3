import { RadixCacheError } from '../errors/radixCacheError.js'
import type { BlockHasher } from './blockHasher.js'
import { joinU64, splitSeed, viewOf, xxh3Into, xxh3PairInto } from './xxh3.js'

/** Options of {@link xxh3BlockHasher}. */
export interface Xxh3BlockHasherOptions {
  /** Seed of XXH3-64 (Dynamo: 1337). Taken modulo 2^64. */
  readonly seed?: bigint
}

/** Length in bytes of an {@link xxh3BlockHasher} digest: sequence hash then local hash, both u64 LE. */
const DIGEST_BYTES = 16

/** Whether typed arrays use little-endian byte order here (then a token page is its own LE bytes). */
const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1

function digestLengthError(what: string, length: number): RadixCacheError {
  return new RadixCacheError(
    'INVALID_OPTION',
    `xxh3-64: ${what} must be a ${DIGEST_BYTES}-byte digest of xxh3BlockHasher, got ${length} bytes`,
    length,
  )
}

function readU32LE(bytes: Uint8Array, o: number): number {
  return (bytes[o]! | (bytes[o + 1]! << 8) | (bytes[o + 2]! << 16) | (bytes[o + 3]! << 24)) >>> 0
}

function writeU32LE(bytes: Uint8Array, o: number, v: number): void {
  bytes[o] = v
  bytes[o + 1] = v >>> 8
  bytes[o + 2] = v >>> 16
  bytes[o + 3] = v >>> 24
}

/**
 * Dynamo / Mooncake-compatible XXH3-64 rolling block hasher (Dynamo's `compute_block_hash_for_seq`
 * and `compute_next_sequence_hash`).
 *
 * - Local hash of a page: `xxh3_64(tokens as u32 little-endian bytes, seed)` (Dynamo's
 *   `LocalBlockHash`, the `tokens_hash` of its KV events).
 * - Sequence hash: `seq[0] = local[0]`, then `seq[i] = xxh3_64(le64(seq[i-1]) || le64(local[i]), seed)`
 *   (Dynamo's `ExternalSequenceBlockHash`, the `block_hash` of its KV events).
 * - Digest (16 bytes): the sequence hash (u64 LE) then the local hash (u64 LE).
 *   {@link BlockHasher.blockId} returns the sequence hash as an unsigned `bigint`;
 *   {@link localBlockHash} returns the local hash.
 * - `extraKey` (namespace, LoRA name...): when it is a non-empty string, the seed of both hashes
 *   becomes `xxh3_64(utf8(extraKey), seed)`. This is **our choice**: Dynamo also isolates namespaces
 *   and LoRA adapters through the seed, but derives it with its own salt hash
 *   (`compute_salt_hash`), so namespaced ids match Dynamo only for an empty `extraKey`.
 *
 * @example
 * ```ts
 * import { xxh3BlockHasher, computeBlockHashes, localBlockHash } from '@kvc/radix-cache'
 * const h = xxh3BlockHasher() // seed 1337n, as Dynamo
 * const ids = computeBlockHashes(h, [1, 2, 3, 4, 5, 6, 7, 8], 4) // two unsigned u64 bigints
 * const first = h.hashBlock(undefined, Uint32Array.of(1, 2, 3, 4), undefined)
 * console.log(h.blockId(first) === localBlockHash(first)) // true: seq[0] = local[0]
 * ```
 */
export function xxh3BlockHasher(options: Xxh3BlockHasherOptions = {}): BlockHasher {
  const seed = options.seed ?? 1337n
  if (typeof seed !== 'bigint') {
    throw new RadixCacheError('INVALID_OPTION', `xxh3-64: seed must be a bigint, got ${String(seed)}`, seed)
  }
  const [baseHi, baseLo] = splitSeed(seed)
  const result = new Uint32Array(2)
  const encoder = new TextEncoder()
  let memoKey: string | undefined
  let memoHi = 0
  let memoLo = 0
  let scratch = new Uint8Array(0)
  let scratchView = new DataView(scratch.buffer)

  return {
    name: 'xxh3-64',
    hashBlock(parent: Uint8Array | undefined, page: Uint32Array, extraKey: string | undefined): Uint8Array {
      let seedHi = baseHi
      let seedLo = baseLo
      if (extraKey !== undefined && extraKey !== '') {
        if (extraKey !== memoKey) {
          const key = encoder.encode(extraKey)
          xxh3Into(viewOf(key.buffer), key.byteOffset, key.length, baseHi, baseLo, result)
          memoLo = result[0]!
          memoHi = result[1]!
          memoKey = extraKey
        }
        seedHi = memoHi
        seedLo = memoLo
      }
      if (LITTLE_ENDIAN) {
        xxh3Into(viewOf(page.buffer), page.byteOffset, page.byteLength, seedHi, seedLo, result)
      } else {
        // Big-endian hosts: lay the tokens out as little-endian bytes first.
        if (scratch.length < page.byteLength) {
          scratch = new Uint8Array(Math.max(page.byteLength, 2 * scratch.length))
          scratchView = new DataView(scratch.buffer)
        }
        for (let i = 0; i < page.length; i++) scratchView.setUint32(4 * i, page[i]!, true)
        xxh3Into(scratchView, 0, page.byteLength, seedHi, seedLo, result)
      }
      const localLo = result[0]!
      const localHi = result[1]!
      let seqLo = localLo
      let seqHi = localHi
      if (parent !== undefined) {
        if (parent.length !== DIGEST_BYTES) throw digestLengthError('a parent', parent.length)
        xxh3PairInto(readU32LE(parent, 4), readU32LE(parent, 0), localHi, localLo, seedHi, seedLo, result)
        seqLo = result[0]!
        seqHi = result[1]!
      }
      const out = new Uint8Array(DIGEST_BYTES)
      writeU32LE(out, 0, seqLo)
      writeU32LE(out, 4, seqHi)
      writeU32LE(out, 8, localLo)
      writeU32LE(out, 12, localHi)
      return out
    },
    blockId(digest: Uint8Array): bigint {
      if (digest.length !== DIGEST_BYTES) throw digestLengthError('blockId input', digest.length)
      return joinU64(readU32LE(digest, 4), readU32LE(digest, 0))
    },
  }
}

/**
 * The local (content) hash of an {@link xxh3BlockHasher} digest: `xxh3_64` of the page's tokens
 * alone, as an unsigned `bigint` (Dynamo's `LocalBlockHash`, the `tokens_hash` of its KV events).
 *
 * @example
 * ```ts
 * import { xxh3BlockHasher, localBlockHash } from '@kvc/radix-cache'
 * const h = xxh3BlockHasher()
 * const d = h.hashBlock(undefined, Uint32Array.of(7, 8, 9, 10), undefined)
 * localBlockHash(d) // xxh3_64 of the 16 LE bytes of the tokens, seed 1337n
 * ```
 */
export function localBlockHash(digest: Uint8Array): bigint {
  if (digest.length !== DIGEST_BYTES) throw digestLengthError('localBlockHash input', digest.length)
  return joinU64(readU32LE(digest, 12), readU32LE(digest, 8))
}
