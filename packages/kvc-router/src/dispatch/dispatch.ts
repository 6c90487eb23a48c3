import {
  ADMIT_PROTOCOL_VERSION,
  type AdmitPath,
  type AdmitRequest,
  type AdmitResponse,
  type SloClass,
  parseAdmitResponse,
} from '../admission/contract.js'
import { type BackoffPolicy, backoffDelayMs } from '../backoff/backoff.js'
import type { LoadDelta, SessionBinding } from '../cluster/stateStore.js'
import { DEFAULT_COST_MODEL } from '../cost/costModel.js'
import { RouterError, checkLength } from '../errors/routerError.js'
import {
  type PathChoice,
  type PathParams,
  type PathSignals,
  choosePath,
  estimateLocal,
  pathParams,
  shouldWaitForOwnDecode,
} from '../path/pathChoice.js'
import { chooseEvictOrWait } from '../path/evictOrWait.js'
import { BlockKeys } from '../residency/blockKeys.js'
import type { RouterParams } from '../route/params.js'
import { turnKeys } from '../route/route.js'
import type {
  RouteCandidate,
  RouteContext,
  RouteDecision,
  RoutingPolicy,
  TurnRequest,
} from '../route/types.js'
import { waitOrMigrateFor } from '../tier/ownDecodeWait.js'
import type {
  AdmitAnswerOutcome,
  DispatchAction,
  DispatchOutcome,
  DispatchRecord,
  DispatchStep,
  DoneAction,
  FailAction,
  TurnFailureCause,
  WaitReason,
} from './types.js'

type Gen<T> = Generator<DispatchAction, T, DispatchOutcome>

type AdmitResult =
  | { readonly kind: 'admitted'; readonly leaseId: string; readonly workerId: string }
  | { readonly kind: 'rejected'; readonly response: AdmitResponse }
  | { readonly kind: 'skipped' }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'exhausted' }

const CAUSE_PRIORITY: readonly TurnFailureCause[] = [
  'all_rejecting',
  'all_paused',
  'transfer_failed',
  'binding_conflict',
  'worker_failed',
  'admission_timeouts',
  'seed_budget',
  'no_prefill',
  'all_excluded',
  'all_draining',
  'all_unhealthy',
  'no_decode_workers',
]

/** Seed-line tier of each SLO class: a turn yields pending-seed slots only to its tier or above. */
const SLO_TIER: Readonly<Record<SloClass, number>> = { interactive: 0, batch: 1, background: 2 }

/** The load deltas of a turn's commitment and pending-seed slot (shared: no allocation per call). */
const ONE_TURN: LoadDelta = Object.freeze({ turns: 1 })
const ONE_TURN_LESS: LoadDelta = Object.freeze({ turns: -1 })
const ONE_SEED: LoadDelta = Object.freeze({ pendingSeeds: 1 })
const ONE_SEED_LESS: LoadDelta = Object.freeze({ pendingSeeds: -1 })

const MAX_RECORDED_ROUTES = 4
const MAX_RECORDED_STEPS = 256

/** Dispatch's backoff: full jitter over the router's `backoffBaseMs` / `backoffCapMs`. */
function backoffPolicyOf(params: RouterParams): BackoffPolicy {
  return { baseDelayMs: params.backoffBaseMs, maxDelayMs: params.backoffCapMs, jitter: 'full' }
}

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
  readonly #ctx: RouteContext
  readonly #policy: RoutingPolicy
  readonly #turn: TurnRequest
  readonly #keys: BlockKeys
  readonly #cls: SloClass
  readonly #reserve: number
  readonly #deadline: number
  /** Waits between walks and admission tries: full jitter over the router's backoff parameters. */
  readonly #backoff: BackoffPolicy
  readonly #gen: Gen<DoneAction | FailAction>
  #pending: DispatchAction | undefined
  #final: DoneAction | FailAction | undefined
  #attempts = 0
  #walks = 0
  /** Sends and seeds of this turn that failed (its retry budget: `maxSendFailures`). */
  #sendFailures = 0
  /** Obstacles met during the whole turn; the most frequent one names a failure. */
  readonly #tally = new Map<TurnFailureCause, number>()
  /**
   * Loads added for an in-flight send (the D's prefill tokens and decode blocks, the P's turn and
   * prefill tokens), undone by its outcome or by `abort`. The D's turn is the commitment below.
   */
  #inflight: { d: string; p: string | undefined; prefill: number; blocks: number } | undefined
  /**
   * The D this turn counts one in-flight turn toward (`turns` in its load): from the first claim or
   * admission request for it (or the send, for policies without admission) until the turn moves on
   * from it, ends or is aborted. So turns routed before any of them is sent see each other's load.
   */
  #committed: string | undefined
  /** The D whose pending-seed slot this turn holds (taken before its admission RPC). */
  #seedSlot: string | undefined
  /** The D workers whose pending-seed budget turned this turn away during the current walk. */
  #budgetWaits: string[] = []
  /** The P of this turn's last seed when it failed on the P side (`transfer_error`). */
  #seedFailedOnP: string | undefined
  /** A P the seed path must not pick (the one that just failed, during the retry through another). */
  #avoidP: string | undefined
  /** Whether the store confirms claims (several replicas). */
  readonly #claims: boolean
  /** The session's binding as this turn knows it (read at each walk, updated by granted claims). */
  #known: SessionBinding | undefined
  /** The bound D before this turn's first granted binding claim (`null`: no claim granted yet). */
  #origin: string | undefined | null = null
  /** The D that won a binding claim this turn lost: tried first in the next walk. */
  #follow: string | undefined
  /** Set by a lost binding claim: end this walk and walk again at once. */
  #reroute = false
  /** The adaptive path choice's parameters (built on first use). */
  #pathParams: PathParams | undefined
  /** The current walk and the position in it (for hedged admission's second D). */
  #walkList: readonly { readonly c: RouteCandidate; readonly ownPause: number | undefined }[] = []
  #walkPos = 0
  /** The D whose pending-seed slot this turn holds for a hedged admission's second RPC. */
  #hedgeSlot: string | undefined

  /** @internal Use `Router.dispatch`. */
  constructor(ctx: RouteContext, policy: RoutingPolicy, turn: TurnRequest, turnId: string) {
    this.#ctx = ctx
    this.#policy = policy
    this.turnId = turnId
    this.#keys = turnKeys(turn)
    // Convert a bigint[] prompt to keys once per turn, not once per walk.
    this.#turn =
      turn.blocks === undefined || turn.blocks instanceof BlockKeys ? turn : { ...turn, blocks: this.#keys }
    this.#cls = turn.sloClass ?? 'interactive'
    this.#claims = ctx.cluster.store.confirmsClaims === true
    ctx.cluster.retractions.turnStarted(turn.sessionId)
    this.#reserve = turn.expectedOutputTokens ?? ctx.params.defaultDecodeReserve
    const now = ctx.cluster.now()
    this.#deadline = now + ctx.params.slo[this.#cls].maxWaitMs
    this.#backoff = backoffPolicyOf(ctx.params)
    this.record = {
      turnId,
      sessionId: turn.sessionId,
      sloClass: this.#cls,
      policy: policy.name,
      startedAt: now,
      endedAt: undefined,
      outcome: 'running',
      path: undefined,
      workerId: undefined,
      cause: undefined,
      attempts: 0,
      walks: 0,
      routes: [],
      steps: [],
    }
    this.#gen = this.#run()
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
    return this.#committed
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
    } else this.#checkOutcome(this.#pending, outcome)
    const r = this.#pending === undefined ? this.#gen.next() : this.#gen.next(outcome!)
    const action = r.value
    if (r.done === true) {
      this.#final = action as DoneAction | FailAction
      this.#pending = undefined
      this.#ctx.cluster.retractions.turnEnded(this.#turn.sessionId)
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
    this.#undoInflight()
    this.#releaseCommitment()
    this.#releaseSeedSlot()
    this.#releaseHedgeSlot()
    const fail = this.#fail('aborted', 'TURN_FINISHED')
    this.#gen.return(fail)
    this.#final = fail
    this.#pending = undefined
    this.#ctx.cluster.retractions.turnEnded(this.#turn.sessionId)
    return fail
  }

  // ------------------------------------------------------------------ the walk

  *#run(): Gen<DoneAction | FailAction> {
    const { cluster, params } = this.#ctx
    const s = this.#turn.sessionId
    const policy = this.#policy
    // A turn no D can ever hold (its prompt and decode reserve above every D's KV pool) fails at
    // once: no walk, wait or retry can make it fit.
    const records = cluster.decodeRecords()
    if (records.length > 0) {
      let largest = 0
      for (const r of records) if (r.capacityTokens > largest) largest = r.capacityTokens
      if (this.#turn.promptTokens + this.#reserve > largest)
        return this.#fail('too_large', 'TOO_LARGE', largest)
    }
    for (;;) {
      this.#walks++
      this.record.walks = this.#walks
      const decision = policy.rank(this.#ctx, this.#turn)
      if (this.#claims) this.#known = cluster.store.getBinding(s)
      this.#recordRoute(decision)
      for (const w of decision.ineligible) {
        this.#count(
          w.reason === 'paused'
            ? 'all_paused'
            : w.reason === 'excluded'
              ? 'all_excluded'
              : w.reason === 'draining'
                ? 'all_draining'
                : 'all_unhealthy',
        )
      }
      if (cluster.decodeIds().length === 0) this.#count('no_decode_workers')
      const evict = this.#evictRatherThanWait(decision)
      if (evict !== undefined) {
        const done = yield* this.#fastDespitePause(evict)
        this.#releaseCommitment()
        if (done !== undefined) return done
        if (this.#sendFailures >= params.maxSendFailures)
          return this.#fail(this.#dominantCause(), 'ATTEMPTS_EXHAUSTED')
      }
      const stayUntil = this.#waitForOwnDecode(decision)
      if (stayUntil !== undefined) {
        if (this.#walks >= params.maxWalks) return this.#fail(this.#dominantCause(), 'ATTEMPTS_EXHAUSTED')
        yield* this.#wait(stayUntil, 'own_decode_paused')
        continue
      }
      let candidates = decision.candidates
      const follow = this.#follow
      this.#follow = undefined
      if (follow !== undefined) {
        const i = candidates.findIndex((x) => x.workerId === follow)
        if (i > 0) {
          candidates = [candidates[i]!, ...candidates.slice(0, i), ...candidates.slice(i + 1)]
          this.#step('route', follow, undefined, `following the binding to ${follow} won by another replica`)
        }
      }
      // Ds that refused the fast path as `append_too_large` (the router thought they held the
      // prompt, they do not) while a later candidate is fast and holds part of the prompt: their
      // seed-path fallback waits until those were tried (Theorem 2; a seed re-prefills it all).
      const deferred: { readonly c: RouteCandidate; readonly ownPause: number }[] = []
      const walk = [...candidates.map((c) => ({ c, ownPause: undefined as number | undefined }))]
      for (let k = 0; k < walk.length; k++) {
        if (this.#attempts >= params.maxAttempts) break
        const { c, ownPause } = walk[k]!
        const d = c.workerId
        this.#walkList = walk
        this.#walkPos = k
        if (!cluster.has(d) || cluster.role(d) !== 'decode') continue
        if (!cluster.isEligible(d) && (ownPause === undefined || !cluster.isPaused(d))) {
          this.#count(cluster.isPaused(d) ? 'all_paused' : 'all_unhealthy')
          continue
        }
        if (cluster.store.isExcluded(s, d)) {
          this.#count('all_excluded')
          continue
        }
        const laterFast =
          ownPause === undefined && walk.slice(k + 1).some((x) => x.c.fast && x.c.heldTokens > 0)
        const done = yield* this.#tryCandidate(c, ownPause, laterFast ? deferred : undefined)
        // Whatever happened on `d`, the turn no longer counts toward it (a success has already
        // given its load back; a rejection, a skip or a failure moves on).
        this.#releaseCommitment()
        if (done !== undefined) return done
        if (this.#sendFailures >= params.maxSendFailures)
          return this.#fail(this.#dominantCause(), 'ATTEMPTS_EXHAUSTED')
        if (this.#reroute) break
        if (k === walk.length - 1 && deferred.length > 0) walk.push(...deferred.splice(0))
      }
      // Wait in line for the D workers whose budget turned this turn away in this walk (and only
      // those: a D it no longer tries stops counting it).
      cluster.seedWaiters.wait(this.turnId, this.record.startedAt, this.#budgetWaits, SLO_TIER[this.#cls])
      this.#budgetWaits = []
      const cause = this.#dominantCause()
      const now = cluster.now()
      if (this.#attempts >= params.maxAttempts || this.#walks >= params.maxWalks) {
        return this.#fail(cause, 'ATTEMPTS_EXHAUSTED')
      }
      if (now >= this.#deadline) return this.#fail(cause, 'WAIT_EXHAUSTED')
      if (this.#reroute) {
        // A lost binding claim changed the session's binding: walk again now, no wait.
        this.#reroute = false
        continue
      }
      let until = now + Math.max(1, backoffDelayMs(this.#walks - 1, this.#backoff, this.#ctx.random))
      // If no healthy D is usable now only because of pauses (including hints received during this
      // walk), sleep until the first pause ends (jittered) instead of waking up for nothing.
      let earliest = Number.POSITIVE_INFINITY
      let usable = false
      for (const d of cluster.decodeIds()) {
        if (!cluster.healthy(d) || cluster.draining(d) || cluster.store.isExcluded(s, d)) continue
        const p = cluster.store.pauseUntil(d)
        if (p <= now) {
          usable = true
          break
        }
        if (p < earliest) earliest = p
      }
      if (!usable && earliest !== Number.POSITIVE_INFINITY) {
        until = earliest + this.#ctx.random() * params.backoffBaseMs
      }
      until = Math.max(now + 1, Math.min(until, this.#deadline))
      yield* this.#wait(until, cause)
    }
  }

  /**
   * One candidate of a walk. `seedAfterOwnPause`: go straight to the seed path on `d` (a deferred
   * `append_too_large` fallback; the pause `d` set in that answer does not stop it). `defer`: on
   * `append_too_large`, record the fallback there instead of seeding now.
   */
  *#tryCandidate(
    c: RouteCandidate,
    seedAfterOwnPause?: number,
    defer?: { c: RouteCandidate; ownPause: number }[],
  ): Gen<DoneAction | undefined> {
    const { cluster, params } = this.#ctx
    const policy = this.#policy
    const d = c.workerId
    if (policy.pathMode === 'direct') {
      let leaseId: string | undefined
      if (!(yield* this.#claimBinding(d))) return undefined
      if (policy.usesAdmission) {
        const r = yield* this.#admit(d, 'fast', c)
        if (r.kind !== 'admitted') return undefined
        leaseId = r.leaseId
      }
      return yield* this.#sendFast(d, c, leaseId, 'direct')
    }
    let seed = policy.pathMode === 'seed' || !c.fast || seedAfterOwnPause !== undefined
    // A pause `d` set in its own answer to this turn's fast-path request does not stop the
    // seed-path fallback on `d` (a later, longer pause set by another turn does).
    let ownPause = seedAfterOwnPause ?? Number.NEGATIVE_INFINITY
    if (!seed) {
      if (!(yield* this.#claimBinding(d))) return undefined
      const r = policy.usesAdmission
        ? yield* this.#admit(d, 'fast', c, undefined, this.#sameDecodeHedge())
        : ({ kind: 'admitted', leaseId: '' } as const)
      if (r.kind === 'admitted')
        return yield* this.#sendFast(d, c, policy.usesAdmission ? r.leaseId : undefined, 'fast')
      if (r.kind === 'rejected' && r.response.reason === 'append_too_large') {
        seed = true
        ownPause = cluster.store.pauseUntil(d)
        if (defer !== undefined) {
          // A later candidate holding part of the prompt may take the fast path.
          defer.push({ c, ownPause })
          this.#step('skip', d, undefined, 'seed-path fallback deferred: a fast candidate follows')
          return undefined
        }
      } else return undefined
    }
    // Not the fast path: with the adaptive path choice, the D may prefill the turn itself (a
    // local seed) when the estimated completion time says so; else the seed path through a P.
    if (params.pathChoice === 'adaptive' && policy.pathMode === 'kvc') {
      const p = this.#pickPrefill(d)
      const choice = choosePath(this.#signals(c, p), this.#pathParamsOf())
      this.#explainPath(d, p, choice)
      if (choice.site === 'local') return yield* this.#localSeed(c, ownPause)
    }
    // Seed path.
    const done = yield* this.#seedPath(c, ownPause)
    const failedP = this.#seedFailedOnP
    if (done !== undefined || failedP === undefined || this.#attempts >= params.maxAttempts) return done
    // It failed on the P side (the P died or its link broke): try the same D once more through
    // another P before moving on, so that a P's failure does not move the session off a D that
    // is fine.
    this.#avoidP = failedP
    const other = this.#pickPrefill(d)
    if (other === undefined) {
      this.#avoidP = undefined
      return undefined
    }
    this.#step('seedViaP', d, other, `failed on the P side: trying ${d} again through another P`)
    // A pause `d` set in its own answer to this turn covered the first seed-path request only.
    const again = yield* this.#seedPath(c, Number.NEGATIVE_INFINITY)
    this.#avoidP = undefined
    return again
  }

  /**
   * A local seed on `c`'s D (the adaptive path choice): claims, admission by `seed` (the D must
   * hold the whole part of the prompt it lacks), then `sendFast` with path `local`: the D
   * prefills it. No pending-seed slot: nothing is transferred.
   */
  *#localSeed(c: RouteCandidate, ownPause: number): Gen<DoneAction | undefined> {
    const d = c.workerId
    if (!(yield* this.#claimBinding(d))) return undefined
    let leaseId: string | undefined
    if (this.#policy.usesAdmission) {
      const r = yield* this.#admit(d, 'seed', c, ownPause)
      if (r.kind !== 'admitted') return undefined
      leaseId = r.leaseId
    }
    return yield* this.#sendFast(d, c, leaseId, 'local')
  }

  #pathParamsOf(): PathParams {
    if (this.#pathParams === undefined) {
      this.#pathParams = pathParams(this.#ctx.cost ?? DEFAULT_COST_MODEL, {
        stallWeight: this.#ctx.params.stallWeight,
      })
    }
    return this.#pathParams
  }

  /**
   * Seconds of prefill work queued on worker `id`: its queue report (seconds, else tokens and
   * requests through the cost model), else the router's own count of the prefill tokens of the
   * turns in flight there (an upper bound: a turn counts until it ends).
   */
  #queueSeconds(id: string): number {
    const cluster = this.#ctx.cluster
    const cm = this.#ctx.cost ?? DEFAULT_COST_MODEL
    const q = cluster.queue(id)
    if (q?.prefillQueueS !== undefined) return q.prefillQueueS
    if (q?.prefillQueueTokens !== undefined) {
      const reqs = q.prefillQueueRequests ?? (q.prefillQueueTokens > 0 ? 1 : 0)
      return q.prefillQueueTokens / cm.prefillTokensPerS + cm.prefillFixedS * reqs
    }
    const l = cluster.store.load(id)
    return l.prefillTokens / cm.prefillTokensPerS + (l.prefillTokens > 0 ? cm.prefillFixedS : 0)
  }

  /** Requests decoding on D `d`: its queue report, else the turns in flight there. */
  #runningDecodes(d: string): number {
    return this.#ctx.cluster.queue(d)?.runningRequests ?? this.#ctx.cluster.store.load(d).turns
  }

  /** The path choice's signals for this turn on `c`'s D, through P `p` (none: no remote seed). */
  #signals(c: RouteCandidate, p: string | undefined): PathSignals {
    const d = c.workerId
    return {
      promptTokens: this.#turn.promptTokens,
      // Route counts a load-back from the D's host tier as held; the path choice prices it.
      decodeHeldTokens: c.heldTokens - c.loadBackTokens,
      ...(c.loadBackTokens > 0 ? { decodeHostTokens: c.loadBackTokens } : {}),
      decodeQueueS: this.#queueSeconds(d),
      runningDecodes: this.#runningDecodes(d),
      ...(p === undefined ? {} : { prefill: { queueS: this.#queueSeconds(p), heldTokens: 0 } }),
    }
  }

  #explainPath(d: string, p: string | undefined, choice: PathChoice): void {
    this.#step('path', d, choice.site === 'remote' ? p : undefined, `${choice.site} seed: ${choice.reason}`)
  }

  /**
   * The adaptive path choice's other question: the session's own D is paused and the best
   * candidate is not a fast path (the turn would move and re-prefill): when waiting out the pause
   * and prefilling the append there costs less than moving, the time to wait until (jittered
   * like any wait for a pause). Only while the D has not refused the session since its last
   * success, and the pause ends before the turn's deadline.
   */
  #waitForOwnDecode(decision: RouteDecision): number | undefined {
    const { cluster, params } = this.#ctx
    const adaptive = params.pathChoice === 'adaptive'
    if ((!adaptive && !params.waitForOwnDecode) || this.#policy.pathMode !== 'kvc') return undefined
    const b = decision.boundWorker
    if (b === undefined) return undefined
    const paused = decision.ineligible.find((w) => w.workerId === b)
    if (paused === undefined || paused.reason !== 'paused' || paused.until === undefined) return undefined
    const top = decision.candidates[0]
    if (top === undefined || top.fast) return undefined
    const s = this.#turn.sessionId
    if (cluster.store.rejects(s, b) > 0 || cluster.store.isExcluded(s, b)) return undefined
    const now = cluster.now()
    const until = paused.until + this.#ctx.random() * params.backoffBaseMs
    if (until >= this.#deadline) return undefined
    if (!adaptive) return this.#waitOrMigrate(b, top, until, now)
    const binding = cluster.store.getBinding(s)
    const prompt = this.#turn.promptTokens
    const pp = this.#pathParamsOf()
    const stay = estimateLocal(
      {
        promptTokens: prompt,
        decodeHeldTokens: Math.min(binding?.committedTokens ?? 0, prompt),
        decodeQueueS: this.#queueSeconds(b),
        runningDecodes: this.#runningDecodes(b),
      },
      pp,
    )
    const p = this.#pickPrefill(top.workerId)
    const move = choosePath(this.#signals(top, p), pp)
    const waitS = (until - now) / 1000
    if (!shouldWaitForOwnDecode(waitS, stay, move)) return undefined
    const moveCost = move.site === 'local' ? move.local.costS : move.remote!.costS
    this.#step(
      'path',
      b,
      undefined,
      `wait ${waitS.toFixed(2)} s for ${b} (paused): ${(waitS + stay.costS).toFixed(2)} s ≤ ${move.site} seed on ${top.workerId} ${moveCost.toFixed(2)} s`,
    )
    return until
  }

  /**
   * Pause or evict (`pauseChoice: 'cost'`): the session's own D is paused, the turn would take the
   * fast path there and no other D offers one. A fast candidate on that D when going now and
   * letting it make room costs less than waiting the pause out (`chooseEvictOrWait`). Not for a
   * session the D refused or retracted since its last success.
   */
  #evictRatherThanWait(decision: RouteDecision): RouteCandidate | undefined {
    const { cluster, params } = this.#ctx
    if (params.pauseChoice !== 'cost' || this.#policy.pathMode !== 'kvc' || !this.#policy.usesAdmission)
      return undefined
    const b = decision.boundWorker
    if (b === undefined || decision.candidates[0]?.fast === true) return undefined
    const paused = decision.ineligible.find((w) => w.workerId === b)
    if (paused === undefined || paused.reason !== 'paused' || paused.until === undefined) return undefined
    const s = this.#turn.sessionId
    if (cluster.store.rejects(s, b) > 0 || cluster.store.isExcluded(s, b)) return undefined
    const binding = cluster.store.getBinding(s)
    if (binding === undefined || binding.workerId !== b) return undefined
    const prompt = this.#turn.promptTokens
    const held = Math.min(binding.committedTokens, prompt)
    const append = prompt - held
    if (append > params.tauAppend) return undefined
    const need = append + this.#reserve
    const waitS = Math.max(0, paused.until - cluster.now()) / 1000
    const choice = chooseEvictOrWait(
      { waitS, needTokens: need, contextTokens: held },
      this.#ctx.cost ?? DEFAULT_COST_MODEL,
    )
    if (choice.action !== 'evict') return undefined
    this.#step('path', b, undefined, `${b} is paused; fast path now, the D makes room: ${choice.reason}`)
    const l = cluster.store.load(b)
    return {
      workerId: b,
      rank: 0,
      fast: true,
      capOk: true,
      prefixResident: true,
      overlapBlocks: 0,
      plainOverlapBlocks: 0,
      bonus: 0,
      score: 0,
      load: l.turns + l.pendingSeeds,
      tieBreak: 0,
      heldTokens: held,
      loadBackTokens: 0,
      appendTokens: append,
      needTokens: need,
      availableTokens: cluster.available(b),
      decidedBy: 'last',
      note: 'paused: evict rather than wait',
    }
  }

  /**
   * The fast path on `c`'s D despite its pause (`#evictRatherThanWait`): claims, admission (the
   * D still decides; the pause it set does not stop this request), then `sendFast`. `undefined`
   * when the D refused or the send failed: the walk goes on as if the pause had held.
   */
  *#fastDespitePause(c: RouteCandidate): Gen<DoneAction | undefined> {
    const d = c.workerId
    if (!(yield* this.#claimBinding(d))) return undefined
    const r = yield* this.#admit(d, 'fast', c, Number.POSITIVE_INFINITY, this.#sameDecodeHedge())
    if (r.kind !== 'admitted') return undefined
    return yield* this.#sendFast(d, c, r.leaseId, 'fast')
  }

  /**
   * `waitForOwnDecode` (remote path choice): wait until `until` for the session's paused own D
   * `b` when {@link waitOrMigrateFor} finds that no slower than migrating to `top`; the record
   * says why either way.
   */
  #waitOrMigrate(b: string, top: RouteCandidate, until: number, now: number): number | undefined {
    const p = this.#pickPrefill(top.workerId)
    const t = this.#turn
    const r = waitOrMigrateFor(
      this.#ctx,
      t.sessionId,
      turnKeys(t),
      t.promptTokens,
      b,
      (until - now) / 1000,
      this.#queueSeconds(b),
      top,
      p,
      p === undefined ? 0 : this.#queueSeconds(p),
    )
    this.#step('path', r.choice === 'wait' ? b : top.workerId, undefined, `${b} paused: ${r.reason}`)
    return r.choice === 'wait' ? until : undefined
  }

  /** The seed path's P for `d`: the policy's choice, else the cluster's; never `#avoidP`. */
  #pickPrefill(d: string): string | undefined {
    const avoid = this.#avoidP
    const p = this.#policy.pickPrefill?.(this.#ctx, this.#turn, d)
    if (p !== undefined && p !== avoid) return p
    return this.#ctx.cluster.pickPrefill(d, avoid)
  }

  /**
   * The seed path on `c`'s D: its pending-seed budget, a P, claims, admission, then `seedViaP`.
   * `ownPause`: a pause the D set in its own answer to this turn, which does not stop it.
   */
  *#seedPath(c: RouteCandidate, ownPause: number): Gen<DoneAction | undefined> {
    const { cluster, params } = this.#ctx
    const policy = this.#policy
    const d = c.workerId
    this.#seedFailedOnP = undefined
    const budget = Math.max(1, Math.floor(params.pendingSeedsPerD * params.slo[this.#cls].seedShare))
    const pending = cluster.store.load(d).pendingSeeds
    // Free slots go to the turns that have waited longest for this D (first come, first served),
    // among those of this turn's SLO class or a higher one (lower classes yield first).
    const older = cluster.seedWaiters.olderThan(d, this.record.startedAt, SLO_TIER[this.#cls])
    if (pending + older >= budget) {
      this.#count('seed_budget')
      this.#ctx.tuning?.tuner.seedBudgetHit()
      this.#budgetWaits.push(d)
      this.#step(
        'skip',
        d,
        undefined,
        pending >= budget
          ? `pending-seed budget full (${budget} for ${this.#cls})`
          : `pending-seed slots left to ${older} earlier turns waiting for ${d}`,
      )
      return undefined
    }
    const p = this.#pickPrefill(d)
    if (p === undefined) {
      this.#count('no_prefill')
      this.#step('skip', d, undefined, 'no healthy P with a healthy link')
      return undefined
    }
    // Take the pending-seed slot before the admission RPC, so that turns interleaved with this
    // one cannot overshoot the budget while it waits for the answer.
    this.#takeSeedSlot(d)
    if (this.#claims) {
      if (!(yield* this.#claimSeedSlot(d, budget))) {
        this.#releaseSeedSlot()
        return undefined
      }
      if (!(yield* this.#claimBinding(d))) {
        this.#releaseSeedSlot()
        return undefined
      }
    }
    let leaseId: string | undefined
    let on = c
    let via = p
    if (policy.usesAdmission) {
      // Hedged admission: a second D of the walk, its slot and its P, ready in case this one is slow.
      const h = ownPause === Number.NEGATIVE_INFINITY ? this.#hedgeCandidate(d) : undefined
      if (h !== undefined) this.#takeHedgeSlot(h.c.workerId)
      const r = yield* this.#admit(d, 'seed', c, ownPause, h?.c)
      if (r.kind === 'admitted' && h !== undefined && r.workerId === h.c.workerId) {
        // The hedge won: the turn seeds that D, holding its slot; this one's slot is free again.
        this.#releaseSeedSlot()
        this.#seedSlot = this.#hedgeSlot
        this.#hedgeSlot = undefined
        if (cluster.has(d)) cluster.seedWaiters.slotFreed(d)
        on = h.c
        via = h.p
      } else this.#releaseHedgeSlot()
      if (r.kind !== 'admitted') {
        this.#releaseSeedSlot()
        return undefined
      }
      leaseId = r.leaseId
    }
    const target = on.workerId
    // Claims and admission RPCs take time: the P picked before them may have gone down, been
    // drained or paused, or lost its link to the D meanwhile. Pick again instead of seeding through it.
    const q = this.#recheckPrefill(via, target)
    if (q === undefined) {
      this.#releaseSeedSlot()
      return undefined
    }
    return yield* this.#seed(q, target, on, leaseId)
  }

  /**
   * Hedged admission's second D for a seed on `d` (`hedgeAdmissions`, without claims): the next
   * candidate of the walk that is not a fast path, has room (`capOk`), is eligible and not
   * excluded for the session, has a free pending-seed slot for this turn and a P that can seed it.
   */
  #hedgeCandidate(d: string): { readonly c: RouteCandidate; readonly p: string } | undefined {
    const { cluster, params } = this.#ctx
    if (!params.hedgeAdmissions || this.#claims || this.#attempts + 2 > params.maxAttempts) return undefined
    if (Number.isNaN(this.#hedgeDelay())) return undefined
    const budget = Math.max(1, Math.floor(params.pendingSeedsPerD * params.slo[this.#cls].seedShare))
    const list = this.#walkList
    for (let k = this.#walkPos + 1; k < list.length; k++) {
      const x = list[k]!
      const c2 = x.c
      const d2 = c2.workerId
      if (d2 === d || c2.fast || !c2.capOk || x.ownPause !== undefined) continue
      if (!cluster.has(d2) || cluster.role(d2) !== 'decode' || !cluster.isEligible(d2)) continue
      if (cluster.store.isExcluded(this.#turn.sessionId, d2)) continue
      const older = cluster.seedWaiters.olderThan(d2, this.record.startedAt, SLO_TIER[this.#cls])
      if (cluster.store.load(d2).pendingSeeds + older >= budget) continue
      const p2 = this.#pickPrefill(d2)
      if (p2 === undefined) continue
      return { c: c2, p: p2 }
    }
    return undefined
  }

  /** `'same'` when a fast-path admission may be hedged (the same request to the same D again). */
  #sameDecodeHedge(): 'same' | undefined {
    const params = this.#ctx.params
    if (!params.hedgeAdmissions || this.#attempts + 2 > params.maxAttempts) return undefined
    return Number.isNaN(this.#hedgeDelay()) ? undefined : 'same'
  }

  /**
   * How long an admission RPC may go unanswered before the hedge goes out: the
   * `hedgeQuantile` of the router's recent admission latencies, at least `hedgeMinDelayMs`;
   * `NaN` (no hedging) until 16 latencies were observed.
   */
  #hedgeDelay(): number {
    const w = this.#ctx.cluster.admissionLatency
    if (w.size < 16) return Number.NaN
    return Math.max(this.#ctx.params.hedgeMinDelayMs, w.quantile(this.#ctx.params.hedgeQuantile))
  }

  #takeHedgeSlot(d: string): void {
    this.#ctx.cluster.store.addLoad(d, ONE_SEED)
    this.#hedgeSlot = d
  }

  #releaseHedgeSlot(): void {
    const d = this.#hedgeSlot
    if (d === undefined) return
    this.#hedgeSlot = undefined
    if (this.#ctx.cluster.has(d)) {
      this.#ctx.cluster.store.addLoad(d, ONE_SEED_LESS)
      this.#ctx.cluster.seedWaiters.slotFreed(d)
    }
  }

  /**
   * `p` if it can still seed `d` (registered, healthy, not draining, not paused, healthy link),
   * else another P picked the same way, else `undefined` (the D is skipped: `no_prefill`).
   */
  #recheckPrefill(p: string, d: string): string | undefined {
    const why = this.#prefillObstacle(p, d)
    if (why === undefined) return p
    const again = this.#pickPrefill(d)
    if (again === undefined || this.#prefillObstacle(again, d) !== undefined) {
      this.#count('no_prefill')
      this.#step('skip', d, p, `P ${p} ${why} since it was picked, and no other P can seed ${d}`)
      return undefined
    }
    this.#step('skip', d, p, `P ${p} ${why} since it was picked; seeding through ${again} instead`)
    return again
  }

  #prefillObstacle(p: string, d: string): string | undefined {
    const cluster = this.#ctx.cluster
    if (!cluster.has(p) || cluster.role(p) !== 'prefill') return 'was removed'
    if (!cluster.healthy(p)) return 'became unhealthy'
    if (cluster.draining(p)) return 'is draining'
    if (cluster.isPaused(p)) return 'is paused'
    if (!cluster.has(d) || !cluster.linkHealthy(p, d)) return `has no healthy link to ${d}`
    return undefined
  }

  /**
   * Why D `d` can no longer take this turn (removed, unhealthy, draining, paused, excluded for the
   * session), or `undefined`. A pause ending no later than `tolerated` (one `d` set in its own
   * answer to this turn) does not count.
   */
  #decodeObstacle(d: string, tolerated: number): { cause: TurnFailureCause; why: string } | undefined {
    const cluster = this.#ctx.cluster
    if (!cluster.has(d) || cluster.role(d) !== 'decode') return { cause: 'all_unhealthy', why: 'was removed' }
    if (!cluster.healthy(d)) return { cause: 'all_unhealthy', why: 'became unhealthy' }
    if (cluster.draining(d)) return { cause: 'all_draining', why: 'is draining' }
    const until = cluster.store.pauseUntil(d)
    if (cluster.now() < until && until > tolerated) {
      return { cause: 'all_paused', why: `is paused until ${until.toFixed(1)}` }
    }
    if (cluster.store.isExcluded(this.#turn.sessionId, d)) {
      return { cause: 'all_excluded', why: 'is excluded for the session' }
    }
    return undefined
  }

  /**
   * With a store that confirms claims: binds the session to `d` unless this turn already knows it
   * is bound there. `false` when another replica's binding won (the walk ends and re-routes).
   */
  *#claimBinding(d: string): Gen<boolean> {
    if (!this.#claims || this.#known?.workerId === d) return true
    const cluster = this.#ctx.cluster
    const s = this.#turn.sessionId
    const expected = this.#known
    this.#commit(d)
    const out = yield {
      type: 'claim',
      turnId: this.turnId,
      claim: { kind: 'binding', sessionId: s, workerId: d, expected, at: cluster.now() },
    }
    const r = out as Extract<DispatchOutcome, { type: 'claimResult' }>
    const note = r.confirmed === false ? ' (unconfirmed: store degraded)' : ''
    if (r.granted) {
      if (this.#origin === null) this.#origin = expected?.workerId
      this.#known = r.binding ?? {
        workerId: d,
        committedTokens: 0,
        verifiedBlocks: 0,
        updatedAt: cluster.now(),
      }
      this.#step('claim', d, undefined, `bound ${s} to ${d}${note}`)
      return true
    }
    const winner = r.binding?.workerId ?? cluster.store.getBinding(s)?.workerId
    this.#count('binding_conflict')
    this.#step(
      'claim',
      d,
      undefined,
      `lost: ${s} is bound to ${winner ?? 'another D'} by another replica; re-routing${note}`,
    )
    this.#follow = winner
    this.#reroute = true
    return false
  }

  /** With a store that confirms claims: confirms the pending-seed slot this turn took on `d`. */
  *#claimSeedSlot(d: string, budget: number): Gen<boolean> {
    const cluster = this.#ctx.cluster
    this.#commit(d)
    const out = yield {
      type: 'claim',
      turnId: this.turnId,
      claim: { kind: 'seedSlot', sessionId: this.#turn.sessionId, workerId: d, budget, at: cluster.now() },
    }
    const r = out as Extract<DispatchOutcome, { type: 'claimResult' }>
    if (r.granted) return true
    this.#count('seed_budget')
    this.#ctx.tuning?.tuner.seedBudgetHit()
    this.#budgetWaits.push(d)
    this.#step('skip', d, undefined, `pending-seed budget full across replicas (${budget} for ${this.#cls})`)
    return false
  }

  *#admit(
    d: string,
    path: 'fast' | 'seed',
    c: RouteCandidate,
    ownPause = Number.NEGATIVE_INFINITY,
    hedge?: RouteCandidate | 'same',
  ): Gen<AdmitResult> {
    const { cluster, params } = this.#ctx
    const cached = cluster.cachedRejection(d, params.admissionStalenessMs)
    if (
      cached !== undefined &&
      cached.response.reason !== 'append_too_large' &&
      cached.needTokens <= c.needTokens
    ) {
      this.#count('all_rejecting')
      this.#step(
        'skip',
        d,
        undefined,
        `reused a ${cached.response.reason} answer from ${cached.at} (staleness budget)`,
      )
      return { kind: 'skipped' }
    }
    const tries = params.admissionTries
    for (let t = 0; t < tries; t++) {
      if (this.#attempts >= params.maxAttempts) return { kind: 'exhausted' }
      // Time has passed since `d` was found eligible (claims, an earlier admission RPC and its
      // backoff): ask it only if it can still take the turn, else move on to the next candidate.
      const obstacle = this.#decodeObstacle(d, ownPause)
      if (obstacle !== undefined) {
        this.#count(obstacle.cause)
        const after = t === 0 ? '' : ` after ${t} unanswered admission ${t === 1 ? 'try' : 'tries'}`
        this.#step('skip', d, undefined, `${d} ${obstacle.why}${after}; moving on`)
        return { kind: 'skipped' }
      }
      const attempt = this.#bumpAttempts()
      const requestId = `${this.turnId}/a${attempt}`
      this.#commit(d)
      // Only the first try is hedged, and only toward a D that can still take the turn. A fast
      // path's hedge is the same request again to the same D (the only one holding the session;
      // admission is idempotent per request id): moving the session would cost a re-prefill.
      const same = hedge === 'same'
      const h =
        t !== 0 || hedge === undefined
          ? undefined
          : same
            ? c
            : this.#decodeObstacle(hedge.workerId, Number.NEGATIVE_INFINITY) === undefined
              ? hedge
              : undefined
      const hedgeId = same ? requestId : `${this.turnId}/h${attempt}`
      const sentAt = cluster.now()
      const out = yield {
        type: 'admit',
        turnId: this.turnId,
        workerId: d,
        request: this.#admitRequest(requestId, path, c),
        timeoutMs: params.admissionTimeoutMs,
        attempt,
        ...(h === undefined
          ? {}
          : {
              hedge: {
                workerId: h.workerId,
                request: this.#admitRequest(hedgeId, path, h),
                afterMs: this.#hedgeDelay(),
              },
            }),
      }
      if (out.type === 'hedgedAdmitResult' && h !== undefined) {
        const hs = cluster.hedging
        hs.sent++
        this.#bumpAttempts()
        if (out.winner === 'primary') cluster.admissionLatency.record(cluster.now() - sentAt)
        const pr = out.primary === undefined ? undefined : this.#onAnswer(d, path, requestId, out.primary)
        const hr = out.hedge === undefined ? undefined : this.#onAnswer(h.workerId, path, hedgeId, out.hedge)
        if (out.winner === 'hedge' && hr?.kind === 'admitted') {
          hs.won++
          this.#commit(h.workerId)
          this.#step(
            'admit',
            h.workerId,
            undefined,
            `hedge won: the first request to ${d} had no answer after ${(cluster.now() - sentAt).toFixed(1)} ms`,
          )
          return hr
        }
        if (out.winner === 'primary' && pr?.kind === 'admitted') return pr
        if (pr !== undefined) return pr
        // The first D never answered: a timed-out try.
        this.#count('admission_timeouts')
        this.#step('admit', d, undefined, 'no answer (hedged)')
      } else {
        cluster.admissionLatency.record(
          out.type === 'admitTimeout' ? params.admissionTimeoutMs : Math.max(0, cluster.now() - sentAt),
        )
        const r = this.#onAnswer(d, path, requestId, out as AdmitAnswerOutcome)
        if (r !== undefined) return r
      }
      // A D that can no longer take the turn is left at once (the loop's check above says why).
      if (t < tries - 1 && this.#decodeObstacle(d, ownPause) === undefined) {
        const now = cluster.now()
        const until = now + Math.max(1, backoffDelayMs(t, this.#backoff, this.#ctx.random))
        yield* this.#wait(until, 'admission_retry')
      }
    }
    this.#reject(d, 'admission timeouts')
    return { kind: 'timeout' }
  }

  #admitRequest(requestId: string, path: AdmitPath, c: RouteCandidate): AdmitRequest {
    return {
      v: ADMIT_PROTOCOL_VERSION,
      requestId,
      sessionId: this.#turn.sessionId,
      path,
      promptTokens: this.#turn.promptTokens,
      appendTokens: c.appendTokens,
      expectedOutputTokens: this.#reserve,
      sloClass: this.#cls,
      leaseMs: this.#ctx.params.leaseMs,
    }
  }

  /**
   * One admission RPC's answer from `d`: applied to the cluster view, recorded, a rejection
   * counted; `undefined` for a timeout or an error (counted).
   */
  #onAnswer(d: string, path: AdmitPath, requestId: string, out: AdmitAnswerOutcome): AdmitResult | undefined {
    const cluster = this.#ctx.cluster
    if (out.type === 'admitResult') {
      const res = out.response
      if (cluster.has(d)) cluster.applyAdmission(d, res)
      if (res.retractedSessions !== undefined) this.#retracted(d, res.retractedSessions)
      this.#ctx.tuning?.tuner.transferQueue(res.transferQueueDepth)
      if (res.admitted) {
        this.#step(
          'admit',
          d,
          undefined,
          `admitted by ${path} (usage after ${res.tokenUsageAfter.toFixed(3)})`,
        )
        return { kind: 'admitted', leaseId: requestId, workerId: d }
      }
      this.#step(
        'admit',
        d,
        undefined,
        `rejected: ${res.reason}${res.recommendedPauseMs > 0 ? ` (pause ${res.recommendedPauseMs} ms)` : ''}`,
      )
      if (res.reason !== 'append_too_large') {
        this.#count('all_rejecting')
        this.#reject(d, res.reason)
      }
      return { kind: 'rejected', response: res }
    }
    this.#count('admission_timeouts')
    this.#step('admit', d, undefined, out.type === 'admitTimeout' ? 'timed out' : 'error')
    return undefined
  }

  /**
   * `d` retracts these hot sessions (memory pressure, `planRetraction`): each is excluded from
   * `d`, so that its next turn is placed on another D (an exclusion ends with the session's next
   * success, `resetOnSuccess`), and stops waiting for `d`'s pauses.
   */
  #retracted(d: string, sessions: readonly string[]): void {
    const cluster = this.#ctx.cluster
    if (!cluster.has(d)) return
    for (const s of sessions) {
      cluster.retractions.record(s, d)
      if (cluster.store.isExcluded(s, d)) continue
      cluster.store.exclude(s, d)
      this.#step('exclude', d, undefined, `${d} retracts session ${s} (memory pressure): its next turn moves`)
    }
  }

  *#sendFast(
    d: string,
    c: RouteCandidate,
    leaseId: string | undefined,
    path: 'fast' | 'local' | 'direct',
  ): Gen<DoneAction | undefined> {
    const { cluster } = this.#ctx
    const migratedFrom = this.#migrationSource(d)
    const attempt = this.#bumpAttempts()
    const blocks = this.#decodeBlocks()
    if (!this.#policy.usesAdmission)
      cluster.consumeAvailable(d, Math.max(0, Math.min(c.needTokens, cluster.available(d))))
    this.#addInflight(d, undefined, c.appendTokens, blocks)
    this.#step('sendFast', d, undefined, `${path}: D prefills ${c.appendTokens} tokens`)
    const out = yield {
      type: 'sendFast',
      turnId: this.turnId,
      workerId: d,
      path,
      leaseId,
      appendTokens: c.appendTokens,
      migratedFrom,
      attempt,
    }
    this.#undoInflight()
    this.#releaseCommitment()
    if (out.type === 'completed') return this.#succeed(d, undefined, path, out, migratedFrom)
    if (out.type !== 'failed') throw new RouterError('UNEXPECTED_OUTCOME', 'unreachable', out)
    this.#count('worker_failed')
    this.#sendFailures++
    this.#step('sendFast', d, undefined, `failed: ${out.cause}`)
    this.#reject(d, out.cause)
    return undefined
  }

  *#seed(p: string, d: string, c: RouteCandidate, leaseId: string | undefined): Gen<DoneAction | undefined> {
    const { cluster } = this.#ctx
    const migratedFrom = this.#migrationSource(d)
    const attempt = this.#bumpAttempts()
    if (!this.#policy.usesAdmission)
      cluster.consumeAvailable(d, Math.max(0, Math.min(c.needTokens, cluster.available(d))))
    this.#addInflight(d, p, this.#turn.promptTokens, this.#decodeBlocks())
    this.#step('seedViaP', d, p, `P ${p} prefills ${this.#turn.promptTokens} tokens → D ${d}`)
    const out = yield {
      type: 'seedViaP',
      turnId: this.turnId,
      prefillId: p,
      decodeId: d,
      leaseId,
      migratedFrom,
      attempt,
    }
    this.#undoInflight()
    this.#releaseCommitment()
    this.#releaseSeedSlot()
    // The seed ended: its slot is free to the turn first in line for `d` (the host may wake it).
    if (cluster.has(d)) cluster.seedWaiters.slotFreed(d)
    if (out.type === 'completed') {
      this.#ctx.tuning?.tuner.transferEnded(false)
      if (cluster.has(p) && cluster.has(d)) cluster.recordTransfer(p, d, true)
      return this.#succeed(d, p, 'seed', out, migratedFrom)
    }
    if (out.type !== 'failed') throw new RouterError('UNEXPECTED_OUTCOME', 'unreachable', out)
    this.#step('seedViaP', d, p, `failed: ${out.cause}`)
    this.#sendFailures++
    if (out.cause === 'transfer_timeout') this.#ctx.tuning?.tuner.transferEnded(true)
    if (out.cause === 'transfer_timeout' || out.cause === 'transfer_error') {
      if (cluster.has(p) && cluster.has(d)) cluster.recordTransfer(p, d, false)
      if (out.cause === 'transfer_error') this.#seedFailedOnP = p
      this.#count('transfer_failed')
    } else {
      this.#count('worker_failed')
      this.#reject(d, out.cause)
    }
    return undefined
  }

  *#wait(untilMs: number, reason: WaitReason): Gen<void> {
    this.#step('wait', undefined, undefined, `until ${untilMs.toFixed(1)} (${reason})`)
    yield { type: 'wait', turnId: this.turnId, untilMs, reason }
  }

  // ------------------------------------------------------------------ effects

  #succeed(
    d: string,
    p: string | undefined,
    path: 'fast' | 'local' | 'seed' | 'direct',
    out: { readonly committedTokens?: number; readonly outputTokens?: number },
    migratedFrom: string | undefined,
  ): DoneAction {
    const { cluster, params } = this.#ctx
    const store = cluster.store
    const s = this.#turn.sessionId
    const now = cluster.now()
    const committed = out.committedTokens ?? this.#turn.promptTokens + (out.outputTokens ?? 0)
    let verified = 0
    if (cluster.has(d)) {
      if (params.predictOnSuccess && this.#keys.length > 0) cluster.residency.recordStored(d, this.#keys)
      if (params.predictOnSuccess || cluster.publishesEvents(d)) verified = this.#keys.length
      store.setBinding(s, {
        workerId: d,
        committedTokens: committed,
        verifiedBlocks: verified,
        updatedAt: now,
      })
    }
    const tuning = this.#ctx.tuning
    if (tuning !== undefined) {
      const k = store.rejects(s, d)
      if (k > 0) tuning.tuner.recovered(k)
    }
    if (params.resetOnSuccess) store.resetSession(s)
    const retractedBy = cluster.retractions.get(s)
    if (retractedBy !== undefined) {
      // The session's D retracted it while this turn ran: its next turn moves (unless this one
      // already did).
      cluster.retractions.delete(s)
      if (retractedBy === d) store.exclude(s, d)
    }
    this.#policy.onSuccess?.(this.#ctx, this.#turn, d, p)
    this.#step(
      'done',
      d,
      p,
      `${path} on ${d}${migratedFrom === undefined ? '' : ` (migrated from ${migratedFrom})`}`,
    )
    cluster.seedWaiters.leave(this.turnId)
    this.#turnEnded()
    const r = this.record
    r.outcome = 'done'
    r.path = path
    r.workerId = d
    r.endedAt = now
    return { type: 'done', turnId: this.turnId, path, workerId: d, prefillId: p, migratedFrom, record: r }
  }

  #fail(
    cause: TurnFailureCause,
    code: 'WAIT_EXHAUSTED' | 'ATTEMPTS_EXHAUSTED' | 'TURN_FINISHED' | 'TOO_LARGE',
    largestD = 0,
  ): FailAction {
    const now = this.#ctx.cluster.now()
    const waited = now - this.record.startedAt
    const params = this.#ctx.params
    const what =
      code === 'WAIT_EXHAUSTED'
        ? `waited ${Math.round(waited)} ms (budget ${params.slo[this.#cls].maxWaitMs} ms for ${this.#cls})`
        : code === 'ATTEMPTS_EXHAUSTED'
          ? this.#sendFailures >= params.maxSendFailures
            ? `${this.#sendFailures} sends failed (retry budget maxSendFailures ${params.maxSendFailures}) in ${this.#attempts} attempts`
            : `used ${this.#attempts} attempts in ${this.#walks} walks`
          : code === 'TOO_LARGE'
            ? `it needs ${this.#turn.promptTokens + this.#reserve} tokens of KV (prompt ${this.#turn.promptTokens} + decode reserve ${this.#reserve}), more than the largest D worker holds (${largestD})`
            : 'aborted by the driver'
    const error = new RouterError(
      code,
      `turn ${this.turnId} of session ${this.#turn.sessionId} failed: ${cause}; ${what}`,
      {
        cause,
        turnId: this.turnId,
        sessionId: this.#turn.sessionId,
        waitedMs: waited,
        attempts: this.#attempts,
        walks: this.#walks,
      },
    )
    this.#step('fail', undefined, undefined, `${cause} (${code})`)
    this.#ctx.cluster.seedWaiters.leave(this.turnId)
    this.#turnEnded()
    const r = this.record
    r.outcome = 'fail'
    r.cause = cause
    r.endedAt = now
    return { type: 'fail', turnId: this.turnId, cause, error, record: r }
  }

  /** The self-tuner (`selfTune`) hears that a turn ended; at a window's end its changes apply. */
  #turnEnded(): void {
    const tuning = this.#ctx.tuning
    if (tuning === undefined) return
    const change = tuning.tuner.turnEnded(this.#ctx.cluster.admissionLatency)
    if (change !== undefined) tuning.apply(change)
  }

  #reject(d: string, why: string): void {
    const { cluster, params } = this.#ctx
    if (!cluster.has(d)) return
    const store = cluster.store
    const s = this.#turn.sessionId
    const n = store.addReject(s, d)
    this.#ctx.tuning?.tuner.rejected(n)
    this.#step('reject', d, undefined, `${why}: rejects[${s}][${d}] = ${n}`)
    if (n >= params.tauReject && !store.isExcluded(s, d)) {
      store.exclude(s, d)
      const bound = store.getBinding(s)?.workerId === d
      this.#step(
        'exclude',
        d,
        undefined,
        `excluded after ${n} rejections${bound ? '; the session migrates' : ''}`,
      )
    }
  }

  #migrationSource(d: string): string | undefined {
    // With claims, the store already binds the session to `d`: the source is the D it was bound
    // to before this turn's first granted claim.
    const from =
      this.#claims && this.#origin !== null
        ? this.#origin
        : this.#ctx.cluster.store.getBinding(this.#turn.sessionId)?.workerId
    return from !== undefined && from !== d ? from : undefined
  }

  #decodeBlocks(): number {
    return Math.ceil((this.#turn.promptTokens + this.#reserve) / this.#ctx.params.pageSize)
  }

  #addInflight(d: string, p: string | undefined, prefill: number, blocks: number): void {
    const store = this.#ctx.cluster.store
    this.#commit(d) // the D's turn (already counted since the admission request, with admission)
    store.addLoad(
      d,
      p === undefined ? { prefillTokens: prefill, decodeBlocks: blocks } : { decodeBlocks: blocks },
    )
    if (p !== undefined) store.addLoad(p, { turns: 1, prefillTokens: prefill })
    this.#inflight = { d, p, prefill, blocks }
  }

  /** Counts this turn toward `d`'s load (moving the count from another D if it was there). */
  #commit(d: string): void {
    if (this.#committed === d) return
    this.#releaseCommitment()
    this.#ctx.cluster.store.addLoad(d, ONE_TURN)
    this.#committed = d
  }

  #releaseCommitment(): void {
    const d = this.#committed
    if (d === undefined) return
    this.#committed = undefined
    // A removed worker's load was dropped with it.
    if (this.#ctx.cluster.has(d)) this.#ctx.cluster.store.addLoad(d, ONE_TURN_LESS)
  }

  #takeSeedSlot(d: string): void {
    this.#ctx.cluster.seedWaiters.leave(this.turnId)
    this.#ctx.cluster.store.addLoad(d, ONE_SEED)
    this.#seedSlot = d
  }

  #releaseSeedSlot(): void {
    const d = this.#seedSlot
    if (d === undefined) return
    if (this.#ctx.cluster.has(d)) this.#ctx.cluster.store.addLoad(d, ONE_SEED_LESS)
    this.#seedSlot = undefined
  }

  #undoInflight(): void {
    const f = this.#inflight
    if (f === undefined) return
    const { cluster } = this.#ctx
    const store = cluster.store
    // A removed worker's load was dropped with it.
    if (cluster.has(f.d)) {
      store.addLoad(
        f.d,
        f.p === undefined
          ? { prefillTokens: -f.prefill, decodeBlocks: -f.blocks }
          : { decodeBlocks: -f.blocks },
      )
    }
    if (f.p !== undefined && cluster.has(f.p)) store.addLoad(f.p, { turns: -1, prefillTokens: -f.prefill })
    this.#inflight = undefined
  }

  #bumpAttempts(): number {
    this.#attempts++
    this.record.attempts = this.#attempts
    return this.#attempts
  }

  #count(cause: TurnFailureCause): void {
    this.#tally.set(cause, (this.#tally.get(cause) ?? 0) + 1)
  }

  #dominantCause(): TurnFailureCause {
    let best: TurnFailureCause = 'no_decode_workers'
    let bestN = 0
    for (const c of CAUSE_PRIORITY) {
      const n = this.#tally.get(c) ?? 0
      if (n > bestN) {
        best = c
        bestN = n
      }
    }
    return best
  }

  #step(
    kind: DispatchStep['kind'],
    workerId: string | undefined,
    prefillId: string | undefined,
    detail: string,
  ): void {
    const steps = this.record.steps
    if (steps.length >= MAX_RECORDED_STEPS) steps.splice(MAX_RECORDED_STEPS / 2, 1)
    const at = this.#ctx.cluster.now()
    // One literal per shape: spreading optional fields took microseconds per step.
    steps.push(
      workerId === undefined
        ? prefillId === undefined
          ? { at, kind, detail }
          : { at, kind, prefillId, detail }
        : prefillId === undefined
          ? { at, kind, workerId, detail }
          : { at, kind, workerId, prefillId, detail },
    )
  }

  #recordRoute(decision: RouteDecision): void {
    const routes = this.record.routes
    if (routes.length >= MAX_RECORDED_ROUTES) routes[MAX_RECORDED_ROUTES - 1] = decision
    else routes.push(decision)
    const top = decision.candidates[0]
    this.#step(
      'route',
      top?.workerId,
      undefined,
      `walk ${this.#walks}: ${decision.candidates.length} candidates, ${decision.ineligible.length} left out${
        decision.exclusionsReleased ? ', exclusions released' : ''
      }`,
    )
  }

  #checkHedged(
    primaryId: string,
    hedgeId: string,
    o: Extract<DispatchOutcome, { type: 'hedgedAdmitResult' }>,
  ): void {
    const part = (x: unknown, want: string, which: string): AdmitAnswerOutcome | undefined => {
      if (x === undefined) return undefined
      const t = (x as { type?: unknown }).type
      if (t !== 'admitResult' && t !== 'admitTimeout' && t !== 'admitError') {
        throw new RouterError('INVALID_MESSAGE', `hedgedAdmitResult.${which} must be an admission answer`, o)
      }
      const a = x as AdmitAnswerOutcome
      if (a.type === 'admitResult') {
        const res = parseAdmitResponse(a.response)
        if (res.requestId !== want) {
          throw new RouterError(
            'UNEXPECTED_OUTCOME',
            `turn ${this.turnId}: ${which} answer for ${res.requestId}, expected ${want}`,
            o,
          )
        }
      }
      return a
    }
    const p = part(o.primary, primaryId, 'primary')
    const h = part(o.hedge, hedgeId, 'hedge')
    const w = o.winner
    if (w !== undefined && w !== 'primary' && w !== 'hedge') {
      throw new RouterError(
        'INVALID_MESSAGE',
        `hedgedAdmitResult.winner must be primary, hedge or undefined`,
        o,
      )
    }
    const won = w === 'primary' ? p : w === 'hedge' ? h : undefined
    if (w !== undefined && !(won?.type === 'admitResult' && won.response.admitted)) {
      throw new RouterError('INVALID_MESSAGE', `hedgedAdmitResult.winner ${w} did not admit`, o)
    }
  }

  #checkOutcome(action: DispatchAction, outcome: DispatchOutcome | undefined): void {
    if (typeof outcome !== 'object' || outcome === null) {
      throw new RouterError(
        'UNEXPECTED_OUTCOME',
        `turn ${this.turnId}: an outcome is required for ${action.type}`,
        outcome,
      )
    }
    const t = outcome.type
    const ok =
      action.type === 'admit'
        ? t === 'admitResult' ||
          t === 'admitTimeout' ||
          t === 'admitError' ||
          (t === 'hedgedAdmitResult' && action.hedge !== undefined)
        : action.type === 'sendFast' || action.type === 'seedViaP'
          ? t === 'completed' || t === 'failed'
          : action.type === 'wait'
            ? t === 'waited'
            : action.type === 'claim'
              ? t === 'claimResult'
              : false
    if (!ok) {
      throw new RouterError(
        'UNEXPECTED_OUTCOME',
        `turn ${this.turnId}: outcome ${String(t)} does not answer ${action.type}`,
        outcome,
      )
    }
    if (outcome.type === 'hedgedAdmitResult' && action.type === 'admit' && action.hedge !== undefined) {
      this.#checkHedged(action.request.requestId, action.hedge.request.requestId, outcome)
    }
    if (outcome.type === 'admitResult' && action.type === 'admit') {
      const res = parseAdmitResponse(outcome.response)
      if (res.requestId !== action.request.requestId) {
        throw new RouterError(
          'UNEXPECTED_OUTCOME',
          `turn ${this.turnId}: answer for ${res.requestId}, expected ${action.request.requestId}`,
          outcome,
        )
      }
    }
    if (outcome.type === 'claimResult') {
      if (typeof outcome.granted !== 'boolean') {
        throw new RouterError('INVALID_MESSAGE', 'claimResult.granted must be a boolean', outcome)
      }
      if (
        outcome.binding !== undefined &&
        (typeof outcome.binding !== 'object' ||
          outcome.binding === null ||
          typeof outcome.binding.workerId !== 'string')
      ) {
        throw new RouterError('INVALID_MESSAGE', 'claimResult.binding must be a session binding', outcome)
      }
    }
    if (outcome.type === 'completed') {
      if (outcome.committedTokens !== undefined) checkLength('committedTokens', outcome.committedTokens)
      if (outcome.outputTokens !== undefined) checkLength('outputTokens', outcome.outputTokens)
    }
    if (outcome.type === 'failed') {
      const causes = ['transfer_timeout', 'transfer_error', 'worker_error', 'worker_unreachable']
      if (!causes.includes(outcome.cause)) {
        throw new RouterError('INVALID_MESSAGE', `unknown failure cause ${String(outcome.cause)}`, outcome)
      }
    }
  }
}
