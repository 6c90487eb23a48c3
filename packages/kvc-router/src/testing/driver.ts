import type { AdmitReason, AdmitResponse } from '../admission/contract.js'
import type { ClaimOutcome } from '../cluster/stateStore.js'
import { type AdmitOutcome, type SendOutcome, TurnDriver, type TurnEffects } from '../driver/turnDriver.js'
import type {
  AdmitAction,
  ClaimAction,
  DispatchAction,
  DispatchOutcome,
  DoneAction,
  FailAction,
  SeedViaPAction,
  SendFailureCause,
  SendFastAction,
} from '../dispatch/types.js'
import type { RouterParams } from '../route/params.js'
import type { TurnRequest } from '../route/types.js'
import type { Router } from '../router/router.js'

/**
 * A settable clock to inject as `now` (milliseconds).
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { ManualClock } from '@kvc/kvc-router/testing'
 * const clock = new ManualClock()
 * const router = new Router({ now: clock.now, random: () => 0.5 })
 * clock.advance(100)
 * router.cluster.now() // 100
 * ```
 */
export class ManualClock {
  t: number
  constructor(start = 0) {
    this.t = start
  }
  /** The clock function (bound; pass it as `now`). */
  readonly now = (): number => this.t
  advance(ms: number): void {
    this.t += ms
  }
  /** Moves to `t` if it is later. */
  advanceTo(t: number): void {
    if (t > this.t) this.t = t
  }
}

/**
 * How a scripted D answers one admission RPC.
 *
 * @example
 * ```ts
 * import type { AdmitAnswer } from '@kvc/kvc-router/testing'
 * const a: AdmitAnswer = { kind: 'reject', reason: 'capacity', pauseMs: 500 }
 * ```
 */
export type AdmitAnswer =
  | {
      readonly kind: 'admit'
      readonly pauseMs?: number
      readonly usageAfter?: number
      /** Hot sessions the D retracts in this answer (`AdmitResponse.retractedSessions`). */
      readonly retracted?: readonly string[]
    }
  | { readonly kind: 'reject'; readonly reason: Exclude<AdmitReason, 'ok'>; readonly pauseMs?: number }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'error' }

/**
 * How a scripted worker answers a send or a seed.
 *
 * @example
 * ```ts
 * import type { SendAnswer } from '@kvc/kvc-router/testing'
 * const a: SendAnswer = { kind: 'fail', cause: 'transfer_timeout' }
 * ```
 */
export type SendAnswer =
  | { readonly kind: 'ok'; readonly outputTokens?: number }
  | { readonly kind: 'fail'; readonly cause: SendFailureCause }

/**
 * Options of {@link ScriptedDriver}.
 *
 * @example
 * ```ts
 * import type { ScriptedDriverOptions } from '@kvc/kvc-router/testing'
 * const o: Partial<ScriptedDriverOptions> = { rpcLatencyMs: 2 }
 * ```
 */
export interface ScriptedDriverOptions {
  readonly router: Router
  readonly clock: ManualClock
  /** Default: admit. */
  readonly admit?: (action: AdmitAction) => AdmitAnswer
  /** Default: ok with 100 output tokens. */
  readonly send?: (action: SendFastAction | SeedViaPAction) => SendAnswer
  /**
   * Answers `claim` actions (stores that confirm claims). Default: the router's store's own
   * `claim`, when it answers synchronously (`InMemoryClusterStateStore`).
   */
  readonly claim?: (action: ClaimAction) => ClaimOutcome
  /** Called before each action is answered (the adversary's hook: health flips, KV events...). */
  readonly beforeAnswer?: (action: DispatchAction) => void
  readonly rpcLatencyMs?: number
  readonly sendLatencyMs?: number
}

/**
 * What {@link ScriptedDriver.runTurn} returns.
 *
 * @example
 * ```ts
 * import type { TurnRun } from '@kvc/kvc-router/testing'
 * const ok = (r: TurnRun) => r.final.type === 'done'
 * ```
 */
export interface TurnRun {
  readonly final: DoneAction | FailAction
  readonly actions: readonly DispatchAction[]
}

/**
 * Drives turns through `Router.dispatch` with scripted answers and a manual clock: admission
 * RPCs take `rpcLatencyMs` (or the action's timeout when they time out), sends take
 * `sendLatencyMs` (a send with admission on arrival is answered by `admit` first: a refusal comes
 * back after `rpcLatencyMs`, an admission's answer goes to `Router.observeAdmission` after
 * `rpcLatencyMs`, a timeout or an error fails the send as `worker_unreachable`), waits jump the clock, claims are answered by the store at once. `runTurn` is
 * `TurnDriver.driveSync` over these scripted effects; `answer` answers one action, for tests that
 * interleave turns themselves. The simulator does the same with real caches; tests use this to
 * play adversaries.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { ManualClock, ScriptedDriver } from '@kvc/kvc-router/testing'
 * const clock = new ManualClock()
 * const router = new Router({ now: clock.now, random: () => 0.5, workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }] })
 * const driver = new ScriptedDriver({ router, clock })
 * driver.runTurn({ sessionId: 's', promptTokens: 100 }).final.type // 'done'
 * ```
 */
export class ScriptedDriver {
  readonly #o: ScriptedDriverOptions
  readonly #driver: TurnDriver
  /** The scripted answers as the turn driver's effects (each one through {@link ScriptedDriver.answer}). */
  readonly #effects: TurnEffects

  constructor(options: ScriptedDriverOptions) {
    this.#o = options
    this.#driver = new TurnDriver(options.router)
    this.#effects = {
      admit: (a) => this.answer(a) as AdmitOutcome,
      send: (a) => this.answer(a) as SendOutcome,
      wait: (a) => {
        this.answer(a)
      },
      claim: (a) => this.answer(a) as ClaimOutcome,
    }
  }

  /** Answers one action (not a terminal one). */
  answer(a: DispatchAction): DispatchOutcome {
    const o = this.#o
    o.beforeAnswer?.(a)
    switch (a.type) {
      case 'admit': {
        const ans = o.admit?.(a) ?? { kind: 'admit' }
        if (ans.kind === 'timeout') {
          o.clock.advance(a.timeoutMs)
          return { type: 'admitTimeout' }
        }
        o.clock.advance(o.rpcLatencyMs ?? 1)
        if (ans.kind === 'error') return { type: 'admitError', message: 'scripted' }
        return { type: 'admitResult', response: scriptedResponse(a, ans) }
      }
      case 'sendFast':
      case 'seedViaP': {
        if (a.type === 'sendFast' && a.admission !== undefined) {
          // Admission on arrival: the scripted D answers the request it carries first.
          const req: AdmitAction = {
            type: 'admit',
            turnId: a.turnId,
            workerId: a.workerId,
            request: a.admission,
            timeoutMs: 0,
            attempt: a.attempt,
          }
          const ans = o.admit?.(req) ?? { kind: 'admit' }
          if (ans.kind === 'timeout' || ans.kind === 'error') {
            o.clock.advance(o.rpcLatencyMs ?? 1)
            return { type: 'failed', cause: 'worker_unreachable' }
          }
          const admission = scriptedResponse(req, ans)
          if (!admission.admitted) {
            o.clock.advance(o.rpcLatencyMs ?? 1)
            return { type: 'admitResult', response: admission }
          }
          // The admitting answer arrives with the response's headers, before the send completes.
          o.clock.advance(o.rpcLatencyMs ?? 1)
          o.router.observeAdmission(a.workerId, admission)
        }
        o.clock.advance(o.sendLatencyMs ?? 10)
        const ans = o.send?.(a) ?? { kind: 'ok', outputTokens: 100 }
        return ans.kind === 'ok'
          ? { type: 'completed', outputTokens: ans.outputTokens ?? 100 }
          : { type: 'failed', cause: ans.cause }
      }
      case 'wait':
        o.clock.advanceTo(a.untilMs)
        return { type: 'waited' }
      case 'claim': {
        if (o.claim !== undefined) return o.claim(a)
        const r = o.router.cluster.store.claim(a.claim)
        if (r instanceof Promise) {
          throw new Error('the store does not answer claims synchronously: pass a claim callback')
        }
        return r
      }
      default:
        throw new Error(`terminal action ${a.type} has no answer`)
    }
  }

  /**
   * Runs one turn to its end (throws if it takes more than `maxActions` actions, or if an answer
   * fails; the turn is aborted first, so it gives its load back).
   */
  runTurn(turn: TurnRequest, maxActions = 1_000_000): TurnRun {
    const t = this.#o.router.dispatch(turn)
    const actions: DispatchAction[] = []
    const r = this.#driver.driveSync(t, this.#effects, {
      onAction: (a) => {
        actions.push(a)
        if (actions.length > maxActions) throw new Error(`turn ${t.turnId} exceeded ${maxActions} actions`)
      },
    })
    if (r.stop !== undefined) throw r.stop.error ?? new Error(`turn ${t.turnId} stopped: ${r.stop.reason}`)
    return { final: r.final, actions }
  }
}

/**
 * Builds a valid `AdmitResponse` answering an admit action with a scripted answer.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { scriptedResponse } from '@kvc/kvc-router/testing'
 * const turn = new Router({ now: () => 0, workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }] })
 *   .dispatch({ sessionId: 's', promptTokens: 10 })
 * const a = turn.next()
 * if (a.type === 'admit') turn.next({ type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) })
 * ```
 */
export function scriptedResponse(
  a: AdmitAction,
  ans: Exclude<AdmitAnswer, { kind: 'timeout' | 'error' }>,
): AdmitResponse {
  const need = a.request.appendTokens + (a.request.expectedOutputTokens ?? 512)
  const admitted = ans.kind === 'admit'
  return {
    requestId: a.request.requestId,
    admitted,
    reason: admitted ? 'ok' : (ans as { reason: Exclude<AdmitReason, 'ok'> }).reason,
    residentTokens: 0,
    needTokens: need,
    tokenUsageAfter: admitted ? ((ans as { usageAfter?: number }).usageAfter ?? 0.1) : 0.99,
    transferQueueDepth: 0,
    retractedQueueDepth: 0,
    recommendedPauseMs: Math.max(0, Math.round(ans.pauseMs ?? 0)),
    ...(admitted ? { leaseMs: a.request.leaseMs ?? 5000 } : {}),
    ...(ans.kind === 'admit' && ans.retracted !== undefined ? { retractedSessions: ans.retracted } : {}),
  }
}

/**
 * An upper bound on the actions of one turn (Theorem 1's "bounded number of attempts"):
 * `maxWalks × (D × (6 × admissionTries + 4) + 1)`. Per D and walk: the fast path (a binding claim,
 * admission tries with a wait between two), its seed-path fallback (two claims, admission tries
 * and waits, the seed), and one more seed through another P after a P-side failure.
 *
 * @example
 * ```ts
 * import { DEFAULT_ROUTER_PARAMS } from '@kvc/kvc-router'
 * import { dispatchActionBound } from '@kvc/kvc-router/testing'
 * dispatchActionBound(DEFAULT_ROUTER_PARAMS, 4) // 22784
 * ```
 */
export function dispatchActionBound(params: RouterParams, decodeWorkers: number): number {
  return params.maxWalks * (Math.max(1, decodeWorkers) * (6 * params.admissionTries + 4) + 1)
}
