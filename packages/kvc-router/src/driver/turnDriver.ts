import type { ClaimOutcome } from '../cluster/stateStore.js'
import type { TurnDispatch } from '../dispatch/turnDispatch.js'
import type {
  AdmitAction,
  ClaimAction,
  DispatchAction,
  DispatchOutcome,
  DoneAction,
  FailAction,
  SeedViaPAction,
  SendFastAction,
  WaitAction,
} from '../dispatch/types.js'
import { RouterError } from '../errors/routerError.js'
import type { Router } from '../router/router.js'

/**
 * A value or a promise of it: a host effect answers at once (virtual time, tests) or later (I/O).
 *
 * @example
 * ```ts
 * import type { Awaitable } from '@kvc/kvc-router'
 * const now: Awaitable<number> = 1
 * const later: Awaitable<number> = Promise.resolve(2)
 * ```
 */
export type Awaitable<T> = T | PromiseLike<T>

/**
 * The outcomes that answer an `admit` action.
 *
 * @example
 * ```ts
 * import type { AdmitOutcome } from '@kvc/kvc-router'
 * const o: AdmitOutcome = { type: 'admitTimeout' }
 * ```
 */
export type AdmitOutcome = Extract<DispatchOutcome, { type: 'admitResult' | 'admitTimeout' | 'admitError' }>

/**
 * The outcomes that answer a `sendFast` or `seedViaP` action: `completed`, `failed`, or, for a
 * `sendFast` with admission on arrival (`SendFastAction.admission`) that the D refused, its
 * `admitResult`.
 *
 * @example
 * ```ts
 * import type { SendOutcome } from '@kvc/kvc-router'
 * const o: SendOutcome = { type: 'failed', cause: 'worker_unreachable' }
 * ```
 */
export type SendOutcome = Extract<DispatchOutcome, { type: 'completed' | 'failed' | 'admitResult' }>

/**
 * A host effect's way to end the turn before Dispatch does (the client went away, the worker
 * refused the request itself, the response broke after it started): the driver aborts the turn,
 * which gives its in-flight load back, and returns the stop with the turn's `fail` action.
 * `report` is an outcome to tell Dispatch first (a send that failed after its response had
 * started still counts against the D); if Dispatch ends the turn on it, its final action stands.
 *
 * @example
 * ```ts
 * import type { TurnStop } from '@kvc/kvc-router'
 * const interrupted: TurnStop = {
 *   type: 'stop',
 *   reason: 'stream_interrupted',
 *   report: { type: 'failed', cause: 'worker_error' },
 * }
 * ```
 */
export interface TurnStop {
  readonly type: 'stop'
  /**
   * Why, in the host's words (`client_closed`, `bad_request`...). The driver's own stops are
   * `aborted` (the drive's signal fired) and `internal_error` (an effect threw, or Dispatch
   * refused an answer; `error` says why).
   */
  readonly reason: string
  readonly error?: Error
  readonly report?: SendOutcome
}

/**
 * What a host does for a turn's actions: the I/O (or the simulation) behind each one. Every
 * effect gets the drive's `AbortSignal` and may answer with a value or a promise ({@link
 * TurnDriver.drive}; {@link TurnDriver.driveSync} needs values), or with a {@link TurnStop}.
 *
 * - `admit`: the admission RPC to `action.workerId` (`admitTimeout` after `action.timeoutMs`).
 * - `send`: the turn to the D (`sendFast`) or through a P/D pair (`seedViaP`).
 * - `wait`: return once the router's clock reaches `action.untilMs`, or as soon as `signal` is
 *   aborted, which also happens when the turn is woken early (a pending-seed slot it waits for
 *   freed up, {@link TurnDriver.wake}). {@link sleepUntil} does it with injected timers; with a
 *   virtual clock, move the clock.
 * - `claim`: default, the router's store decides (`router.cluster.store.claim`).
 * - `sleep`, `releaseLease` (optional): hedged admission (see each).
 *
 * @example
 * ```ts
 * import type { TurnEffects } from '@kvc/kvc-router'
 * let now = 0
 * const effects: TurnEffects = {
 *   admit: (a) => ({ type: 'admitError', message: `no sidecar on ${a.workerId}` }),
 *   send: () => ({ type: 'completed', outputTokens: 10 }),
 *   wait: (a) => {
 *     now = Math.max(now, a.untilMs)
 *   },
 * }
 * ```
 */
export interface TurnEffects {
  admit(action: AdmitAction, signal: AbortSignal): Awaitable<AdmitOutcome | TurnStop>
  /**
   * Resolves after `ms` or when `signal` aborts. With it, {@link TurnDriver.drive} hedges the
   * admission RPCs Dispatch marks (`AdmitAction.hedge`): the second RPC goes out when the first
   * is still unanswered after `hedge.afterMs`. Without it, only the first RPC is sent.
   */
  sleep?(ms: number, signal: AbortSignal): Awaitable<void>
  /**
   * Gives back a lease a hedged admission's losing D granted (it admitted after the other did).
   * Without it the lease lapses after its `leaseMs`.
   */
  releaseLease?(workerId: string, leaseId: string): Awaitable<void>
  send(action: SendFastAction | SeedViaPAction, signal: AbortSignal): Awaitable<SendOutcome | TurnStop>
  // biome-ignore lint/suspicious/noConfusingVoidType: a wait answers nothing, or a stop
  wait(action: WaitAction, signal: AbortSignal): Awaitable<void | TurnStop>
  claim?(action: ClaimAction, signal: AbortSignal): Awaitable<ClaimOutcome | TurnStop>
}

/**
 * Options of one {@link TurnDriver.drive}.
 *
 * @example
 * ```ts
 * import type { DriveOptions } from '@kvc/kvc-router'
 * const o: DriveOptions = { signal: AbortSignal.timeout(60_000), onAction: (a) => console.log(a.type) }
 * ```
 */
export interface DriveOptions {
  /** Aborts the turn: checked before each action, and handed to every effect. */
  readonly signal?: AbortSignal
  /** Called with each action before it is performed (logs, tests). A throw ends the turn as `internal_error`. */
  readonly onAction?: (action: DispatchAction) => void
}

/**
 * How a driven turn ended: Dispatch's final action (for a stopped turn, the `fail` action with
 * cause `aborted`, or what Dispatch answered the stop's `report` with), the stop if a host effect
 * or the driver ended it, and how many actions were performed.
 *
 * @example
 * ```ts
 * import type { DrivenTurn } from '@kvc/kvc-router'
 * const ok = (r: DrivenTurn) => r.final.type === 'done' && r.stop === undefined
 * ```
 */
export interface DrivenTurn {
  readonly turnId: string
  readonly final: DoneAction | FailAction
  readonly stop: TurnStop | undefined
  readonly actions: number
}

/**
 * Timers to inject into {@link sleepUntil} (`{ setTimeout, clearTimeout }` of the host, or fakes).
 *
 * @example
 * ```ts
 * import type { TurnTimers } from '@kvc/kvc-router'
 * const timers: TurnTimers = { setTimeout, clearTimeout }
 * ```
 */
export interface TurnTimers {
  setTimeout(callback: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

const NEVER = new AbortController().signal
const WAITED: DispatchOutcome = Object.freeze({ type: 'waited' })

function isStop(x: unknown): x is TurnStop {
  return typeof x === 'object' && x !== null && (x as { type?: unknown }).type === 'stop'
}

function isThenable(x: unknown): x is PromiseLike<unknown> {
  return (
    (typeof x === 'object' || typeof x === 'function') &&
    x !== null &&
    typeof (x as { then?: unknown }).then === 'function'
  )
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err))
}

function terminal(a: DispatchAction): a is DoneAction | FailAction {
  return a.type === 'done' || a.type === 'fail'
}

/**
 * Resolves once the clock `now` reaches `untilMs`, or at once when `signal` is (or becomes)
 * aborted; never rejects. The wait effect of a host on real time:
 * `wait: (a, signal) => sleepUntil(a.untilMs, signal, { now, timers: { setTimeout, clearTimeout } })`.
 *
 * @example
 * ```ts
 * import { sleepUntil } from '@kvc/kvc-router'
 * const clock = { now: () => performance.now(), timers: { setTimeout, clearTimeout } }
 * await sleepUntil(clock.now() + 5, AbortSignal.timeout(1_000), clock)
 * ```
 */
export function sleepUntil(
  untilMs: number,
  signal: AbortSignal,
  clock: { readonly now: () => number; readonly timers: TurnTimers },
): Promise<void> {
  const ms = untilMs - clock.now()
  return new Promise((resolve) => {
    if (signal.aborted || !(ms > 0)) {
      resolve()
      return
    }
    const done = (): void => {
      clock.timers.clearTimeout(timer)
      signal.removeEventListener('abort', done)
      resolve()
    }
    const timer = clock.timers.setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
  })
}

/**
 * Runs turns of one {@link Router} to their end: it performs each action Dispatch yields through
 * the host's {@link TurnEffects} (claim, admit, send, wait) and answers Dispatch with the outcome,
 * until the turn is `done` or `fail`. The one driver of Algorithm 3 over I/O (the proxy, the
 * replay, a custom host) and, with {@link TurnDriver.driveSync}, in virtual time (the testing
 * `ScriptedDriver`). It owns what every host needs besides its effects:
 *
 * - **abort**: the drive's `signal` is checked before each action and handed to each effect; an
 *   aborted turn is ended with `turn.abort()`, which gives its in-flight load back;
 * - **stops**: an effect may end the turn (a {@link TurnStop}), reporting an outcome first;
 * - **errors**: an effect that throws, or an answer Dispatch refuses, ends the turn as
 *   `internal_error` (load given back, the error kept), never silently;
 * - **seed-slot wake-up**: while a turn waits, a seed that ends on a D and frees the pending-seed
 *   slot the turn is first in line for aborts the wait's signal
 *   (`router.cluster.seedWaiters.onSlotFreed`), so the slot does not idle until the turn's backoff
 *   runs out. {@link TurnDriver.wake} does the same by hand.
 *
 * The simulator drives Dispatch itself, interleaving thousands of turns in one event queue.
 *
 * @example
 * ```ts
 * import { Router, TurnDriver } from '@kvc/kvc-router'
 * let now = 0
 * const router = new Router({ now: () => now, random: () => 0.5, workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }] })
 * const driver = new TurnDriver(router)
 * const r = await driver.drive(router.dispatch({ sessionId: 's', promptTokens: 100 }), {
 *   admit: async (a) => ({ type: 'admitResult', response: { requestId: a.request.requestId, admitted: true, reason: 'ok',
 *     residentTokens: 0, needTokens: 612, tokenUsageAfter: 0.01, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 0 } }),
 *   send: async () => ({ type: 'completed', outputTokens: 20 }),
 *   wait: (a) => {
 *     now = Math.max(now, a.untilMs)
 *   },
 * })
 * r.final.type // 'done'
 * ```
 */
export class TurnDriver {
  readonly #router: Router
  /** The turns waiting now, by turn id: calling one ends its wait. */
  readonly #wakers = new Map<string, () => void>()
  #unsubscribe: (() => void) | undefined

  constructor(router: Router) {
    if (typeof router !== 'object' || router === null || typeof router.cluster !== 'object') {
      throw new RouterError('INVALID_OPTION', 'TurnDriver needs a Router', router)
    }
    this.#router = router
  }

  /**
   * Turns waiting now (in an async `wait` effect).
   *
   * @example
   * ```ts
   * import { Router, TurnDriver } from '@kvc/kvc-router'
   * new TurnDriver(new Router({ now: () => 0 })).waiting // 0
   * ```
   */
  get waiting(): number {
    return this.#wakers.size
  }

  /**
   * Ends the wait of turn `turnId` now (its wait effect's signal is aborted); `false` when it is
   * not waiting. The driver calls it when a seed frees the slot the turn is first in line for.
   *
   * @example
   * ```ts
   * import { Router, TurnDriver } from '@kvc/kvc-router'
   * new TurnDriver(new Router({ now: () => 0 })).wake('s#1') // false: not waiting
   * ```
   */
  wake(turnId: string): boolean {
    const w = this.#wakers.get(turnId)
    if (w === undefined) return false
    w()
    return true
  }

  /**
   * Runs `turn` (fresh from `router.dispatch`, or resumed at its pending action) to its end
   * through `effects`. Resolves with how it ended; a turn's failure, a stop and an effect's
   * error are results, not rejections.
   *
   * @throws RouterError `TURN_FINISHED` (the turn had already ended), `INVALID_OPTION` (not a
   * turn, or effects without `admit`, `send` or `wait`); nothing is started.
   *
   * @example
   * ```ts
   * import { Router, TurnDriver } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0 })
   * const ctl = new AbortController()
   * ctl.abort()
   * const r = await new TurnDriver(router).drive(router.dispatch({ sessionId: 's', promptTokens: 10 }), {
   *   admit: () => ({ type: 'admitTimeout' }),
   *   send: () => ({ type: 'completed' }),
   *   wait: () => {},
   * }, { signal: ctl.signal })
   * r.stop?.reason // 'aborted'
   * ```
   */
  async drive(turn: TurnDispatch, effects: TurnEffects, options: DriveOptions = {}): Promise<DrivenTurn> {
    const signal = options.signal ?? NEVER
    this.#checkArgs(turn, effects)
    let n = 0
    try {
      let a = turn.pending ?? turn.next()
      for (;;) {
        if (terminal(a)) return { turnId: turn.turnId, final: a, stop: undefined, actions: n }
        if (signal.aborted) return this.#aborted(turn, signal, n)
        n++
        options.onAction?.(a)
        const r =
          a.type === 'wait'
            ? await this.#waitAsync(a, effects, signal)
            : a.type === 'admit' && a.hedge !== undefined && effects.sleep !== undefined
              ? await this.#hedgedAdmit(a, effects, signal)
              : await this.#perform(a, effects, signal)
        if (isStop(r)) return this.#stopped(turn, r, n)
        a = turn.next(r)
      }
    } catch (err) {
      return this.#failed(turn, err, n)
    }
  }

  /**
   * {@link TurnDriver.drive} for effects that answer at once (virtual time: tests, in-process
   * hosts): the same loop, synchronously. An effect that answers with a promise ends the turn as
   * `internal_error`. Waits cannot be woken early (nothing runs while the turn waits).
   *
   * @throws RouterError `TURN_FINISHED`, `INVALID_OPTION`, as {@link TurnDriver.drive}.
   *
   * @example
   * ```ts
   * import { Router, TurnDriver } from '@kvc/kvc-router'
   * let now = 0
   * const router = new Router({ now: () => now, random: () => 0.5, params: { maxWalks: 2 } })
   * const r = new TurnDriver(router).driveSync(router.dispatch({ sessionId: 's', promptTokens: 10 }), {
   *   admit: () => ({ type: 'admitTimeout' }),
   *   send: () => ({ type: 'completed' }),
   *   wait: (a) => {
   *     now = a.untilMs
   *   },
   * })
   * r.final.type === 'fail' && r.final.cause // 'no_decode_workers'
   * ```
   */
  driveSync(turn: TurnDispatch, effects: TurnEffects, options: DriveOptions = {}): DrivenTurn {
    const signal = options.signal ?? NEVER
    this.#checkArgs(turn, effects)
    let n = 0
    try {
      let a = turn.pending ?? turn.next()
      for (;;) {
        if (terminal(a)) return { turnId: turn.turnId, final: a, stop: undefined, actions: n }
        if (signal.aborted) return this.#aborted(turn, signal, n)
        n++
        options.onAction?.(a)
        const r = a.type === 'wait' ? effects.wait(a, signal) : this.#perform(a, effects, signal)
        // An outcome or a stop has a string `type`; only look for `then` on anything else.
        if (typeof (r as { type?: unknown } | undefined)?.type !== 'string' && isThenable(r)) {
          // Nothing awaits it: keep its rejection, if any, from going unhandled.
          Promise.resolve(r).catch(() => {})
          throw new RouterError(
            'UNEXPECTED_OUTCOME',
            `turn ${turn.turnId}: the ${a.type} effect answered with a promise; driveSync needs answers at once (use drive)`,
            a.type,
          )
        }
        if (isStop(r)) return this.#stopped(turn, r, n)
        a = turn.next(a.type === 'wait' ? WAITED : (r as DispatchOutcome))
      }
    } catch (err) {
      return this.#failed(turn, err, n)
    }
  }

  #checkArgs(turn: TurnDispatch, effects: TurnEffects): void {
    if (typeof turn !== 'object' || turn === null || typeof turn.next !== 'function') {
      throw new RouterError('INVALID_OPTION', 'drive takes a turn from router.dispatch', turn)
    }
    for (const k of ['admit', 'send', 'wait'] as const) {
      if (typeof effects?.[k] !== 'function') {
        throw new RouterError('INVALID_OPTION', `the host's effects need a ${k} function`, effects)
      }
    }
    for (const k of ['claim', 'sleep', 'releaseLease'] as const) {
      if (effects[k] !== undefined && typeof effects[k] !== 'function') {
        throw new RouterError('INVALID_OPTION', `the ${k} effect must be a function`, effects[k])
      }
    }
    if (turn.finished)
      throw new RouterError('TURN_FINISHED', `turn ${turn.turnId} already ended`, turn.turnId)
  }

  /** The effect of a non-wait action (a value, or a promise of one, from the host). */
  #perform(
    a: Exclude<DispatchAction, WaitAction | DoneAction | FailAction>,
    effects: TurnEffects,
    signal: AbortSignal,
  ): Awaitable<DispatchOutcome | TurnStop> {
    switch (a.type) {
      case 'admit':
        return effects.admit(a, signal)
      case 'sendFast':
      case 'seedViaP':
        return effects.send(a, signal)
      case 'claim':
        return effects.claim === undefined
          ? this.#router.cluster.store.claim(a.claim)
          : effects.claim(a, signal)
    }
  }

  /**
   * A hedged admission: the first RPC; if it has not answered after `hedge.afterMs`, the second;
   * the first admitting answer wins (a hedged result naming both), or both answers when neither
   * admits. A losing D that admits later has its lease given back (`releaseLease`).
   */
  async #hedgedAdmit(
    a: AdmitAction,
    effects: TurnEffects,
    signal: AbortSignal,
  ): Promise<DispatchOutcome | TurnStop> {
    const hedge = a.hedge!
    const timer = new AbortController()
    const onAbort = (): void => timer.abort()
    signal.addEventListener('abort', onAbort, { once: true })
    type Answer = AdmitOutcome | TurnStop
    const settle = (x: Awaitable<Answer>): Promise<Answer> =>
      Promise.resolve(x).then(
        (v) => v,
        (err: unknown): Answer => ({ type: 'stop', reason: 'internal_error', error: asError(err) }),
      )
    try {
      const primary = settle(effects.admit(a, signal))
      const first = await Promise.race([
        primary.then(() => 'primary' as const),
        Promise.resolve(effects.sleep!(hedge.afterMs, timer.signal)).then(() => 'timer' as const),
      ])
      if (first === 'primary' || signal.aborted) return await primary
      const second: AdmitAction = {
        type: 'admit',
        turnId: a.turnId,
        workerId: hedge.workerId,
        request: hedge.request,
        timeoutMs: a.timeoutMs,
        attempt: a.attempt,
      }
      const backup = settle(effects.admit(second, signal))
      const admitted = (x: Answer | undefined): boolean => x?.type === 'admitResult' && x.response.admitted
      // A fast path's hedge repeats the same request to the same D: one lease, never released.
      const distinct = hedge.request.requestId !== a.request.requestId
      let p: Answer | undefined
      let h: Answer | undefined
      const out = await new Promise<DispatchOutcome | TurnStop>((resolve) => {
        let done = false
        const finish = (): void => {
          if (done) return
          if (p?.type === 'stop') {
            done = true
            resolve(p)
            return
          }
          const winner = admitted(p) ? 'primary' : admitted(h) ? 'hedge' : undefined
          if (winner === undefined && (p === undefined || h === undefined)) return
          done = true
          resolve({
            type: 'hedgedAdmitResult',
            winner,
            primary: p as AdmitOutcome | undefined,
            hedge:
              h?.type === 'stop'
                ? { type: 'admitError', message: h.reason }
                : (h as AdmitOutcome | undefined),
          })
        }
        primary.then((v) => {
          p = v
          if (done && distinct && admitted(v)) this.#release(effects, a.workerId, a.request.requestId)
          finish()
        })
        backup.then((v) => {
          h = v
          if (done && distinct && admitted(v)) this.#release(effects, hedge.workerId, hedge.request.requestId)
          finish()
        })
      })
      return out
    } finally {
      timer.abort()
      signal.removeEventListener('abort', onAbort)
    }
  }

  #release(effects: TurnEffects, workerId: string, leaseId: string): void {
    if (effects.releaseLease === undefined) return
    // A failed release only means the lease lapses on its own.
    Promise.resolve()
      .then(() => effects.releaseLease!(workerId, leaseId))
      .catch(() => {})
  }

  /** A wait the turn can be woken from: its signal aborts with the drive's, or on `wake`. */
  async #waitAsync(
    a: WaitAction,
    effects: TurnEffects,
    signal: AbortSignal,
  ): Promise<DispatchOutcome | TurnStop> {
    const wake = new AbortController()
    const onAbort = (): void => wake.abort(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    const waker = (): void => wake.abort()
    this.#register(a.turnId, waker)
    try {
      const r = await effects.wait(a, wake.signal)
      return isStop(r) ? r : WAITED
    } finally {
      this.#unregister(a.turnId, waker)
      signal.removeEventListener('abort', onAbort)
    }
  }

  #register(turnId: string, waker: () => void): void {
    this.#wakers.set(turnId, waker)
    // Listen to the router's seed-slot news only while some turn waits (no listener left behind).
    if (this.#unsubscribe === undefined) {
      this.#unsubscribe = this.#router.cluster.seedWaiters.onSlotFreed((id) => {
        this.wake(id)
      })
    }
  }

  #unregister(turnId: string, waker: () => void): void {
    if (this.#wakers.get(turnId) === waker) this.#wakers.delete(turnId)
    if (this.#wakers.size === 0 && this.#unsubscribe !== undefined) {
      this.#unsubscribe()
      this.#unsubscribe = undefined
    }
  }

  #aborted(turn: TurnDispatch, signal: AbortSignal, n: number): DrivenTurn {
    const reason: unknown = signal.reason
    const stop: TurnStop =
      reason instanceof Error
        ? { type: 'stop', reason: 'aborted', error: reason }
        : { type: 'stop', reason: 'aborted' }
    return { turnId: turn.turnId, final: turn.abort(), stop, actions: n }
  }

  #stopped(turn: TurnDispatch, stop: TurnStop, n: number): DrivenTurn {
    let final: DoneAction | FailAction | undefined
    if (stop.report !== undefined) {
      const next = turn.next(stop.report)
      if (terminal(next)) final = next
    }
    return { turnId: turn.turnId, final: final ?? turn.abort(), stop, actions: n }
  }

  #failed(turn: TurnDispatch, err: unknown, n: number): DrivenTurn {
    // Every return of the loops above holds the turn's final action, so a throw finds it running.
    if (turn.finished) throw err
    return {
      turnId: turn.turnId,
      final: turn.abort(),
      stop: { type: 'stop', reason: 'internal_error', error: asError(err) },
      actions: n,
    }
  }
}
