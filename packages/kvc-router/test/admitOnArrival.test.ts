import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type AdmitAction,
  type ArrivalView,
  DEFAULT_PAUSE_HINT,
  type DispatchAction,
  Router,
  RouterError,
  type SendFastAction,
  admitOnArrival,
  recommendedPauseMs,
  renderDispatch,
} from '../src/index.js'
import { type AdmitAnswer, ManualClock, ScriptedDriver, checkNoInflightLoad } from '../src/testing/index.js'

const CAP = 200_000

const viewArb = fc.record({
  capacityTokens: fc.constant(CAP),
  availableTokens: fc.integer({ min: -20_000, max: CAP }),
  releasableTokens: fc.integer({ min: 0, max: 50_000 }),
  transferQueueDepth: fc.nat(12),
  retractedQueueDepth: fc.oneof(fc.constant(0), fc.nat(3)),
  paused: fc.boolean(),
  needTokens: fc.integer({ min: 0, max: 60_000 }),
  loadBackTokens: fc.oneof(fc.constant(0), fc.nat(5_000)),
}) satisfies fc.Arbitrary<ArrivalView>

const calm: ArrivalView = {
  capacityTokens: CAP,
  availableTokens: 90_000,
  releasableTokens: 0,
  transferQueueDepth: 0,
  retractedQueueDepth: 0,
  paused: false,
  needTokens: 2_512,
  loadBackTokens: 0,
}

describe('admitOnArrival: when a fast-path turn may skip the admission round trip', () => {
  it('on arrival well below the pause threshold; asks first near it, when paused, retracting, queueing transfers or loading back', () => {
    const ok = admitOnArrival(calm)
    expect(ok.onArrival).toBe(true)
    expect(ok.usageAfter).toBeCloseTo((CAP - 90_000 + 2_512) / CAP, 12)
    expect(ok.reason).toMatch(/admitted on arrival/)
    expect(admitOnArrival({ ...calm, availableTokens: 20_000 })).toMatchObject({ onArrival: false })
    expect(admitOnArrival({ ...calm, availableTokens: 20_000 }).reason).toMatch(/≥ 0.90/)
    expect(admitOnArrival({ ...calm, paused: true }).reason).toMatch(/paused/)
    expect(admitOnArrival({ ...calm, retractedQueueDepth: 1 }).reason).toMatch(/retracts/)
    expect(admitOnArrival({ ...calm, transferQueueDepth: 8 }).reason).toMatch(/transfers queued/)
    expect(admitOnArrival({ ...calm, loadBackTokens: 100 }).reason).toMatch(/load back/)
    // Idle sessions' tokens count as available, as in the D's own answer.
    expect(admitOnArrival({ ...calm, availableTokens: 10_000, releasableTokens: 80_000 }).onArrival).toBe(
      true,
    )
  })

  it('sound: whenever it sends on arrival, the pause hint of the answer the view predicts is 0 and the need fits', () => {
    fc.assert(
      fc.property(viewArb, (v) => {
        const d = admitOnArrival(v)
        expect(d.usageAfter).toBe(
          Math.max(0, (CAP - v.availableTokens - v.releasableTokens + v.needTokens) / CAP),
        )
        if (!d.onArrival) return
        expect(v.paused).toBe(false)
        expect(v.loadBackTokens).toBe(0)
        expect(v.needTokens).toBeLessThanOrEqual(v.availableTokens + v.releasableTokens)
        const pause = recommendedPauseMs({
          retractedQueueDepth: v.retractedQueueDepth,
          tokenUsageAfter: d.usageAfter,
          transferQueueDepth: v.transferQueueDepth,
        })
        expect(pause).toBe(0)
      }),
    )
  })

  it('exact: on arrival iff not paused, nothing retracted or loaded back, the transfer queue below its threshold and the usage after below 0.90', () => {
    fc.assert(
      fc.property(viewArb, (v) => {
        const u = Math.max(0, (CAP - v.availableTokens - v.releasableTokens + v.needTokens) / CAP)
        const expected =
          !v.paused &&
          v.retractedQueueDepth === 0 &&
          v.loadBackTokens === 0 &&
          v.transferQueueDepth < DEFAULT_PAUSE_HINT.transferQueueThreshold &&
          v.needTokens <= v.availableTokens + v.releasableTokens &&
          u < DEFAULT_PAUSE_HINT.usageThreshold
        expect(admitOnArrival(v).onArrival).toBe(expected)
      }),
    )
  })

  it('monotone: more need, less memory, a deeper queue, a pause, a retraction or a load-back never turn "ask first" into "on arrival"', () => {
    const more = fc.nat(50_000)
    fc.assert(
      fc.property(viewArb, more, more, fc.nat(10), (v, dn, da, dq) => {
        if (admitOnArrival(v).onArrival) return
        expect(admitOnArrival({ ...v, needTokens: v.needTokens + dn }).onArrival).toBe(false)
        expect(admitOnArrival({ ...v, availableTokens: v.availableTokens - da }).onArrival).toBe(false)
        expect(
          admitOnArrival({ ...v, releasableTokens: Math.max(0, v.releasableTokens - da) }).onArrival,
        ).toBe(false)
        expect(admitOnArrival({ ...v, transferQueueDepth: v.transferQueueDepth + dq }).onArrival).toBe(false)
        expect(admitOnArrival({ ...v, paused: true }).onArrival).toBe(false)
        expect(admitOnArrival({ ...v, retractedQueueDepth: v.retractedQueueDepth + 1 }).onArrival).toBe(false)
        expect(admitOnArrival({ ...v, loadBackTokens: v.loadBackTokens + 1 }).onArrival).toBe(false)
      }),
    )
  })

  it.each([
    ['capacityTokens', 0],
    ['capacityTokens', -1],
    ['needTokens', -5],
    ['needTokens', Number.NaN],
    ['releasableTokens', Number.POSITIVE_INFINITY],
    ['transferQueueDepth', -1],
    ['availableTokens', Number.NaN],
  ])('a bad %s (%s) is a typed error naming it', (field, value) => {
    const bad = { ...calm, [field]: value } as ArrivalView
    expect(() => admitOnArrival(bad)).toThrow(RouterError)
    try {
      admitOnArrival(bad)
    } catch (e) {
      expect((e as RouterError).code).toBe('INVALID_OPTION')
      expect((e as RouterError).message).toContain(field)
    }
  })
})

/** One P, two D; the second turn of a session takes the fast path on its D. */
function setup(admitOnArrivalOn: boolean, admit?: (a: AdmitAction) => AdmitAnswer) {
  const clock = new ManualClock(1_000)
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    params: { pageSize: 16, admitOnArrival: admitOnArrivalOn },
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
      { id: 'd0', role: 'decode', capacityTokens: 1e6 },
      { id: 'd1', role: 'decode', capacityTokens: 1e6 },
    ],
  })
  const actions: DispatchAction[] = []
  const driver = new ScriptedDriver({
    router,
    clock,
    beforeAnswer: (a) => actions.push(a),
    ...(admit === undefined ? {} : { admit }),
  })
  return { router, clock, driver, actions }
}

const workerOf = (r: { final: { type: string } }) => (r.final as { workerId?: string }).workerId

describe('admission on arrival in Dispatch (admitOnArrival)', () => {
  it('a fast-path turn on a D with room goes at once, carrying its admission request: no RPC first', () => {
    const s = setup(true)
    const t1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    expect(t1.final.type).toBe('done')
    s.actions.length = 0
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    expect(t2.final).toMatchObject({ type: 'done', path: 'fast', workerId: workerOf(t1) })
    expect(s.actions.map((a) => a.type)).toEqual(['sendFast'])
    const send = s.actions[0] as SendFastAction
    expect(send.admission).toMatchObject({ path: 'fast', sessionId: 'a', promptTokens: 8_400 })
    expect(send.leaseId).toBe(send.admission?.requestId)
    expect(t2.final.record.attempts).toBe(1)
    expect(renderDispatch(t2.final.record)).toContain('admission on arrival')
    checkNoInflightLoad(s.router)
  })

  it('off (the default), the same turn asks first', () => {
    const s = setup(false)
    s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    s.actions.length = 0
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    expect(t2.final).toMatchObject({ type: 'done', path: 'fast' })
    expect(s.actions.map((a) => a.type)).toEqual(['admit', 'sendFast'])
    expect((s.actions[1] as SendFastAction).admission).toBeUndefined()
  })

  it("near the D's pause threshold in the router's view, the turn asks first", () => {
    const s = setup(true)
    const t1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const d = workerOf(t1)!
    s.router.cluster.consumeAvailable(d, s.router.cluster.available(d) - 50_000) // usage ≈ 0.95
    s.actions.length = 0
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    expect(t2.final).toMatchObject({ type: 'done', path: 'fast' })
    expect(s.actions.map((a) => a.type)).toEqual(['admit', 'sendFast'])
  })

  it('a refusal on arrival is handled as a refused RPC: counted, the pause applied, the turn served elsewhere', () => {
    let refuse = false
    const s = setup(true, (a) =>
      refuse && a.request.path === 'fast'
        ? { kind: 'reject', reason: 'capacity', pauseMs: 800 }
        : { kind: 'admit' },
    )
    const t1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const own = workerOf(t1)!
    refuse = true
    s.actions.length = 0
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    expect(t2.final.type).toBe('done')
    expect(s.actions[0]).toMatchObject({ type: 'sendFast', workerId: own })
    expect((s.actions[0] as SendFastAction).admission).toBeDefined()
    // The D's pause holds: the turn moved (a seed through the P onto the other D).
    expect(workerOf(t2)).not.toBe(own)
    expect(t2.final).toMatchObject({ path: 'seed', migratedFrom: own })
    const text = renderDispatch(t2.final.record)
    expect(text).toContain('rejected: capacity (pause 800 ms)')
    checkNoInflightLoad(s.router)
  })

  it('append_too_large on arrival falls back to the seed path on the same D, as after the RPC', () => {
    let tooLarge = false
    const s = setup(true, (a) =>
      tooLarge && a.request.path === 'fast'
        ? { kind: 'reject', reason: 'append_too_large' }
        : { kind: 'admit' },
    )
    const t1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const own = workerOf(t1)!
    tooLarge = true
    s.actions.length = 0
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    expect(t2.final).toMatchObject({ type: 'done', path: 'seed', workerId: own })
    expect(s.actions.map((a) => a.type)).toEqual(['sendFast', 'admit', 'seedViaP'])
    checkNoInflightLoad(s.router)
  })

  it('an unanswered admission on arrival is a failed send: counted against the D, the turn goes on elsewhere', () => {
    let lose = false
    const s = setup(true, (a) =>
      lose && a.request.path === 'fast' ? { kind: 'timeout' } : { kind: 'admit' },
    )
    const t1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    expect(t1.final).toMatchObject({ type: 'done', path: 'fast' })
    lose = true
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    // The lost send counts against the D; the turn is reseeded on the other D.
    expect(t2.final).toMatchObject({ type: 'done', path: 'seed', migratedFrom: workerOf(t1) })
    expect(renderDispatch(t2.final.record)).toContain('failed: worker_unreachable')
    checkNoInflightLoad(s.router)
  })

  it("an admitting answer reaches the router's view while the turn runs: its pause hint and retractions steer the next turns", () => {
    let full = false
    const s = setup(true, (a) =>
      full && a.request.path === 'fast'
        ? { kind: 'admit', usageAfter: 0.95, pauseMs: 700, retracted: ['b'] }
        : { kind: 'admit' },
    )
    const t1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const own = workerOf(t1)!
    full = true
    s.actions.length = 0
    const t2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_400 })
    expect(t2.final).toMatchObject({ type: 'done', path: 'fast', workerId: own })
    expect(s.actions.map((a) => a.type)).toEqual(['sendFast'])
    expect(s.router.cluster.isPaused(own)).toBe(true)
    expect(s.router.cluster.store.isExcluded('b', own)).toBe(true)
    // The view follows the answer (usage 0.95): once the pause ends, the next turn there asks first.
    s.clock.advance(1_000)
    s.actions.length = 0
    s.driver.runTurn({ sessionId: 'a', promptTokens: 8_800 })
    expect(s.actions[0]).toMatchObject({ type: 'admit', workerId: own })
  })

  it('observeAdmission refuses a malformed answer, a P worker or an unknown one, and changes nothing', () => {
    const s = setup(true)
    const before = s.router.cluster.worker('d0')
    expect(() => s.router.observeAdmission('d0', { requestId: 'x' } as never)).toThrow(RouterError)
    const ok = {
      requestId: 'x',
      admitted: true,
      reason: 'ok' as const,
      residentTokens: 0,
      needTokens: 10,
      tokenUsageAfter: 0.5,
      transferQueueDepth: 0,
      retractedQueueDepth: 0,
      recommendedPauseMs: 0,
    }
    expect(() => s.router.observeAdmission('p0', ok)).toThrow(/not a decode worker/)
    expect(() => s.router.observeAdmission('nope', ok)).toThrow(RouterError)
    expect(s.router.cluster.worker('d0')).toEqual(before)
  })

  it('checks the answer to a send with admission on arrival', () => {
    const answer = (o: (send: SendFastAction) => unknown) => {
      // A fresh router each time: a refusal changes the router's view of the D.
      const s = setup(true)
      s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
      const turn = s.router.dispatch({ sessionId: 'a', promptTokens: 8_400 })
      const send = turn.next() as SendFastAction
      expect(send.admission).toBeDefined()
      try {
        turn.next(o(send) as never)
      } catch (e) {
        turn.abort()
        return (e as RouterError).code
      }
      turn.abort()
      return 'accepted'
    }
    const refusal = (send: SendFastAction, over: object = {}) => ({
      type: 'admitResult',
      response: {
        requestId: send.admission!.requestId,
        admitted: false,
        reason: 'capacity',
        residentTokens: 0,
        needTokens: 1_000,
        tokenUsageAfter: 0.99,
        transferQueueDepth: 0,
        retractedQueueDepth: 0,
        recommendedPauseMs: 0,
        ...over,
      },
    })
    expect(answer((a) => refusal(a))).toBe('accepted')
    expect(answer((a) => refusal(a, { requestId: 'other' }))).toBe('UNEXPECTED_OUTCOME')
    expect(answer((a) => refusal(a, { admitted: true, reason: 'ok' }))).toBe('INVALID_MESSAGE')
    // A send without admission on arrival is not answered by an admission answer.
    const t = setup(false)
    t.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const turn = t.router.dispatch({ sessionId: 'a', promptTokens: 8_400 })
    const adm = turn.next() as AdmitAction
    turn.next({
      type: 'admitResult',
      response: {
        requestId: adm.request.requestId,
        admitted: true,
        reason: 'ok',
        residentTokens: 0,
        needTokens: 900,
        tokenUsageAfter: 0.1,
        transferQueueDepth: 0,
        retractedQueueDepth: 0,
        recommendedPauseMs: 0,
      },
    })
    expect(() =>
      turn.next({
        type: 'admitResult',
        response: {
          requestId: adm.request.requestId,
          admitted: false,
          reason: 'capacity',
          residentTokens: 0,
          needTokens: 900,
          tokenUsageAfter: 0.99,
          transferQueueDepth: 0,
          retractedQueueDepth: 0,
          recommendedPauseMs: 0,
        },
      }),
    ).toThrow(/does not answer sendFast/)
  })
})
