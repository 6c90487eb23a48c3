import { bench, describe } from 'vitest'
import { PagedAllocator, RadixCache } from '../src/index.js'
import { agenticScript, lcg } from './workload.js'

// What the optional host tier costs when it is on: matchPrefix of the same device-resident
// content on a cache without a host tier and on one with a host tier (write_back, twice the
// device pool), in one run. Target: with / without <= 1.2x. A third case matches a prompt whose
// second half was demoted to the host (the match walks host nodes and reports hostLength).

// 1. One fully cached 32K-token prompt as the 2K-token pieces of a growing session, page 16.
const rand = lcg(3)
const prompt = Uint32Array.from({ length: 32 * 1024 }, () => Math.floor(rand() * 150000))
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
const plain = build(false)
const tiered = build(true)
const halfOnHost = build(true)
halfOnHost.evict(16 * 1024)
const row = new Int32Array(prompt.length)

// 2. The agentic script's matches (24 sessions x 12 turns, 4K shared prefix) on warm caches.
const ops = agenticScript({ sessions: 24, turns: 12, systemTokens: 4096 })
const matchOps = ops.filter((o) => o.kind === 'match').map((o) => o.tokens)
function warm(tier: boolean): RadixCache {
  const cache = new RadixCache({
    pageSize: 16,
    trackValues: false,
    ...(tier ? { hostTier: { capacity: 8 * 1024 * 1024 } } : {}),
  })
  for (const op of ops) if (op.kind === 'insert') cache.insert(op.tokens)
  return cache
}
const warmPlain = warm(false)
const warmTiered = warm(true)

let sink = 0
describe('matchPrefix with vs without a host tier: 32K cached tokens in 16 nodes, indices into a row', () => {
  bench('without a host tier', () => {
    sink ^= plain.matchPrefix(prompt, { into: row }).length
  })
  bench('with a host tier (all on the device)', () => {
    sink ^= tiered.matchPrefix(prompt, { into: row }).length
  })
  bench('with a host tier, second half host-only (reports hostLength)', () => {
    const m = halfOnHost.matchPrefix(prompt, { into: row })
    sink ^= m.length + m.hostLength
  })
})

describe('matchPrefix with vs without a host tier: agentic script matches, lengths only', () => {
  bench('without a host tier', () => {
    for (const t of matchOps) sink ^= warmPlain.matchPrefix(t).length
  })
  bench('with a host tier', () => {
    for (const t of matchOps) sink ^= warmTiered.matchPrefix(t).length
  })
})

export { sink }
