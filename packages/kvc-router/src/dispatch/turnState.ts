/**
 * The state of one turn's dispatch, shared by the modules of the dispatch state machine
 * (`walk.ts` and the modules it calls). Internal: the public face is `TurnDispatch`.
 */
import type { SloClass } from '../admission/contract.js'
import type { BackoffPolicy } from '../backoff/backoff.js'
import type { SessionBinding } from '../cluster/stateStore.js'
import type { PathParams } from '../path/pathChoice.js'
import { BlockKeys } from '../residency/blockKeys.js'
import type { RouterParams } from '../route/params.js'
import { turnKeys } from '../route/route.js'
import type { RouteCandidate, RouteContext, RoutingPolicy, TurnRequest } from '../route/types.js'
import type { DispatchAction, DispatchOutcome, DispatchRecord, TurnFailureCause } from './types.js'

/** A step of the dispatch state machine: yields actions, receives their outcomes. */
export type Gen<T> = Generator<DispatchAction, T, DispatchOutcome>

/** Seed-line tier of each SLO class: a turn yields pending-seed slots only to its tier or above. */
export const SLO_TIER: Readonly<Record<SloClass, number>> = { interactive: 0, batch: 1, background: 2 }

/** Dispatch's backoff: full jitter over the router's `backoffBaseMs` / `backoffCapMs`. */
function backoffPolicyOf(params: RouterParams): BackoffPolicy {
  return { baseDelayMs: params.backoffBaseMs, maxDelayMs: params.backoffCapMs, jitter: 'full' }
}

/** One entry of a walk over Route's ranking (`ownPause`: a deferred `append_too_large` fallback). */
export interface WalkEntry {
  readonly c: RouteCandidate
  readonly ownPause: number | undefined
}

/** The mutable state of one turn's dispatch (one per `TurnDispatch`). */
export class TurnState {
  /** The turn's id (used in request ids). */
  readonly turnId: string
  /** The history of this turn. */
  readonly record: DispatchRecord
  readonly ctx: RouteContext
  readonly policy: RoutingPolicy
  readonly turn: TurnRequest
  readonly keys: BlockKeys
  readonly cls: SloClass
  readonly reserve: number
  readonly deadline: number
  /** Waits between walks and admission tries: full jitter over the router's backoff parameters. */
  readonly backoff: BackoffPolicy
  attempts = 0
  walks = 0
  /** Sends and seeds of this turn that failed (its retry budget: `maxSendFailures`). */
  sendFailures = 0
  /** Obstacles met during the whole turn; the most frequent one names a failure. */
  readonly tally = new Map<TurnFailureCause, number>()
  /**
   * Loads added for an in-flight send (the D's prefill tokens and decode blocks, the P's turn and
   * prefill tokens), undone by its outcome or by `abort`. The D's turn is the commitment below.
   */
  inflight: { d: string; p: string | undefined; prefill: number; blocks: number } | undefined
  /**
   * The D this turn counts one in-flight turn toward (`turns` in its load): from the first claim or
   * admission request for it (or the send, for policies without admission) until the turn moves on
   * from it, ends or is aborted. So turns routed before any of them is sent see each other's load.
   */
  committed: string | undefined
  /** The D whose pending-seed slot this turn holds (taken before its admission RPC). */
  seedSlot: string | undefined
  /** The D workers whose pending-seed budget turned this turn away during the current walk. */
  budgetWaits: string[] = []
  /** The P of this turn's last seed when it failed on the P side (`transfer_error`). */
  seedFailedOnP: string | undefined
  /** A P the seed path must not pick (the one that just failed, during the retry through another). */
  avoidP: string | undefined
  /**
   * The session's resident tokens on each D that refused this turn's fast path as
   * `append_too_large` (what that D said it holds: less than the binding claims). The adaptive
   * wait for the session's own D prices a stay there with it, and pause or evict does not
   * send a turn to it as an append.
   */
  appendRefused: Map<string, number> | undefined
  /** Whether the store confirms claims (several replicas). */
  readonly claims: boolean
  /** The session's binding as this turn knows it (read at each walk, updated by granted claims). */
  known: SessionBinding | undefined
  /** The bound D before this turn's first granted binding claim (`null`: no claim granted yet). */
  origin: string | undefined | null = null
  /** The D that won a binding claim this turn lost: tried first in the next walk. */
  follow: string | undefined
  /** Set by a lost binding claim: end this walk and walk again at once. */
  reroute = false
  /** The adaptive path choice's parameters (built on first use). */
  pathParams: PathParams | undefined
  /** The current walk and the position in it (for hedged admission's second D). */
  walkList: readonly WalkEntry[] = []
  walkPos = 0
  /** The D whose pending-seed slot this turn holds for a hedged admission's second RPC. */
  hedgeSlot: string | undefined

  constructor(ctx: RouteContext, policy: RoutingPolicy, turn: TurnRequest, turnId: string) {
    this.ctx = ctx
    this.policy = policy
    this.turnId = turnId
    this.keys = turnKeys(turn)
    // Convert a bigint[] prompt to keys once per turn, not once per walk.
    this.turn =
      turn.blocks === undefined || turn.blocks instanceof BlockKeys ? turn : { ...turn, blocks: this.keys }
    this.cls = turn.sloClass ?? 'interactive'
    this.claims = ctx.cluster.store.confirmsClaims === true
    ctx.cluster.retractions.turnStarted(turn.sessionId)
    this.reserve = turn.expectedOutputTokens ?? ctx.params.defaultDecodeReserve
    const now = ctx.cluster.now()
    this.deadline = now + ctx.params.slo[this.cls].maxWaitMs
    this.backoff = backoffPolicyOf(ctx.params)
    this.record = {
      turnId,
      sessionId: turn.sessionId,
      sloClass: this.cls,
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
  }
}
