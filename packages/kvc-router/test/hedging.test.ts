import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type AdmitAction,
  type AdmitResponse,
  type DispatchAction,
  LatencyWindow,
  Router,
  RouterError,
  TurnDriver,
} from '../src/index.js'
import { ManualClock, checkNoInflightLoad, scriptedResponse } from '../src/testing/index.js'

function naiveQuantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return Number.NaN
  const s = [...xs].sort((a, b) => a - b)
  const pos = q * (s.length - 1)
  const lo = Math.floor(pos)
  const hi = Math.min(s.length - 1, lo + 1)
  return s[lo]! * (1 - (pos - lo)) + s[hi]! * (pos - lo)
}

describe('LatencyWindow', () => {
  it('matches a naive window after every sample (model-based)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(fc.oneof(fc.nat({ max: 50 }), fc.double({ min: 0, max: 1e4, noNaN: true })), {
          maxLength: 80,
        }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (cap, samples, q) => {
          const w = new LatencyWindow(cap)
          const model: number[] = []
          for (const x of samples) {
            w.record(x)
            model.push(x)
            if (model.length > cap) model.shift()
            expect(w.size).toBe(model.length)
            for (const qq of [0, q, 0.5, 0.95, 1])
              expect(w.quantile(qq)).toBeCloseTo(naiveQuantile(model, qq), 9)
          }
          expect(w.total).toBe(samples.length)
        },
      ),
    )
  })

  it('refuses bad samples and quantiles, and records nothing', () => {
    const w = new LatencyWindow(4)
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => w.record(bad)).toThrow(RouterError)
    expect(w.size).toBe(0)
    expect(() => w.quantile(1.5)).toThrow(/q must be in \[0, 1\]/)
    expect(() => new LatencyWindow(0)).toThrow(/capacity must be an integer >= 1/)
  })
})

function hedgedRouter(params = {}) {
  const clock = new ManualClock(1_000)
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    params: { pageSize: 16, hedgeAdmissions: true, hedgeQuantile: 0.9, hedgeMinDelayMs: 5, ...params },
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
      { id: 'd0', role: 'decode', capacityTokens: 1e6 },
      { id: 'd1', role: 'decode', capacityTokens: 1e6 },
    ],
  })
  return { router, clock }
}

const ok = (a: { readonly request: AdmitAction['request'] }): AdmitResponse =>
  scriptedResponse(a as AdmitAction, { kind: 'admit' })

describe('hedged admission in Dispatch', () => {
  it('no hedge before 16 latencies are known, then one after the quantile', () => {
    const { router } = hedgedRouter()
    const t0 = router.dispatch({ sessionId: 'a', promptTokens: 30_000 })
    const first = t0.next()
    expect(first.type === 'admit' && first.hedge).toBeUndefined()
    t0.abort()
    for (let i = 0; i < 20; i++) router.cluster.admissionLatency.record(i === 19 ? 40 : 2)
    const a = router.dispatch({ sessionId: 'b', promptTokens: 30_000 }).next()
    expect(a.type).toBe('admit')
    if (a.type !== 'admit') return
    expect(a.request.path).toBe('seed')
    expect(a.hedge?.workerId).toBe(a.workerId === 'd0' ? 'd1' : 'd0')
    // 0.9-quantile of nineteen 2 ms and one 40 ms: between order statistics 17 and 18 → 2 ms; floor 5.
    expect(a.hedge?.afterMs).toBe(5)
    expect(a.hedge?.request.requestId).toBe(`${a.turnId}/h1`)
    // Both D workers hold a pending-seed slot for it while the RPCs are out.
    expect(router.cluster.store.load('d0').pendingSeeds + router.cluster.store.load('d1').pendingSeeds).toBe(
      2,
    )
  })

  it('the hedge wins: the turn seeds that D, the first one’s slot is given back, nothing leaks', () => {
    const { router } = hedgedRouter()
    for (let i = 0; i < 16; i++) router.cluster.admissionLatency.record(2)
    const turn = router.dispatch({ sessionId: 's', promptTokens: 30_000 })
    const a = turn.next() as AdmitAction
    const second = a.hedge!.workerId
    const next = turn.next({
      type: 'hedgedAdmitResult',
      winner: 'hedge',
      primary: undefined,
      hedge: { type: 'admitResult', response: ok(a.hedge!) },
    })
    expect(next).toMatchObject({ type: 'seedViaP', decodeId: second, leaseId: a.hedge!.request.requestId })
    expect(router.cluster.store.load(a.workerId).pendingSeeds).toBe(0)
    expect(router.cluster.store.load(second).pendingSeeds).toBe(1)
    expect(router.cluster.hedging).toEqual({ sent: 1, won: 1 })
    const done = turn.next({ type: 'completed', outputTokens: 10 })
    expect(done).toMatchObject({ type: 'done', workerId: second, path: 'seed' })
    expect(done.type === 'done' && done.record.steps.some((s) => /^hedge won/.test(s.detail))).toBe(true)
    checkNoInflightLoad(router)
  })

  it('the first D wins or refuses: the hedge’s slot is given back; refusals count on each D', () => {
    const { router } = hedgedRouter()
    for (let i = 0; i < 16; i++) router.cluster.admissionLatency.record(2)
    const t1 = router.dispatch({ sessionId: 's1', promptTokens: 30_000 })
    const a1 = t1.next() as AdmitAction
    const n1 = t1.next({
      type: 'hedgedAdmitResult',
      winner: 'primary',
      primary: { type: 'admitResult', response: ok(a1) },
      hedge: undefined,
    })
    expect(n1).toMatchObject({ type: 'seedViaP', decodeId: a1.workerId })
    expect(router.cluster.store.load(a1.hedge!.workerId).pendingSeeds).toBe(0)
    t1.next({ type: 'completed' })
    const t2 = router.dispatch({ sessionId: 's2', promptTokens: 30_000 })
    const a2 = t2.next() as AdmitAction
    const no = (request: AdmitAction['request']) =>
      scriptedResponse({ request } as AdmitAction, { kind: 'reject', reason: 'capacity' })
    const n2 = t2.next({
      type: 'hedgedAdmitResult',
      winner: undefined,
      primary: { type: 'admitResult', response: no(a2.request) },
      hedge: { type: 'admitResult', response: no(a2.hedge!.request) },
    })
    expect(router.cluster.store.rejects('s2', a2.workerId)).toBe(1)
    expect(router.cluster.store.rejects('s2', a2.hedge!.workerId)).toBe(1)
    // Both D workers refused (their answers are reused within the staleness budget): the turn waits.
    expect(n2).toMatchObject({ type: 'wait', reason: 'all_rejecting' })
    t2.abort()
    checkNoInflightLoad(router)
  })

  it('a fast-path admission is hedged to the same D with the same request (one lease, idempotent)', () => {
    const { router } = hedgedRouter()
    for (let i = 0; i < 16; i++) router.cluster.admissionLatency.record(2)
    const turn = router.dispatch({ sessionId: 's', promptTokens: 800 })
    const a = turn.next() as AdmitAction
    expect(a.request.path).toBe('fast')
    expect(a.hedge).toEqual({ workerId: a.workerId, request: a.request, afterMs: 5 })
    const next = turn.next({
      type: 'hedgedAdmitResult',
      winner: 'hedge',
      primary: { type: 'admitTimeout' },
      hedge: { type: 'admitResult', response: ok(a) },
    })
    expect(next).toMatchObject({ type: 'sendFast', workerId: a.workerId, leaseId: a.request.requestId })
    turn.next({ type: 'completed' })
    checkNoInflightLoad(router)
  })

  it('refuses a malformed hedged answer and changes nothing', () => {
    const { router } = hedgedRouter()
    for (let i = 0; i < 16; i++) router.cluster.admissionLatency.record(2)
    const turn = router.dispatch({ sessionId: 's', promptTokens: 30_000 })
    const a = turn.next() as AdmitAction
    const bad = [
      { type: 'hedgedAdmitResult', winner: 'hedge', primary: undefined, hedge: { type: 'admitTimeout' } },
      {
        type: 'hedgedAdmitResult',
        winner: 'primary',
        primary: { type: 'admitResult', response: ok(a.hedge!) },
        hedge: undefined,
      },
      { type: 'hedgedAdmitResult', winner: 'other', primary: undefined, hedge: undefined },
    ]
    for (const o of bad) expect(() => turn.next(o as never)).toThrow(RouterError)
    expect(turn.pending).toBe(a)
    // A host that does not hedge answers the first RPC alone, as usual.
    expect(turn.next({ type: 'admitResult', response: ok(a) })).toMatchObject({
      type: 'seedViaP',
      decodeId: a.workerId,
    })
  })
})

describe('hedged admission in TurnDriver', () => {
  it('sends the second RPC after the delay, takes the first admission and releases the late one', async () => {
    const { router } = hedgedRouter()
    for (let i = 0; i < 16; i++) router.cluster.admissionLatency.record(2)
    let releasePrimary: (() => void) | undefined
    const sent: string[] = []
    const released: [string, string][] = []
    const actions: DispatchAction[] = []
    const r = await new TurnDriver(router).drive(
      router.dispatch({ sessionId: 's', promptTokens: 30_000 }),
      {
        admit: (a) => {
          sent.push(a.workerId)
          if (sent.length === 1) {
            // The first D is slow: it answers (admitted) only when the test says so.
            return new Promise((resolve) => {
              releasePrimary = () => resolve({ type: 'admitResult', response: ok(a) })
            })
          }
          return { type: 'admitResult', response: ok(a) }
        },
        sleep: () => Promise.resolve(),
        releaseLease: (w, id) => {
          released.push([w, id])
        },
        send: () => ({ type: 'completed', outputTokens: 5 }),
        wait: () => {},
      },
      { onAction: (a) => actions.push(a) },
    )
    expect(sent).toHaveLength(2)
    expect(r.final).toMatchObject({ type: 'done', workerId: sent[1], path: 'seed' })
    releasePrimary!()
    await new Promise((res) => setTimeout(res, 0))
    const first = actions[0] as AdmitAction
    expect(released).toEqual([[sent[0], first.request.requestId]])
    checkNoInflightLoad(router)
  })

  it('without a sleep effect only the first RPC goes out', async () => {
    const { router } = hedgedRouter()
    for (let i = 0; i < 16; i++) router.cluster.admissionLatency.record(2)
    const sent: string[] = []
    const r = await new TurnDriver(router).drive(router.dispatch({ sessionId: 's', promptTokens: 30_000 }), {
      admit: (a) => {
        sent.push(a.workerId)
        return { type: 'admitResult', response: ok(a) }
      },
      send: () => ({ type: 'completed' }),
      wait: () => {},
    })
    expect(sent).toHaveLength(1)
    expect(r.final.type).toBe('done')
    checkNoInflightLoad(router)
  })
})
