import { describe, expect, it } from 'vitest'
import { type RouteDecision, Router, type RouterOptions, renderRoute } from '../src/index.js'

function router(nD: number, extra: Partial<RouterOptions> = {}, capacity = 1_000_000): Router {
  return new Router({
    now: () => 0,
    random: () => 0.5,
    params: { pageSize: 16 },
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1_000_000 },
      ...Array.from({ length: nD }, (_, i) => ({
        id: `d${i}`,
        role: 'decode' as const,
        capacityTokens: capacity,
      })),
    ],
    ...extra,
  })
}
const order = (d: RouteDecision) => d.candidates.map((c) => c.workerId)
/** Binds `session` to `d`, which holds `committed` tokens of it, `verified` blocks confirmed. */
const bind = (r: Router, session: string, d: string, committed: number, verified: number) =>
  r.cluster.store.setBinding(session, {
    workerId: d,
    committedTokens: committed,
    verifiedBlocks: verified,
    updatedAt: 0,
  })
const blocks = (n: number, from = 1) => Array.from({ length: n }, (_, i) => BigInt(from + i))

describe('Algorithm 1: each key of the lexicographic ranking', () => {
  it('key 1 (fast) beats capOk and score: the bound D holding the prefix wins despite less overlap elsewhere', () => {
    const r = router(2)
    bind(r, 's', 'd0', 160, 10)
    r.cluster.residency.recordStored('d0', blocks(10))
    r.cluster.residency.recordStored('d1', blocks(10)) // d1 holds the same prefix...
    r.cluster.residency.recordStored('d1', blocks(10, 11)) // ...and more
    const tooBig = r.route({ sessionId: 's', promptTokens: 20_000, blocks: blocks(20) })
    // append 20000-320 > tau_append on d1, 20000-160 on d0: neither is fast; score (overlap) decides.
    expect(tooBig.candidates.map((c) => c.fast)).toEqual([false, false])
    expect(order(tooBig)).toEqual(['d1', 'd0'])
    expect(tooBig.candidates[0]?.decidedBy).toBe('score')
    const small = r.route({ sessionId: 's', promptTokens: 400, blocks: blocks(20) })
    expect(small.candidates.every((c) => c.fast)).toBe(true)
    // both fast: the exclusive overlap of d1 (blocks 11..20 are only on d1) decides.
    expect(order(small)).toEqual(['d1', 'd0'])
    r.cluster.residency.recordRemoved('d1', [1n]) // d1 loses the head of the session's prefix
    const after = r.route({ sessionId: 's', promptTokens: 400, blocks: blocks(20) })
    expect(order(after)).toEqual(['d0', 'd1'])
    expect(after.candidates[0]).toMatchObject({ fast: true, prefixResident: true, decidedBy: 'fast' })
    expect(after.candidates[1]).toMatchObject({ fast: false, prefixResident: false })
  })

  it("idle sessions' releasable tokens count for a fast-path turn on the session's own D, not for placement", () => {
    const r = router(2, {}, 100_000)
    bind(r, 's', 'd0', 4_000, 250)
    r.cluster.residency.recordStored('d0', blocks(250))
    // Both Ds full, but of idle sessions' KV that their admission would release on demand.
    for (const d of ['d0', 'd1']) {
      r.cluster.reportCapacity(d, { freeTokens: 100, evictableTokens: 0, releasableTokens: 60_000 })
    }
    expect(r.cluster.worker('d0')).toMatchObject({ availableTokens: 100, releasableTokens: 60_000 })
    const own = r.route({ sessionId: 's', promptTokens: 4_500, blocks: blocks(281) })
    expect(own.candidates[0]).toMatchObject({ workerId: 'd0', fast: true, capOk: true, availableTokens: 100 })
    // A new session, or a turn too large for the fast path, sees only free + evictable.
    const fresh = r.route({ sessionId: 'new', promptTokens: 4_500, blocks: blocks(281, 10_000) })
    expect(fresh.candidates.every((c) => !c.capOk && !c.fast)).toBe(true)
    const big = r.route({ sessionId: 's', promptTokens: 20_000, blocks: blocks(1_250) })
    expect(big.candidates.every((c) => !c.capOk)).toBe(true)
    // Without the report's releasable tokens, the own D is not capOk either.
    r.cluster.reportCapacity('d0', { freeTokens: 100, evictableTokens: 0 })
    const blind = r.route({ sessionId: 's', promptTokens: 4_500, blocks: blocks(281) })
    expect(blind.candidates.find((c) => c.workerId === 'd0')).toMatchObject({ fast: false, capOk: false })
  })

  it('the binding is trusted only while the index still shows its verified blocks', () => {
    const r = router(1)
    bind(r, 's', 'd0', 5_000, 4)
    r.cluster.residency.recordStored('d0', blocks(4))
    const ok = r.route({ sessionId: 's', promptTokens: 6_000, blocks: blocks(6) }).candidates[0]!
    expect(ok).toMatchObject({ prefixResident: true, heldTokens: 5_000, appendTokens: 1_000, fast: true })
    r.cluster.residency.recordRemoved('d0', [4n]) // an eviction event
    const gone = r.route({ sessionId: 's', promptTokens: 6_000, blocks: blocks(6) }).candidates[0]!
    // The D lost the session's tail: it re-prefills the lost pages with the append (5,952 ≤ τ_append).
    expect(gone).toMatchObject({ prefixResident: false, heldTokens: 48, appendTokens: 5_952, fast: true })
  })

  it('refillLostTail: only the bound D, only while lost tail + append fits τ_append, and it can be turned off', () => {
    const r = router(2)
    bind(r, 's', 'd0', 8_000, 500)
    r.cluster.residency.recordStored('d0', blocks(200)) // 3,200 of the 8,000 committed tokens left on d0
    r.cluster.residency.recordStored('d1', blocks(200))
    const small = r.route({ sessionId: 's', promptTokens: 9_000, blocks: blocks(562) })
    const d0 = small.candidates.find((c) => c.workerId === 'd0')!
    const d1 = small.candidates.find((c) => c.workerId === 'd1')!
    expect(d0).toMatchObject({ prefixResident: false, appendTokens: 5_800, fast: true })
    expect(d1).toMatchObject({ fast: false }) // the same blocks, but not the session's D
    expect(order(small)[0]).toBe('d0')
    const big = r.route({ sessionId: 's', promptTokens: 12_000, blocks: blocks(750) })
    expect(big.candidates.find((c) => c.workerId === 'd0')).toMatchObject({
      appendTokens: 8_800,
      fast: false,
    })
    const strict = router(1, { params: { pageSize: 16, refillLostTail: false } })
    bind(strict, 's', 'd0', 8_000, 500)
    strict.cluster.residency.recordStored('d0', blocks(200))
    expect(
      strict.route({ sessionId: 's', promptTokens: 9_000, blocks: blocks(562) }).candidates[0],
    ).toMatchObject({
      fast: false,
    })
  })

  it('key 2 (capOk): a D that cannot hold the uncached prompt plus the decode reserve ranks below one that can', () => {
    const r = router(2)
    r.cluster.reportCapacity('d0', { freeTokens: 10_000, evictableTokens: 0 })
    r.cluster.reportCapacity('d1', { freeTokens: 9_000, evictableTokens: 12_000, reservedTokens: 1_000 })
    r.cluster.residency.recordStored('d0', blocks(100)) // d0 has far more overlap
    const d = r.route({
      sessionId: 'x',
      promptTokens: 12_000,
      blocks: blocks(100),
      expectedOutputTokens: 1_000,
    })
    expect(d.candidates.map((c) => [c.workerId, c.capOk, c.needTokens, c.availableTokens])).toEqual([
      ['d1', true, 13_000, 20_000],
      ['d0', false, 11_400, 10_000],
    ])
    expect(d.candidates[0]?.decidedBy).toBe('capOk')
  })

  it('key 3 (score): exclusive overlap ignores boilerplate blocks; plain mode keeps the old behaviour', () => {
    const mk = (mode: 'plain' | 'exclusive') => {
      const r = router(4, { params: { pageSize: 16, overlapMode: mode, loadFloorK: 0 } })
      for (const d of ['d0', 'd1', 'd2']) r.cluster.residency.recordStored(d, blocks(30)) // shared system prompt
      r.cluster.residency.recordStored('d0', blocks(5, 1000)) // nothing of this session
      r.cluster.residency.recordStored('d3', blocks(3, 500)) // d3 lacks the boilerplate
      r.cluster.residency.recordStored('d2', blocks(2, 31)) // d2 holds 2 session blocks after the prompt
      return r.route({ sessionId: 'new', promptTokens: 10_000, blocks: blocks(40) })
    }
    const plain = mk('plain')
    expect(plain.candidates.map((c) => c.overlapBlocks)).toEqual([32, 30, 30, 0])
    expect([plain.candidates[0]?.workerId, plain.candidates[3]?.workerId]).toEqual(['d2', 'd3'])
    expect(plain.candidates[1]?.decidedBy).toBe('tieBreak') // d0 and d1 tie on every other key
    const excl = mk('exclusive')
    expect(excl.candidates[0]).toMatchObject({ workerId: 'd2', overlapBlocks: 2, plainOverlapBlocks: 32 })
    expect(excl.candidates.slice(1).every((c) => c.overlapBlocks === 0)).toBe(true)
  })

  it('key 3 (bonus): the load-floor bonus K·max(0, mean − load)/mean applies to unbound sessions only', () => {
    const r = router(3)
    r.cluster.store.addLoad('d0', { turns: 6 })
    r.cluster.store.addLoad('d1', { turns: 3 })
    r.cluster.residency.recordStored('d0', blocks(50)) // d0 has the overlap
    const fresh = r.route({ sessionId: 'fresh', promptTokens: 20_000, blocks: blocks(60) })
    // mean 3: bonus d2 = 200, d1 = 0, d0 = 0; d0 score 50 (exclusive: only d0 holds them).
    expect(fresh.candidates.map((c) => [c.workerId, c.bonus, c.score])).toEqual([
      ['d2', 200, 200],
      ['d0', 0, 50],
      ['d1', 0, 0],
    ])
    bind(r, 'bound', 'd1', 0, 0)
    const bound = r.route({ sessionId: 'bound', promptTokens: 20_000, blocks: blocks(60) })
    expect(bound.candidates.every((c) => c.bonus === 0)).toBe(true)
    expect(order(bound)[0]).toBe('d0')
  })

  it('key 4 (load): in-flight turns plus pending seeds, lower first', () => {
    const r = router(2, { params: { pageSize: 16, loadFloorK: 0 } })
    r.cluster.store.addLoad('d0', { turns: 1, pendingSeeds: 1 })
    r.cluster.store.addLoad('d1', { turns: 1 })
    const d = r.route({ sessionId: 's', promptTokens: 20_000 })
    expect(d.candidates.map((c) => [c.workerId, c.load])).toEqual([
      ['d1', 1],
      ['d0', 2],
    ])
    expect(d.candidates[0]?.decidedBy).toBe('load')
  })

  it('key 5 (tie-break): stable per session, rotated across sessions so ties spread', () => {
    const r = router(4)
    const first = new Map<string, number>()
    for (let i = 0; i < 200; i++) {
      const s = `session-${i}`
      const a = order(r.route({ sessionId: s, promptTokens: 20_000 }))
      expect(order(r.route({ sessionId: s, promptTokens: 20_000 }))).toEqual(a)
      expect(r.route({ sessionId: s, promptTokens: 20_000 }).candidates[0]?.decidedBy).toBe('tieBreak')
      first.set(a[0]!, (first.get(a[0]!) ?? 0) + 1)
    }
    expect(first.size).toBe(4)
    for (const n of first.values()) expect(n).toBeGreaterThan(25)
  })
})

describe('Route eligibility', () => {
  it('leaves out unhealthy, draining, paused and excluded workers, with the reason', () => {
    const r = router(5)
    r.cluster.setHealth('d0', false)
    r.cluster.setDraining('d1', true)
    r.cluster.pause('d2', 500)
    r.cluster.store.exclude('s', 'd3')
    const d = r.route({ sessionId: 's', promptTokens: 10 })
    expect(order(d)).toEqual(['d4'])
    expect(d.ineligible).toEqual([
      { workerId: 'd0', reason: 'unhealthy' },
      { workerId: 'd1', reason: 'draining' },
      { workerId: 'd2', reason: 'paused', until: 500 },
      { workerId: 'd3', reason: 'excluded' },
    ])
    expect(renderRoute(d)).toContain('d2: paused until 500')
  })

  it('releases the exclusions of a session that every eligible D excludes', () => {
    const r = router(2)
    r.cluster.store.exclude('s', 'd0')
    r.cluster.store.exclude('s', 'd1')
    r.cluster.store.addReject('s', 'd0')
    const d = r.route({ sessionId: 's', promptTokens: 10 })
    expect(d.exclusionsReleased).toBe(true)
    expect(d.candidates).toHaveLength(2)
    expect(r.cluster.store.excludedWorkers('s')).toEqual([])
    expect(r.cluster.store.rejects('s', 'd0')).toBe(0)
    const v1 = router(2, { params: { releaseWhenAllExcluded: false } })
    v1.cluster.store.exclude('s', 'd0')
    v1.cluster.store.exclude('s', 'd1')
    expect(v1.route({ sessionId: 's', promptTokens: 10 }).candidates).toHaveLength(0)
  })

  it('costs one residency query and O(D) work, whatever the number of sessions', () => {
    const r = router(8)
    for (let i = 0; i < 20_000; i++) {
      r.cluster.store.setBinding(`s${i}`, {
        workerId: `d${i % 8}`,
        committedTokens: 100,
        verifiedBlocks: 0,
        updatedAt: 0,
      })
    }
    const d = r.route({ sessionId: 's77', promptTokens: 200 })
    expect(d.boundWorker).toBe('d5')
    expect(d.candidates[0]?.workerId).toBe('d5')
  })
})
