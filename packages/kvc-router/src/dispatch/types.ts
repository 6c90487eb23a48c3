import type { AdmitRequest, AdmitResponse, SloClass } from '../admission/contract.js'
import type { RouterError } from '../errors/routerError.js'
import type { ClaimOutcome, StateClaim } from '../cluster/stateStore.js'
import type { RouteDecision } from '../route/types.js'

/**
 * Ask D worker `workerId` to admit (Algorithm 2). The driver sends `request` (over HTTP, or to a
 * simulated D) and answers with `admitResult`, or `admitTimeout` after `timeoutMs`, or
 * `admitError`.
 *
 * @example
 * ```ts
 * import type { AdmitAction } from '@kvc/kvc-router'
 * function url(a: AdmitAction) { return `http://${a.workerId}/kvc/v1/admit` }
 * ```
 */
export interface AdmitAction {
  readonly type: 'admit'
  readonly turnId: string
  readonly workerId: string
  readonly request: AdmitRequest
  readonly timeoutMs: number
  /** 1-based count of attempts (admission RPCs and sends) of this turn. */
  readonly attempt: number
  /**
   * Hedged admission (`hedgeAdmissions`): when `request` has no answer after `hedge.afterMs`,
   * send `hedge.request` to `hedge.workerId` too and answer with a `hedgedAdmitResult` as soon
   * as one of them admits (or both have answered); release the other's lease if it admits later.
   * A host that does not hedge sends `request` alone and answers as usual.
   */
  readonly hedge?: AdmitHedge
}

/**
 * The second admission RPC of a hedged admission.
 *
 * @example
 * ```ts
 * import type { AdmitHedge } from '@kvc/kvc-router'
 * const late = (h: AdmitHedge) => `after ${h.afterMs} ms, ask ${h.workerId} too`
 * ```
 */
export interface AdmitHedge {
  readonly workerId: string
  readonly request: AdmitRequest
  /** How long the first RPC may go unanswered before this one is sent, ms. */
  readonly afterMs: number
}

/**
 * One admission RPC's answer: a response, a timeout or an error.
 *
 * @example
 * ```ts
 * import type { AdmitAnswerOutcome } from '@kvc/kvc-router'
 * const t: AdmitAnswerOutcome = { type: 'admitTimeout' }
 * ```
 */
export type AdmitAnswerOutcome =
  | { readonly type: 'admitResult'; readonly response: AdmitResponse }
  | { readonly type: 'admitTimeout' }
  | { readonly type: 'admitError'; readonly message?: string }

/**
 * The answer to a hedged `admit` action once the hedge was sent: what each RPC answered by then
 * (`undefined`: no answer yet) and which one's admission the turn takes (`undefined`: neither
 * admitted).
 *
 * @example
 * ```ts
 * import type { HedgedAdmitOutcome } from '@kvc/kvc-router'
 * const slowPrimary: HedgedAdmitOutcome = { type: 'hedgedAdmitResult', winner: 'hedge', primary: undefined,
 *   hedge: { type: 'admitTimeout' } }
 * ```
 */
export interface HedgedAdmitOutcome {
  readonly type: 'hedgedAdmitResult'
  readonly winner: 'primary' | 'hedge' | undefined
  readonly primary: AdmitAnswerOutcome | undefined
  readonly hedge: AdmitAnswerOutcome | undefined
}

/**
 * Send the turn straight to D `workerId` (fast path; `local`, a local seed: the D prefills the
 * part of the prompt it lacks, possibly the whole prompt, chosen by the adaptive path choice; or
 * `direct` for colocated workers). The D prefills `appendTokens` itself. Answer `completed` or
 * `failed`. If `migratedFrom` is set, the session moved: after success, release its slot there
 * (locks only). With `admission` (admission on arrival, the router's `admitOnArrival`), the D
 * first decides on that admission request as on an admission RPC (its lease id is `leaseId`):
 * when it refuses, answer `admitResult` with the refusal (nothing was prefilled); when it admits,
 * give its answer to `Router.observeAdmission` as soon as it arrives (the response's headers),
 * serve the turn, and answer `completed` or `failed`.
 *
 * @example
 * ```ts
 * import type { SendFastAction } from '@kvc/kvc-router'
 * function describe(a: SendFastAction) { return `${a.workerId} prefills ${a.appendTokens} tokens` }
 * ```
 */
export interface SendFastAction {
  readonly type: 'sendFast'
  readonly turnId: string
  readonly workerId: string
  readonly path: 'fast' | 'local' | 'direct'
  /** The admission lease to present (undefined for policies without admission). */
  readonly leaseId: string | undefined
  readonly appendTokens: number
  readonly migratedFrom: string | undefined
  readonly attempt: number
  /** Admission on arrival: the D decides on this request when the send arrives (see above). */
  readonly admission?: AdmitRequest
}

/**
 * Seed path: P `prefillId` prefills the prompt and transfers the KV to D `decodeId`, which then
 * decodes. Answer `completed` or `failed` (transfer failures name `transfer_timeout` /
 * `transfer_error`, which count against the P→D link).
 *
 * @example
 * ```ts
 * import type { SeedViaPAction } from '@kvc/kvc-router'
 * function describe(a: SeedViaPAction) { return `${a.prefillId} → ${a.decodeId}` }
 * ```
 */
export interface SeedViaPAction {
  readonly type: 'seedViaP'
  readonly turnId: string
  readonly prefillId: string
  readonly decodeId: string
  readonly leaseId: string | undefined
  readonly migratedFrom: string | undefined
  readonly attempt: number
}

/**
 * Confirm shared state with the store before relying on it (only with a store whose
 * `confirmsClaims` is true, i.e. several router replicas): answer with the store's own answer,
 * `turn.next(await store.claim(action.claim))` (what `TurnDriver` does by default). A lost binding claim re-routes the turn to the
 * winner's D; a denied pending-seed slot skips the D.
 *
 * @example
 * ```ts
 * import type { ClaimAction } from '@kvc/kvc-router'
 * const what = (a: ClaimAction) => `${a.claim.kind} ${a.claim.workerId} for ${a.claim.sessionId}`
 * ```
 */
export interface ClaimAction {
  readonly type: 'claim'
  readonly turnId: string
  readonly claim: StateClaim
}

/**
 * Why a turn waits.
 *
 * @example
 * ```ts
 * import type { WaitReason } from '@kvc/kvc-router'
 * const r: WaitReason = 'admission_retry'
 * ```
 */
export type WaitReason = 'admission_retry' | 'own_decode_paused' | TurnFailureCause

/**
 * Wait until `untilMs` (the router's clock), then answer `waited`. Jittered; never past the
 * turn's deadline. `own_decode_paused`: the session's own D is paused and waiting for it costs
 * less than moving (the adaptive path choice).
 *
 * @example
 * ```ts
 * import type { WaitAction } from '@kvc/kvc-router'
 * const sleepMs = (a: WaitAction, now: number) => Math.max(0, a.untilMs - now)
 * ```
 */
export interface WaitAction {
  readonly type: 'wait'
  readonly turnId: string
  readonly untilMs: number
  readonly reason: WaitReason
}

/**
 * Why a turn failed: the obstacle met most often during the turn.
 *
 * | cause | meaning |
 * |---|---|
 * | `no_decode_workers` | no D worker is registered |
 * | `all_unhealthy` / `all_draining` / `all_paused` / `all_excluded` | every D was left out for that reason |
 * | `all_rejecting` | the D workers tried answered no (capacity, SLO budget, draining) |
 * | `admission_timeouts` | admission RPCs timed out or errored |
 * | `seed_budget` | the D workers' pending-seed budgets were full |
 * | `no_prefill` | no healthy P with a healthy link to the D workers |
 * | `transfer_failed` | KV transfers from P failed |
 * | `too_large` | the prompt plus the decode reserve is more KV than the largest D holds (failed before any attempt) |
 * | `binding_conflict` | other router replicas kept binding the session elsewhere first (lost claims) |
 * | `worker_failed` | the D failed the turn after accepting it |
 * | `aborted` | the driver called `abort` |
 *
 * @example
 * ```ts
 * import type { TurnFailureCause } from '@kvc/kvc-router'
 * const c: TurnFailureCause = 'all_paused'
 * ```
 */
export type TurnFailureCause =
  | 'no_decode_workers'
  | 'all_unhealthy'
  | 'all_draining'
  | 'all_paused'
  | 'all_excluded'
  | 'all_rejecting'
  | 'admission_timeouts'
  | 'seed_budget'
  | 'no_prefill'
  | 'transfer_failed'
  | 'binding_conflict'
  | 'worker_failed'
  | 'too_large'
  | 'aborted'

/**
 * Terminal: the turn failed. `error` is a `RouterError` (`WAIT_EXHAUSTED` or
 * `ATTEMPTS_EXHAUSTED`, or `TURN_FINISHED` for an abort) whose message names the cause.
 *
 * @example
 * ```ts
 * import type { FailAction } from '@kvc/kvc-router'
 * const log = (a: FailAction) => `${a.turnId} failed: ${a.cause} (${a.error.code})`
 * ```
 */
export interface FailAction {
  readonly type: 'fail'
  readonly turnId: string
  readonly cause: TurnFailureCause
  readonly error: RouterError
  readonly record: DispatchRecord
}

/**
 * Terminal: the turn completed on `workerId` by `path`.
 *
 * @example
 * ```ts
 * import type { DoneAction } from '@kvc/kvc-router'
 * const log = (a: DoneAction) => `${a.turnId}: ${a.path} on ${a.workerId}`
 * ```
 */
export interface DoneAction {
  readonly type: 'done'
  readonly turnId: string
  readonly path: 'fast' | 'local' | 'seed' | 'direct'
  readonly workerId: string
  readonly prefillId: string | undefined
  readonly migratedFrom: string | undefined
  readonly record: DispatchRecord
}

/**
 * What a turn asks its driver to do next.
 *
 * @example
 * ```ts
 * import type { DispatchAction } from '@kvc/kvc-router'
 * const terminal = (a: DispatchAction) => a.type === 'done' || a.type === 'fail'
 * ```
 */
export type DispatchAction =
  | AdmitAction
  | ClaimAction
  | SendFastAction
  | SeedViaPAction
  | WaitAction
  | FailAction
  | DoneAction

/**
 * How a send or seed failed.
 *
 * @example
 * ```ts
 * import type { SendFailureCause } from '@kvc/kvc-router'
 * const c: SendFailureCause = 'transfer_timeout'
 * ```
 */
export type SendFailureCause = 'transfer_timeout' | 'transfer_error' | 'worker_error' | 'worker_unreachable'

/**
 * The driver's answer to the pending action: `admitResult` / `admitTimeout` / `admitError` for
 * `admit`; `completed` / `failed` for `sendFast` and `seedViaP`; `waited` for `wait`; the
 * store's `claimResult` for `claim`.
 * `completed.committedTokens` is what the session now holds on the D (prompt + output; default
 * `promptTokens + outputTokens`). A `sendFast` with admission on arrival
 * (`SendFastAction.admission`) that the D refused is answered by its `admitResult`.
 *
 * @example
 * ```ts
 * import type { DispatchOutcome } from '@kvc/kvc-router'
 * const ok: DispatchOutcome = { type: 'completed', outputTokens: 300 }
 * ```
 */
export type DispatchOutcome =
  | AdmitAnswerOutcome
  | HedgedAdmitOutcome
  | { readonly type: 'completed'; readonly committedTokens?: number; readonly outputTokens?: number }
  | { readonly type: 'failed'; readonly cause: SendFailureCause; readonly message?: string }
  | { readonly type: 'waited' }
  | ClaimOutcome

/**
 * One step of a turn's history.
 *
 * @example
 * ```ts
 * import type { DispatchStep } from '@kvc/kvc-router'
 * const s: DispatchStep = { at: 10, kind: 'admit', workerId: 'd1', detail: 'rejected: capacity (pause 2000 ms)' }
 * ```
 */
export interface DispatchStep {
  readonly at: number
  readonly kind:
    | 'route'
    | 'path'
    | 'admit'
    | 'claim'
    | 'skip'
    | 'sendFast'
    | 'seedViaP'
    | 'wait'
    | 'reject'
    | 'exclude'
    | 'done'
    | 'fail'
  readonly workerId?: string
  readonly prefillId?: string
  readonly detail: string
}

/**
 * A turn's decision record, for logs and the simulator's report (render it with
 * `renderDispatch`).
 *
 * @example
 * ```ts
 * import type { DispatchRecord } from '@kvc/kvc-router'
 * const summary = (r: DispatchRecord) => `${r.turnId}: ${r.outcome} after ${r.attempts} attempts`
 * ```
 */
export interface DispatchRecord {
  readonly turnId: string
  readonly sessionId: string
  readonly sloClass: SloClass
  readonly policy: string
  readonly startedAt: number
  endedAt: number | undefined
  outcome: 'running' | 'done' | 'fail'
  path: 'fast' | 'local' | 'seed' | 'direct' | undefined
  workerId: string | undefined
  cause: TurnFailureCause | undefined
  attempts: number
  walks: number
  /** The first three route decisions of the turn and the last one. */
  readonly routes: RouteDecision[]
  readonly steps: DispatchStep[]
}
