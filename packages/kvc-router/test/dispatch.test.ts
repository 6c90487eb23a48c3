import { describe, expect, it } from 'vitest'
import {
  type AdmitAction,
  type DispatchAction,
  Router,
  RouterError,
  type RouterParamsInput,
  type SeedViaPAction,
  type SendFastAction,
  type WorkerSpec,
  backoffDelayMs,
  renderDispatch,
  roundRobinPolicy,
} from '../src/index.js'
import {
  type AdmitAnswer,
  ManualClock,
  ScriptedDriver,
  type SendAnswer,
  checkNoInflightLoad,
  scriptedResponse,
} from '../src/testing/index.js'

interface Setup {
  router: Router
  clock: ManualClock
  driver: ScriptedDriver
  admits: AdmitAction[]
  sends: (SendFastAction | SeedViaPAction)[]
}

function setup(
  opts: {
    nP?: number
    nD?: number
    params?: RouterParamsInput
    admit?: (a: AdmitAction) => AdmitAnswer
    send?: (a: SendFastAction | SeedViaPAction) => SendAnswer
    random?: () => number
    before?: (a: DispatchAction) => void
  } = {},
): Setup {
  const clock = new ManualClock(1_000)
  const workers: WorkerSpec[] = [
    ...Array.from({ length: opts.nP ?? 1 }, (_, i) => ({
      id: `p${i}`,
      role: 'prefill' as const,
      capacityTokens: 1e6,
    })),
    ...Array.from({ length: opts.nD ?? 2 }, (_, i) => ({
      id: `d${i}`,
      role: 'decode' as const,
      capacityTokens: 1e6,
    })),
  ]
  const router = new Router({
    now: clock.now,
    random: opts.random ?? (() => 0.5),
    params: { pageSize: 16, ...opts.params },
    workers,
  })
  const admits: AdmitAction[] = []
  const sends: (SendFastAction | SeedViaPAction)[] = []
  const driver = new ScriptedDriver({
    router,
    clock,
    admit: (a) => {
      admits.push(a)
      return opts.admit?.(a) ?? { kind: 'admit' }
    },
    send: (a) => {
      sends.push(a)
      return opts.send?.(a) ?? { kind: 'ok', outputTokens: 100 }
    },
    ...(opts.before === undefined ? {} : { beforeAnswer: opts.before }),
  })
  return { router, clock, driver, admits, sends }
}

const blocks = (n: number) => Array.from({ length: n }, (_, i) => BigInt(i + 1))
const queue = (...answers: AdmitAnswer[]) => {
  const q = [...answers]
  return () => q.shift() ?? ({ kind: 'admit' } as const)
}

describe('Algorithm 3: paths', () => {
  it('fast path: a short turn goes straight to a D, which then holds the session', () => {
    const s = setup()
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800, blocks: blocks(50) })
    expect(run.final).toMatchObject({ type: 'done', path: 'fast', prefillId: undefined })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'sendFast'])
    expect(s.admits[0]?.request).toMatchObject({
      path: 'fast',
      promptTokens: 800,
      appendTokens: 800,
      expectedOutputTokens: 512,
    })
    const d = run.final.type === 'done' ? run.final.workerId : ''
    expect(s.router.cluster.store.getBinding('s')).toMatchObject({
      workerId: d,
      committedTokens: 900,
      verifiedBlocks: 50,
    })
    // Turn 2 extends turn 1: fast on the same D, appending only the new tokens.
    const run2 = s.driver.runTurn({ sessionId: 's', promptTokens: 1_400, blocks: blocks(87) })
    expect(run2.final).toMatchObject({ path: 'fast', workerId: d, migratedFrom: undefined })
    expect(s.admits[1]?.request.appendTokens).toBe(500)
    checkNoInflightLoad(s.router)
  })

  it('seed path: a long turn goes through the least-loaded P, holding a pending seed while in flight', () => {
    let seen = -1
    const s = setup({
      nP: 2,
      before: (a) => {
        if (a.type === 'seedViaP') seen = s.router.cluster.store.load(a.decodeId).pendingSeeds
      },
    })
    s.router.cluster.store.addLoad('p0', { turns: 2 })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'seedViaP'])
    expect(s.admits[0]?.request.path).toBe('seed')
    expect(run.final).toMatchObject({ type: 'done', path: 'seed', prefillId: 'p1' })
    expect(seen).toBe(1)
    s.router.cluster.store.addLoad('p0', { turns: -2 })
    checkNoInflightLoad(s.router)
  })

  it('append_too_large on the fast path falls back to the seed path on the same D (not a rejection)', () => {
    const s = setup({ nD: 1, admit: queue({ kind: 'reject', reason: 'append_too_large' }) })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 900 })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'admit', 'seedViaP'])
    expect(s.admits.map((a) => a.request.path)).toEqual(['fast', 'seed'])
    expect(s.router.cluster.store.rejects('s', 'd0')).toBe(0)
  })

  it('P selection avoids a P whose link to the D keeps failing, and probes it again after the cooldown', () => {
    const s = setup({
      nP: 2,
      nD: 1,
      send: (a) =>
        a.type === 'seedViaP' && a.prefillId === 'p0' && s.clock.t < 40_000
          ? { kind: 'fail', cause: 'transfer_timeout' }
          : { kind: 'ok' },
    })
    const r1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 20_000 })
    // p0 (first, equal load) fails; the same walk moves on... the only D is d0, so the turn waits and retries.
    expect(r1.final.type).toBe('done')
    expect(s.router.cluster.linkHealth('p0', 'd0').failures).toBeGreaterThanOrEqual(1)
    s.driver.runTurn({ sessionId: 'b', promptTokens: 20_000 })
    const before = s.sends.length
    s.router.cluster.recordTransfer('p0', 'd0', false)
    s.router.cluster.recordTransfer('p0', 'd0', false)
    expect(s.router.cluster.linkHealthy('p0', 'd0')).toBe(false)
    s.router.cluster.store.addLoad('p1', { turns: 5 }) // p1 is busier, but p0's link is unhealthy
    s.driver.runTurn({ sessionId: 'c', promptTokens: 20_000 })
    expect((s.sends[before] as SeedViaPAction).prefillId).toBe('p1')
    s.clock.advance(31_000)
    expect(s.router.cluster.linkHealthy('p0', 'd0')).toBe(true)
    expect(s.router.cluster.pickPrefill('d0')).toBe('p0')
    expect(s.router.cluster.pickPrefill('d0', 'p0')).toBe('p1') // excluded: the next best
    expect(s.router.cluster.pickPrefill('d0', 'p9')).toBe('p0') // an unknown id excludes nothing
  })

  it('respects the pending-seed budget per D, with a smaller share for lower SLO classes', () => {
    const s = setup({ nD: 2, params: { loadFloorK: 0 } })
    s.router.cluster.store.addLoad('d0', { pendingSeeds: 3 }) // 3 seeds pending on d0
    s.router.cluster.store.addLoad('d1', { pendingSeeds: 3 })
    s.router.cluster.store.addLoad('d1', { turns: 1 }) // d1 ranks second
    const interactive = s.driver.runTurn({ sessionId: 'i', promptTokens: 20_000 })
    expect(interactive.final).toMatchObject({ path: 'seed', workerId: 'd0' }) // 3 < 4
    const batch = s.driver.runTurn({ sessionId: 'b', promptTokens: 20_000, sloClass: 'batch' })
    // batch budget = floor(4 × 0.75) = 3: both D workers are full for batch; it waits and fails at its budget... unless seeds finish.
    expect(batch.final).toMatchObject({ type: 'fail', cause: 'seed_budget' })
    expect(batch.final.type === 'fail' && batch.final.error.code).toBe('WAIT_EXHAUSTED')
    expect(s.clock.t - 1_000).toBeGreaterThanOrEqual(60_000)
  })
})

describe('pending-seed slots go to the turns that waited longest', () => {
  it('a slot that frees goes to the turn waiting for it, not to a younger turn that asks first', () => {
    const s = setup({ nD: 1, params: { pendingSeedsPerD: 1 } })
    const woken: string[] = []
    s.router.cluster.seedWaiters.onSlotFreed((turnId, d) => woken.push(`${turnId}@${d}`))
    s.router.cluster.store.addLoad('d0', { pendingSeeds: 1 }) // d0's only slot is taken
    const old = s.router.dispatch({ sessionId: 'old', promptTokens: 20_000 })
    let a = old.next()
    expect(a.type).toBe('wait') // turned away by the budget: it waits in line for d0
    expect(s.router.cluster.seedWaiters.waiting('d0')).toBe(1)
    s.clock.advance(5_000)
    s.router.cluster.store.addLoad('d0', { pendingSeeds: -1 }) // the slot frees
    // A younger turn asks first: the slot is the waiting turn's.
    const young = s.router.dispatch({ sessionId: 'young', promptTokens: 20_000 })
    let b = young.next()
    expect(b.type).toBe('wait')
    expect(young.record.steps.some((x) => /left to 1 earlier turns waiting for d0/.test(x.detail))).toBe(true)
    expect(s.router.cluster.seedWaiters.waiting('d0')).toBe(2)
    // The old turn wakes up and takes it.
    a = old.next({ type: 'waited' })
    expect(a).toMatchObject({ type: 'admit', workerId: 'd0' })
    expect(s.router.cluster.seedWaiters.waiting('d0')).toBe(1) // it left the line
    a = old.next(s.driver.answer(a))
    expect(a).toMatchObject({ type: 'seedViaP', decodeId: 'd0' })
    // While its seed is pending the young turn still finds the budget full...
    b = young.next({ type: 'waited' })
    expect(b.type).toBe('wait')
    expect(woken).toEqual([]) // a slot freed by hand (addLoad above) is nobody's news
    a = old.next({ type: 'completed', outputTokens: 10 })
    expect(a.type).toBe('done')
    // ...and once it completes, the host is told to wake the young turn, whose slot it is.
    expect(woken).toEqual([`${young.turnId}@d0`])
    b = young.next({ type: 'waited' })
    expect(b).toMatchObject({ type: 'admit', workerId: 'd0' })
    b = young.next(s.driver.answer(b))
    b = young.next({ type: 'completed', outputTokens: 10 })
    expect(b.type).toBe('done')
    checkNoInflightLoad(s.router)
  })

  it('a lower SLO class waiting for its smaller share never holds slots back from a higher one', () => {
    // Budget 4: interactive may use 4 slots, background floor(4 × 0.5) = 2.
    const s = setup({ nD: 1, params: { pendingSeedsPerD: 4 } })
    s.router.cluster.store.addLoad('d0', { pendingSeeds: 2 })
    const bg = s.router.dispatch({ sessionId: 'bg', promptTokens: 20_000, sloClass: 'background' })
    expect(bg.next().type).toBe('wait') // 2 pending: its share is full
    s.clock.advance(1_000)
    const batch = s.router.dispatch({ sessionId: 'b', promptTokens: 20_000, sloClass: 'batch' })
    expect(batch.next().type).toBe('admit') // 2 pending + 0 older batch-or-higher < 3
    s.clock.advance(1_000)
    // An interactive turn, younger than both: the background one does not count against it.
    const inter = s.router.dispatch({ sessionId: 'i', promptTokens: 20_000 })
    expect(inter.next()).toMatchObject({ type: 'admit', workerId: 'd0' }) // 3 pending < 4
    // The background turn still waits for its share; neither took it from it.
    expect(bg.next({ type: 'waited' }).type).toBe('wait')
    for (const t of [batch, inter, bg]) t.abort()
    s.router.cluster.store.addLoad('d0', { pendingSeeds: -2 })
    checkNoInflightLoad(s.router)
  })

  it('a turn waits in line only for the D workers that turned it away in its last walk', () => {
    const s = setup({ nD: 2, params: { pendingSeedsPerD: 1, loadFloorK: 0 } })
    s.router.cluster.store.addLoad('d0', { pendingSeeds: 1 })
    s.router.cluster.store.addLoad('d1', { pendingSeeds: 1 })
    const t = s.router.dispatch({ sessionId: 's', promptTokens: 20_000 })
    expect(t.next().type).toBe('wait')
    expect([s.router.cluster.seedWaiters.waiting('d0'), s.router.cluster.seedWaiters.waiting('d1')]).toEqual([
      1, 1,
    ])
    // d1 leaves the cluster: the turn no longer waits for it.
    s.router.cluster.removeWorker('d1')
    expect(s.router.cluster.seedWaiters.waiting('d1')).toBe(0)
    expect(t.abort().cause).toBe('aborted')
    expect(s.router.cluster.seedWaiters.waiting('d0')).toBe(0)
  })
})

describe('Algorithm 3: rejections, exclusion, migration, reset-on-success', () => {
  it('a rejection moves the turn to the next D in the same walk; the session migrates', () => {
    const s = setup({ nD: 2 })
    const r1 = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    const home = r1.final.type === 'done' ? r1.final.workerId : ''
    const other = home === 'd0' ? 'd1' : 'd0'
    const s2 = setup({
      nD: 2,
      admit: (a) => (a.workerId === home ? { kind: 'reject', reason: 'capacity' } : { kind: 'admit' }),
    })
    s2.router.cluster.store.setBinding('s', s.router.cluster.store.getBinding('s')!)
    const r2 = s2.driver.runTurn({ sessionId: 's', promptTokens: 1_500 })
    expect(r2.final).toMatchObject({ type: 'done', workerId: other, migratedFrom: home })
    const send = r2.actions.find((a) => a.type === 'sendFast' || a.type === 'seedViaP') as SendFastAction
    expect(send.migratedFrom).toBe(home)
    expect(s2.router.cluster.store.getBinding('s')?.workerId).toBe(other)
    expect(s2.router.cluster.store.rejects('s', home)).toBe(0) // reset on success
  })

  it('excludes a D for the session after tauReject rejections and releases when every D is excluded', () => {
    const answers = new Map<string, AdmitAnswer[]>([
      ['d0', Array(10).fill({ kind: 'reject', reason: 'capacity' })],
      [
        'd1',
        [
          { kind: 'reject', reason: 'capacity' },
          { kind: 'reject', reason: 'capacity' },
          { kind: 'reject', reason: 'slo_budget' },
        ],
      ],
    ])
    const s = setup({
      nD: 2,
      params: { tauReject: 2 },
      admit: (a) => answers.get(a.workerId)?.shift() ?? { kind: 'admit' },
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final).toMatchObject({ type: 'done', workerId: 'd1' })
    const text = renderDispatch(run.final.record)
    // walk 1: both reject once; walk 2: both reach 2 and are excluded; walk 3: every D is excluded,
    // so the exclusions are released, both reject again; walk 4: d0 is excluded again, d1 admits.
    expect(text.match(/excluded after 2 rejections/g)).toHaveLength(3)
    expect(text).toContain('exclusions released')
    expect(s.router.cluster.store.excludedWorkers('s')).toEqual([])
  })

  it('v1 mode (resetOnSuccess: false) keeps rejects and exclusions after a success', () => {
    const s = setup({
      nD: 2,
      params: { resetOnSuccess: false, tauReject: 1 },
      admit: queue({ kind: 'reject', reason: 'capacity' }),
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final.type).toBe('done')
    const first = s.admits[0]!.workerId
    expect(s.router.cluster.store.excludedWorkers('s')).toEqual([first])
  })

  it('honours pause hints: a paused D is skipped by other turns, and a turn waits for the pause to end', () => {
    const s = setup({ nD: 1, admit: queue({ kind: 'reject', reason: 'capacity', pauseMs: 1_500 }) })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'wait', 'admit', 'sendFast'])
    const wait = run.actions[1]!
    // admit took 1 ms (t = 1001); pause until 2501; jitter random 0.5 × backoff base 50 → 2526.
    expect(wait).toMatchObject({ type: 'wait', untilMs: 2_526, reason: 'all_rejecting' })
  })

  it('retries timed-out admission RPCs with exponential backoff and full jitter, then counts a rejection', () => {
    const s = setup({ nD: 1, admit: queue({ kind: 'timeout' }, { kind: 'timeout' }, { kind: 'timeout' }) })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    const waits = run.actions.filter((a) => a.type === 'wait')
    // try 0 times out at 1500, waits 0.5 × 50 = 25; try 1 at 2025, waits 0.5 × 100 = 50; try 2 at 2575 → rejection.
    expect(waits.map((w) => (w.type === 'wait' ? [w.untilMs, w.reason] : []))).toEqual([
      [1_525, 'admission_retry'],
      [2_075, 'admission_retry'],
      [2_600, 'admission_timeouts'],
    ])
    expect(run.final.type).toBe('done')
    const full = { baseDelayMs: 50, maxDelayMs: 2_000, jitter: 'full' } as const
    expect(backoffDelayMs(10, full, () => 0.999)).toBeCloseTo(1_998)
    expect(backoffDelayMs(0, full, () => 0)).toBe(0)
  })

  it('waits at least 1 ms between admission tries, even when the jitter draws 0', () => {
    const s = setup({ nD: 1, random: () => 0, admit: queue({ kind: 'timeout' }) })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    // try 0 times out at 1500 and waits 0 × 50 ms, floored to 1 ms.
    expect(run.actions.find((a) => a.type === 'wait')).toMatchObject({
      untilMs: 1_501,
      reason: 'admission_retry',
    })
    expect(run.final.type).toBe('done')
  })

  it('reuses a negative admission answer younger than the staleness budget instead of a new RPC', () => {
    const s = setup({
      nD: 2,
      params: { loadFloorK: 0 },
      admit: (a) => (a.workerId === 'd0' ? { kind: 'reject', reason: 'capacity' } : { kind: 'admit' }),
    })
    s.router.cluster.store.addLoad('d1', { turns: 1 }) // d0 ranks first for everyone
    s.driver.runTurn({ sessionId: 'a', promptTokens: 20_000 })
    expect(s.admits.map((a) => a.workerId)).toEqual(['d0', 'd1'])
    s.driver.runTurn({ sessionId: 'b', promptTokens: 20_000 }) // 12 ms later: reuse
    expect(s.admits.map((a) => a.workerId)).toEqual(['d0', 'd1', 'd1'])
    s.driver.runTurn({ sessionId: 'c', promptTokens: 100 }) // smaller need: ask again
    expect(s.admits.at(-2)?.workerId).toBe('d0')
    s.driver.runTurn({ sessionId: 'd', promptTokens: 100 }) // within the budget, same need: reused
    expect(s.admits.at(-1)?.workerId).toBe('d1')
    expect(s.admits.at(-2)?.workerId).toBe('d1')
    s.clock.advance(50)
    s.driver.runTurn({ sessionId: 'e', promptTokens: 100 }) // stale: ask again
    expect(s.admits.at(-2)?.workerId).toBe('d0')
  })

  it('a D that fails the turn counts as a rejection and the turn moves on; a failed transfer marks the link', () => {
    const s = setup({
      nD: 2,
      send: (a) =>
        a.type === 'sendFast' && s.sends.length === 1
          ? { kind: 'fail', cause: 'worker_error' }
          : { kind: 'ok' },
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 500 })
    expect(run.final.type).toBe('done')
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'sendFast', 'admit', 'sendFast'])
    const t = setup({
      nD: 1,
      nP: 1,
      send: () => (t.sends.length === 1 ? { kind: 'fail', cause: 'transfer_error' } : { kind: 'ok' }),
    })
    const r2 = t.driver.runTurn({ sessionId: 's', promptTokens: 50_000 })
    expect(r2.final.type).toBe('done')
    expect(t.router.cluster.linkHealth('p0', 'd0')).toMatchObject({
      failures: 1,
      successes: 1,
      consecutiveFailures: 0,
    })
    checkNoInflightLoad(t.router)
  })
})

describe('a seed that fails on the P side', () => {
  it('goes to the same D again through another P, so a P failure does not move the session', () => {
    const s = setup({
      nP: 2,
      nD: 2,
      // The transfer fails on the P side; nothing has marked p0 down yet (one failure is below
      // the link's threshold): the retry still avoids it.
      send: () => (s.sends.length === 1 ? { kind: 'fail', cause: 'transfer_error' } : { kind: 'ok' }),
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 50_000 })
    const seeds = run.actions.filter((a): a is SeedViaPAction => a.type === 'seedViaP')
    expect(seeds.map((a) => [a.prefillId, a.decodeId])).toEqual([
      ['p0', 'd0'],
      ['p1', 'd0'],
    ])
    expect(run.final).toMatchObject({ type: 'done', path: 'seed', workerId: 'd0', prefillId: 'p1' })
    expect(s.router.cluster.store.rejects('s', 'd0')).toBe(0) // the D is not blamed
    checkNoInflightLoad(s.router)
  })

  it('moves on to the next D when no other P can seed this one (or the failure was a timeout)', () => {
    for (const cause of ['transfer_error', 'transfer_timeout'] as const) {
      const s = setup({
        nP: cause === 'transfer_error' ? 1 : 2,
        nD: 2,
        send: () => (s.sends.length === 1 ? { kind: 'fail', cause } : { kind: 'ok' }),
      })
      const run = s.driver.runTurn({ sessionId: 's', promptTokens: 50_000 })
      const seeds = run.actions.filter((a): a is SeedViaPAction => a.type === 'seedViaP')
      expect(
        seeds.map((a) => a.decodeId),
        cause,
      ).toEqual(['d0', 'd1'])
      expect(run.final.type).toBe('done')
      checkNoInflightLoad(s.router)
    }
  })
})

describe('Algorithm 3: a D (or P) that became unusable between admission tries is not asked again', () => {
  /** Whether `d` could be asked at the moment the driver is asked to answer an action for it. */
  const usable = (r: Router, d: string, s: string) =>
    r.cluster.has(d) && r.cluster.isEligible(d) && !r.cluster.store.isExcluded(s, d)

  const flips: [string, (r: Router, d: string) => void, string][] = [
    ['unhealthy', (r, d) => r.cluster.setHealth(d, false), 'became unhealthy'],
    ['draining', (r, d) => r.cluster.setDraining(d, true), 'is draining'],
    ['paused by another turn', (r, d) => r.cluster.pause(d, r.cluster.now() + 10_000), 'is paused'],
    ['excluded for the session', (r, d) => r.cluster.store.exclude('s', d), 'is excluded for the session'],
    ['removed', (r, d) => r.cluster.removeWorker(d), 'was removed'],
  ]

  it.each(flips)(
    'admit times out and the D becomes %s: the next action is not an admit to it; the turn moves on to the next D',
    (_, flip, why) => {
      let first: string | undefined
      const s = setup({
        nD: 2,
        admit: (a) => {
          if (first !== undefined) return { kind: 'admit' }
          first = a.workerId
          flip(s.router, a.workerId) // the D goes away while its admission RPC times out
          return { kind: 'timeout' }
        },
      })
      const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
      const other = first === 'd0' ? 'd1' : 'd0'
      // No backoff for a retry that will not happen: straight to the next-ranked D.
      expect(run.actions[1]).toMatchObject({ type: 'admit', workerId: other })
      expect(s.admits.filter((a) => a.workerId === first)).toHaveLength(1)
      expect(run.final).toMatchObject({ type: 'done', workerId: other })
      const text = renderDispatch(run.final.record)
      expect(text).toContain(`skip ${first}  ${first} ${why}`)
      expect(text).toContain('after 1 unanswered admission try; moving on')
      checkNoInflightLoad(s.router)
    },
  )

  it.each(flips)(
    'the D becomes %s during the backoff before a retry: no retry to it, the turn moves on',
    (_, flip) => {
      let first: string | undefined
      const s = setup({
        nD: 2,
        admit: (a) => {
          first ??= a.workerId
          return a.workerId === first ? { kind: 'timeout' } : { kind: 'admit' }
        },
        before: (a) => {
          if (a.type === 'wait' && a.reason === 'admission_retry') flip(s.router, first!)
          if (a.type === 'admit') expect(usable(s.router, a.workerId, 's')).toBe(true)
        },
      })
      const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
      const other = first === 'd0' ? 'd1' : 'd0'
      expect(run.actions.map((a) => [a.type, a.type === 'admit' ? a.workerId : ''])).toEqual([
        ['admit', first],
        ['wait', ''],
        ['admit', other],
        ['sendFast', ''],
      ])
      expect(run.final).toMatchObject({ type: 'done', workerId: other })
      checkNoInflightLoad(s.router)
    },
  )

  it('the only D goes down between tries: the turn waits for it instead of asking it, then completes', () => {
    let n = 0
    const s = setup({
      nD: 1,
      admit: () => (n++ === 0 ? { kind: 'timeout' } : { kind: 'admit' }),
      before: (a) => {
        if (a.type === 'admit') expect(usable(s.router, a.workerId, 's')).toBe(true)
        if (a.type === 'wait' && a.reason === 'admission_retry') s.router.cluster.setHealth('d0', false)
        else if (a.type === 'wait') s.router.cluster.setHealth('d0', true) // back for the next walk
      },
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(
      run.actions.map((a) => (a.type === 'wait' && a.reason === 'admission_retry' ? 'retry' : a.type)),
    ).toEqual(['admit', 'retry', 'wait', 'admit', 'sendFast'])
    expect(run.final).toMatchObject({ type: 'done', workerId: 'd0' })
    checkNoInflightLoad(s.router)
  })

  it('a D that refuses the fast path as append_too_large is seeded only after the session’s own D was tried fast (Theorem 2)', () => {
    // d0 holds the session (bound, one page); d1's index wrongly shows the whole prompt, so d1
    // ranks first, and refuses: it does not hold it. The turn then takes the fast path on d0
    // instead of seeding d1 through a P (found by the Theorem 2 property).
    // Session s is bound to d0, which holds its first block; d1 holds both blocks (wrongly).
    const bound = (admit: (a: AdmitAction) => AdmitAnswer) => {
      const x = setup({ nD: 2, admit })
      x.router.cluster.residency.recordStored('d0', blocks(1))
      x.router.cluster.residency.recordStored('d1', blocks(2))
      x.router.cluster.store.setBinding('s', {
        workerId: 'd0',
        committedTokens: 16,
        verifiedBlocks: 1,
        updatedAt: 0,
      })
      return x
    }
    const s = bound((a) =>
      a.workerId === 'd1' ? { kind: 'reject', reason: 'append_too_large' } : { kind: 'admit' },
    )
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 32, blocks: blocks(2) })
    expect(s.admits.map((a) => [a.workerId, a.request.path])).toEqual([
      ['d1', 'fast'],
      ['d0', 'fast'],
    ])
    expect(run.final).toMatchObject({ type: 'done', path: 'fast', workerId: 'd0' })
    // With d0 refusing too, d1's deferred seed-path fallback still comes.
    const t = bound((a) =>
      a.request.path === 'fast'
        ? { kind: 'reject', reason: a.workerId === 'd1' ? 'append_too_large' : 'capacity' }
        : { kind: 'admit' },
    )
    const run2 = t.driver.runTurn({ sessionId: 's', promptTokens: 32, blocks: blocks(2) })
    expect(t.admits.map((a) => [a.workerId, a.request.path])).toEqual([
      ['d1', 'fast'],
      ['d0', 'fast'],
      ['d1', 'seed'],
    ])
    expect(run2.final).toMatchObject({ type: 'done', path: 'seed', workerId: 'd1' })
    checkNoInflightLoad(t.router)
  })

  it("a pause hint in the D's own append_too_large answer does not stop the seed-path request on it; a longer pause set by another turn stops its retry", () => {
    const own = setup({
      nD: 2,
      admit: queue({ kind: 'reject', reason: 'append_too_large', pauseMs: 500 }),
    })
    const r1 = own.driver.runTurn({ sessionId: 's', promptTokens: 900 })
    expect(r1.actions.map((a) => a.type)).toEqual(['admit', 'admit', 'seedViaP'])
    expect(own.admits.map((a) => [a.workerId, a.request.path])).toEqual([
      [own.admits[0]!.workerId, 'fast'],
      [own.admits[0]!.workerId, 'seed'],
    ])
    let first: string | undefined
    const other = setup({
      nD: 2,
      admit: (a) => {
        first ??= a.workerId
        if (a.workerId !== first) return { kind: 'admit' }
        return other.admits.length === 1
          ? { kind: 'reject', reason: 'append_too_large', pauseMs: 500 }
          : { kind: 'timeout' }
      },
      before: (a) => {
        // While the seed-path request's retry backs off, another turn's answer pauses the D longer.
        if (a.type === 'wait' && a.reason === 'admission_retry')
          other.router.cluster.pause(first!, other.clock.t + 5_000)
      },
    })
    const r2 = other.driver.runTurn({ sessionId: 's', promptTokens: 900 })
    const second = first === 'd0' ? 'd1' : 'd0'
    expect(other.admits.map((a) => [a.workerId, a.request.path])).toEqual([
      [first, 'fast'],
      [first, 'seed'],
      [second, 'fast'],
    ])
    expect(r2.final).toMatchObject({ type: 'done', workerId: second })
    checkNoInflightLoad(other.router)
  })

  it('seed path: the P picked before admission went down meanwhile: the seed goes through another P', () => {
    const s = setup({
      nP: 2,
      nD: 1,
      admit: (a) => {
        if (s.admits.length === 1) return { kind: 'timeout' }
        void a
        return { kind: 'admit' }
      },
      before: (a) => {
        // p0 (equal load, registered first) was picked; it goes down during the backoff.
        if (a.type === 'wait' && a.reason === 'admission_retry') s.router.cluster.setHealth('p0', false)
      },
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.actions.map((a) => a.type)).toEqual(['admit', 'wait', 'admit', 'seedViaP'])
    expect(s.sends[0]).toMatchObject({ type: 'seedViaP', prefillId: 'p1', decodeId: 'd0' })
    expect(renderDispatch(run.final.record)).toContain('P p0 became unhealthy since it was picked')
    checkNoInflightLoad(s.router)
  })

  it('seed path: the P lost its link to the D meanwhile and no other P can seed it: the D is skipped (no_prefill), its slot given back', () => {
    let waited = false
    const s = setup({
      nP: 1,
      nD: 1,
      before: (a) => {
        if (a.type === 'wait' && !waited) {
          waited = true
          expect(a.reason).toBe('no_prefill')
          expect(s.router.cluster.store.load('d0')).toMatchObject({ turns: 0, pendingSeeds: 0 })
        }
      },
      admit: () => {
        if (s.admits.length === 1) {
          s.router.cluster.recordTransfer('p0', 'd0', false)
          s.router.cluster.recordTransfer('p0', 'd0', false)
        }
        return { kind: 'admit' }
      },
      send: (a) => {
        if (a.type === 'seedViaP') expect(s.router.cluster.linkHealthy(a.prefillId, a.decodeId)).toBe(true)
        return { kind: 'ok' }
      },
    })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 30_000 })
    expect(run.actions[1]).toMatchObject({ type: 'wait', reason: 'no_prefill' })
    expect(renderDispatch(run.final.record)).toContain('P p0 has no healthy link to d0 since it was picked')
    // The link's cooldown (30 s) ends just within the turn's budget: p0 probes the link again.
    expect(run.final).toMatchObject({ type: 'done', path: 'seed' })
    expect(s.sends).toHaveLength(1)
    expect(s.clock.t).toBeGreaterThanOrEqual(31_000)
    checkNoInflightLoad(s.router)
  })
})

describe('Algorithm 3: bounded waiting ends in a typed error naming the cause', () => {
  it('every D paused past the budget → WAIT_EXHAUSTED (all_paused) at the deadline', () => {
    const s = setup({ nD: 2 })
    s.router.cluster.pause('d0', 100_000)
    s.router.cluster.pause('d1', 100_000)
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final.type).toBe('fail')
    if (run.final.type !== 'fail') return
    expect(run.final.cause).toBe('all_paused')
    expect(run.final.error).toBeInstanceOf(RouterError)
    expect(run.final.error.code).toBe('WAIT_EXHAUSTED')
    expect(run.final.error.message).toContain('all_paused')
    expect(run.final.error.value).toMatchObject({ cause: 'all_paused', waitedMs: 30_000 })
    expect(run.actions.filter((a) => a.type === 'wait')).toHaveLength(1)
  })

  it('SLO classes have separate wait budgets', () => {
    for (const [cls, budget] of [
      ['interactive', 30_000],
      ['batch', 60_000],
      ['background', 120_000],
    ] as const) {
      const s = setup({ nD: 1, admit: () => ({ kind: 'reject', reason: 'capacity', pauseMs: 2000 }) })
      const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800, sloClass: cls })
      expect(run.final).toMatchObject({ type: 'fail', cause: 'all_rejecting' })
      expect(run.final.type === 'fail' && run.final.error.value).toMatchObject({ waitedMs: budget })
    }
  })

  it('no D worker at all → waits, then fails naming no_decode_workers', () => {
    const s = setup({ nD: 0 })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final).toMatchObject({ type: 'fail', cause: 'no_decode_workers' })
  })

  it('ATTEMPTS_EXHAUSTED bounds the admission RPCs of one turn', () => {
    const s = setup({ nD: 2, params: { maxAttempts: 5 }, admit: () => ({ kind: 'timeout' }) })
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final.type === 'fail' && run.final.error.code).toBe('ATTEMPTS_EXHAUSTED')
    expect(run.final.type === 'fail' && run.final.cause).toBe('admission_timeouts')
    expect(s.admits).toHaveLength(5)
  })
})

describe('Dispatch input checking', () => {
  it('refuses mismatched and malformed outcomes without changing state, and anything after the end', () => {
    const s = setup({ nD: 1 })
    const t = s.router.dispatch({ sessionId: 's', promptTokens: 800 })
    const code = (f: () => unknown) => {
      try {
        f()
      } catch (e) {
        return e instanceof RouterError ? e.code : String(e)
      }
      return undefined
    }
    expect(code(() => t.next({ type: 'waited' }))).toBe('UNEXPECTED_OUTCOME')
    const a = t.next()
    if (a.type !== 'admit') throw new Error('expected admit')
    expect(code(() => t.next())).toBe('UNEXPECTED_OUTCOME')
    expect(code(() => t.next({ type: 'completed' }))).toBe('UNEXPECTED_OUTCOME')
    const ok = scriptedResponse(a, { kind: 'admit' })
    expect(code(() => t.next({ type: 'admitResult', response: { ...ok, requestId: 'other' } }))).toBe(
      'UNEXPECTED_OUTCOME',
    )
    expect(code(() => t.next({ type: 'admitResult', response: { ...ok, tokenUsageAfter: -1 } }))).toBe(
      'INVALID_MESSAGE',
    )
    expect(code(() => t.next({ type: 'admitResult', response: { ...ok, admitted: false } }))).toBe(
      'INVALID_MESSAGE',
    )
    expect(t.pending).toBe(a)
    const send = t.next({ type: 'admitResult', response: ok })
    expect(send.type).toBe('sendFast')
    expect(code(() => t.next({ type: 'failed', cause: 'nope' as never }))).toBe('INVALID_MESSAGE')
    expect(code(() => t.next({ type: 'completed', outputTokens: -3 }))).toBe('INVALID_LENGTH')
    expect(t.next({ type: 'completed', outputTokens: 1 }).type).toBe('done')
    expect(code(() => t.next({ type: 'waited' }))).toBe('TURN_FINISHED')
    expect(code(() => t.abort())).toBe('TURN_FINISHED')
    expect(code(() => s.router.dispatch({ sessionId: 's', promptTokens: -1 }))).toBe('INVALID_LENGTH')
    expect(code(() => s.router.dispatch({ sessionId: '', promptTokens: 1 }))).toBe('INVALID_OPTION')
    expect(
      code(() => s.router.dispatch({ sessionId: 's', promptTokens: 1, sloClass: 'gold' as never })),
    ).toBe('INVALID_OPTION')
    expect(code(() => s.router.dispatch({ sessionId: 's', promptTokens: 1, blocks: [1 as never] }))).toBe(
      'INVALID_MESSAGE',
    )
  })

  it('abort gives back the in-flight load and ends the turn with cause aborted', () => {
    const s = setup({ nD: 1 })
    const t = s.router.dispatch({ sessionId: 's', promptTokens: 30_000 })
    const a = t.next()
    if (a.type !== 'admit') throw new Error('expected admit')
    const seed = t.next({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) })
    expect(seed.type).toBe('seedViaP')
    expect(s.router.cluster.store.load('d0').pendingSeeds).toBe(1)
    const f = t.abort()
    expect(f).toMatchObject({ type: 'fail', cause: 'aborted' })
    expect(t.finished).toBe(true)
    checkNoInflightLoad(s.router)
  })
})

describe('baselines drive Dispatch without admission', () => {
  it('round-robin in seed mode sends every turn through a P; direct mode sends straight to the worker', () => {
    const clock = new ManualClock()
    const mk = (pathMode: 'seed' | 'direct') =>
      new Router({
        now: clock.now,
        random: () => 0.5,
        policy: roundRobinPolicy({ pathMode }),
        workers: [
          { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
          { id: 'd0', role: 'decode', capacityTokens: 1e6 },
          { id: 'd1', role: 'decode', capacityTokens: 1e6 },
        ],
      })
    const seed = new ScriptedDriver({ router: mk('seed'), clock })
    const r = seed.runTurn({ sessionId: 's', promptTokens: 100 })
    expect(r.actions.map((a) => a.type)).toEqual(['seedViaP'])
    const direct = new ScriptedDriver({ router: mk('direct'), clock })
    const d1 = direct.runTurn({ sessionId: 's', promptTokens: 100 })
    const d2 = direct.runTurn({ sessionId: 's', promptTokens: 200 })
    expect(d1.actions.map((a) => a.type)).toEqual(['sendFast'])
    expect([d1.final, d2.final].map((f) => (f.type === 'done' ? [f.path, f.workerId] : []))).toEqual([
      ['direct', 'd0'],
      ['direct', 'd1'],
    ])
  })
})
