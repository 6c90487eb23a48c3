/**
 * A small agentic workload on one radix cache: sessions share a system prompt, each turn
 * re-sends the growing history plus a new append, and the KV pool is too small to keep
 * everything, so the cache evicts under pressure. Prints the prefix-hit ratio, eviction sizes
 * and the tree's shape. Run: `pnpm demo` at the repository root.
 */
import { formatTree, PagedAllocator, RadixCache } from '@kvc/radix-cache'

const pageSize = 16
const pool = new PagedAllocator({ size: 160 * 1024, pageSize })
let clock = 0
const cache = new RadixCache({ pageSize, allocator: pool, evictGranularity: 'page', now: () => clock })

let seed = 42
const rand = (): number => {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0
  return seed / 2 ** 32
}
const tokens = (n: number, base: number): number[] =>
  Array.from({ length: n }, (_, i) => (base + i * 7919) % 50000)

const system = tokens(2048, 1)
const sessions = Array.from({ length: 12 }, () => [...system])
const evictions: number[] = []
let computed = 0
let requested = 0

for (let turn = 0; turn < 20; turn++) {
  for (let s = 0; s < sessions.length; s++) {
    clock += 1
    const history = sessions[s]!
    history.push(...tokens(200 + Math.floor(rand() * 800), Math.floor(rand() * 1e6)))
    const prompt = Uint32Array.from(history)
    const hit = cache.matchPrefix(prompt)
    cache.incLockRef(hit.lastNode)
    const fresh = prompt.length - hit.length
    requested += prompt.length
    computed += fresh
    // Make room for the uncached part (evict only the shortfall, as SGLang does).
    const short = Math.ceil(fresh / pageSize) * pageSize - pool.availableSize()
    if (short > 0) evictions.push(cache.evict(short).evictedTokens)
    const slots = new Int32Array(prompt.length)
    slots.set(hit.indices)
    slots.set(pool.alloc(fresh), hit.length)
    // Output tokens extend the history for the next turn.
    history.push(...tokens(100 + Math.floor(rand() * 300), Math.floor(rand() * 1e6)))
    const res = cache.insert(prompt, slots)
    // Ownership rule: free our duplicates (tokens the tree already had) and the unaligned tail.
    if (res.prefixLen > hit.length) pool.free(slots.subarray(hit.length, res.prefixLen))
    if (res.alignedLen < prompt.length) pool.free(slots.subarray(res.alignedLen))
    cache.decLockRef(hit.lastNode)
  }
}

const s = cache.stats()
const mean = evictions.reduce((a, b) => a + b, 0) / Math.max(1, evictions.length)
console.log(`sessions ${sessions.length}, turns 20, page ${pageSize}, pool ${pool.size} tokens`)
console.log(`prefix hit: ${((1 - computed / requested) * 100).toFixed(1)}% of ${requested} prompt tokens`)
console.log(
  `evictions: ${evictions.length}, mean ${mean.toFixed(0)} tokens, max ${Math.max(0, ...evictions)} tokens`,
)
console.log(`tree: ${s.nodeCount} nodes, ${s.totalSize} tokens cached, ${pool.availableSize()} slots free`)
console.log(formatTree(cache, { maxTokens: 4 }).split('\n').slice(0, 8).join('\n'))
console.log('...')
