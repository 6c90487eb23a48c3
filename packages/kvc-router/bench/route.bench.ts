import { bench, describe } from 'vitest'
import { BlockKeys, Router, type TurnRequest } from '../src/index.js'
import { seededRandom } from '../src/testing/index.js'

// route() with 64 D workers at 1K and at 100K bound sessions. Every session has 4 boilerplate
// blocks (on every D) and 8 blocks of its own on its D; routing a turn must cost the same at
// both sizes (no scan over sessions): the ratio of the two means should be <= 2.
const D = 64
const QUERIES = 1024

function build(sessions: number): { router: Router; turns: TurnRequest[] } {
  const router = new Router({
    now: () => 0,
    random: seededRandom(1),
    params: { pageSize: 16 },
    workers: [
      ...Array.from({ length: 8 }, (_, i) => ({
        id: `p${i}`,
        role: 'prefill' as const,
        capacityTokens: 4_000_000,
      })),
      ...Array.from({ length: D }, (_, i) => ({
        id: `d${i}`,
        role: 'decode' as const,
        capacityTokens: 4_000_000,
      })),
    ],
  })
  const boiler = [1n, 2n, 3n, 4n]
  for (let d = 0; d < D; d++) router.cluster.residency.recordStored(`d${d}`, boiler)
  const keysOf = (s: number) =>
    BlockKeys.fromHashes([...boiler, ...Array.from({ length: 8 }, (_, i) => BigInt(1_000 + s * 16 + i))])
  for (let s = 0; s < sessions; s++) {
    const d = `d${s % D}`
    const keys = keysOf(s)
    router.cluster.residency.recordStored(d, keys)
    router.cluster.store.setBinding(`s${s}`, {
      workerId: d,
      committedTokens: 12 * 16,
      verifiedBlocks: 12,
      updatedAt: 0,
    })
  }
  const rnd = seededRandom(2)
  const turns: TurnRequest[] = []
  for (let i = 0; i < QUERIES; i++) {
    const s = Math.floor(rnd() * sessions)
    turns.push({ sessionId: `s${s}`, promptTokens: 12 * 16 + 300, blocks: keysOf(s) })
  }
  return { router, turns }
}

const small = build(1_000)
const large = build(100_000)
let sink = 0
let i = 0
const OPTS = { time: 1_500, warmupTime: 500, warmupIterations: 2_000 }

describe('route() with 64 D workers', () => {
  bench(
    '1K sessions',
    () => {
      const d = small.router.route(small.turns[i++ & (QUERIES - 1)]!)
      sink ^= d.candidates.length
    },
    OPTS,
  )
  bench(
    '100K sessions',
    () => {
      const d = large.router.route(large.turns[i++ & (QUERIES - 1)]!)
      sink ^= d.candidates.length
    },
    OPTS,
  )
})

export { sink }
