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
   * for the first page of a namespace). The returned array is owned by the caller.
   */
  hashBlock(parent: Uint8Array | undefined, page: Uint32Array, extraKey: string | undefined): Uint8Array
  /** The 64-bit block id carried by KV events for a digest. */
  blockId(digest: Uint8Array): bigint
}

/**
 * Chained block ids of every full page of `tokens` (the trailing partial page is ignored).
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
  const t = tokens instanceof Uint32Array ? tokens : Uint32Array.from(tokens)
  const pages = Math.floor(t.length / pageSize)
  const out: bigint[] = new Array(pages)
  let parent: Uint8Array | undefined
  for (let p = 0; p < pages; p++) {
    parent = hasher.hashBlock(parent, t.subarray(p * pageSize, (p + 1) * pageSize), extraKey)
    out[p] = hasher.blockId(parent)
  }
  return out
}
