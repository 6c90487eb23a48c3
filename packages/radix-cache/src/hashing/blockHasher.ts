import { RadixCacheError } from '../errors/radixCacheError.js'

/**
 * A chained block hasher: the digest of page `i` depends on the tokens of page `i` and on the
 * digest of page `i - 1`, so equal block hashes mean equal prefixes (up to collisions).
 *
 * Two implementations ship with the package: {@link sglangBlockHasher} (SHA-256 chain, the
 * hash SGLang puts in its KV events) and {@link xxh3BlockHasher} (XXH3-64 rolling hash, the one
 * Dynamo's KV router and Mooncake's Conductor use). Implement this interface to match another
 * engine's hashes.
 *
 * @example
 * ```ts
 * import { sglangBlockHasher, computeBlockHashes } from '@kvc/radix-cache'
 * const hashes = computeBlockHashes(sglangBlockHasher(), Uint32Array.of(1, 2, 3, 4), 2)
 * console.log(hashes.length) // 2
 * ```
 */
export interface BlockHasher {
  /** A short name, recorded in docs and reports (`'sglang-sha256'`, `'xxh3-64'`). */
  readonly name: string
  /**
   * Digest of one full page chained onto the previous page's digest (`parent` is `undefined`
   * for the first page of a namespace). The returned array is owned by the caller. Every digest
   * of one hasher has the same length (a cache that emits events stores them packed, and refuses
   * a digest of another length with `INVALID_OPTION`).
   */
  hashBlock(parent: Uint8Array | undefined, page: Uint32Array, extraKey: string | undefined): Uint8Array
  /** The 64-bit block id carried by KV events for a digest. */
  blockId(digest: Uint8Array): bigint
  /**
   * Bytes of every digest. Optional; required with {@link BlockHasher.hashPagesInto} (a cache
   * then packs a node's digests without hashing page by page first).
   */
  readonly digestLength?: number
  /**
   * Optional, with {@link BlockHasher.digestLength}: the digests of `pages` consecutive pages of
   * `pageSize` tokens from `tokens[from]`, the first chained onto the digest at
   * `parent[parentAt, parentAt + digestLength)` (`parent` `undefined`: the first page of a
   * namespace), written back to back into `out` from `outAt`. The same digests as
   * {@link BlockHasher.hashBlock} page after page, without allocating; a cache that emits events
   * uses it when the hasher has it.
   */
  hashPagesInto?(
    parent: Uint8Array | undefined,
    parentAt: number,
    tokens: Uint32Array,
    from: number,
    pageSize: number,
    pages: number,
    extraKey: string | undefined,
    out: Uint8Array,
    outAt: number,
  ): void
  /**
   * Optional: {@link BlockHasher.blockId} of the digest at `digests[at, at + digest length)`,
   * without copying it out (a cache reads the ids of a node's packed digests with it).
   */
  blockIdAt?(digests: Uint8Array, at: number): bigint
}

/**
 * Chained block ids of every full page of `tokens` (the trailing partial page is ignored).
 *
 * Throws a {@link RadixCacheError} with code `INVALID_OPTION` when `pageSize` is not a positive
 * integer, and `INVALID_TOKEN` when a token is not an integer in `[0, 2^32)` (the error's `value`
 * is the offending page size or token). A `Uint32Array` is used as is, without validation.
 *
 * @example
 * ```ts
 * import { xxh3BlockHasher, computeBlockHashes } from '@kvc/radix-cache'
 * computeBlockHashes(xxh3BlockHasher(), [5, 6, 7, 8, 9], 2) // two ids: pages [5,6] and [7,8]
 * ```
 */
export function computeBlockHashes(
  hasher: BlockHasher,
  tokens: ArrayLike<number>,
  pageSize: number,
  extraKey?: string,
): bigint[] {
  if (!Number.isInteger(pageSize) || pageSize <= 0) {
    throw new RadixCacheError(
      'INVALID_OPTION',
      `pageSize must be a positive integer, got ${String(pageSize)}`,
      pageSize,
    )
  }
  let t: Uint32Array
  if (tokens instanceof Uint32Array) {
    t = tokens
  } else {
    t = new Uint32Array(tokens.length)
    for (let i = 0; i < tokens.length; i++) {
      const token = tokens[i]!
      if (!Number.isInteger(token) || token < 0 || token > 0xffffffff) {
        throw new RadixCacheError(
          'INVALID_TOKEN',
          `token ${String(token)} at index ${i} is not an integer in [0, 2^32)`,
          token,
        )
      }
      t[i] = token
    }
  }
  const pages = Math.floor(t.length / pageSize)
  const out: bigint[] = new Array(pages)
  let parent: Uint8Array | undefined
  for (let p = 0; p < pages; p++) {
    parent = hasher.hashBlock(parent, t.subarray(p * pageSize, (p + 1) * pageSize), extraKey)
    out[p] = hasher.blockId(parent)
  }
  return out
}
