import type { BlockHasher } from '@kvc/radix-cache'

// A block id is the digest's 8 bytes read as a big-endian signed 64-bit integer: its two words are
// written into a `BigInt64Array`'s 32-bit view (host order) and the element read once, about twice
// as fast as eight `DataView.setUint8` and a `getBigInt64`.
const id64 = new BigInt64Array(1)
const id32 = new Int32Array(id64.buffer)
const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1
const HI = littleEndian ? 1 : 0
const LO = littleEndian ? 0 : 1

/** The block id of the digest at `d[at, at + 8)`. */
function idOf(d: Uint8Array, at: number): bigint {
  id32[HI] = (d[at]! << 24) | (d[at + 1]! << 16) | (d[at + 2]! << 8) | d[at + 3]!
  id32[LO] = (d[at + 4]! << 24) | (d[at + 5]! << 16) | (d[at + 6]! << 8) | d[at + 7]!
  return id64[0]!
}

function nsSeed(extraKey: string | undefined): number {
  let h = 0x811c9dc5
  if (extraKey !== undefined)
    for (let i = 0; i < extraKey.length; i++) h = Math.imul(h ^ extraKey.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/**
 * The simulator's block hasher: a chained 64-bit hash made of two independent 32-bit lanes
 * (FNV-1a and a Murmur-style mix), a few nanoseconds per token. The simulated engines publish KV
 * events with it and the router hashes prompts with it, so they agree, which is all the
 * residency index needs; matching an inference server's hashes is the job of
 * `@kvc/radix-cache`'s SGLang and XXH3 hashers, which are about 20× slower per page.
 *
 * @example
 * ```ts
 * import { computeBlockHashes } from '@kvc/radix-cache'
 * import { simBlockHasher } from '@kvc/sim'
 * const a = computeBlockHashes(simBlockHasher, Uint32Array.of(1, 2, 3, 4), 2)
 * const b = computeBlockHashes(simBlockHasher, Uint32Array.of(1, 2, 9, 9), 2)
 * console.log(a[0] === b[0], a[1] === b[1]) // true false
 * ```
 */
export const simBlockHasher: BlockHasher = Object.freeze({
  name: 'sim-2x32',
  hashBlock(parent: Uint8Array | undefined, page: Uint32Array, extraKey: string | undefined): Uint8Array {
    if (parent === undefined) {
      const seed = nsSeed(extraKey)
      hashLanes(seed, 0x9747b28c ^ seed, page, 0, page.length)
    } else {
      hashLanes(
        (parent[0]! << 24) | (parent[1]! << 16) | (parent[2]! << 8) | parent[3]!,
        (parent[4]! << 24) | (parent[5]! << 16) | (parent[6]! << 8) | parent[7]!,
        page,
        0,
        page.length,
      )
    }
    const h1 = LANES[0]!
    const h2 = LANES[1]!
    const out = new Uint8Array(8)
    out[0] = h1 >>> 24
    out[1] = (h1 >>> 16) & 255
    out[2] = (h1 >>> 8) & 255
    out[3] = h1 & 255
    out[4] = h2 >>> 24
    out[5] = (h2 >>> 16) & 255
    out[6] = (h2 >>> 8) & 255
    out[7] = h2 & 255
    return out
  },
  blockId(digest: Uint8Array): bigint {
    return idOf(digest, 0)
  },
  digestLength: 8,
  hashPagesInto(
    parent: Uint8Array | undefined,
    parentAt: number,
    tokens: Uint32Array,
    from: number,
    pageSize: number,
    pages: number,
    extraKey: string | undefined,
    out: Uint8Array,
    outAt: number,
  ): void {
    let h1: number
    let h2: number
    if (parent === undefined) {
      h1 = nsSeed(extraKey)
      h2 = 0x9747b28c ^ h1
    } else {
      const a = parentAt
      h1 = (parent[a]! << 24) | (parent[a + 1]! << 16) | (parent[a + 2]! << 8) | parent[a + 3]!
      h2 = (parent[a + 4]! << 24) | (parent[a + 5]! << 16) | (parent[a + 6]! << 8) | parent[a + 7]!
    }
    for (let p = 0, at = from, o = outAt; p < pages; p++, at += pageSize, o += 8) {
      hashLanes(h1, h2, tokens, at, at + pageSize)
      h1 = LANES[0]!
      h2 = LANES[1]!
      out[o] = h1 >>> 24
      out[o + 1] = (h1 >>> 16) & 255
      out[o + 2] = (h1 >>> 8) & 255
      out[o + 3] = h1 & 255
      out[o + 4] = h2 >>> 24
      out[o + 5] = (h2 >>> 16) & 255
      out[o + 6] = (h2 >>> 8) & 255
      out[o + 7] = h2 & 255
    }
  },
  blockIdAt(digests: Uint8Array, at: number): bigint {
    return idOf(digests, at)
  },
})

/** The two 32-bit lanes of the last {@link hashLanes} (the digest's first and last 4 bytes). */
export const LANES = new Int32Array(2)

/** Seed lanes of a namespace's first page (no parent). */
export function rootLanes(extraKey: string | undefined): void {
  const seed = nsSeed(extraKey)
  LANES[0] = seed
  LANES[1] = 0x9747b28c ^ seed
}

/**
 * Hash `tokens[from, to)` as one page after a parent whose lanes are `h1`, `h2` (a root page:
 * {@link rootLanes}' seeds) into {@link LANES}: `simBlockHasher.hashBlock` without its byte
 * digest, for the simulator's own key chains (the lanes are a block key's high and low words).
 */
export function hashLanes(h1: number, h2: number, tokens: Uint32Array, from: number, to: number): void {
  for (let i = from; i < to; i++) {
    const t = tokens[i]!
    h1 = Math.imul(h1 ^ t, 0x01000193)
    h2 = Math.imul(h2 ^ t, 0x5bd1e995)
    h2 ^= h2 >>> 13
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 0x85ebca6b)
  h1 ^= h1 >>> 13
  h2 = Math.imul(h2 ^ (h2 >>> 16), 0xc2b2ae35)
  h2 ^= h2 >>> 16
  LANES[0] = h1
  LANES[1] = h2
}
