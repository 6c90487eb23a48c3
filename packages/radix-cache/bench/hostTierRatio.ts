// Paired ratios for the host tier (run by `pnpm bench` after the vitest benchmarks): matchPrefix on
// a cache with a host tier against the same device-resident content without one. Target <= 1.2x.
// Paired rounds (see paired.ts) because the vitest figures of two separate benchmarks drift by
// tens of percent on a shared 2-core machine.
import { PagedAllocator, RadixCache } from '../src/index.js'
import { formatPaired, paired } from './paired.js'
import { agenticScript, lcg } from './workload.js'

const rand = lcg(3)
const prompt = Uint32Array.from({ length: 32 * 1024 }, () => Math.floor(rand() * 150000))
function build(tier: boolean): RadixCache {
  const pool = new PagedAllocator({ size: 64 * 1024, pageSize: 16 })
  const cache = new RadixCache({ pageSize: 16, allocator: pool, ...(tier ? { hostTier: { ratio: 2 } } : {}) })
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
const results = [
  formatPaired(
    paired(
      'matchPrefix, 32K tokens in 16 nodes, indices into a row',
      () => {
        sink ^= plain.matchPrefix(prompt, { into: row }).length
      },
      () => {
        sink ^= tiered.matchPrefix(prompt, { into: row }).length
      },
    ),
    'no tier',
    'host tier',
  ),
  formatPaired(
    paired(
      'matchPrefix, same prompt, second half host-only',
      () => {
        sink ^= plain.matchPrefix(prompt, { into: row }).length
      },
      () => {
        const m = halfOnHost.matchPrefix(prompt, { into: row })
        sink ^= m.length + m.hostLength
      },
    ),
    'no tier',
    'host tier',
  ),
  formatPaired(
    paired(
      'matchPrefix, agentic script (192 matches, 3.2M tokens), lengths only',
      () => {
        for (const t of matchOps) sink ^= warmPlain.matchPrefix(t).length
      },
      () => {
        for (const t of matchOps) sink ^= warmTiered.matchPrefix(t).length
      },
      { rounds: 30, batchMs: 20 },
    ),
    'no tier',
    'host tier',
  ),
]
for (const line of results) console.log(line)
if (sink === 0.5) console.log(sink)
