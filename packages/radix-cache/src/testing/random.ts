/**
 * A small seeded PRNG (mulberry32) returning uniform numbers in `[0, 1)`: deterministic
 * workloads, networks and tie-breaks in tests, or an injected `random`. The same seed always
 * gives the same sequence.
 *
 * @example
 * ```ts
 * import { seededRandom } from '@kvc/radix-cache/testing'
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
