/**
 * A small seeded PRNG (mulberry32) returning numbers in `[0, 1)`, for deterministic networks and
 * workloads.
 *
 * @example
 * ```ts
 * import { seededRandom } from '@kvc/dto-p-sync/testing'
 * const r = seededRandom(42)
 * r() === seededRandom(42)() // true
 * ```
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
