import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  Router,
  type RoutingPolicy,
  dynamoKvCostPolicy,
  llmdPrecisePrefixPolicy,
  powerOfTwoPolicy,
  randomPolicy,
  roundRobinPolicy,
  sglangCacheAwarePolicy,
  stickySessionPolicy,
} from '../src/index.js'
import { ManualClock, seededRandom } from '../src/testing/index.js'

function mk(policy: RoutingPolicy, nD = 3, nP = 2, random: () => number = () => 0.5): Router {
  return new Router({
    now: new ManualClock().now,
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
const turn = (sessionId = 's', blocks: bigint[] = [], promptTokens = 16 * Math.max(1, blocks.length)) => ({
  sessionId,
  promptTokens,
  blocks,
})
const stored = (eventId: number, blockHashes: bigint[], parentBlockHash: bigint | null = null) => ({
  type: 'BlockStored' as const,
  eventId,
  blockHashes,
  parentBlockHash,
  tokenIds: [],
  blockSize: 16,
  extraKey: null,
})

describe('KV events of P workers', () => {
  it('land in the P workers’ own index, never in the D workers’ overlap', () => {
    const r = mk(dynamoKvCostPolicy({ pathMode: 'direct' }), 2, 1)
    expect(r.ingest('p0', stored(0, [1n, 2n]))).toBe('applied')
    expect(r.cluster.prefillResidency.workerBlocks('p0').sort()).toEqual([1n, 2n])
    expect(r.cluster.residency.holdersOf(1n)).toEqual([])
    expect(r.cluster.worker('p0').publishesEvents).toBe(true)
    // Gaps and order are checked per P as for a D.
    expect(() => r.ingest('p0', stored(0, [3n]))).toThrow(
      expect.objectContaining({ code: 'EVENT_OUT_OF_ORDER' }),
    )
    r.cluster.removeWorker('p0')
    expect(r.cluster.prefillResidency.hasWorker('p0')).toBe(false)
  })
})

describe('classic P/D baselines pick the P by their own rule (SGLang’s PD router applies the policy to both pools)', () => {
  it('round-robin cycles over the eligible P workers with a counter of its own', () => {
    const r = mk(roundRobinPolicy(), 2, 3)
    const pick = () => r.policy.pickPrefill?.(r.context, turn(), 'd0')
    expect([pick(), pick(), pick(), pick()]).toEqual(['p0', 'p1', 'p2', 'p0'])
    r.cluster.setHealth('p1', false)
    expect([pick(), pick()]).toEqual(['p0', 'p2'])
  })
  it('random draws from the eligible P workers with the injected randomness', () => {
    const r = mk(randomPolicy(), 1, 4, seededRandom(3))
    const seen = new Map<string, number>()
    for (let i = 0; i < 4000; i++) {
      const p = r.policy.pickPrefill!(r.context, turn(), 'd0')!
      seen.set(p, (seen.get(p) ?? 0) + 1)
    }
    expect([...seen.keys()].sort()).toEqual(['p0', 'p1', 'p2', 'p3'])
    for (const n of seen.values()) expect(Math.abs(n - 1000)).toBeLessThan(150)
  })
  it('power-of-two keeps the less loaded of two sampled P workers', () => {
    const r = mk(powerOfTwoPolicy(), 1, 2, () => 0)
    r.cluster.store.addLoad('p0', { turns: 3 })
    expect(r.policy.pickPrefill?.(r.context, turn(), 'd0')).toBe('p1')
  })
  it('sticky keeps a session on its P while it is eligible, else the least loaded', () => {
    const r = mk(stickySessionPolicy(), 1, 2)
    r.cluster.store.addLoad('p0', { turns: 1 })
    expect(r.policy.pickPrefill?.(r.context, turn('a'), 'd0')).toBe('p1')
    r.cluster.store.addLoad('p1', { turns: 5 })
    expect(r.policy.pickPrefill?.(r.context, turn('a'), 'd0')).toBe('p1')
    r.cluster.setHealth('p1', false)
    expect(r.policy.pickPrefill?.(r.context, turn('a'), 'd0')).toBe('p0')
  })
  it('no baseline avoids a P whose link failed (link health is kvc’s signal, not theirs)', () => {
    for (const policy of [
      roundRobinPolicy(),
      sglangCacheAwarePolicy(),
      dynamoKvCostPolicy(),
      llmdPrecisePrefixPolicy(),
    ]) {
      const r = mk(policy, 1, 1)
      for (let i = 0; i < 5; i++) r.cluster.recordTransfer('p0', 'd0', false)
      expect(r.cluster.linkHealthy('p0', 'd0')).toBe(false)
      expect(r.policy.pickPrefill?.(r.context, turn(), 'd0')).toBe('p0')
    }
  })
})

describe('Dynamo disaggregated serving', () => {
  it('the decode stage ignores overlap; the prefill router credits the P workers’ overlap', () => {
    const r = mk(dynamoKvCostPolicy(), 2, 2)
    r.cluster.residency.recordStored('d1', [1n, 2n, 3n, 4n])
    r.cluster.store.addLoad('d1', { decodeBlocks: 1 })
    const d = r.route(turn('s', [1n, 2n, 3n, 4n]))
    // d1 holds the prompt but decode ignores overlap: d0 (fewer decode blocks) wins.
    expect(d.candidates.map((c) => [c.workerId, c.note])).toEqual([
      ['d0', 'decode stage: cost 4.0 = decode 4'],
      ['d1', 'decode stage: cost 5.0 = decode 5'],
    ])
    r.ingest('p1', stored(0, [1n, 2n, 3n]))
    // p0: 4 blocks to prefill; p1: 4 − 3 = 1.
    expect(r.policy.pickPrefill?.(r.context, turn('s', [1n, 2n, 3n, 4n]), 'd0')).toBe('p1')
    // Active prefill tokens count against a P: 64 more tokens (4 blocks) on p1 → 5 > 4.
    r.cluster.store.addLoad('p1', { prefillTokens: 64 })
    expect(r.policy.pickPrefill?.(r.context, turn('s', [1n, 2n, 3n, 4n]), 'd0')).toBe('p0')
  })
})

/** A naive restatement of llm-d's scoring, to check the policy against. */
function reference(prefix: number[], queue: number[], kvFree: number[], w = { p: 3, k: 2, q: 2 }): number[] {
  const hit = prefix.filter((x) => x > 0)
  const pMin = Math.min(...hit)
  const pMax = Math.max(...hit)
  const qMin = Math.min(...queue)
  const qMax = Math.max(...queue)
  return prefix.map((x, i) => {
    const ps = x === 0 ? 0 : pMax === pMin ? 1 : (x - pMin) / (pMax - pMin)
    const qs = qMax === qMin ? 1 : (qMax - queue[i]!) / (qMax - qMin)
    return w.p * ps + w.k * kvFree[i]! + w.q * qs
  })
}

describe('llm-d precise prefix-cache scorer', () => {
  it('weights prefix 3, KV use 2, queue 2 and picks the highest score', () => {
    const r = mk(llmdPrecisePrefixPolicy({ pathMode: 'direct' }), 3, 0)
    r.cluster.residency.recordStored('d0', [1n, 2n])
    r.cluster.residency.recordStored('d1', [1n, 2n, 3n, 4n])
    r.cluster.store.addLoad('d1', { turns: 4 })
    r.cluster.reportCapacity('d2', { freeTokens: 500_000, evictableTokens: 0 })
    const d = r.route(turn('s', [1n, 2n, 3n, 4n]))
    // d0: prefix (2−2)/(4−2) = 0, kv 1, queue 1 → 4; d1: prefix 1, kv 1, queue 0 → 5;
    // d2: prefix 0 (no first block), kv 0.5, queue 1 → 3.
    expect(d.candidates.map((c) => c.workerId)).toEqual(['d1', 'd0', 'd2'])
    expect(d.candidates[0]?.note).toBe('score 5.00 = 3·prefix 1.00 + 2·kv 1.00 + 2·queue 0.00')
    expect(d.candidates[2]?.note).toBe('score 3.00 = 3·prefix 0.00 + 2·kv 0.50 + 2·queue 1.00')
  })
  it('one endpoint holding the first block scores 1 whatever its length; none: prefix plays no part', () => {
    const r = mk(llmdPrecisePrefixPolicy({ pathMode: 'direct' }), 2, 0, () => 0.99)
    r.cluster.residency.recordStored('d1', [1n])
    expect(r.route(turn('s', [1n, 2n, 3n])).candidates[0]?.note).toContain('prefix 1.00')
    const cold = mk(llmdPrecisePrefixPolicy({ pathMode: 'direct' }), 2, 0, seededRandom(5))
    const wins = new Set<string>()
    for (let i = 0; i < 50; i++) wins.add(cold.route(turn('s', [9n])).candidates[0]!.workerId)
    expect([...wins].sort()).toEqual(['d0', 'd1']) // ties broken at random
  })
  it('in P/D mode scores the P workers on their own KV events', () => {
    const r = mk(llmdPrecisePrefixPolicy(), 2, 2)
    r.ingest('p1', stored(0, [1n, 2n]))
    expect(r.policy.pickPrefill?.(r.context, turn('s', [1n, 2n, 3n]), 'd0')).toBe('p1')
    r.cluster.store.addLoad('p1', { turns: 3 })
    // p1: 3 + 2 + 0 = 5; p0: 0 + 2 + 2 = 4.
    expect(r.policy.pickPrefill?.(r.context, turn('s', [1n, 2n, 3n]), 'd0')).toBe('p1')
    const w = mk(llmdPrecisePrefixPolicy({ prefixWeight: 1 }), 2, 2)
    w.ingest('p1', stored(0, [1n, 2n]))
    w.cluster.store.addLoad('p1', { turns: 3 })
    expect(w.policy.pickPrefill?.(w.context, turn('s', [1n, 2n, 3n]), 'd0')).toBe('p0')
  })
  it('refuses a bad weight or path mode with a typed error', () => {
    expect(() => llmdPrecisePrefixPolicy({ prefixWeight: -1 })).toThrow(/prefixWeight/)
    expect(() => llmdPrecisePrefixPolicy({ queueWeight: Number.NaN })).toThrow(/queueWeight/)
    expect(() => llmdPrecisePrefixPolicy({ pathMode: 'kvc' as never })).toThrow(/pathMode/)
  })
  it('property: the winner has the highest score of a naive restatement, and the ranking is by score', () => {
    const state = fc.record({
      workers: fc.integer({ min: 1, max: 6 }),
      held: fc.array(fc.integer({ min: 0, max: 6 }), { minLength: 6, maxLength: 6 }),
      queue: fc.array(fc.integer({ min: 0, max: 9 }), { minLength: 6, maxLength: 6 }),
      free: fc.array(fc.integer({ min: 0, max: 100 }), { minLength: 6, maxLength: 6 }),
      weights: fc.record({
        p: fc.integer({ min: 0, max: 4 }),
        k: fc.integer({ min: 0, max: 4 }),
        q: fc.integer({ min: 0, max: 4 }),
      }),
      seed: fc.integer(),
    })
    fc.assert(
      fc.property(state, (s) => {
        const r = mk(
          llmdPrecisePrefixPolicy({
            pathMode: 'direct',
            prefixWeight: s.weights.p,
            kvUtilizationWeight: s.weights.k,
            queueWeight: s.weights.q,
          }),
          s.workers,
          0,
          seededRandom(s.seed),
        )
        const prompt = [1n, 2n, 3n, 4n, 5n, 6n]
        for (let i = 0; i < s.workers; i++) {
          const id = `d${i}`
          if (s.held[i]! > 0) r.cluster.residency.recordStored(id, prompt.slice(0, s.held[i]!))
          if (s.queue[i]! > 0) r.cluster.store.addLoad(id, { turns: s.queue[i]! })
          r.cluster.reportCapacity(id, { freeTokens: s.free[i]! * 10_000, evictableTokens: 0 })
        }
        const want = reference(
          s.held.slice(0, s.workers),
          s.queue.slice(0, s.workers),
          s.free.slice(0, s.workers).map((f) => f / 100),
          s.weights,
        )
        const d = r.route(turn('s', prompt))
        expect(d.candidates.length).toBe(s.workers)
        const got = d.candidates.map((c) => want[Number(c.workerId.slice(1))]!)
        const best = Math.max(...want)
        expect(got[0]).toBeCloseTo(best, 9)
        for (let i = 2; i < got.length; i++) expect(got[i - 1]! + 1e-9).toBeGreaterThanOrEqual(got[i]!)
      }),
      { numRuns: 300 },
    )
  })
})
