import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { DEFAULT_TUNING_OPTIONS, LatencyWindow, Router, RouterError, SelfTuner } from '../src/index.js'
import { ManualClock, ScriptedDriver, checkNoInflightLoad } from '../src/testing/index.js'

const START = { tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }

/** Ends `n` turns; returns the merged changes. */
function endWindow(t: SelfTuner, rpc = new LatencyWindow(), n = DEFAULT_TUNING_OPTIONS.windowTurns) {
  let change = {}
  for (let i = 0; i < n; i++) change = { ...change, ...t.turnEnded(rpc) }
  return change
}

type Obs =
  | { readonly k: 'rej'; readonly n: number }
  | { readonly k: 'rec'; readonly n: number }
  | { readonly k: 'hit' }
  | { readonly k: 'xfer'; readonly timeout: boolean }
  | { readonly k: 'queue'; readonly depth: number }
  | { readonly k: 'lat'; readonly ms: number }
  | { readonly k: 'end' }

const obs: fc.Arbitrary<Obs> = fc.oneof(
  fc.record({ k: fc.constant('rej' as const), n: fc.integer({ min: 1, max: 12 }) }),
  fc.record({ k: fc.constant('rec' as const), n: fc.integer({ min: 1, max: 12 }) }),
  fc.record({ k: fc.constant('hit' as const) }),
  fc.record({ k: fc.constant('xfer' as const), timeout: fc.boolean() }),
  fc.record({ k: fc.constant('queue' as const), depth: fc.nat({ max: 20 }) }),
  fc.record({ k: fc.constant('lat' as const), ms: fc.double({ min: 0, max: 2_000, noNaN: true }) }),
  fc.record({ k: fc.constant('end' as const) }),
)

describe('SelfTuner', () => {
  it('every value stays within its bounds, whatever the traffic', () => {
    fc.assert(
      fc.property(fc.array(obs, { maxLength: 600 }), (xs) => {
        const t = new SelfTuner(START, { windowTurns: 8, minSamples: 4 })
        const rpc = new LatencyWindow(64)
        const o = t.options
        for (const x of xs) {
          if (x.k === 'rej') t.rejected(x.n)
          else if (x.k === 'rec') t.recovered(x.n)
          else if (x.k === 'hit') t.seedBudgetHit()
          else if (x.k === 'xfer') t.transferEnded(x.timeout)
          else if (x.k === 'queue') t.transferQueue(x.depth)
          else if (x.k === 'lat') rpc.record(x.ms)
          else t.turnEnded(rpc)
          const v = t.values
          expect(v.tauReject).toBeGreaterThanOrEqual(o.tauReject[0])
          expect(v.tauReject).toBeLessThanOrEqual(o.tauReject[1])
          expect(Number.isInteger(v.tauReject) && Number.isInteger(v.pendingSeedsPerD)).toBe(true)
          expect(v.pendingSeedsPerD).toBeGreaterThanOrEqual(o.pendingSeedsPerD[0])
          expect(v.pendingSeedsPerD).toBeLessThanOrEqual(o.pendingSeedsPerD[1])
          expect(v.backoffBaseMs).toBeGreaterThanOrEqual(o.backoffBaseMs[0])
          expect(v.backoffBaseMs).toBeLessThanOrEqual(o.backoffBaseMs[1])
        }
      }),
    )
  })

  it('K: +1 after a window of seeds turned away by the budget, halved after a transfer timeout or a deep queue', () => {
    const t = new SelfTuner(START)
    expect(endWindow(t)).toEqual({})
    t.seedBudgetHit()
    expect(endWindow(t)).toEqual({ pendingSeedsPerD: 5 })
    t.seedBudgetHit()
    t.transferEnded(true)
    expect(endWindow(t)).toEqual({ pendingSeedsPerD: 2 })
    t.seedBudgetHit()
    t.transferQueue(8)
    expect(endWindow(t)).toEqual({ pendingSeedsPerD: 1 })
    t.transferEnded(true)
    expect(endWindow(t)).toEqual({}) // already at the bound
    expect(t.values.pendingSeedsPerD).toBe(1)
  })

  it('K never rises in a window with a timeout, never falls in one without timeouts or deep queues', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 16 }),
        fc.boolean(),
        fc.boolean(),
        fc.nat({ max: 12 }),
        (k, hit, timeout, q) => {
          const t = new SelfTuner({ ...START, pendingSeedsPerD: k }, { windowTurns: 1 })
          if (hit) t.seedBudgetHit()
          t.transferEnded(timeout)
          t.transferQueue(q)
          t.turnEnded(new LatencyWindow())
          const after = t.values.pendingSeedsPerD
          if (timeout || q >= 8) expect(after).toBeLessThanOrEqual(k)
          else expect(after).toBeGreaterThanOrEqual(k)
        },
      ),
    )
  })

  it('τ_reject: up when a D that refused τ−1 times mostly takes the session back next, down when it hardly ever does', () => {
    const up = new SelfTuner(START)
    for (let i = 0; i < 30; i++) up.rejected(2)
    for (let i = 0; i < 18; i++) up.recovered(2)
    expect(endWindow(up)).toEqual({ tauReject: 4 })
    const down = new SelfTuner(START)
    for (let i = 0; i < 30; i++) down.rejected(2)
    for (let i = 0; i < 2; i++) down.recovered(2)
    expect(endWindow(down)).toEqual({ tauReject: 2 })
    // Too few streaks: no move.
    const few = new SelfTuner(START)
    for (let i = 0; i < 10; i++) few.rejected(2)
    expect(endWindow(few)).toEqual({})
    // Old traffic fades: each window halves the counts.
    expect(endWindow(down)).toEqual({}) // at τ = 2 the boundary is k = 1, never observed
  })

  it('backoff base: twice the 0.95-quantile of the admission latencies, within [5, 500] ms', () => {
    const t = new SelfTuner(START)
    const rpc = new LatencyWindow(64)
    for (let i = 0; i < 40; i++) rpc.record(10 + (i % 10))
    expect(endWindow(t, rpc)).toEqual({ backoffBaseMs: Math.round(2 * rpc.quantile(0.95)) })
    const slow = new LatencyWindow(64)
    for (let i = 0; i < 40; i++) slow.record(5_000)
    expect(endWindow(t, slow)).toEqual({ backoffBaseMs: 500 })
  })

  it('refuses bad options with a typed error', () => {
    for (const bad of [
      () => new SelfTuner(START, { tauReject: [0, 3] }),
      () => new SelfTuner(START, { pendingSeedsPerD: [5, 2] }),
      () => new SelfTuner(START, { windowTurns: 0 }),
      () => new SelfTuner(START, { raiseHazard: 0.1, lowerHazard: 0.2 }),
      () => new SelfTuner({ ...START, backoffBaseMs: Number.NaN }),
    ]) {
      expect(bad).toThrow(RouterError)
    }
  })
})

describe('self-tuning in the router (selfTune)', () => {
  it('seeds that keep hitting the pending-seed budget raise it; the router applies the change', () => {
    const clock = new ManualClock(0)
    const router = new Router({
      now: clock.now,
      random: () => 0.5,
      params: { pageSize: 16, selfTune: true, pendingSeedsPerD: 1 },
      workers: [
        { id: 'p0', role: 'prefill', capacityTokens: 1e9 },
        { id: 'd0', role: 'decode', capacityTokens: 1e9 },
      ],
    })
    expect(router.tuner?.values.pendingSeedsPerD).toBe(1)
    const driver = new ScriptedDriver({ router, clock })
    // A seed holds d0's only slot while another turn asks: the budget turns it away.
    const a = router.dispatch({ sessionId: 'a', promptTokens: 30_000 })
    const first = a.next()
    expect(first.type).toBe('admit')
    for (let i = 0; i < 64; i++) {
      const r = driver.runTurn({ sessionId: `s${i}`, promptTokens: 30_000 })
      expect(r.final).toMatchObject({ type: 'fail', cause: 'seed_budget' })
    }
    // The window's 64 turns ended, every one of them turned away by the budget: K + 1.
    expect(router.params.pendingSeedsPerD).toBe(2)
    expect(router.tuner?.updates).toBe(1)
    // With the second slot, a turn seeds while the first still holds its slot.
    expect(driver.runTurn({ sessionId: 'b', promptTokens: 30_000 }).final).toMatchObject({
      type: 'done',
      path: 'seed',
    })
    a.abort()
    checkNoInflightLoad(router)
  })

  it('updateParams validates and refuses parameters other parts copied', () => {
    const router = new Router({ now: () => 0 })
    router.updateParams({ stallWeight: 0.5, pathChoice: 'adaptive' })
    expect(router.params).toMatchObject({ stallWeight: 0.5, pathChoice: 'adaptive' })
    expect(() => router.updateParams({ pageSize: 32 })).toThrow(/pageSize cannot change/)
    expect(() => router.updateParams({ tauReject: 0 })).toThrow(/tauReject must be/)
    expect(router.params.tauReject).toBe(3)
  })
})
