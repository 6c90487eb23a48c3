import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type ClaimAction,
  type DispatchAction,
  InMemoryClusterStateStore,
  type SessionBinding,
  Router,
  RouterError,
  SLO_CLASSES,
} from '../src/index.js'
import {
  ManualClock,
  ScriptedDriver,
  admitAnswerArb,
  checkLoadAccounting,
  checkNoInflightLoad,
  dispatchActionBound,
  seededRandom,
  sendAnswerArb,
} from '../src/testing/index.js'

const PAGE = 16
const blocksOf = (s: number, tokens: number) =>
  Array.from({ length: Math.floor(tokens / PAGE) }, (_, i) => BigInt(s) * 1_000_000n + BigInt(i))

/** `replicas` routers over one clock and one shared store (a perfectly synchronous "distributed" store). */
function replicas(n: number, store: InMemoryClusterStateStore, nD = 2, params = {}) {
  const clock = new ManualClock(0)
  const routers = Array.from(
    { length: n },
    (_, i) =>
      new Router({
        now: clock.now,
        random: seededRandom(i + 1),
        store,
        params: { pageSize: PAGE, ...params },
        workers: [
          { id: 'p0', role: 'prefill', capacityTokens: 10_000_000 },
          ...Array.from({ length: nD }, (_, k) => ({
            id: `d${k}`,
            role: 'decode' as const,
            capacityTokens: 10_000_000,
          })),
        ],
      }),
  )
  return { clock, routers }
}

describe('claims (stores shared by several router replicas)', () => {
  it('the default store confirms no claims: no claim action in a turn', () => {
    const { clock, routers } = replicas(1, new InMemoryClusterStateStore())
    const run = new ScriptedDriver({ router: routers[0]!, clock }).runTurn({
      sessionId: 's',
      promptTokens: 20_000,
    })
    expect(run.final.type).toBe('done')
    expect(run.actions.some((a) => a.type === 'claim')).toBe(false)
  })

  it('the in-memory store decides claims by the rules: first live binding wins, a migration names the binding it replaces', () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const first = store.claim({ kind: 'binding', sessionId: 's', workerId: 'd0', expected: undefined, at: 1 })
    expect(first).toMatchObject({
      granted: true,
      binding: { workerId: 'd0', committedTokens: 0, updatedAt: 1 },
    })
    const again = store.claim({ kind: 'binding', sessionId: 's', workerId: 'd0', expected: undefined, at: 2 })
    expect(again.granted).toBe(true)
    const stale = store.claim({ kind: 'binding', sessionId: 's', workerId: 'd1', expected: undefined, at: 3 })
    expect(stale).toMatchObject({ granted: false, binding: { workerId: 'd0' } })
    const move = store.claim({
      kind: 'binding',
      sessionId: 's',
      workerId: 'd1',
      expected: first.binding,
      at: 4,
    })
    expect(move).toMatchObject({ granted: true, binding: { workerId: 'd1' } })
    expect(move.binding!.revision!).toBeGreaterThan(first.binding!.revision!)
    // The old revision no longer wins anything.
    expect(
      store.claim({ kind: 'binding', sessionId: 's', workerId: 'd2', expected: first.binding, at: 5 })
        .granted,
    ).toBe(false)
    store.setBinding('s', { workerId: 'd1', committedTokens: 900, verifiedBlocks: 50, updatedAt: 6 })
    expect(store.getBinding('s')!.revision).toBeGreaterThan(move.binding!.revision!)
    // A success on d0 from a turn that claimed before the move does not undo it.
    store.setBinding('s', { workerId: 'd0', committedTokens: 700, verifiedBlocks: 40, updatedAt: 7 })
    expect(store.getBinding('s')).toMatchObject({ workerId: 'd1', committedTokens: 900 })
    store.addLoad('d0', { pendingSeeds: 2 })
    expect(store.claim({ kind: 'seedSlot', sessionId: 's', workerId: 'd0', budget: 2, at: 7 }).granted).toBe(
      true,
    )
    store.addLoad('d0', { pendingSeeds: 1 })
    expect(store.claim({ kind: 'seedSlot', sessionId: 's', workerId: 'd0', budget: 2, at: 8 }).granted).toBe(
      false,
    )
  })

  it('two replicas racing on one unbound session: the loser re-routes to the winner and completes there', () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const { clock, routers } = replicas(2, store)
    const [ra, rb] = routers as [Router, Router]
    const da = new ScriptedDriver({ router: ra, clock })
    const db = new ScriptedDriver({ router: rb, clock })
    const turn = { sessionId: 'race', promptTokens: 20_000, blocks: blocksOf(1, 20_000) }
    const ta = ra.dispatch(turn)
    const tb = rb.dispatch(turn)
    // Both walk before either claims: both see the session unbound.
    let a = ta.next()
    let b = tb.next()
    expect(a).toMatchObject({ type: 'claim', claim: { kind: 'seedSlot' } })
    a = ta.next(da.answer(a))
    expect(a).toMatchObject({ type: 'claim', claim: { kind: 'binding', expected: undefined } })
    const target = (a as ClaimAction).claim.workerId
    // B's slot on the other D, so its binding claim names another D.
    const other = target === 'd0' ? 'd1' : 'd0'
    a = ta.next(da.answer(a)) // A wins the binding
    expect(store.getBinding('race')?.workerId).toBe(target)
    // B: drive until done, counting claims.
    const bActions: DispatchAction[] = []
    while (b.type !== 'done' && b.type !== 'fail') {
      bActions.push(b)
      b = tb.next(db.answer(b))
    }
    while (a.type !== 'done' && a.type !== 'fail') a = ta.next(da.answer(a))
    expect(a).toMatchObject({ type: 'done', workerId: target })
    expect(b).toMatchObject({ type: 'done', workerId: target })
    const bClaims = bActions.filter((x): x is ClaimAction => x.type === 'claim' && x.claim.kind === 'binding')
    // B walked while the session was unbound and A's slot made the other D look less loaded: its
    // binding claim named the other D, lost to A's, and B followed A's binding.
    expect(bClaims[0]!.claim).toMatchObject({ workerId: other, expected: undefined })
    expect(b.type === 'done' && b.record.steps.some((st) => st.detail.startsWith('lost:'))).toBe(true)
    expect(store.getBinding('race')?.workerId).toBe(target)
    checkNoInflightLoad(ra)
  })

  it('a lost binding claim re-routes to the winner first, even when the ranking prefers another D', () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const { clock, routers } = replicas(1, store, 3)
    const r = routers[0]!
    const t = r.dispatch({ sessionId: 's', promptTokens: 2_000 })
    let a = t.next()
    expect(a).toMatchObject({ type: 'claim', claim: { kind: 'binding' } })
    const wanted = (a as ClaimAction).claim.workerId
    const winner = wanted === 'd2' ? 'd1' : 'd2'
    // Another replica binds the session first.
    store.claim({ kind: 'binding', sessionId: 's', workerId: winner, expected: undefined, at: 0 })
    const driver = new ScriptedDriver({ router: r, clock })
    a = t.next(driver.answer(a))
    expect(a).toMatchObject({ type: 'admit', workerId: winner })
    while (a.type !== 'done' && a.type !== 'fail') a = t.next(driver.answer(a))
    expect(a).toMatchObject({ type: 'done', workerId: winner, migratedFrom: undefined })
    expect(a.record.steps.map((x) => x.kind)).toContain('claim')
  })

  it('a pending-seed slot denied across replicas skips the D and gives the slot back', () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const { clock, routers } = replicas(1, store, 2, { pendingSeedsPerD: 2 })
    const r = routers[0]!
    let denied: string | undefined
    const driver = new ScriptedDriver({
      router: r,
      clock,
      claim: (a) => {
        if (a.claim.kind === 'seedSlot' && denied === undefined) {
          denied = a.claim.workerId
          expect(store.load(denied).pendingSeeds).toBe(1) // the slot is taken before the claim
          return { type: 'claimResult', granted: false }
        }
        return store.claim(a.claim)
      },
    })
    const run = driver.runTurn({ sessionId: 's', promptTokens: 20_000 })
    expect(run.final.type).toBe('done')
    expect(run.final.type === 'done' && run.final.workerId).not.toBe(denied)
    expect(run.final.record.steps.some((x) => x.detail.includes('across replicas'))).toBe(true)
    checkNoInflightLoad(r)
  })

  it('a migration under claims names the D the session left', () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const { clock, routers } = replicas(1, store, 2)
    const r = routers[0]!
    store.setBinding('s', { workerId: 'd0', committedTokens: 1_000, verifiedBlocks: 0, updatedAt: 0 })
    store.exclude('s', 'd0')
    store.addReject('s', 'd1') // keeps d1 eligible but the session has a flag
    const run = new ScriptedDriver({ router: r, clock }).runTurn({ sessionId: 's', promptTokens: 2_000 })
    expect(run.final).toMatchObject({ type: 'done', workerId: 'd1', migratedFrom: 'd0' })
    const claim = run.actions.find((a): a is ClaimAction => a.type === 'claim' && a.claim.kind === 'binding')!
    expect(claim.claim).toMatchObject({ kind: 'binding', workerId: 'd1', expected: { workerId: 'd0' } })
    expect(store.getBinding('s')).toMatchObject({ workerId: 'd1', committedTokens: 2_100 })
  })

  it('refuses a claim outcome that does not answer the claim, or a malformed one', () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const { routers } = replicas(1, store)
    const t = routers[0]!.dispatch({ sessionId: 's', promptTokens: 100 })
    const a = t.next()
    expect(a.type).toBe('claim')
    expect(() => t.next({ type: 'waited' })).toThrowError(RouterError)
    try {
      t.next({ type: 'claimResult', granted: 'yes' as unknown as boolean })
      expect.unreachable()
    } catch (e) {
      expect((e as RouterError).code).toBe('INVALID_MESSAGE')
    }
    expect(() =>
      t.next({ type: 'claimResult', granted: false, binding: 3 as unknown as SessionBinding }),
    ).toThrowError(RouterError)
    // Nothing changed: a valid answer still works.
    expect(t.next({ type: 'claimResult', granted: true }).type).toBe('admit')
    // An admit action cannot take a claim result.
    expect(() => t.next({ type: 'claimResult', granted: true })).toThrowError(RouterError)
  })

  it('the ScriptedDriver refuses to answer claims for a store that answers asynchronously', () => {
    class AsyncStore extends InMemoryClusterStateStore {
      // @ts-expect-error a store whose claims go over the network answers with a promise
      override async claim() {
        return { type: 'claimResult' as const, granted: true }
      }
    }
    const asyncStore = new AsyncStore({ confirmClaims: true })
    const clock = new ManualClock()
    const router = new Router({
      now: clock.now,
      store: asyncStore,
      workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }],
    })
    const t = router.dispatch({ sessionId: 's', promptTokens: 10 })
    const a = t.next()
    expect(() => new ScriptedDriver({ router, clock }).answer(a)).toThrow(/synchronously/)
  })

  it('interleaved turns of shared sessions on three replicas: every turn ends, pending seeds stay within budget, every session ends with one binding to a D that served it, each turn counts on the D it is committed to, no load leaks', () => {
    const arb = fc.record({
      nD: fc.integer({ min: 1, max: 3 }),
      seed: fc.integer(),
      turns: fc.array(
        fc.record({
          replica: fc.nat(2),
          session: fc.nat(3),
          prompt: fc.integer({ min: 1, max: 30_000 }),
          sloClass: fc.constantFrom(...SLO_CLASSES),
        }),
        { minLength: 2, maxLength: 10 },
      ),
      order: fc.array(fc.nat(), { minLength: 64, maxLength: 64 }),
      answers: fc.array(admitAnswerArb(), { maxLength: 16 }),
      sends: fc.array(sendAnswerArb(), { maxLength: 6 }),
    })
    const BUDGET = 2
    fc.assert(
      fc.property(arb, (c) => {
        const store = new InMemoryClusterStateStore({ confirmClaims: true })
        const { clock, routers } = replicas(3, store, c.nD, { pendingSeedsPerD: BUDGET })
        const answers = [...c.answers]
        const sends = [...c.sends]
        const drivers = routers.map(
          (router) =>
            new ScriptedDriver({
              router,
              clock,
              admit: () => answers.shift() ?? { kind: 'admit' },
              send: () => sends.shift() ?? { kind: 'ok' },
            }),
        )
        const live = c.turns.map((t, i) => {
          const turn = routers[t.replica]!.dispatch({
            sessionId: `s${t.session}`,
            turnId: `t${i}`,
            promptTokens: t.prompt,
            sloClass: t.sloClass,
          })
          return { t, turn, action: turn.next() }
        })
        const served = new Map<string, Set<string>>()
        const bound = c.turns.length * dispatchActionBound(routers[0]!.params, c.nD) * 2
        let steps = 0
        for (;;) {
          const running = live.filter((x) => x.action.type !== 'done' && x.action.type !== 'fail')
          if (running.length === 0) break
          const pick = running[c.order[steps % c.order.length]! % running.length]!
          const a = pick.action
          if (a.type === 'sendFast' || a.type === 'seedViaP') {
            const d = a.type === 'sendFast' ? a.workerId : a.decodeId
            const s = `s${pick.t.session}`
            if (!served.has(s)) served.set(s, new Set())
            served.get(s)!.add(d)
          }
          pick.action = pick.turn.next(drivers[pick.t.replica]!.answer(a))
          // Every replica's turns count on the one shared store.
          checkLoadAccounting(
            routers[0]!,
            live.map((x) => x.turn),
          )
          for (let k = 0; k < c.nD; k++) {
            expect(store.load(`d${k}`).pendingSeeds).toBeLessThanOrEqual(BUDGET)
          }
          expect(++steps).toBeLessThanOrEqual(bound)
        }
        for (const x of live) {
          if (x.action.type === 'fail') expect(x.action.error).toBeInstanceOf(RouterError)
        }
        for (const [s, ds] of served) {
          const b = store.getBinding(s)
          if (b !== undefined) expect(ds.has(b.workerId) || b.committedTokens === 0).toBe(true)
        }
        checkNoInflightLoad(routers[0]!)
      }),
      { numRuns: 60 },
    )
  })
})
