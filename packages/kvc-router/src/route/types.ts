import type { SloClass } from '../admission/contract.js'
import type { ClusterView } from '../cluster/clusterView.js'
import type { CostModel } from '../cost/costModel.js'
import type { SelfTuner, TunedParams } from '../tuning/selfTuner.js'
import type { BlockKeys } from '../residency/blockKeys.js'
import type { RouterParams } from './params.js'

/**
 * One turn of one session, as Route and Dispatch see it.
 *
 * @example
 * ```ts
 * import { BlockKeys, type TurnRequest } from '@kvc/kvc-router'
 * const turn: TurnRequest = {
 *   sessionId: 'agent-17',
 *   turnId: 'agent-17/t4',
 *   promptTokens: 42_100,
 *   blocks: BlockKeys.fromHashes([101n, 102n, 103n]), // the prompt's chained block hashes
 *   expectedOutputTokens: 512,
 *   sloClass: 'interactive',
 * }
 * ```
 */
export interface TurnRequest {
  readonly sessionId: string
  /** Used in action and request ids (default: `${sessionId}#${counter}`). */
  readonly turnId?: string
  /** Length of the whole prompt in tokens. */
  readonly promptTokens: number
  /**
   * Chained block hashes of the prompt's full pages (same hasher and page size as the engines).
   * Without them overlap is 0 and residency rests on the session binding alone.
   */
  readonly blocks?: BlockKeys | readonly bigint[]
  /** The request's `max_tokens` (the decode reserve). */
  readonly expectedOutputTokens?: number
  /** Default `interactive`. */
  readonly sloClass?: SloClass
  /**
   * Optional request text or token ids for policies that match on them (the SGLang cache-aware
   * baselines use an approximate tree over these; default: the block keys).
   */
  readonly matchKey?: ArrayLike<number>
}

/**
 * The key that placed a candidate above the next one (`last` for the last candidate; `policy`
 * when a baseline's own rule decided).
 *
 * @example
 * ```ts
 * import type { RankKey } from '@kvc/kvc-router'
 * const k: RankKey = 'capOk'
 * ```
 */
export type RankKey = 'fast' | 'capOk' | 'score' | 'load' | 'tieBreak' | 'policy' | 'last'

/**
 * One eligible D worker, with every quantity of the ranking key and why it sits where it does.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 100_000 }], now: () => 0 })
 * const [top] = router.route({ sessionId: 's', promptTokens: 1_000 }).candidates
 * top?.fast // true: 1,000 new tokens ≤ τ_append and they fit
 * ```
 */
export interface RouteCandidate {
  readonly workerId: string
  /** 0 = best. */
  readonly rank: number
  /** Key 1: prefix resident ∧ append ≤ τ_append ∧ capOk. */
  readonly fast: boolean
  /** Key 2: available tokens cover `needTokens`. */
  readonly capOk: boolean
  /** The session's committed prefix is resident on this worker (always true for an unbound session). */
  readonly prefixResident: boolean
  /** Overlap in blocks, in the router's overlap mode (part of the score). */
  readonly overlapBlocks: number
  /** Plain overlap in blocks (what residency uses). */
  readonly plainOverlapBlocks: number
  /** Load-floor bonus (unbound sessions only). */
  readonly bonus: number
  /** Key 3: overlap + bonus. */
  readonly score: number
  /**
   * Key 4 (lower is better): in-flight turns (counted from each turn's first claim or admission
   * request for the worker, not only once sent) + pending seeds.
   */
  readonly load: number
  /** Key 5 (lower is better): the session-rotated position of the worker. */
  readonly tieBreak: number
  /**
   * Prompt tokens believed resident on the worker: on its device, plus {@link RouteCandidate.loadBackTokens}.
   */
  readonly heldTokens: number
  /**
   * Tokens of `heldTokens` the session's own D holds below the device (host or disk tier) and
   * would load back rather than recompute, because that is estimated cheaper than a reseed; they
   * count in `needTokens` (they take device slots). 0 elsewhere.
   */
  readonly loadBackTokens: number
  /** `promptTokens − heldTokens`. */
  readonly appendTokens: number
  /** `appendTokens` + `loadBackTokens` + decode reserve. */
  readonly needTokens: number
  readonly availableTokens: number
  readonly decidedBy: RankKey
  /** Policy-specific detail for baselines (for example a Dynamo cost); undefined for Algorithm 1. */
  readonly note: string | undefined
}

/**
 * Why a D worker was left out of the ranking.
 *
 * @example
 * ```ts
 * import type { IneligibleReason } from '@kvc/kvc-router'
 * const r: IneligibleReason = 'paused'
 * ```
 */
export type IneligibleReason = 'unhealthy' | 'draining' | 'paused' | 'excluded'

/**
 * A D worker left out of the ranking and why (`until`: end of a pause).
 *
 * @example
 * ```ts
 * import type { IneligibleWorker } from '@kvc/kvc-router'
 * const w: IneligibleWorker = { workerId: 'd3', reason: 'paused', until: 2_500 }
 * ```
 */
export interface IneligibleWorker {
  readonly workerId: string
  readonly reason: IneligibleReason
  readonly until?: number
}

/**
 * How Dispatch uses a policy's ranking: `kvc` (Algorithm 3: fast path when `fast`, else seed via
 * a P), `seed` (every turn through a P, classic P/D), or `direct` (every turn straight to the
 * worker, which prefills itself: colocated data-parallel workers).
 *
 * @example
 * ```ts
 * import type { PathMode } from '@kvc/kvc-router'
 * const m: PathMode = 'direct'
 * ```
 */
export type PathMode = 'kvc' | 'seed' | 'direct'

/**
 * Route's answer: the eligible D workers ranked best first, each with its keys and the reason
 * for its rank, plus the workers left out.
 *
 * @example
 * ```ts
 * import { Router, renderRoute } from '@kvc/kvc-router'
 * const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 100_000 }], now: () => 0 })
 * const decision = router.route({ sessionId: 's', promptTokens: 1_000 })
 * console.log(renderRoute(decision))
 * ```
 */
export interface RouteDecision {
  readonly policy: string
  readonly pathMode: PathMode
  readonly sessionId: string
  readonly at: number
  readonly promptTokens: number
  /** Blocks in the prompt's key list. */
  readonly queryBlocks: number
  readonly boundWorker: string | undefined
  /** Mean load over the eligible D workers (the load-floor bonus's reference). */
  readonly meanLoad: number
  readonly candidates: readonly RouteCandidate[]
  readonly ineligible: readonly IneligibleWorker[]
  /** Every eligible D was excluded for the session and its exclusions were released. */
  readonly exclusionsReleased: boolean
}

/**
 * What a policy sees: the cluster, the parameters and the injected randomness.
 *
 * @example
 * ```ts
 * import { Router, type RouteContext } from '@kvc/kvc-router'
 * const router = new Router({ now: () => 0 })
 * const ctx: RouteContext = router.context
 * ```
 */
export interface RouteContext {
  readonly cluster: ClusterView
  readonly params: RouterParams
  readonly random: () => number
  /**
   * The cost model of the router's estimates (the adaptive path choice; load-back against reseed
   * with a host tier; default `DEFAULT_COST_MODEL`).
   */
  readonly cost?: CostModel
  /** The self-tuner Dispatch reports to (`selfTune`), and how its changes are applied. */
  readonly tuning?: {
    readonly tuner: SelfTuner
    apply(change: Partial<TunedParams>): void
  }
}

/**
 * A routing policy: Algorithm 1 ({@link kvcPolicy}) or a baseline, behind one interface so that
 * every comparison is one option.
 *
 * @example
 * ```ts
 * import { Router, roundRobinPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: roundRobinPolicy(), now: () => 0 })
 * router.policy.name // 'round-robin'
 * ```
 */
export interface RoutingPolicy {
  readonly name: string
  readonly pathMode: PathMode
  /** Whether Dispatch asks the D to admit before sending (Algorithm 2). */
  readonly usesAdmission: boolean
  /** Ranks the eligible D workers for a turn. */
  rank(ctx: RouteContext, turn: TurnRequest): RouteDecision
  /** Seed-path P choice (default: least loaded P with a healthy link to `decodeId`). */
  pickPrefill?(ctx: RouteContext, turn: TurnRequest, decodeId: string): string | undefined
  /** Called when a turn succeeds (for example to record affinity). */
  onSuccess?(ctx: RouteContext, turn: TurnRequest, decodeId: string, prefillId: string | undefined): void
}
