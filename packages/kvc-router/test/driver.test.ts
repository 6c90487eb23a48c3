import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type AdmitAction,
  type ClusterStateStore,
  type DispatchAction,
  type DrivenTurn,
  InMemoryClusterStateStore,
  Router,
  RouterError,
  type SloClass,
  TurnDriver,
  type TurnEffects,
  type TurnTimers,
  sleepUntil,
} from '../src/index.js'
import {
  type AdmitAnswer,
  ManualClock,
  ScriptedDriver,
  type SendAnswer,
  admitAnswerArb,
  checkLoadAccounting,
  checkNoInflightLoad,
  scriptedResponse,
  sendAnswerArb,
} from '../src/testing/index.js'

function cluster(opts: { nP?: number; nD?: number; params?: object; store?: ClusterStateStore } = {}) {
  const clock = new ManualClock(1_000)
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    ...(opts.store === undefined ? {} : { store: opts.store }),
    params: { pageSize: 16, ...opts.params },
    workers: [
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
    ],
  })
  return { clock, router }
}

/** Everything observable about how a turn went (its actions and its record). */
function trace(actions: readonly DispatchAction[], final: DispatchAction): string {
  return JSON.stringify([actions, final], (k, v) => (k === 'error' ? String(v) : v))
}

/** Resolves on the next turn of the event loop (a real hop, as an RPC takes). */
const hop = () => new Promise<void>((resolve) => setImmediate(resolve))

describe('TurnDriver: one driver for every host', () => {
  it('drive (async effects), driveSync and a hand-written loop take every turn through the same actions to the same end', async () => {
    const arb = fc.record({
      nD: fc.integer({ min: 1, max: 3 }),
      nP: fc.integer({ min: 0, max: 2 }),
      claims: fc.boolean(),
      turns: fc.array(
        fc.record({
          session: fc.nat(2),
          prompt: fc.integer({ min: 1, max: 30_000 }),
          sloClass: fc.constantFrom<SloClass>('interactive', 'batch', 'background'),
        }),
        { minLength: 1, maxLength: 5 },
      ),
      admits: fc.array(admitAnswerArb(), { maxLength: 12 }),
      sends: fc.array(sendAnswerArb(), { maxLength: 6 }),
    })
    await fc.assert(
      fc.asyncProperty(arb, async (c) => {
        const runs: string[][] = []
        for (const how of ['loop', 'sync', 'async'] as const) {
          const store = new InMemoryClusterStateStore({ confirmClaims: c.claims })
          const { clock, router } = cluster({ nP: c.nP, nD: c.nD, store, params: { maxWalks: 8 } })
          const admits = [...c.admits]
          const sends = [...c.sends]
          const scripted = new ScriptedDriver({
            router,
            clock,
            admit: (): AdmitAnswer => admits.shift() ?? { kind: 'admit' },
            send: (): SendAnswer => sends.shift() ?? { kind: 'ok', outputTokens: 50 },
          })
          const driver = new TurnDriver(router)
          // The scripted answers at once (virtual time)...
          const atOnce: TurnEffects = {
            admit: (a) => scripted.answer(a) as never,
            send: (a) => scripted.answer(a) as never,
            wait: (a) => {
              scripted.answer(a)
            },
            claim: (a) => scripted.answer(a) as never,
          }
          // ...and the same answers later (a promise per action, as real I/O).
          const later: TurnEffects = {
            admit: async (a) => {
              await hop()
              return scripted.answer(a) as never
            },
            send: async (a) => {
              await hop()
              return scripted.answer(a) as never
            },
            wait: async (a) => {
              await hop()
              scripted.answer(a)
            },
            claim: async (a) => {
              await hop()
              return scripted.answer(a) as never
            },
          }
          const out: string[] = []
          for (const [i, t] of c.turns.entries()) {
            const turn = router.dispatch({
              sessionId: `s${t.session}`,
              turnId: `t${i}`,
              promptTokens: t.prompt,
              sloClass: t.sloClass,
            })
            const actions: DispatchAction[] = []
            let final: DispatchAction
            if (how === 'loop') {
              let a = turn.next()
              while (a.type !== 'done' && a.type !== 'fail') {
                actions.push(a)
                a = turn.next(scripted.answer(a))
              }
              final = a
            } else {
              const onAction = (a: DispatchAction) => actions.push(a)
              const r: DrivenTurn =
                how === 'sync'
                  ? driver.driveSync(turn, atOnce, { onAction })
                  : await driver.drive(turn, later, { onAction })
              final = r.final
              expect(r.stop).toBeUndefined()
              expect(r.actions).toBe(actions.length)
            }
            out.push(trace(actions, final))
            checkNoInflightLoad(router)
          }
          runs.push(out)
        }
        expect(runs[1]).toEqual(runs[0])
        expect(runs[2]).toEqual(runs[0])
      }),
      { numRuns: 40, seed: 11 },
    )
  })

  it('a stop ends the turn at once and gives its load back; a stop with a report tells Dispatch first', async () => {
    const { router } = cluster({ nD: 1 })
    const driver = new TurnDriver(router)
    const admitted = (a: AdmitAction) => ({
      type: 'admitResult' as const,
      response: scriptedResponse(a, { kind: 'admit' }),
    })
    // The worker refuses the request itself: no report, the turn is aborted.
    let turn = router.dispatch({ sessionId: 's', promptTokens: 100 })
    const bad = new Error('400: prompt too long')
    let r = await driver.drive(turn, {
      admit: async (a) => admitted(a),
      send: async () => ({ type: 'stop', reason: 'bad_request', error: bad }),
      wait: () => {},
    })
    expect(r.stop).toEqual({ type: 'stop', reason: 'bad_request', error: bad })
    expect(r.final).toMatchObject({ type: 'fail', cause: 'aborted' })
    expect(r.actions).toBe(2)
    checkNoInflightLoad(router)
    // The response broke after it started: Dispatch hears the failure (a reject against d0), then the turn ends.
    turn = router.dispatch({ sessionId: 's', promptTokens: 100 })
    r = await driver.drive(turn, {
      admit: async (a) => admitted(a),
      send: async () => ({
        type: 'stop',
        reason: 'stream_interrupted',
        report: { type: 'failed', cause: 'worker_error' },
      }),
      wait: () => {},
    })
    expect(r.stop?.reason).toBe('stream_interrupted')
    expect(r.final).toMatchObject({ type: 'fail', cause: 'aborted' })
    expect(router.cluster.store.rejects('s', 'd0')).toBe(1)
    checkNoInflightLoad(router)
  })

  it('an effect that throws, or an answer Dispatch refuses, ends the turn as internal_error with its load given back', async () => {
    const { router } = cluster({ nD: 1 })
    const driver = new TurnDriver(router)
    const boom = new Error('boom')
    const seen: string[] = []
    let r = await driver.drive(
      router.dispatch({ sessionId: 's', promptTokens: 100 }),
      {
        admit: async () => {
          throw boom
        },
        send: async () => ({ type: 'completed' }),
        wait: () => {},
      },
      { onAction: (a) => seen.push(a.type) },
    )
    expect(r.stop).toEqual({ type: 'stop', reason: 'internal_error', error: boom })
    expect(r.final).toMatchObject({ type: 'fail', cause: 'aborted' })
    expect(seen).toEqual(['admit'])
    checkNoInflightLoad(router)
    // A negative output length is refused by Dispatch: the same ending.
    r = await driver.drive(router.dispatch({ sessionId: 's', promptTokens: 100 }), {
      admit: async (a) => ({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) }),
      send: async () => ({ type: 'completed', outputTokens: -1 }),
      wait: () => {},
    })
    expect(r.stop?.reason).toBe('internal_error')
    expect(r.stop?.error).toBeInstanceOf(RouterError)
    expect(r.stop?.error?.message).toMatch(/outputTokens/)
    checkNoInflightLoad(router)
    // driveSync cannot wait for a promise: the turn ends, named.
    const s = driver.driveSync(router.dispatch({ sessionId: 's', promptTokens: 100 }), {
      admit: async (a) => ({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) }),
      send: () => ({ type: 'completed' }),
      wait: () => {},
    })
    expect(s.stop?.reason).toBe('internal_error')
    expect(s.stop?.error?.message).toMatch(/admit effect answered with a promise/)
    checkNoInflightLoad(router)
    // Bad arguments are refused before anything starts.
    const fresh = router.dispatch({ sessionId: 'y', promptTokens: 1 })
    expect(() => driver.driveSync(fresh, { admit: () => ({ type: 'admitTimeout' }) } as never)).toThrowError(
      /need a send function/,
    )
    expect(() =>
      driver.driveSync({} as never, { admit: () => ({ type: 'admitTimeout' }) } as never),
    ).toThrowError(RouterError)
    expect(fresh.pending).toBeUndefined()
    fresh.abort()
    // A finished turn cannot be driven again.
    const done = router.dispatch({ sessionId: 'x', promptTokens: 1 })
    done.abort()
    await expect(
      driver.drive(done, {
        admit: () => ({ type: 'admitTimeout' }),
        send: () => ({ type: 'completed' }),
        wait: () => {},
      }),
    ).rejects.toMatchObject({
      code: 'TURN_FINISHED',
    })
  })

  it('the signal aborts the turn before its next action, and ends a wait at once', async () => {
    const { router } = cluster({ nD: 1 })
    const driver = new TurnDriver(router)
    // Every admission times out: the turn waits between tries.
    const ctl = new AbortController()
    const reason = new Error('client went away')
    let waitSignal: AbortSignal | undefined
    const r = await driver.drive(
      router.dispatch({ sessionId: 's', promptTokens: 100 }),
      {
        admit: async () => ({ type: 'admitTimeout' }),
        send: async () => ({ type: 'completed' }),
        wait: (_, signal) => {
          waitSignal = signal
          setImmediate(() => ctl.abort(reason))
          return new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()))
        },
      },
      { signal: ctl.signal },
    )
    expect(waitSignal?.aborted).toBe(true)
    expect(r.stop).toEqual({ type: 'stop', reason: 'aborted', error: reason })
    expect(r.final).toMatchObject({ type: 'fail', cause: 'aborted' })
    expect(r.actions).toBe(2) // admit, wait
    expect(driver.waiting).toBe(0)
    checkNoInflightLoad(router)
  })

  it('a seed that ends wakes the turn first in line for its slot, and the driver stops listening once no turn waits', async () => {
    const { clock, router } = cluster({ nD: 1, params: { pendingSeedsPerD: 1 } })
    const driver = new TurnDriver(router)
    const releaseSeed: (() => void)[] = []
    let woken = 0
    const effects: TurnEffects = {
      admit: async (a) => ({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) }),
      // Each seed runs until the test lets it finish.
      send: () =>
        new Promise((resolve) => releaseSeed.push(() => resolve({ type: 'completed', outputTokens: 10 }))),
      // A wait never ends by itself: only a wake-up (or an abort) ends it.
      wait: (a, signal) =>
        new Promise<void>((resolve) =>
          signal.addEventListener('abort', () => {
            woken++
            clock.advanceTo(Math.min(a.untilMs, clock.t + 1))
            resolve()
          }),
        ),
    }
    const first = router.dispatch({ sessionId: 'a', promptTokens: 20_000 })
    const second = router.dispatch({ sessionId: 'b', promptTokens: 20_000 })
    const pa = driver.drive(first, effects)
    await hop()
    await hop()
    expect(first.pending?.type).toBe('seedViaP') // holds d0's only pending-seed slot
    const pb = driver.drive(second, effects)
    await hop()
    expect(second.pending?.type).toBe('wait') // turned away by the budget, in line for d0
    expect(driver.waiting).toBe(1)
    checkLoadAccounting(router, [first, second])
    releaseSeed.shift()!() // the first seed ends: its slot is the waiting turn's
    const ra = await pa
    expect(ra.final.type).toBe('done')
    while (releaseSeed.length === 0) await hop()
    expect(woken).toBe(1)
    expect(driver.waiting).toBe(0)
    expect(second.pending?.type).toBe('seedViaP')
    releaseSeed.shift()!()
    const rb = await pb
    expect(rb.final).toMatchObject({ type: 'done', path: 'seed' })
    checkNoInflightLoad(router)
    // No listener is left: a slot freed now wakes nobody, and wake() finds no waiting turn.
    expect(driver.wake(second.turnId)).toBe(false)
  })

  it('claims are answered by the router store by default, synchronously or not', async () => {
    const store = new InMemoryClusterStateStore({ confirmClaims: true })
    const { router } = cluster({ nD: 2, store })
    const driver = new TurnDriver(router)
    const effects: TurnEffects = {
      admit: (a) => ({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) }),
      send: () => ({ type: 'completed', outputTokens: 10 }),
      wait: () => {},
    }
    const seen: string[] = []
    const r = driver.driveSync(router.dispatch({ sessionId: 's', promptTokens: 100 }), effects, {
      onAction: (a) => seen.push(a.type),
    })
    expect(seen).toEqual(['claim', 'admit', 'sendFast'])
    expect(r.final.type).toBe('done')
    expect(store.getBinding('s')?.workerId).toBe(r.final.type === 'done' ? r.final.workerId : '')
    // A store whose claims go over the network answers with a promise: drive waits for it.
    class RemoteStore extends InMemoryClusterStateStore {
      // @ts-expect-error a store deciding on a server answers later
      override async claim(c: Parameters<InMemoryClusterStateStore['claim']>[0]) {
        await hop()
        return super.claim(c)
      }
    }
    const remote = new RemoteStore({ confirmClaims: true })
    const far = cluster({ nD: 2, store: remote })
    const r2 = await new TurnDriver(far.router).drive(
      far.router.dispatch({ sessionId: 's', promptTokens: 100 }),
      effects,
    )
    expect(r2.final.type).toBe('done')
    expect(remote.getBinding('s')).toBeDefined()
  })

  it('resumes a turn at its pending action', () => {
    const { router } = cluster({ nD: 1 })
    const turn = router.dispatch({ sessionId: 's', promptTokens: 100 })
    const first = turn.next()
    expect(first.type).toBe('admit')
    const seen: DispatchAction[] = []
    const r = new TurnDriver(router).driveSync(
      turn,
      {
        admit: (a) => ({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) }),
        send: () => ({ type: 'completed' }),
        wait: () => {},
      },
      { onAction: (a) => seen.push(a) },
    )
    expect(seen[0]).toBe(first)
    expect(r.final.type).toBe('done')
  })
})

describe('sleepUntil', () => {
  /** Fake timers: records what is scheduled, fires on demand. */
  function fakeTimers() {
    const pending = new Map<number, { at: number; fire: () => void }>()
    let next = 0
    const timers: TurnTimers = {
      setTimeout: (fire, ms) => {
        pending.set(++next, { at: ms, fire })
        return next
      },
      clearTimeout: (h) => {
        pending.delete(h as number)
      },
    }
    return { timers, pending }
  }

  it('sleeps until the clock reaches the time, on the injected timers; an abort ends it and clears the timer', async () => {
    let now = 100
    const { timers, pending } = fakeTimers()
    const clock = { now: () => now, timers }
    let ended = false
    const p = sleepUntil(350, new AbortController().signal, clock).then(() => {
      ended = true
    })
    expect([...pending.values()].map((t) => t.at)).toEqual([250])
    await hop()
    expect(ended).toBe(false)
    now = 350
    ;[...pending.values()][0]!.fire()
    await p
    expect(pending.size).toBe(0)
    // Aborted: resolves at once, and its timer is cleared.
    const ctl = new AbortController()
    const q = sleepUntil(10_000, ctl.signal, clock)
    expect(pending.size).toBe(1)
    ctl.abort()
    await q
    expect(pending.size).toBe(0)
    // Already due, or already aborted: no timer at all.
    await sleepUntil(now, new AbortController().signal, clock)
    await sleepUntil(now + 5, AbortSignal.abort(), clock)
    expect(pending.size).toBe(0)
  })
})

describe('ScriptedDriver on the turn driver', () => {
  it("throws what an answer threw (after giving the turn's load back), and past maxActions", () => {
    const { clock, router } = cluster({ nD: 1 })
    const driver = new ScriptedDriver({
      router,
      clock,
      send: () => {
        throw new Error('scripted failure')
      },
    })
    expect(() => driver.runTurn({ sessionId: 's', promptTokens: 10 })).toThrow('scripted failure')
    checkNoInflightLoad(router)
    expect(() =>
      new ScriptedDriver({ router, clock }).runTurn({ sessionId: 's', promptTokens: 10 }, 1),
    ).toThrow(/exceeded 1 actions/)
    checkNoInflightLoad(router)
  })
})
