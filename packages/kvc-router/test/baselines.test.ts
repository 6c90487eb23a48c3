import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  ApproxPrefixTree,
  Router,
  type RoutingPolicy,
  dataParallelCacheAwarePolicy,
  dynamoKvCostPolicy,
  powerOfTwoPolicy,
  randomPolicy,
  roundRobinPolicy,
  sglangCacheAwarePolicy,
  stickySessionPolicy,
} from '../src/index.js'
import { ManualClock, seededRandom } from '../src/testing/index.js'

function mk(
  policy: RoutingPolicy,
  nD = 3,
  nP = 1,
  random: () => number = () => 0.5,
  clock = new ManualClock(),
): Router {
  return new Router({
    now: clock.now,
    random,
    policy,
    params: { pageSize: 16 },
    workers: [
      ...Array.from({ length: nP }, (_, i) => ({
        id: `p${i}`,
        role: 'prefill' as const,
        capacityTokens: 1e6,
      })),
      ...Array.from({ length: nD }, (_, i) => ({
        id: `d${i}`,
        role: 'decode' as const,
        capacityTokens: 1e6,
      })),
    ],
  })
}
const top = (r: Router, sessionId = 's', extra: object = {}) =>
  r.route({ sessionId, promptTokens: 100, ...extra }).candidates[0]?.workerId

describe('round-robin', () => {
  it('cycles over the eligible workers and skips ineligible ones', () => {
    const r = mk(roundRobinPolicy())
    expect([top(r), top(r), top(r), top(r)]).toEqual(['d0', 'd1', 'd2', 'd0'])
    r.cluster.setHealth('d1', false)
    expect([top(r), top(r)]).toEqual(['d0', 'd2']) // counter 4, 5 mod 2 healthy workers
    expect(r.route({ sessionId: 's', promptTokens: 1 }).candidates.map((c) => c.decidedBy)).toEqual([
      'policy',
      'last',
    ])
  })
})

describe('random', () => {
  it('is a permutation driven by the injected randomness, uniform enough', () => {
    const r = mk(randomPolicy(), 4, 1, seededRandom(7))
    const counts = new Map<string, number>()
    for (let i = 0; i < 4000; i++) {
      const d = r.route({ sessionId: 's', promptTokens: 1 })
      expect(new Set(d.candidates.map((c) => c.workerId)).size).toBe(4)
      counts.set(d.candidates[0]!.workerId, (counts.get(d.candidates[0]!.workerId) ?? 0) + 1)
    }
    for (const n of counts.values()) expect(Math.abs(n - 1000)).toBeLessThan(150)
  })
})

describe('power-of-two', () => {
  it('samples two distinct workers and keeps the less loaded one (<= keeps the first)', () => {
    const seq = [0.0, 0.0] // i = 0 (d0), j = floor(0 × 2) = 0 → bumped to 1 (d1)
    const r = mk(powerOfTwoPolicy(), 3, 1, () => seq.shift() ?? 0.99)
    r.cluster.store.addLoad('d0', { turns: 2 })
    r.cluster.store.addLoad('d1', { turns: 1 })
    const d = r.route({ sessionId: 's', promptTokens: 1 })
    expect(d.candidates.map((c) => c.workerId)).toEqual(['d1', 'd0', 'd2'])
    const eq = mk(powerOfTwoPolicy(), 2, 1, () => 0.0)
    expect(top(eq)).toBe('d0') // equal loads: the first sampled wins
    const r2 = mk(powerOfTwoPolicy(), 3, 1, seededRandom(3))
    r2.cluster.store.addLoad('d2', { turns: 9 })
    for (let i = 0; i < 200; i++) expect(top(r2)).not.toBe('d2') // never wins a sample against an idle worker
  })
})

describe('sticky session', () => {
  it('keeps a bound session on its worker while eligible, else least loaded', () => {
    const r = mk(stickySessionPolicy())
    r.cluster.store.addLoad('d0', { turns: 3 })
    r.cluster.store.addLoad('d1', { turns: 1 })
    expect(top(r, 'new')).toBe('d2')
    r.cluster.store.setBinding('b', { workerId: 'd0', committedTokens: 1, verifiedBlocks: 0, updatedAt: 0 })
    expect(top(r, 'b')).toBe('d0')
    r.cluster.setHealth('d0', false)
    expect(top(r, 'b')).toBe('d2')
  })
})

describe('SGLang cache-aware', () => {
  it('implements the exact rule: imbalance → shortest queue; match rate > threshold → matched worker; else smallest tenant', () => {
    const r = mk(sglangCacheAwarePolicy({ pathMode: 'direct' }))
    const key = (...x: number[]) => ({ matchKey: x })
    expect(top(r, 'a', key(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))).toBe('d0') // empty tree: smallest tenant (first of equals)
    expect(top(r, 'b', key(1, 2, 3, 4, 20, 21, 22, 23, 24, 25))).toBe('d0') // rate 0.4 > 0.3: matched worker
    expect(top(r, 'c', key(1, 2, 30, 31, 32, 33, 34, 35, 36, 37))).toBe('d1') // rate 0.2: smallest tenant (d1 and d2 have 0)
    expect(top(r, 'd', key(50, 51))).toBe('d2')
    // Imbalance: max − min > 64 and max > 1.5 × min → argmin load, whatever the tree says.
    r.cluster.store.addLoad('d0', { turns: 100 })
    r.cluster.store.addLoad('d1', { turns: 10 })
    r.cluster.store.addLoad('d2', { turns: 30 })
    const d = r.route({ sessionId: 'e', promptTokens: 10, matchKey: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] })
    expect(d.candidates[0]?.workerId).toBe('d1')
    expect(d.candidates[0]?.note).toContain('imbalanced')
    // 100 − 10 = 90 > 64 but with rel threshold 11 the loads are not imbalanced: the tree decides.
    const r2 = mk(sglangCacheAwarePolicy({ pathMode: 'direct', balanceRelThreshold: 11 }))
    top(r2, 'a', key(1, 2, 3, 4))
    r2.cluster.store.addLoad('d0', { turns: 100 })
    r2.cluster.store.addLoad('d1', { turns: 10 })
    r2.cluster.store.addLoad('d2', { turns: 10 })
    expect(top(r2, 'b', key(1, 2, 3, 4))).toBe('d0')
  })

  it('uses the Python RouterArgs defaults, or the Rust ones on request', () => {
    const py = mk(sglangCacheAwarePolicy({ pathMode: 'direct' }))
    const rs = mk(sglangCacheAwarePolicy({ pathMode: 'direct', defaults: 'rust' }))
    for (const r of [py, rs]) top(r, 'a', { matchKey: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] })
    const q = { matchKey: [1, 2, 3, 4, 90, 91, 92, 93, 94, 95] } // rate 0.4: above 0.3, below 0.5
    expect(top(py, 'b', q)).toBe('d0')
    expect(top(rs, 'b', q)).toBe('d1')
  })

  it('falls back to the first healthy worker when the selected tenant is not healthy', () => {
    const r = mk(sglangCacheAwarePolicy({ pathMode: 'direct' }))
    top(r, 'a', { matchKey: [1, 2, 3] })
    r.cluster.setHealth('d0', false)
    const d = r.route({ sessionId: 'b', promptTokens: 3, matchKey: [1, 2, 3] })
    expect(d.candidates[0]?.workerId).toBe('d1')
    expect(d.candidates[0]?.note).toContain('first healthy')
  })

  it('in P/D mode picks the prefill worker by the rule and ranks decode workers by load', () => {
    const r = mk(sglangCacheAwarePolicy(), 2, 2)
    r.cluster.store.addLoad('d0', { turns: 1 })
    const turn = { sessionId: 's', promptTokens: 4, matchKey: [7, 8, 9, 10] }
    expect(r.route(turn).candidates[0]?.workerId).toBe('d1')
    expect(r.policy.pickPrefill?.(r.context, turn, 'd1')).toBe('p0')
    expect(r.policy.pickPrefill?.(r.context, { ...turn, matchKey: [99] }, 'd1')).toBe('p1') // smallest tenant
  })

  it('evicts each tenant down to maxTreeSize every eviction interval', () => {
    const clock = new ManualClock()
    const r = mk(
      sglangCacheAwarePolicy({ pathMode: 'direct', maxTreeSize: 4, evictionIntervalSecs: 1 }),
      1,
      1,
      () => 0.5,
      clock,
    )
    top(r, 'a', { matchKey: [1, 2, 3, 4, 5, 6] })
    clock.advance(500)
    top(r, 'b', { matchKey: [9, 9, 9] })
    clock.advance(600) // interval elapsed: d0 holds 9 tokens > 4 → the older branch goes
    const d = r.route({ sessionId: 'c', promptTokens: 6, matchKey: [1, 2, 3, 4, 5, 6] })
    expect(d.candidates[0]?.note).toContain('match rate 0.00')
  })

  it('routes a turn by its block keys exactly as by their words given as matchKey, across interleaved policies', () => {
    // The block keys' words go through one buffer shared by every policy instance: interleaving
    // two routers, and prompts longer than the buffer's first size, must not change any decision.
    const words = (hashes: readonly bigint[]) =>
      hashes.flatMap((h) => [Number(BigInt.asUintN(64, h) >> 32n), Number(BigInt.asUintN(32, h))])
    const prompt = fc.array(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 64n - 1n }), { maxLength: 300 })
    const turn = fc.record({
      session: fc.nat(5),
      shared: fc.nat(300),
      blocks: prompt,
      direct: fc.boolean(),
      load: fc.option(fc.record({ worker: fc.nat(2), turns: fc.nat(80) }), { nil: undefined }),
    })
    fc.assert(
      fc.property(
        fc.array(turn, { maxLength: 40 }),
        fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { minLength: 300, maxLength: 300 }),
        (turns, common) => {
          const byBlocks = [
            mk(sglangCacheAwarePolicy({ pathMode: 'direct' })),
            mk(sglangCacheAwarePolicy(), 3, 2),
          ]
          const byKey = [
            mk(sglangCacheAwarePolicy({ pathMode: 'direct' })),
            mk(sglangCacheAwarePolicy(), 3, 2),
          ]
          for (const t of turns) {
            const hashes = [...common.slice(0, t.shared), ...t.blocks]
            const i = t.direct ? 0 : 1
            if (t.load !== undefined) {
              for (const r of [byBlocks[i]!, byKey[i]!])
                r.cluster.store.addLoad(`d${t.load.worker}`, { turns: t.load.turns })
            }
            const a = { sessionId: `s${t.session}`, promptTokens: 16 * hashes.length, blocks: hashes }
            const b = {
              sessionId: `s${t.session}`,
              promptTokens: 16 * hashes.length,
              matchKey: words(hashes),
            }
            const da = byBlocks[i]!.route(a).candidates.map((c) => [c.workerId, c.note])
            const db = byKey[i]!.route(b).candidates.map((c) => [c.workerId, c.note])
            expect(da).toEqual(db)
            if (!t.direct) {
              const d = da[0]?.[0] ?? 'd0'
              expect(byBlocks[i]!.policy.pickPrefill?.(byBlocks[i]!.context, a, d)).toBe(
                byKey[i]!.policy.pickPrefill?.(byKey[i]!.context, b, d),
              )
            }
          }
        },
      ),
      { numRuns: 60 },
    )
  })

  it('data-parallel cache-aware is the same rule over colocated workers, sent direct', () => {
    const p = dataParallelCacheAwarePolicy()
    expect([p.name, p.pathMode, p.usesAdmission]).toEqual(['dp-cache-aware', 'direct', false])
  })
})

describe('ApproxPrefixTree', () => {
  it('splits edges, tracks tenant sizes and access order', () => {
    const t = new ApproxPrefixTree()
    t.insert([1, 2, 3, 4], 'a', 1)
    t.insert([1, 2, 7], 'b', 2)
    expect(t.prefixMatch([1, 2, 3, 9])).toEqual({ matched: 3, tenant: 'a' })
    expect(t.prefixMatch([1, 2])).toEqual({ matched: 2, tenant: 'a' })
    expect(t.tenantSize('a')).toBe(4)
    expect(t.tenantSize('b')).toBe(3)
    t.insert([1, 2, 3, 4], 'b', 3)
    expect(t.tenantSize('b')).toBe(5)
    t.removeTenant('a')
    expect(t.prefixMatch([1, 2, 3, 4])).toEqual({ matched: 4, tenant: 'b' })
    expect(t.smallestTenant(['b', 'zz'])).toBe('zz')
  })
})

describe('Dynamo KV cost', () => {
  it('argmin of prefill_load_scale·max(0, raw_prefill − credit·overlap) + potential decode blocks + w·requests', () => {
    const r = mk(dynamoKvCostPolicy({ pathMode: 'direct' }), 3)
    r.cluster.residency.recordStored('d0', [1n, 2n, 3n, 4n])
    r.cluster.store.addLoad('d0', { prefillTokens: 320, decodeBlocks: 10 }) // 20 active prefill blocks, 10 decode blocks
    r.cluster.store.addLoad('d1', { decodeBlocks: 30 })
    r.cluster.store.addLoad('d2', { decodeBlocks: 12 })
    const d = r.route({ sessionId: 's', promptTokens: 128, blocks: [1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n] })
    // ISL 128 = 8 blocks. d0: max(0, 20 + 8 − 4) + 10 + 8 = 42; d1: 8 + 30 + 8 = 46; d2: 8 + 12 + 8 = 28.
    expect(d.candidates.map((c) => [c.workerId, c.note])).toEqual([
      ['d2', 'cost 28.0 = prefill 8.0 + decode 20'],
      ['d0', 'cost 42.0 = prefill 24.0 + decode 18'],
      ['d1', 'cost 46.0 = prefill 8.0 + decode 38'],
    ])
  })

  it('the overlap credit decays with excess active prefill when k > 0; temperature samples', () => {
    const r = mk(dynamoKvCostPolicy({ pathMode: 'direct', overlapScoreCreditDecay: 1 }), 2)
    r.cluster.residency.recordStored('d0', [1n, 2n, 3n, 4n])
    r.cluster.store.addLoad('d0', { prefillTokens: 128 }) // 8 blocks more than d1
    const d = r.route({ sessionId: 's', promptTokens: 64, blocks: [1n, 2n, 3n, 4n] })
    // decay = 1/(1 + 1·8/4) = 1/3: credit 4/3; d0: 8 + 4 − 4/3 + 4 = 14.67; d1: 4 + 4 = 8.
    expect(d.candidates[1]?.note).toBe('cost 14.7 = prefill 10.7 + decode 4')
    const hot = mk(dynamoKvCostPolicy({ pathMode: 'direct', temperature: 1 }), 2, 1, seededRandom(1))
    hot.cluster.store.addLoad('d0', { decodeBlocks: 5 })
    const wins = new Map<string, number>()
    for (let i = 0; i < 2000; i++) {
      const w = top(hot)!
      wins.set(w, (wins.get(w) ?? 0) + 1)
    }
    // costs 0-normalised: d1 → weight 1, d0 → e^-1: d1 wins ~73%.
    expect(wins.get('d1')! / 2000).toBeGreaterThan(0.68)
    expect(wins.get('d1')! / 2000).toBeLessThan(0.78)
  })
})
