import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  BlockKeys,
  type CostModel,
  DEFAULT_COST_MODEL,
  type MigrationEstimate,
  Router,
  RouterError,
  type TieredHit,
  chooseWaitOrMigrate,
  loadBackSeconds,
  makeCostModel,
  migrationSeconds,
  planPrefix,
  prefillSeconds,
  renderDispatch,
  transferSeconds,
} from '../src/index.js'
import { ManualClock, ScriptedDriver } from '../src/testing/index.js'
import { tierCostOverrides } from './arbitraries.js'

/**
 * Cost models in the domain where the host tier loads a token no slower than the prefill
 * computes one (every real PCIe link): the premise of the host-token monotonicity.
 */
const costModels = fc
  .tuple(tierCostOverrides, fc.double({ min: 1, max: 800, noNaN: true }))
  .map(([c, linkGbps]) => ({ ...c, linkGbps }))
  .filter((c) => c.kvBytesPerToken / (c.hostLoadGBps * 1e9) <= 1 / c.prefillTokensPerS)
  .map((c) => makeCostModel(c))

/** A paused own D's hit, a wait, and a migration estimate for the same prompt. */
const cases = fc
  .record({
    prompt: fc.integer({ min: 1, max: 150_000 }),
    dev: fc.double({ min: 0, max: 1, noNaN: true }),
    host: fc.double({ min: 0, max: 1, noNaN: true }),
    disk: fc.double({ min: 0, max: 1, noNaN: true }),
    more: fc.double({ min: 0, max: 1, noNaN: true }),
    waitS: fc.double({ min: 0, max: 10, noNaN: true }),
    longer: fc.double({ min: 0, max: 10, noNaN: true }),
    queueS: fc.double({ min: 0, max: 5, noNaN: true }),
    dHeld: fc.double({ min: 0, max: 1, noNaN: true }),
    pHeld: fc.double({ min: 0, max: 1, noNaN: true }),
    pQueueS: fc.double({ min: 0, max: 5, noNaN: true }),
  })
  .map((r) => {
    const n = r.prompt
    const device = Math.floor(n * r.dev)
    const rest = n - device
    const disk = Math.floor(rest * r.disk * (1 - r.host))
    const host = Math.floor((rest - disk) * r.host)
    // More host tokens: some of the recomputed rest moves to the host tier (device and disk parts unchanged).
    const host2 = host + Math.floor((rest - disk - host) * r.more)
    const hit: TieredHit = { promptTokens: n, deviceTokens: device, hostTokens: host, diskTokens: disk }
    const move: MigrationEstimate = {
      decodeHeldTokens: Math.floor(n * r.dHeld),
      prefillHeldTokens: Math.floor(n * r.pHeld),
      prefillQueueS: r.pQueueS,
    }
    return { hit, host2, move, waitS: r.waitS, longer: r.longer, queueS: r.queueS }
  })

describe('chooseWaitOrMigrate', () => {
  it('waits iff the wait, the queue and the cheapest load-back plan cost no more than the migration', () => {
    fc.assert(
      fc.property(costModels, cases, (cm, c) => {
        const r = chooseWaitOrMigrate(cm, { waitS: c.waitS, queueS: c.queueS, hit: c.hit }, c.move)
        const plan = planPrefix(cm, c.hit)
        expect(r.plan).toEqual(plan)
        expect(r.waitCostS).toBeCloseTo(c.waitS + c.queueS + plan.seconds, 9)
        const n = c.hit.promptTokens
        const mig =
          (c.move.prefillQueueS ?? 0) +
          prefillSeconds(cm, n - c.move.prefillHeldTokens, c.move.prefillHeldTokens) +
          transferSeconds(cm, n - c.move.decodeHeldTokens)
        expect(r.migrateCostS).toBeCloseTo(mig, 9)
        expect(r.choice).toBe(r.waitCostS <= r.migrateCostS ? 'wait' : 'migrate')
        expect(r.reason.startsWith(r.choice === 'wait' ? 'wait ' : 'migrate: ')).toBe(true)
      }),
    )
  })

  it('monotone: a longer wait never turns a migration into a wait', () => {
    fc.assert(
      fc.property(costModels, cases, (cm, c) => {
        const a = chooseWaitOrMigrate(cm, { waitS: c.waitS, queueS: c.queueS, hit: c.hit }, c.move)
        const b = chooseWaitOrMigrate(cm, { waitS: c.waitS + c.longer, queueS: c.queueS, hit: c.hit }, c.move)
        if (a.choice === 'migrate') expect(b.choice).toBe('migrate')
        expect(b.waitCostS).toBeGreaterThanOrEqual(a.waitCostS)
        expect(b.migrateCostS).toBe(a.migrateCostS)
      }),
    )
  })

  it('monotone: more host-resident tokens never turn a wait into a migration', () => {
    fc.assert(
      fc.property(costModels, cases, (cm, c) => {
        const a = chooseWaitOrMigrate(cm, { waitS: c.waitS, queueS: c.queueS, hit: c.hit }, c.move)
        const more = { ...c.hit, hostTokens: c.host2 }
        const b = chooseWaitOrMigrate(cm, { waitS: c.waitS, queueS: c.queueS, hit: more }, c.move)
        expect(b.waitCostS).toBeLessThanOrEqual(a.waitCostS + 1e-12)
        if (a.choice === 'wait') expect(b.choice).toBe('wait')
      }),
      { numRuns: 300 },
    )
  })

  it('a long session parked on its own D’s host tier waits out a short pause; a short one moves', () => {
    const cm = DEFAULT_COST_MODEL
    const long: TieredHit = { promptTokens: 60_000, deviceTokens: 6_000, hostTokens: 53_700 }
    const move = { decodeHeldTokens: 6_000, prefillHeldTokens: 6_000 }
    const w = chooseWaitOrMigrate(cm, { waitS: 1.5, hit: long }, move)
    expect(w.choice).toBe('wait')
    expect(w.plan).toMatchObject({ loadBack: true, loadBackTokens: 53_700, recomputeTokens: 300 })
    // 53.7K tokens re-prefilled on a P take ≈ 3.8 s: the pause's 1.5 s plus ≈ 0.13 s of copy win.
    expect(w.migrateCostS).toBeGreaterThan(3.5)
    expect(w.waitCostS).toBeLessThan(1.5 + loadBackSeconds(cm, 53_700) + 0.05)
    expect(w.reason).toMatch(
      /^wait 1\.50 s \+ load back 53700 tokens 0\.11 s \+ prefill 300 tokens .* ≤ migrate/,
    )
    const short: TieredHit = { promptTokens: 8_000, deviceTokens: 6_000, hostTokens: 1_700 }
    expect(chooseWaitOrMigrate(cm, { waitS: 1.5, hit: short }, move).choice).toBe('migrate')
    // Without the host tier the long session recomputes its history on its own D too: it moves.
    const gone = { ...long, hostTokens: 0 }
    expect(chooseWaitOrMigrate(cm, { waitS: 1.5, hit: gone }, move).choice).toBe('migrate')
  })

  it('rejects malformed input with a typed error naming the value', () => {
    const hit: TieredHit = { promptTokens: 100, deviceTokens: 0, hostTokens: 50 }
    const move = { decodeHeldTokens: 0, prefillHeldTokens: 0 }
    const cm = DEFAULT_COST_MODEL
    const bad = (f: () => unknown, re: RegExp) => {
      try {
        f()
        expect.unreachable()
      } catch (e) {
        expect(e).toBeInstanceOf(RouterError)
        expect((e as RouterError).code).toBe('INVALID_OPTION')
        expect((e as Error).message).toMatch(re)
      }
    }
    bad(() => chooseWaitOrMigrate(cm, { waitS: -1, hit }, move), /waitS must be a finite number >= 0, got -1/)
    bad(() => chooseWaitOrMigrate(cm, { waitS: Number.NaN, hit }, move), /waitS/)
    bad(() => chooseWaitOrMigrate(cm, { waitS: 0, queueS: -2, hit }, move), /queueS/)
    bad(() => chooseWaitOrMigrate(cm, { waitS: 0, hit: { ...hit, hostTokens: 101 } }, move), /tiered hit/)
    bad(
      () => chooseWaitOrMigrate(cm, { waitS: 0, hit }, { ...move, decodeHeldTokens: 101 }),
      /decodeHeldTokens/,
    )
    bad(() => migrationSeconds(cm, 100, { ...move, prefillHeldTokens: 1.5 }), /prefillHeldTokens/)
    bad(() => migrationSeconds(cm, 100, { ...move, prefillQueueS: -1 }), /prefillQueueS/)
    bad(() => chooseWaitOrMigrate(cm, null as never, move), /own D must be an object/)
  })
})

/** One P, two D with a host tier reported by KV events; `waitForOwnDecode` as given. */
function cluster(waitForOwnDecode: boolean, cm: CostModel = DEFAULT_COST_MODEL) {
  const clock = new ManualClock(1_000)
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    costModel: cm,
    params: { pageSize: 16, waitForOwnDecode },
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
      { id: 'd0', role: 'decode', capacityTokens: 1e6 },
      { id: 'd1', role: 'decode', capacityTokens: 1e6 },
    ],
  })
  const driver = new ScriptedDriver({
    router,
    clock,
    admit: () => ({ kind: 'admit' }),
    send: () => ({ kind: 'ok', outputTokens: 100 }),
  })
  return { router, clock, driver }
}

/** Keys of a prompt of `pages` pages: 1, 2, ... (each session its own chain). */
const keysOf = (pages: number, base: bigint) =>
  BlockKeys.fromHashes(Array.from({ length: pages }, (_, i) => base + BigInt(i)))

/** Demote the prompt's blocks on `d` after the first `keepPages` to its host tier (events). */
function demote(router: Router, d: string, keys: BlockKeys, keepPages: number, eventId: number) {
  const moved: bigint[] = []
  for (let i = keepPages; i < keys.length; i++) moved.push(keys.hashAt(i))
  const base = { eventId, tokenIds: [], blockSize: 16, extraKey: null, parentBlockHash: null }
  router.ingest(d, { type: 'BlockRemoved', eventId, blockHashes: moved, medium: 'GPU' } as never)
  router.ingest(d, {
    ...base,
    eventId: eventId + 1,
    type: 'BlockStored',
    blockHashes: moved,
    medium: 'CPU_TIER1',
  } as never)
}

describe('Dispatch with waitForOwnDecode', () => {
  it('a session demoted to its paused D’s host tier waits, is served there on the fast path, and the record says why', () => {
    for (const on of [false, true]) {
      const s = cluster(on)
      const k1 = keysOf(3_750, 1_000n) // 60,000 tokens
      const first = s.driver.runTurn({ sessionId: 's', promptTokens: 60_000, blocks: k1 })
      const own = first.final.type === 'done' ? first.final.workerId : ''
      s.router.cluster.residency.recordStored(own, k1)
      demote(s.router, own, k1, 375, 10)
      s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_500)
      const k2 = keysOf(3_768, 1_000n)
      const run = s.driver.runTurn({ sessionId: 's', promptTokens: 60_300, blocks: k2 })
      if (!on) {
        // Off (the default): the session moves and is re-prefilled through the P.
        expect(run.final).toMatchObject({ path: 'seed', migratedFrom: own })
        continue
      }
      expect(run.actions.map((a) => a.type)).toEqual(['wait', 'admit', 'sendFast'])
      expect(run.actions[0]).toMatchObject({ type: 'wait', reason: 'own_decode_paused' })
      expect(run.final).toMatchObject({ path: 'fast', workerId: own, migratedFrom: undefined })
      const text = renderDispatch(run.final.record)
      expect(text).toMatch(
        new RegExp(`path ${own} {2}${own} paused: wait 1\\.5\\d s \\+ load back 54000 tokens`),
      )
      expect(text).toMatch(/≤ migrate: prefill \d+ tokens on a P and transfer/)
    }
  })

  it('a short session migrates (and the record says why); a D that refused the session is not waited for', () => {
    const s = cluster(true)
    const k1 = keysOf(500, 5_000n) // 8,000 tokens
    const first = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000, blocks: k1 })
    const own = first.final.type === 'done' ? first.final.workerId : ''
    s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_500)
    const run = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_300, blocks: keysOf(518, 5_000n) })
    expect(run.final).toMatchObject({ path: 'seed', migratedFrom: own })
    expect(renderDispatch(run.final.record)).toMatch(
      new RegExp(`${own} paused: migrate: prefill \\d+ tokens`),
    )

    const t = cluster(true)
    const kb = keysOf(3_750, 9_000n)
    const big = t.driver.runTurn({ sessionId: 'b', promptTokens: 60_000, blocks: kb })
    const home = big.final.type === 'done' ? big.final.workerId : ''
    t.router.cluster.residency.recordStored(home, kb)
    t.router.cluster.store.addReject('b', home)
    t.router.cluster.store.setPauseUntil(home, t.clock.t + 1_500)
    const moved = t.driver.runTurn({ sessionId: 'b', promptTokens: 60_300, blocks: keysOf(3_768, 9_000n) })
    expect(moved.final).toMatchObject({ migratedFrom: home })
    expect(moved.actions.some((a) => a.type === 'wait')).toBe(false)
  })
})
