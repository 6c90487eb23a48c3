import type { KvEvent } from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type DispatchAction,
  Router,
  RouterError,
  type RouterParamsInput,
  SLO_CLASSES,
} from '../src/index.js'
import {
  type AdmitAnswer,
  ManualClock,
  ScriptedDriver,
  type SendAnswer,
  admitAnswerArb,
  checkLoadAccounting,
  checkNoInflightLoad,
  dispatchActionBound,
  seededRandom,
  sendAnswerArb,
} from '../src/testing/index.js'

const PAGE = 16
/** Block hashes of session `s`'s prompt of `tokens` tokens (prompts of a session extend each other). */
const sessionBlocks = (s: number, tokens: number) =>
  Array.from({ length: Math.floor(tokens / PAGE) }, (_, i) => BigInt(s) * 1_000_000n + BigInt(i))

interface World {
  router: Router
  clock: ManualClock
  nD: number
}

function world(nP: number, nD: number, seed: number, params: RouterParamsInput = {}): World {
  const clock = new ManualClock(0)
  const router = new Router({
    now: clock.now,
    random: seededRandom(seed),
    params: { pageSize: PAGE, ...params },
    workers: [
      ...Array.from({ length: nP }, (_, i) => ({
        id: `p${i}`,
        role: 'prefill' as const,
        capacityTokens: 10_000_000,
      })),
      ...Array.from({ length: nD }, (_, i) => ({
        id: `d${i}`,
        role: 'decode' as const,
        capacityTokens: 10_000_000,
      })),
    ],
  })
  return { router, clock, nD }
}

/** Adversarial KV events: stores and removals of sessions' blocks, sometimes after a gap. */
const kvEventArb = fc.record({
  worker: fc.nat(3),
  kind: fc.constantFrom('BlockStored', 'BlockStored', 'BlockRemoved', 'AllBlocksCleared' as const),
  session: fc.nat(3),
  from: fc.nat(40),
  count: fc.integer({ min: 1, max: 40 }),
  skip: fc.oneof(
    { weight: 5, arbitrary: fc.constant(0) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 }) },
  ),
  atAction: fc.nat(40),
})
type KvEventSpec = typeof kvEventArb extends fc.Arbitrary<infer T> ? T : never

function applyEvent(w: World, ev: KvEventSpec, nextId: Map<string, number>): void {
  const id = `d${ev.worker % w.nD}`
  const eventId = (nextId.get(id) ?? 0) + ev.skip
  nextId.set(id, eventId + 1)
  const hashes = sessionBlocks(ev.session, (ev.from + ev.count) * PAGE).slice(ev.from)
  const e: KvEvent =
    ev.kind === 'BlockStored'
      ? {
          type: 'BlockStored',
          eventId,
          blockHashes: hashes,
          parentBlockHash: null,
          tokenIds: [],
          blockSize: PAGE,
          extraKey: null,
        }
      : ev.kind === 'BlockRemoved'
        ? ({ type: 'BlockRemoved', eventId, blockHashes: hashes, extraKey: null } as KvEvent)
        : { type: 'AllBlocksCleared', eventId }
  w.router.ingest(id, e)
}

const turnArb = fc.record({
  session: fc.nat(3),
  growth: fc.integer({ min: 1, max: 12_000 }),
  output: fc.nat(600),
  sloClass: fc.constantFrom(...SLO_CLASSES),
})

const theorem1Arb = fc.record({
  nP: fc.integer({ min: 1, max: 2 }),
  nD: fc.integer({ min: 1, max: 4 }),
  seed: fc.integer(),
  turns: fc.array(turnArb, { minLength: 1, maxLength: 8 }),
  badAdmits: fc.array(fc.array(admitAnswerArb(), { maxLength: 5 }), { minLength: 4, maxLength: 4 }),
  badSends: fc.array(sendAnswerArb(), { maxLength: 4 }),
  health: fc.array(fc.record({ atAction: fc.nat(30), worker: fc.nat(5), healthy: fc.boolean() }), {
    maxLength: 5,
  }),
  events: fc.array(kvEventArb, { maxLength: 12 }),
})
type Theorem1Case = typeof theorem1Arb extends fc.Arbitrary<infer T> ? T : never

/**
 * Dispatch only asks a D that can still take the turn when it emits the request: registered,
 * healthy, not draining, not excluded for the session and not paused (except by a pause the same D
 * set in its `append_too_large` answer to this turn's fast-path request, which the seed-path
 * request on that D follows, retries included); and it seeds only through a P that is registered, healthy,
 * not draining or paused, with a healthy link to the D. Time passes between a walk's ranking and
 * these actions (admission RPCs, timeouts, backoffs), and the adversary flips health meanwhile.
 */
function checkUsableWhenAsked(
  router: Router,
  session: string,
  a: DispatchAction,
  fallback: string | undefined,
): void {
  const c = router.cluster
  if (a.type === 'admit') {
    const d = a.workerId
    expect(c.has(d), `admit to removed ${d}`).toBe(true)
    expect(c.healthy(d), `admit to unhealthy ${d}`).toBe(true)
    expect(c.draining(d), `admit to draining ${d}`).toBe(false)
    expect(c.store.isExcluded(session, d), `admit to ${d}, excluded for ${session}`).toBe(false)
    if (fallback !== d) expect(c.isPaused(d), `admit to paused ${d}`).toBe(false)
  }
  if (a.type === 'sendFast' && a.admission !== undefined) {
    // Admission on arrival: the send is the admission request.
    const d = a.workerId
    expect(c.has(d) && c.healthy(d) && !c.draining(d), `send with admission to unusable ${d}`).toBe(true)
    expect(c.store.isExcluded(session, d), `send with admission to ${d}, excluded for ${session}`).toBe(false)
    expect(c.isPaused(d), `send with admission to paused ${d}`).toBe(false)
  }
  if (a.type === 'seedViaP') {
    const p = a.prefillId
    expect(c.has(p) && c.isEligible(p), `seed through unusable ${p}`).toBe(true)
    expect(c.linkHealthy(p, a.decodeId), `seed over unhealthy link ${p}→${a.decodeId}`).toBe(true)
  }
}

/**
 * One turn runs at a time: it counts toward the D its admission request, send or seed is about
 * (from the request on, not only once sent), toward no D while it waits between walks, and toward
 * at most one D at any time.
 */
function checkOneTurnLoad(router: Router, a: DispatchAction): void {
  const c = router.cluster
  const ds = c.decodeIds()
  const total = ds.reduce((n, d) => n + c.store.load(d).turns, 0)
  expect(total).toBeLessThanOrEqual(1)
  const d =
    a.type === 'admit' || a.type === 'sendFast' ? a.workerId : a.type === 'seedViaP' ? a.decodeId : undefined
  if (d !== undefined) expect(c.store.load(d).turns, `${a.type} on ${d}`).toBe(1)
  if (a.type === 'wait' && a.reason !== 'admission_retry') expect(total).toBe(0)
}

/**
 * Plays a Theorem-1 scenario. The adversary: each D gives up to 5 arbitrary admission answers
 * (rejections for any reason, pause hints up to 2 s, timeouts, errors) before it admits, up to 4
 * sends or seeds fail, workers (P and D) go down and up during the first 30 actions (then all
 * are healthy again), and KV events (with gaps) rewrite the residency index as turns run. Every
 * admission request and seed is checked to go to a worker that can still take it.
 */
function playTheorem1(c: Theorem1Case, params: RouterParamsInput) {
  const w = world(c.nP, c.nD, c.seed, params)
  const admits = c.badAdmits.slice(0, c.nD).map((q) => [...q])
  const sends = [...c.badSends]
  const ids = [...w.router.cluster.prefillIds(), ...w.router.cluster.decodeIds()]
  const nextId = new Map<string, number>()
  let actions = 0
  let session = ''
  /** The D whose `append_too_large` answer this turn is following with a seed-path request. */
  let fallback: string | undefined
  const before = (a: DispatchAction) => {
    checkUsableWhenAsked(w.router, session, a, fallback)
    checkOneTurnLoad(w.router, a)
    if (a.type === 'admit' ? a.workerId !== fallback : !(a.type === 'wait' && a.reason === 'admission_retry'))
      fallback = undefined
    actions++
    for (const h of c.health) {
      if (h.atAction === actions) w.router.cluster.setHealth(ids[h.worker % ids.length]!, h.healthy)
    }
    if (actions === 31) for (const id of ids) w.router.cluster.setHealth(id, true)
    for (const ev of c.events) if (ev.atAction === actions) applyEvent(w, ev, nextId)
    void a
  }
  const driver = new ScriptedDriver({
    router: w.router,
    clock: w.clock,
    beforeAnswer: before,
    admit: (a): AdmitAnswer => {
      const answer = admits[Number(a.workerId.slice(1))]?.shift() ?? { kind: 'admit' }
      if (answer.kind === 'reject' && answer.reason === 'append_too_large') fallback = a.workerId
      return answer
    },
    send: (): SendAnswer => sends.shift() ?? { kind: 'ok', outputTokens: 100 },
  })
  const promptOf = new Map<number, number>()
  const results: { final: ReturnType<ScriptedDriver['runTurn']>['final']; session: string }[] = []
  const bound = dispatchActionBound(w.router.params, c.nD)
  for (const t of c.turns) {
    const prompt = (promptOf.get(t.session) ?? 0) + t.growth
    const sessionId = `s${t.session}`
    session = sessionId
    fallback = undefined
    const run = driver.runTurn(
      {
        sessionId,
        promptTokens: prompt,
        blocks: sessionBlocks(t.session, prompt),
        expectedOutputTokens: t.output,
        sloClass: t.sloClass,
      },
      bound,
    )
    results.push({ final: run.final, session: sessionId })
    if (run.final.type === 'done') {
      promptOf.set(t.session, prompt + t.output)
      // Reset-on-success: no exclusions and no rejects remain for the session.
      expect(w.router.cluster.store.excludedWorkers(sessionId)).toEqual([])
      for (const d of w.router.cluster.decodeIds())
        expect(w.router.cluster.store.rejects(sessionId, d)).toBe(0)
    } else {
      expect(run.final.error).toBeInstanceOf(RouterError)
      expect(['WAIT_EXHAUSTED', 'ATTEMPTS_EXHAUSTED']).toContain(run.final.error.code)
      expect(run.final.error.message).toContain(run.final.cause)
    }
    checkNoInflightLoad(w.router)
  }
  return results
}

describe('Theorem 1 (no starvation)', () => {
  it('every turn ends within a bounded number of actions, done or failed with a typed error naming the cause', () => {
    fc.assert(
      fc.property(theorem1Arb, (c) => {
        playTheorem1(c, {})
      }),
      { numRuns: 80 },
    )
  })

  it('a seed retried through another P after a P-side failure does not ask a D its own pause covered only once (found by the property above)', () => {
    // d2 answers the fast path append_too_large with a 12 ms pause: the seed-path request that
    // follows may still go to d2; it fails on the P side, and the retry through another P must
    // respect the pause like any other request.
    playTheorem1(
      {
        nP: 2,
        nD: 4,
        seed: 0,
        turns: [
          { session: 1, growth: 1, output: 0, sloClass: 'interactive' },
          { session: 1, growth: 1, output: 0, sloClass: 'interactive' },
          { session: 0, growth: 1, output: 0, sloClass: 'interactive' },
        ],
        badAdmits: [[], [], [{ kind: 'reject', reason: 'append_too_large', pauseMs: 12 }], []],
        badSends: [
          { kind: 'ok', outputTokens: 0 },
          { kind: 'ok', outputTokens: 0 },
          { kind: 'fail', cause: 'transfer_error' },
        ],
        health: [],
        events: [],
      },
      {},
    )
  })

  it('when every healthy D eventually admits and the wait budget covers the adversary, every turn completes', () => {
    // The adversary above costs at most ~24 bad answers of <= 2.5 s each plus link cooldowns:
    // a 10-minute budget covers it, so no turn may fail.
    const slo = { maxWaitMs: 600_000, seedShare: 1 }
    fc.assert(
      fc.property(theorem1Arb, (c) => {
        const results = playTheorem1(c, { slo: { interactive: slo, batch: slo, background: slo } })
        for (const r of results) expect(r.final.type).toBe('done')
      }),
      { numRuns: 80 },
    )
  })
})

const theorem2Arb = fc.record({
  nD: fc.integer({ min: 1, max: 4 }),
  target: fc.nat(3),
  seed: fc.integer(),
  committed: fc.integer({ min: PAGE, max: 60_000 }),
  append: fc.integer({ min: 0, max: 8_192 }),
  targetPause: fc.integer({ min: 0, max: 2_000 }),
  others: fc.array(fc.array(admitAnswerArb(), { maxLength: 6 }), { minLength: 4, maxLength: 4 }),
  otherHealth: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  events: fc.array(kvEventArb, { maxLength: 10 }),
})

describe('Theorem 1 with admission on arrival (admitOnArrival)', () => {
  // The adversary's admission answers also answer the requests that sends carry; a timeout or an
  // error there is a lost send (a failed send, within maxSendFailures).
  it('every turn ends within a bounded number of actions, done or failed with a typed error naming the cause', () => {
    fc.assert(
      fc.property(theorem1Arb, (c) => {
        playTheorem1(c, { admitOnArrival: true })
      }),
      { numRuns: 80 },
    )
  })

  it('when every healthy D eventually admits and the budgets cover the adversary, every turn completes', () => {
    const slo = { maxWaitMs: 600_000, seedShare: 1 }
    fc.assert(
      fc.property(theorem1Arb, (c) => {
        const results = playTheorem1(c, {
          admitOnArrival: true,
          // Up to 20 scripted timeouts and errors become lost sends, plus 4 failed sends.
          maxSendFailures: 32,
          slo: { interactive: slo, batch: slo, background: slo },
        })
        for (const r of results) expect(r.final.type).toBe('done')
      }),
      { numRuns: 80 },
    )
  })
})

describe('Theorem 2 (fast path)', () => {
  it('if residency ⊇ prefix, append <= tau_append, capOk(d) and d admits, the turn takes the fast path (on d when it is the only fast candidate)', () => {
    fc.assert(
      fc.property(theorem2Arb, (c) => {
        const w = world(1, c.nD, c.seed)
        const target = `d${c.target % c.nD}`
        const nextId = new Map<string, number>()
        // Adversarial residency on the other workers (the session is session 0).
        for (const ev of c.events)
          if (`d${ev.worker % c.nD}` !== target) applyEvent(w, { ...ev, session: 0 }, nextId)
        // The session holds `committed` tokens on the target D, whose index shows them.
        w.router.cluster.residency.recordStored(target, sessionBlocks(0, c.committed))
        const verifiedBlocks = Math.floor(c.committed / PAGE)
        w.router.cluster.store.setBinding('s0', {
          workerId: target,
          committedTokens: c.committed,
          verifiedBlocks,
          updatedAt: 0,
        })
        for (let i = 0; i < c.nD; i++) {
          const d = `d${i}`
          if (d !== target) w.router.cluster.setHealth(d, c.otherHealth[i]!)
        }
        const prompt = c.committed + c.append
        const turn = { sessionId: 's0', promptTokens: prompt, blocks: sessionBlocks(0, prompt) }
        const decision = w.router.route(turn)
        const mine = decision.candidates.find((x) => x.workerId === target)!
        expect(mine.fast).toBe(true) // the premise holds
        const fastOnes = decision.candidates.filter((x) => x.fast).map((x) => x.workerId)
        const others = c.others.map((q) => [...q])
        const driver = new ScriptedDriver({
          router: w.router,
          clock: w.clock,
          admit: (a): AdmitAnswer =>
            a.workerId === target
              ? { kind: 'admit', pauseMs: c.targetPause }
              : (others[Number(a.workerId.slice(1))]?.shift() ?? { kind: 'admit' }),
        })
        const run = driver.runTurn(turn)
        expect(run.final).toMatchObject({ type: 'done', path: 'fast' })
        expect(run.actions.some((a) => a.type === 'seedViaP')).toBe(false)
        if (fastOnes.length === 1) expect(run.final.type === 'done' && run.final.workerId).toBe(target)
        // Nothing ranked below the target was tried before it.
        const rankOf = new Map(decision.candidates.map((x) => [x.workerId, x.rank]))
        for (const a of run.actions)
          if (a.type === 'admit') expect(rankOf.get(a.workerId)!).toBeLessThanOrEqual(mine.rank)
      }),
      { numRuns: 150 },
    )
  })
})

describe('reset-on-success vs v1 permanent exclusion', () => {
  it('on a script of transient rejections v1 excludes every D and starves the session; ours completes every turn', () => {
    const TAU = 3
    const scriptArb = fc.record({
      nD: fc.integer({ min: 2, max: 4 }),
      seed: fc.integer(),
      extraTurns: fc.nat(3),
      rejections: fc.array(fc.integer({ min: 1, max: TAU }), { minLength: 16, maxLength: 16 }),
      growth: fc.integer({ min: 100, max: 4_000 }),
    })
    const play = (c: typeof scriptArb extends fc.Arbitrary<infer T> ? T : never, v1: boolean) => {
      const w = world(1, c.nD, c.seed, {
        tauReject: TAU,
        resetOnSuccess: !v1,
        releaseWhenAllExcluded: false, // isolate reset-on-success: no other escape hatch
      })
      let pending = 0
      const driver = new ScriptedDriver({
        router: w.router,
        clock: w.clock,
        // Transient pressure: the first r admission RPCs of each turn are rejected, then D workers admit.
        admit: (): AdmitAnswer =>
          pending-- > 0 ? { kind: 'reject', reason: 'capacity' } : { kind: 'admit' },
      })
      const turns = TAU * c.nD + c.extraTurns
      const outcomes: string[] = []
      let prompt = 0
      for (let k = 0; k < turns; k++) {
        pending = c.rejections[k % c.rejections.length]!
        prompt += c.growth
        const run = driver.runTurn({ sessionId: 's', promptTokens: prompt, blocks: sessionBlocks(0, prompt) })
        outcomes.push(run.final.type === 'done' ? 'done' : run.final.cause)
        if (run.final.type !== 'done') break // starved: the property has its witness
        prompt += 100
      }
      return outcomes
    }
    fc.assert(
      fc.property(scriptArb, (c) => {
        const ours = play(c, false)
        expect(ours.every((o) => o === 'done')).toBe(true)
        const v1 = play(c, true)
        expect(v1).toContain('all_excluded')
      }),
      { numRuns: 40 },
    )
  })
})

describe('concurrent turns share the cluster view safely', () => {
  it('interleaved turns never exceed a D pending-seed budget, never drive a load negative, count each turn on the D it is committed to, and give every load back', () => {
    const concArb = fc.record({
      nP: fc.integer({ min: 1, max: 2 }),
      nD: fc.integer({ min: 1, max: 3 }),
      seed: fc.integer(),
      turns: fc.array(
        fc.record({
          session: fc.nat(5),
          prompt: fc.integer({ min: 1, max: 40_000 }),
          sloClass: fc.constantFrom(...SLO_CLASSES),
        }),
        { minLength: 2, maxLength: 8 },
      ),
      order: fc.array(fc.nat(), { minLength: 64, maxLength: 64 }),
      answers: fc.array(admitAnswerArb(), { maxLength: 20 }),
      sends: fc.array(sendAnswerArb(), { maxLength: 8 }),
    })
    const BUDGET = 2
    fc.assert(
      fc.property(concArb, (c) => {
        const w = world(c.nP, c.nD, c.seed, { pendingSeedsPerD: BUDGET })
        const answers = [...c.answers]
        const sends = [...c.sends]
        const driver = new ScriptedDriver({
          router: w.router,
          clock: w.clock,
          admit: () => answers.shift() ?? { kind: 'admit' },
          send: () => sends.shift() ?? { kind: 'ok' },
        })
        const live = c.turns.map((t) => {
          const turn = w.router.dispatch({
            sessionId: `s${t.session}`,
            promptTokens: t.prompt,
            blocks: sessionBlocks(t.session, t.prompt),
            sloClass: t.sloClass,
          })
          return { turn, action: turn.next() }
        })
        const check = () => {
          for (const id of [...w.router.cluster.decodeIds(), ...w.router.cluster.prefillIds()]) {
            const l = w.router.cluster.store.load(id)
            expect(l.pendingSeeds).toBeLessThanOrEqual(BUDGET)
            for (const v of Object.values(l)) expect(v).toBeGreaterThanOrEqual(0)
          }
        }
        const bound = c.turns.length * dispatchActionBound(w.router.params, c.nD)
        let steps = 0
        for (;;) {
          const running = live.filter((x) => x.action.type !== 'done' && x.action.type !== 'fail')
          if (running.length === 0) break
          const pick = running[c.order[steps % c.order.length]! % running.length]!
          pick.action = pick.turn.next(driver.answer(pick.action))
          check()
          checkLoadAccounting(
            w.router,
            live.map((x) => x.turn),
          )
          expect(++steps).toBeLessThanOrEqual(bound)
        }
        for (const x of live) {
          if (x.action.type === 'fail') expect(x.action.error).toBeInstanceOf(RouterError)
        }
        checkNoInflightLoad(w.router)
      }),
      { numRuns: 120 },
    )
  })
})
