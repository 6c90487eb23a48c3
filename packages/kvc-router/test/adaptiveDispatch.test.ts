import { describe, expect, it } from 'vitest'
import {
  type AdmitAction,
  type QueueReport,
  Router,
  type RouterParamsInput,
  type SeedViaPAction,
  type SendFastAction,
  renderDispatch,
} from '../src/index.js'
import { type AdmitAnswer, ManualClock, ScriptedDriver, checkNoInflightLoad } from '../src/testing/index.js'

/** One P, two D, adaptive path choice; queues as the test sets them. */
function setup(params: RouterParamsInput = {}, admit?: (a: AdmitAction) => AdmitAnswer) {
  const clock = new ManualClock(1_000)
  const queues = new Map<string, QueueReport>()
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    params: { pageSize: 16, pathChoice: 'adaptive', ...params },
    queueSource: (id) => queues.get(id),
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
      { id: 'd0', role: 'decode', capacityTokens: 1e6 },
      { id: 'd1', role: 'decode', capacityTokens: 1e6 },
    ],
  })
  const admits: AdmitAction[] = []
  const sends: (SendFastAction | SeedViaPAction)[] = []
  const driver = new ScriptedDriver({
    router,
    clock,
    admit: (a) => {
      admits.push(a)
      return admit?.(a) ?? { kind: 'admit' }
    },
    send: (a) => {
      sends.push(a)
      return { kind: 'ok', outputTokens: 100 }
    },
  })
  return { router, clock, driver, queues, admits, sends }
}

describe('adaptive path choice in Dispatch', () => {
  it('a long first turn on idle D workers is a local seed: admitted by seed, sent to the D, no P', () => {
    const s = setup()
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'sendFast'])
    expect(s.admits[0]!.request.path).toBe('seed')
    expect(s.sends[0]).toMatchObject({ type: 'sendFast', path: 'local', appendTokens: 30_000 })
    expect(run.final).toMatchObject({ type: 'done', path: 'local', prefillId: undefined })
    expect(run.final.record.steps.find((x) => x.kind === 'path')?.detail).toMatch(
      /^local seed: local .* ≤ remote/,
    )
    // No pending-seed slot was taken, and every load was given back.
    checkNoInflightLoad(s.router)
    // The session now lives on that D: its next short turn is a fast path there.
    const d = run.final.type === 'done' ? run.final.workerId : ''
    const next = s.driver.runTurn({ sessionId: 's', promptTokens: 30_500 })
    expect(next.final).toMatchObject({ path: 'fast', workerId: d })
  })

  it('the same turn beside busy decodes goes through the P (remote seed), and the record says why', () => {
    const s = setup()
    for (const d of ['d0', 'd1']) s.queues.set(d, { prefillQueueS: 0, runningRequests: 8 })
    s.queues.set('p0', { prefillQueueS: 0.5 })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'seedViaP'])
    expect(run.final).toMatchObject({ path: 'seed', prefillId: 'p0' })
    expect(renderDispatch(run.final.record)).toMatch(
      /path p0→d\d {2}remote seed: remote .* < local .* × 8 decodes\)/,
    )
  })

  it('turns arriving at the D price a local seed: on D workers that receive two turns a second it goes through the P', () => {
    const quiet = setup()
    quiet.queues.set('p0', { prefillQueueS: 1.5 })
    const alone = quiet.driver.runTurn({ sessionId: 'n', promptTokens: 30_000 })
    expect(alone.final).toMatchObject({ path: 'local' })
    expect(quiet.router.cluster.arrivals.perSecond('d0', quiet.clock.now())).toBeLessThan(0.02)

    const s = setup()
    // Two sessions, one per D, each sending an append every 0.5 s for two minutes.
    s.driver.runTurn({ sessionId: 'a', promptTokens: 2_000 })
    s.driver.runTurn({ sessionId: 'b', promptTokens: 2_000 })
    for (let i = 1; i <= 240; i++) {
      s.clock.advance(500)
      for (const id of ['a', 'b']) {
        expect(s.driver.runTurn({ sessionId: id, promptTokens: 2_000 + 20 * i }).final).toMatchObject({
          path: 'fast',
        })
      }
    }
    for (const d of ['d0', 'd1']) {
      const rate = s.router.cluster.arrivals.perSecond(d, s.clock.now())
      expect(rate).toBeGreaterThan(1.6) // 2 × (1 − e^−2): two windows of arrivals
      expect(rate).toBeLessThan(2.1)
    }
    s.queues.set('p0', { prefillQueueS: 1.5 })
    const run = s.driver.runTurn({ sessionId: 'n', promptTokens: 30_000 })
    expect(run.final).toMatchObject({ path: 'seed', prefillId: 'p0' })
    expect(renderDispatch(run.final.record)).toMatch(
      /remote seed: remote .* < local .* s of arrivals queued behind\)\)/,
    )
    checkNoInflightLoad(s.router)
  })

  it('a long P queue turns it back into a local seed (Dynamo: a full prefill queue means prefill locally)', () => {
    const s = setup()
    for (const d of ['d0', 'd1']) s.queues.set(d, { prefillQueueS: 0, runningRequests: 8 })
    s.queues.set('p0', { prefillQueueTokens: 900_000, prefillQueueRequests: 30 })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.final).toMatchObject({ path: 'local' })
  })

  it('remote mode (the default) seeds every non-fast turn through a P, as before', () => {
    const s = setup({ pathChoice: 'remote' })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.final).toMatchObject({ path: 'seed', prefillId: 'p0' })
    expect(run.final.record.steps.some((x) => x.kind === 'path')).toBe(false)
  })

  it('a local seed the D refuses counts as a rejection and the turn moves on', () => {
    let first = true
    const s = setup({}, () => {
      if (!first) return { kind: 'admit' }
      first = false
      return { kind: 'reject', reason: 'capacity' }
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.final.type).toBe('done')
    const refused = s.admits[0]!.workerId
    expect(s.router.cluster.store.rejects('s', refused)).toBe(0) // reset on success
    expect(run.final.type === 'done' && run.final.workerId).not.toBe(refused)
    checkNoInflightLoad(s.router)
  })

  it('waits for the session’s own paused D when that beats re-prefilling elsewhere', () => {
    const s = setup()
    for (const d of ['d0', 'd1']) s.queues.set(d, { prefillQueueS: 0, runningRequests: 4 })
    const first = s.driver.runTurn({ sessionId: 's', promptTokens: 40_000 })
    const own = first.final.type === 'done' ? first.final.workerId : ''
    s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_200)
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 40_300 })
    expect(run.actions.map((a) => a.type)).toEqual(['wait', 'admit', 'sendFast'])
    expect(run.actions[0]).toMatchObject({ type: 'wait', reason: 'own_decode_paused' })
    expect(run.final).toMatchObject({ path: 'fast', workerId: own, migratedFrom: undefined })
    expect(run.final.record.steps[1]!.detail).toMatch(new RegExp(`^wait 1\\.2\\d s for ${own} \\(paused\\)`))
  })

  it('moves when the pause is longer than a move costs, or the own D has refused the session', () => {
    const s = setup()
    const first = s.driver.runTurn({ sessionId: 's', promptTokens: 4_000 })
    const own = first.final.type === 'done' ? first.final.workerId : ''
    // A 4K prompt re-prefills in ≈ 0.15 s elsewhere: a 1.2 s pause is not worth waiting for.
    s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_200)
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 4_300 })
    expect(run.final).toMatchObject({ migratedFrom: own })
    // A long session whose D refused it since its last success moves too.
    const t = setup()
    const big = t.driver.runTurn({ sessionId: 'b', promptTokens: 40_000 })
    const home = big.final.type === 'done' ? big.final.workerId : ''
    t.router.cluster.store.addReject('b', home)
    t.router.cluster.store.setPauseUntil(home, t.clock.t + 1_200)
    expect(t.driver.runTurn({ sessionId: 'b', promptTokens: 40_300 }).final).toMatchObject({
      migratedFrom: home,
    })
  })
})

describe("pause or evict (pauseChoice: 'cost')", () => {
  it('a fast-path turn goes to its own paused D at once when recomputing what the D evicts costs less than the wait', () => {
    for (const pathChoice of ['adaptive', 'remote'] as const) {
      const s = setup({ pauseChoice: 'cost', pathChoice })
      const first = s.driver.runTurn({ sessionId: 's', promptTokens: 40_000 })
      const own = first.final.type === 'done' ? first.final.workerId : ''
      s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_200)
      const t0 = s.clock.t
      const run = s.driver.runTurn({ sessionId: 's', promptTokens: 40_300 })
      // No wait, no move (the 40,000 prompt tokens and 100 output tokens are held: a 200-token
      // append plus the 512-token reserve): the turn is admitted by its own D (which still decides) and sent.
      expect(run.actions.map((a) => a.type)).toEqual(['admit', 'sendFast'])
      expect(run.actions[0]).toMatchObject({ workerId: own, request: { path: 'fast', appendTokens: 200 } })
      expect(run.final).toMatchObject({ path: 'fast', workerId: own, migratedFrom: undefined })
      expect(s.clock.t - t0).toBeLessThan(1_200)
      expect(renderDispatch(run.final.record)).toMatch(
        new RegExp(
          `${own} is paused; fast path now, the D makes room: recomputing ≤ 712 evicted tokens 0\\.\\d\\d s < pause 1\\.20 s`,
        ),
      )
      checkNoInflightLoad(s.router)
    }
  })

  it("honours the pause when the wait is shorter than the recompute, by default ('wait'), and for a session the D refused", () => {
    // A 20 ms pause is less than recomputing 712 tokens (≈ 0.07 s): the turn waits for its D.
    const s = setup({ pauseChoice: 'cost' })
    const first = s.driver.runTurn({ sessionId: 's', promptTokens: 40_000 })
    const own = first.final.type === 'done' ? first.final.workerId : ''
    s.router.cluster.store.setPauseUntil(own, s.clock.t + 20)
    const short = s.driver.runTurn({ sessionId: 's', promptTokens: 40_300 })
    expect(short.actions[0]).toMatchObject({ type: 'wait', reason: 'own_decode_paused' })
    expect(short.final).toMatchObject({ workerId: own })
    // The default waits a 1.2 s pause out (the adaptive choice's stay, as before).
    const w = setup()
    const f = w.driver.runTurn({ sessionId: 's', promptTokens: 40_000 })
    const home = f.final.type === 'done' ? f.final.workerId : ''
    w.router.cluster.store.setPauseUntil(home, w.clock.t + 1_200)
    expect(w.driver.runTurn({ sessionId: 's', promptTokens: 40_300 }).actions[0]).toMatchObject({
      type: 'wait',
      reason: 'own_decode_paused',
    })
    // A D that refused the session since its last success is not asked again despite its pause.
    const r = setup({ pauseChoice: 'cost' })
    const g = r.driver.runTurn({ sessionId: 'b', promptTokens: 40_000 })
    const d = g.final.type === 'done' ? g.final.workerId : ''
    r.router.cluster.store.addReject('b', d)
    r.router.cluster.store.setPauseUntil(d, r.clock.t + 1_200)
    expect(r.driver.runTurn({ sessionId: 'b', promptTokens: 40_300 }).final).toMatchObject({
      migratedFrom: d,
    })
  })

  it('a paused own D that refuses the append as too large no longer holds the session: the turn moves at once', () => {
    // The D's refusal says how much of the session it holds (0 here): waiting for it would buy
    // a re-prefill there, not an append, and asking it again despite its pause would be refused again.
    let n = 0
    const s = setup({ pauseChoice: 'cost' }, () =>
      n++ === 1 ? { kind: 'reject', reason: 'append_too_large', pauseMs: 1_200 } : { kind: 'admit' },
    )
    for (const d of ['d0', 'd1']) s.queues.set(d, { prefillQueueS: 0, runningRequests: 4 })
    const first = s.driver.runTurn({ sessionId: 's', promptTokens: 40_000 })
    const own = first.final.type === 'done' ? first.final.workerId : ''
    s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_200)
    const t0 = s.clock.t
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 40_300 })
    expect(run.actions.some((a) => a.type === 'wait')).toBe(false)
    expect(s.admits.filter((a) => a.workerId === own)).toHaveLength(2) // the first turn's, and one refusal
    expect(run.final).toMatchObject({ type: 'done', migratedFrom: own })
    expect(s.clock.t - t0).toBeLessThan(1_200)
    checkNoInflightLoad(s.router)
  })

  it('a refusal on the paused D leaves the turn to the usual choice: it moves, nothing leaks', () => {
    let n = 0
    const s = setup({ pauseChoice: 'cost' }, () =>
      n++ === 1 ? { kind: 'reject', reason: 'capacity' } : { kind: 'admit' },
    )
    const first = s.driver.runTurn({ sessionId: 's', promptTokens: 40_000 })
    const own = first.final.type === 'done' ? first.final.workerId : ''
    s.router.cluster.store.setPauseUntil(own, s.clock.t + 1_200)
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 40_300 })
    expect(s.admits[1]).toMatchObject({ workerId: own })
    expect(run.final.type).toBe('done')
    expect(run.final).toMatchObject({ migratedFrom: own })
    checkNoInflightLoad(s.router)
  })
})
