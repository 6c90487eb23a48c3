import { bench, describe } from 'vitest'
import { RadixCache } from '../src/index.js'
import { NaiveRadixCache } from './baseline/naiveRadix.js'

// evict of one page with 1K vs 100K evictable leaves. Each iteration evicts one 16-token page
// (the LRU leaf) and inserts a fresh leaf, so the leaf count stays constant. Target: the
// per-call ratio 100K/1K stays <= 2 (the heap is maintained incrementally, O(log n) per call).
function build(leaves: number): { cache: RadixCache; next: () => Uint32Array } {
  const cache = new RadixCache({ pageSize: 16, trackValues: false })
  let k = 0
  const leaf = (): Uint32Array => {
    const t = new Uint32Array(32)
    t.fill(k % 97, 0, 16) // shared first page among groups of siblings
    t.fill(1_000_000 + k++, 16)
    return t
  }
  for (let i = 0; i < leaves; i++) cache.insert(leaf())
  return { cache, next: leaf }
}

const small = build(1_000)
const large = build(100_000)
const naiveSmall = new NaiveRadixCache(16)
for (let i = 0; i < 1_000; i++)
  naiveSmall.insert(Uint32Array.of(...new Array(16).fill(i), ...new Array(16).fill(i)), new Array(32).fill(0))

describe('evict one page + insert one leaf', () => {
  bench('1K evictable leaves', () => {
    small.cache.evict(16)
    small.cache.insert(small.next())
  })
  bench('100K evictable leaves', () => {
    large.cache.evict(16)
    large.cache.insert(large.next())
  })
  bench('baseline: heap rebuilt per call, 1K leaves', () => {
    naiveSmall.evict(16)
    const i = Math.floor(Math.random() * 1e9)
    naiveSmall.insert(
      Uint32Array.of(...new Array(16).fill(i), ...new Array(16).fill(i)),
      new Array(32).fill(0),
    )
  })
})
