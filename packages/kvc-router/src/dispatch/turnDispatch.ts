/** Turn dispatch (Algorithm 3) as a state machine: the public `TurnDispatch`. */
import { RouterError } from '../errors/routerError.js'
import type { RouteContext, RoutingPolicy, TurnRequest } from '../route/types.js'
import { checkOutcome } from './outcomeCheck.js'
import { failTurn } from './turnEnd.js'
import { releaseCommitment, releaseHedgeSlot, releaseSeedSlot, undoInflight } from './turnLoad.js'
import { type Gen, TurnState } from './turnState.js'
import type { DispatchAction, DispatchOutcome, DispatchRecord, DoneAction, FailAction } from './types.js'
import { walkTurn } from './walk.js'

/**
 * Algorithm 3 (Dispatch with reset-on-success) for one turn, as a state machine: call
 * {@link TurnDispatch.next} with no argument for the first action, then with the outcome of each
 * action, until it returns `done` or `fail`. It drives real HTTP workers and the simulator alike.
 *
 * Per walk over Route's ranking:
 * - **fast path** when `fast(s,d)`: admit on `d` by `fast`; admitted → `sendFast`;
 *   `append_too_large` → the seed path on `d`, after the later fast candidates that hold part of
 *   the prompt (the session's own D, when `d`'s residency was wrong) were tried;
 * - **seed path**: `d`'s pending-seed budget (the SLO class's share), a P chosen by link health
 *   and load, admit on `d` by `seed`, then `seedViaP`;
 * - a **rejection** counts `rejects[s][d]`, honours the pause hint, and at `τ_reject` excludes `d`
 *   for `s`; the session then lands on the next D (migration: the action carries `migratedFrom`);
 * - admission RPCs time out, are retried with full-jitter backoff, and a negative answer younger
 *   than the staleness budget is reused instead of a new RPC; before every request (retries
 *   included) the D is checked again (registered, healthy, not draining, paused or excluded for the
 *   session), and one that no longer qualifies is left at once for the next candidate; a seed's P
 *   is checked the same way (and its link) before `seedViaP`, and replaced if it went away;
 * - **load**: the turn counts toward a D's `turns` from its first claim or admission request for
 *   that D (its send, without admission) until it moves on to another D, ends or is aborted
 *   ({@link TurnDispatch.committedWorker}), so turns routed before any of them is sent spread;
 * - **reset-on-success**: a completed turn clears the session's rejects and exclusions;
 * - with a store that confirms claims (several router replicas), a `claim` action confirms a
 *   pending-seed slot after the turn takes it and a binding before the turn moves or creates it;
 *   a lost binding claim re-routes the turn at once, to the winner's D first;
 * - when a walk finds no taker the turn waits (until the earliest pause ends, or a jittered
 *   backoff), bounded by the SLO class's wait budget, `maxWalks` and `maxAttempts`; then it fails
 *   with a `RouterError` naming the cause. No turn ends silently.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * let now = 0
 * const router = new Router({ now: () => now, random: () => 0.5, workers: [
 *   { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 },
 * ] })
 * const turn = router.dispatch({ sessionId: 's1', promptTokens: 20_000 })
 * let a = turn.next() // { type: 'admit', workerId: 'd0', request: { path: 'seed', ... } }
 * a = turn.next({ type: 'admitResult', response: { requestId: a.type === 'admit' ? a.request.requestId : '', admitted: true, reason: 'ok',
 *   residentTokens: 0, needTokens: 20_512, tokenUsageAfter: 0.02, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 0 } })
 * a.type // 'seedViaP'
 * a = turn.next({ type: 'completed', outputTokens: 400 })
 * a.type // 'done'
 * ```
 */
export class TurnDispatch {
  /** The turn's id (used in request ids). */
  readonly turnId: string
  /** The history of this turn. */
  readonly record: DispatchRecord
  readonly #st: TurnState
  readonly #gen: Gen<DoneAction | FailAction>
  #pending: DispatchAction | undefined
  #final: DoneAction | FailAction | undefined

  /** @internal Use `Router.dispatch`. */
  constructor(ctx: RouteContext, policy: RoutingPolicy, turn: TurnRequest, turnId: string) {
    const st = new TurnState(ctx, policy, turn, turnId)
    this.#st = st
    this.turnId = turnId
    this.record = st.record
    this.#gen = walkTurn(st)
  }

  /**
   * Whether the turn has ended (`done` or `fail` was returned).
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * new Router({ now: () => 0 }).dispatch({ sessionId: 's', promptTokens: 1 }).finished // false
   * ```
   */
  get finished(): boolean {
    return this.#final !== undefined
  }

  /**
   * The action waiting for an outcome, if any.
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * new Router({ now: () => 0 }).dispatch({ sessionId: 's', promptTokens: 1 }).pending // undefined before the first next()
   * ```
   */
  get pending(): DispatchAction | undefined {
    return this.#pending
  }

  /**
   * The D worker this turn counts toward in the shared load (one in `turns`), if any: from the
   * turn's first claim or admission request for the D (or its send, for policies without
   * admission) until it moves on to another D, ends or is aborted. `undefined` while it waits
   * between walks.
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0, workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }] })
   * const turn = router.dispatch({ sessionId: 's', promptTokens: 100 })
   * turn.next() // { type: 'admit', workerId: 'd0', ... }
   * turn.committedWorker // 'd0'
   * router.cluster.store.load('d0').turns // 1: counted before the turn is sent
   * ```
   */
  get committedWorker(): string | undefined {
    return this.#st.committed
  }

  /**
   * Advances the turn: no argument for the first action, then the outcome of the previous one.
   * A malformed or mismatched outcome is refused and nothing changes.
   *
   * @throws RouterError `UNEXPECTED_OUTCOME`, `INVALID_MESSAGE`, `TURN_FINISHED`.
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const turn = new Router({ now: () => 0, random: () => 0 }).dispatch({ sessionId: 's', promptTokens: 10 })
   * turn.next().type // 'wait': no D worker yet
   * ```
   */
  next(outcome?: DispatchOutcome): DispatchAction {
    if (this.#final !== undefined) {
      throw new RouterError(
        'TURN_FINISHED',
        `turn ${this.turnId} already ended (${this.#final.type})`,
        outcome,
      )
    }
    if (this.#pending === undefined) {
      if (outcome !== undefined) {
        throw new RouterError('UNEXPECTED_OUTCOME', `turn ${this.turnId} has no pending action yet`, outcome)
      }
    } else checkOutcome(this.turnId, this.#pending, outcome)
    const r = this.#pending === undefined ? this.#gen.next() : this.#gen.next(outcome!)
    const action = r.value
    if (r.done === true) {
      this.#final = action as DoneAction | FailAction
      this.#pending = undefined
      this.#st.ctx.cluster.retractions.turnEnded(this.#st.turn.sessionId)
    } else this.#pending = action
    return action
  }

  /**
   * Ends the turn now (the client went away, the proxy shuts down): undoes the in-flight load it
   * holds and returns its `fail` action with cause `aborted`.
   *
   * @throws RouterError `TURN_FINISHED`.
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const turn = new Router({ now: () => 0 }).dispatch({ sessionId: 's', promptTokens: 10 })
   * turn.abort().cause // 'aborted'
   * ```
   */
  abort(): FailAction {
    if (this.#final !== undefined) {
      throw new RouterError(
        'TURN_FINISHED',
        `turn ${this.turnId} already ended (${this.#final.type})`,
        undefined,
      )
    }
    const st = this.#st
    undoInflight(st)
    releaseCommitment(st)
    releaseSeedSlot(st)
    releaseHedgeSlot(st)
    const fail = failTurn(st, 'aborted', 'TURN_FINISHED')
    this.#gen.return(fail)
    this.#final = fail
    this.#pending = undefined
    this.#st.ctx.cluster.retractions.turnEnded(this.#st.turn.sessionId)
    return fail
  }
}
