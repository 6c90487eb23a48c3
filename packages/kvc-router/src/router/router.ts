import type { KvEvent } from '@kvc/radix-cache'
import { type AdmitResponse, parseAdmitResponse } from '../admission/contract.js'
import { ClusterView, type QueueReport, type WorkerSpec } from '../cluster/clusterView.js'
import { type CostModel, DEFAULT_COST_MODEL } from '../cost/costModel.js'
import { SelfTuner, type TunedParams } from '../tuning/selfTuner.js'
import type { ClusterStateStore } from '../cluster/stateStore.js'
import { TurnDispatch } from '../dispatch/turnDispatch.js'
import { RouterError, checkOption, describeValue } from '../errors/routerError.js'
import type { IngestStatus, ResidencyIndexOptions } from '../residency/residencyIndex.js'
import {
  type RouterParams,
  type RouterParamsInput,
  checkRouterParam,
  resolveRouterParams,
} from '../route/params.js'
import { kvcPolicy, validateTurn } from '../route/route.js'
import type { RouteContext, RouteDecision, RoutingPolicy, TurnRequest } from '../route/types.js'

/** Parameters other parts of the router copied at construction. */
const FIXED_PARAMS = new Set([
  'pageSize',
  'thetaShared',
  'linkFailureThreshold',
  'linkCooldownMs',
  'selfTune',
])

/**
 * Options of {@link Router}.
 *
 * @example
 * ```ts
 * import { Router, type RouterOptions } from '@kvc/kvc-router'
 * let t = 0
 * const opts: RouterOptions = { now: () => t, random: () => 0.5, params: { tauReject: 2 } }
 * new Router(opts)
 * ```
 */
export interface RouterOptions {
  /** Workers to register at once (more with `cluster.addWorker`). */
  readonly workers?: readonly WorkerSpec[]
  readonly params?: RouterParamsInput
  /** Default {@link kvcPolicy} (Algorithm 1). */
  readonly policy?: RoutingPolicy
  /** Clock in ms (default `Date.now`; inject one for determinism). */
  readonly now?: () => number
  /** Uniform in `[0, 1)` (default `Math.random`; inject one for determinism). */
  readonly random?: () => number
  /** The shared state (default in-process). */
  readonly store?: ClusterStateStore
  /**
   * The cost model of the router's estimates (default `DEFAULT_COST_MODEL`): the adaptive path
   * choice (`pathChoice: 'adaptive'`), and, with a host tier, whether the session's own D should
   * load back what it holds there rather than reseed.
   */
  readonly costModel?: CostModel
  /** Where the cluster view reads workers' queues on demand (`ClusterViewOptions.queueSource`). */
  readonly queueSource?: (workerId: string) => QueueReport | undefined
  /**
   * Residency-index options other than `thetaShared` (taken from `params`). The router has one
   * page size, `params.pageSize`: a `residency.pageSize` (which makes the index check the block
   * size of `BlockStored` events and answer token queries) must equal it, and gives it when
   * `params` does not.
   */
  readonly residency?: Omit<ResidencyIndexOptions, 'thetaShared'>
}

/**
 * The router's parameters with the page size given once: `params.pageSize`, else
 * `residency.pageSize`; both given and different is an error.
 */
function pageSizeFrom(options: RouterOptions): RouterParamsInput | undefined {
  const input = options.params
  const rp = options.residency?.pageSize
  if (rp === undefined) return input
  checkRouterParam('pageSize', rp, 'residency.')
  const pp = input?.pageSize
  if (pp === undefined) return { ...input, pageSize: rp }
  if (pp !== rp) {
    throw new RouterError(
      'INVALID_OPTION',
      `residency.pageSize ${describeValue(rp)} disagrees with params.pageSize ${describeValue(pp)}: the router has one page size (give it in params)`,
      { paramsPageSize: pp, residencyPageSize: rp },
    )
  }
  return input
}

/**
 * The decision core a proxy or a simulator embeds: a {@link ClusterView} (workers, residency
 * index, shared state), the parameters, and a routing policy; `route` ranks the D workers for a
 * turn (Algorithm 1) and `dispatch` returns the turn's state machine (Algorithm 3). Admission
 * (Algorithm 2) runs on the D side: see `admit`.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * let now = 0
 * const router = new Router({
 *   now: () => now,
 *   random: () => 0.5,
 *   workers: [
 *     { id: 'p0', role: 'prefill', capacityTokens: 500_000 },
 *     { id: 'd0', role: 'decode', capacityTokens: 400_000 },
 *     { id: 'd1', role: 'decode', capacityTokens: 400_000 },
 *   ],
 * })
 * router.ingest('d0', { type: 'BlockStored', eventId: 0, blockHashes: [1n, 2n], parentBlockHash: null, tokenIds: [], blockSize: 16, extraKey: null })
 * const decision = router.route({ sessionId: 's1', promptTokens: 40, blocks: [1n, 2n] })
 * decision.candidates[0]?.workerId // 'd0': it holds the prompt's blocks
 * ```
 */
export class Router {
  readonly cluster: ClusterView
  readonly policy: RoutingPolicy
  /** What policies see (cluster, params, randomness). */
  readonly context: RouteContext
  /** The self-tuner (`selfTune`), else undefined. */
  readonly tuner: SelfTuner | undefined
  #turnCounter = 0

  /**
   * @throws RouterError `INVALID_OPTION`: a bad parameter, or a `residency.pageSize` that
   * disagrees with `params.pageSize`.
   */
  constructor(options: RouterOptions = {}) {
    const params = resolveRouterParams(pageSizeFrom(options))
    const now = options.now ?? Date.now
    const random = options.random ?? Math.random
    checkOption(typeof now === 'function', `now must be a function, got ${describeValue(now)}`, now)
    checkOption(
      typeof random === 'function',
      `random must be a function, got ${describeValue(random)}`,
      random,
    )
    const policy = options.policy ?? kvcPolicy()
    checkOption(
      typeof policy?.rank === 'function' && typeof policy.name === 'string',
      `policy must be a RoutingPolicy (a name and a rank function), got ${describeValue(policy)}`,
      policy,
    )
    this.policy = policy
    this.cluster = new ClusterView({
      now,
      ...(options.store === undefined ? {} : { store: options.store }),
      ...(options.queueSource === undefined ? {} : { queueSource: options.queueSource }),
      residency: { ...options.residency, thetaShared: params.thetaShared },
      linkFailureThreshold: params.linkFailureThreshold,
      linkCooldownMs: params.linkCooldownMs,
    })
    const cost = options.costModel ?? DEFAULT_COST_MODEL
    checkOption(
      typeof cost === 'object' && cost !== null && typeof cost.prefillTokensPerS === 'number',
      `costModel must be a CostModel, got ${describeValue(cost)}`,
      cost,
    )
    this.tuner = params.selfTune
      ? new SelfTuner({
          tauReject: params.tauReject,
          pendingSeedsPerD: params.pendingSeedsPerD,
          backoffBaseMs: params.backoffBaseMs,
        })
      : undefined
    const tuner = this.tuner
    this.context = {
      cluster: this.cluster,
      params,
      random,
      cost,
      ...(tuner === undefined
        ? {}
        : {
            tuning: {
              tuner,
              apply: (change: Partial<TunedParams>) => {
                const b = change.backoffBaseMs
                this.updateParams(
                  b === undefined
                    ? change
                    : { ...change, backoffBaseMs: Math.min(b, this.params.backoffCapMs) },
                )
              },
            },
          }),
    }
    for (const w of options.workers ?? []) this.cluster.addWorker(w)
  }

  /**
   * Ranks the eligible D workers for a turn with the router's policy. Reads the shared state;
   * changes it only to release a session's exclusions when every eligible D excludes it.
   *
   * @throws RouterError on an invalid turn (nothing changes).
   *
   * @example
   * ```ts
   * import { Router, renderRoute } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0, workers: [{ id: 'd0', role: 'decode', capacityTokens: 10_000 }] })
   * console.log(renderRoute(router.route({ sessionId: 's', promptTokens: 900 })))
   * ```
   */
  route(turn: TurnRequest): RouteDecision {
    validateTurn(turn)
    return this.policy.rank(this.context, turn)
  }

  /**
   * Starts Algorithm 3 for a turn: drive the returned state machine with `next(outcome)` until it
   * returns `done` or `fail` (`TurnDriver` runs that loop over a host's effects). Several turns
   * may be in flight at once; they share the cluster view.
   *
   * @throws RouterError on an invalid turn (nothing changes).
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0, random: () => 0 })
   * const turn = router.dispatch({ sessionId: 's', promptTokens: 100, sloClass: 'batch' })
   * turn.turnId // 's#1'
   * ```
   */
  dispatch(turn: TurnRequest): TurnDispatch {
    validateTurn(turn)
    const id = turn.turnId ?? `${turn.sessionId}#${++this.#turnCounter}`
    return new TurnDispatch(this.context, this.policy, turn, id)
  }

  /**
   * The parameters in force (they change only through {@link Router.updateParams}).
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * new Router({ now: () => 0 }).params.tauReject // 3
   * ```
   */
  get params(): RouterParams {
    return this.context.params
  }

  /**
   * Changes Dispatch's parameters from now on (turns already running see the new values at their
   * next decision): the ones the self-tuner moves and the other per-turn ones. Parameters other
   * parts of the router copied when it was built (`pageSize`, `thetaShared`, link health,
   * `selfTune`) cannot change this way.
   *
   * @throws RouterError `INVALID_OPTION` naming a parameter that cannot change, or a bad value
   * (nothing changes).
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0 })
   * router.updateParams({ tauReject: 5, pendingSeedsPerD: 8 })
   * router.params.tauReject // 5
   * ```
   */
  updateParams(update: RouterParamsInput): void {
    checkOption(
      typeof update === 'object' && update !== null,
      `updateParams takes an object, got ${describeValue(update)}`,
      update,
    )
    for (const k of Object.keys(update)) {
      checkOption(
        !FIXED_PARAMS.has(k),
        `${k} cannot change after the router is built (other parts of the router copied it)`,
        k,
      )
    }
    const cur = this.context.params
    const next = resolveRouterParams({ ...cur, ...update, slo: { ...cur.slo, ...update.slo } })
    ;(this.context as { params: RouterParams }).params = next
  }

  /**
   * Feeds a worker's KV event to the residency index (a P's to the P workers' index, which the
   * KV-aware baselines' P choice reads).
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_MESSAGE`, `EVENT_OUT_OF_ORDER`.
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0, workers: [{ id: 'd0', role: 'decode', capacityTokens: 10 }] })
   * router.ingest('d0', { type: 'AllBlocksCleared', eventId: 0 }) // 'applied'
   * ```
   */
  ingest(workerId: string, event: KvEvent): IngestStatus {
    return this.cluster.ingest(workerId, event)
  }

  /**
   * Applies a D's answer to an admission on arrival that admitted the turn
   * (`SendFastAction.admission`, `admitOnArrival`): the D sends it with the first bytes of its
   * response (the headers), while it prefills. Call it as soon as it arrives: the router's view
   * of the D (available memory, queues), its pause hint and the sessions it retracts take effect
   * for the next turns, as an RPC's answer would. (A refusal answers the send itself, `admitResult`.)
   *
   * @throws RouterError `INVALID_MESSAGE` (a malformed answer), `UNKNOWN_WORKER`, `WRONG_ROLE`.
   *
   * @example
   * ```ts
   * import { Router } from '@kvc/kvc-router'
   * const router = new Router({ now: () => 0, workers: [{ id: 'd0', role: 'decode', capacityTokens: 100_000 }] })
   * router.observeAdmission('d0', { requestId: 't1/a1', admitted: true, reason: 'ok', residentTokens: 0, needTokens: 2_000,
   *   tokenUsageAfter: 0.93, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 600 })
   * router.cluster.isPaused('d0') // true: the answer's pause hint holds for the next turns
   * ```
   */
  observeAdmission(workerId: string, response: AdmitResponse): void {
    const res = parseAdmitResponse(response)
    const cluster = this.cluster
    if (cluster.role(workerId) !== 'decode') {
      throw new RouterError('WRONG_ROLE', `${workerId} is not a decode worker`, workerId)
    }
    cluster.applyAdmission(workerId, res)
    this.context.tuning?.tuner.transferQueue(res.transferQueueDepth)
    for (const s of res.retractedSessions ?? []) {
      cluster.retractions.record(s, workerId)
      if (!cluster.store.isExcluded(s, workerId)) cluster.store.exclude(s, workerId)
    }
  }
}
