import { PagedAllocator, RadixCache } from '../src/index.js'
import { agenticScript, lcg } from './workload.js'

// The caches the host-tier benchmarks compare (hostTier.bench.ts and the paired hostTierRatio.ts):
// the same device-resident content on a cache without a host tier and on one with a host tier
// (write_back, twice the device pool), plus one whose second half was demoted to the host.

// 1. One fully cached 32K-token prompt as the 2K-token pieces of a growing session, page 16.
const rand = lcg(3)
export const prompt = Uint32Array.from({ length: 32 * 1024 }, () => Math.floor(rand() * 150000))
function build(tier: boolean): RadixCache {
  const pool = new PagedAllocator({ size: 64 * 1024, pageSize: 16 })
  const cache = new RadixCache({
    pageSize: 16,
    allocator: pool,
    ...(tier ? { hostTier: { ratio: 2 } } : {}),
  })
  for (let n = 2048; n <= prompt.length; n += 2048) {
    const hit = cache.matchPrefix(prompt.subarray(0, n))
    const slots = pool.alloc(n)
    const res = cache.insert(prompt.subarray(0, n), slots)
    pool.free(slots.subarray(0, Math.max(res.prefixLen, hit.length)))
  }
  return cache
}
export const plain = build(false)
export const tiered = build(true)
export const halfOnHost = build(true)
halfOnHost.evict(16 * 1024)
export const row = new Int32Array(prompt.length)

// 2. The agentic script's matches (24 sessions x 12 turns, 4K shared prefix) on warm caches.
const ops = agenticScript({ sessions: 24, turns: 12, systemTokens: 4096 })
export const matchOps = ops.filter((o) => o.kind === 'match').map((o) => o.tokens)
function warm(tier: boolean): RadixCache {
  const cache = new RadixCache({
    pageSize: 16,
    trackValues: false,
    ...(tier ? { hostTier: { capacity: 8 * 1024 * 1024 } } : {}),
  })
  for (const op of ops) if (op.kind === 'insert') cache.insert(op.tokens)
  return cache
}
export const warmPlain = warm(false)
export const warmTiered = warm(true)
