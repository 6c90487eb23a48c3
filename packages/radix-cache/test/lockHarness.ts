import { type NodeHandle, PagedAllocator, RadixCache } from '../src/index.js'

/** A cache under test with the two calls the lock tests drive it by. */
export interface LockHarness {
  readonly cache: RadixCache
  /** Inserts `t` (page-aligned) under `extraKey`; `undefined` when a tiered pool is short. */
  readonly insert: (t: number[], extraKey: string) => NodeHandle | undefined
  /** The deepest node matching `t` under `extraKey` (host hits loaded back when tiered). */
  readonly match: (t: number[], extraKey: string) => NodeHandle
}

/** The settings both lock tests run: page sizes 1–3 without a tier, 1–2 with a host tier. */
export const LOCK_HARNESS_CASES = [
  [1, false],
  [2, false],
  [3, false],
  [1, true],
  [2, true],
] as const

/**
 * The tree alone (no KV values), or with a device pool of 24 pages and a host tier of 48, whose
 * inserts allocate slots (skipped when the pool is short) and whose matches load host hits back.
 */
export function makeLockHarness(pageSize: number, tiered: boolean): LockHarness {
  if (!tiered) {
    const cache = new RadixCache({ pageSize, trackValues: false, evictGranularity: 'page' })
    return {
      cache,
      insert: (t, extraKey) => cache.insert(t, undefined, { extraKey }).lastNode,
      match: (t, extraKey) => cache.matchPrefix(t, { extraKey }).lastNode,
    }
  }
  const pool = new PagedAllocator({ size: 24 * pageSize, pageSize })
  const cache = new RadixCache({ pageSize, allocator: pool, hostTier: { capacity: 48 * pageSize } })
  return {
    cache,
    insert: (t, extraKey) => {
      const len = t.length - (t.length % pageSize)
      if (pool.availableSize() < len) cache.evict(len)
      if (pool.availableSize() < len) return undefined
      const slots = pool.alloc(len)
      const res = cache.insert(t.slice(0, len), slots, { extraKey })
      if (res.prefixLen > 0) pool.free(slots.subarray(0, res.prefixLen))
      if (res.alignedLen < len) pool.free(slots.subarray(res.alignedLen))
      return res.lastNode
    },
    match: (t, extraKey) => cache.matchPrefix(t, { extraKey, loadBack: true }).lastNode,
  }
}
