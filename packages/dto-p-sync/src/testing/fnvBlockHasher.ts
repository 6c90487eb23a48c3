import type { BlockHasher } from '@kvc/radix-cache'

/**
 * A fast, non-cryptographic chained `BlockHasher` for tests and simulations: two 32-bit
 * FNV-1a-style lanes over the parent digest and the page's tokens (and the namespace), giving a
 * 64-bit block id. Collisions are possible in principle; never use it to name real KV.
 *
 * @example
 * ```ts
 * import { computeBlockHashes } from '@kvc/radix-cache'
 * import { fnvBlockHasher } from '@kvc/dto-p-sync/testing'
 * computeBlockHashes(fnvBlockHasher(), [1, 2, 3, 4], 2).length // 2
 * ```
 */
export function fnvBlockHasher(): BlockHasher {
  return {
    name: 'fnv-test',
    hashBlock(parent: Uint8Array | undefined, page: Uint32Array, extraKey: string | undefined): Uint8Array {
      let a = 0x811c9dc5
      let b = 0x01000193 ^ 0x5bd1e995
      if (parent !== undefined) {
        for (let i = 0; i < parent.length; i++) {
          a = Math.imul(a ^ parent[i]!, 0x01000193)
          b = Math.imul(b ^ parent[i]!, 0x5bd1e995)
        }
      }
      if (extraKey !== undefined) {
        for (let i = 0; i < extraKey.length; i++) {
          a = Math.imul(a ^ extraKey.charCodeAt(i), 0x01000193)
          b = Math.imul(b ^ extraKey.charCodeAt(i), 0x5bd1e995)
        }
      }
      for (let i = 0; i < page.length; i++) {
        const t = page[i]!
        a = Math.imul(a ^ t, 0x01000193)
        b = Math.imul(b ^ (t >>> 7) ^ (t << 11), 0x5bd1e995)
        b ^= b >>> 15
      }
      a ^= a >>> 13
      a = Math.imul(a, 0x85ebca6b)
      a ^= a >>> 16
      b = Math.imul(b ^ (b >>> 16), 0xc2b2ae35)
      const out = new Uint8Array(8)
      new DataView(out.buffer).setUint32(0, a >>> 0)
      new DataView(out.buffer).setUint32(4, b >>> 0)
      return out
    },
    blockId(digest: Uint8Array): bigint {
      return new DataView(digest.buffer, digest.byteOffset, digest.byteLength).getBigInt64(0)
    },
  }
}
