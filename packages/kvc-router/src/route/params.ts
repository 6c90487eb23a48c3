import type { SloClass } from '../admission/contract.js'
import { checkOption, describeValue } from '../errors/routerError.js'
import type { OverlapMode } from '../residency/residencyIndex.js'

/**
 * How a turn that cannot take the fast path is prefilled: `remote` (always seeded through a P) or
 * `adaptive` (local or remote seed per turn, by estimated completion time).
 *
 * @example
 * ```ts
 * import type { PathChoiceMode } from '@kvc/kvc-router'
 * const m: PathChoiceMode = 'adaptive'
 * ```
 */
export type PathChoiceMode = 'remote' | 'adaptive'

/**
 * What a turn does when its session's own D is paused: `wait` the pause out (the prototype's
 * replayer), or weigh it (`cost`): go now and let the D make room when recomputing what that
 * evicts costs less than the wait (`chooseEvictOrWait`).
 *
 * @example
 * ```ts
 * import type { PauseChoiceMode } from '@kvc/kvc-router'
 * const m: PauseChoiceMode = 'cost'
 * ```
 */
export type PauseChoiceMode = 'wait' | 'cost'

/**
 * Per-SLO-class budgets on the router side (the D side has `AdmitOptions.usageCeiling`).
 *
 * @example
 * ```ts
 * import type { SloBudget } from '@kvc/kvc-router'
 * const batch: SloBudget = { maxWaitMs: 60_000, seedShare: 0.75 }
 * ```
 */
export interface SloBudget {
  /** Longest a turn of this class waits (paused / rejecting D workers) before failing. */
  readonly maxWaitMs: number
  /** Fraction of a D's pending-seed budget this class may use (at least one seed). */
  readonly seedShare: number
}

/**
 * Every tunable of Route and Dispatch. Defaults in {@link DEFAULT_ROUTER_PARAMS}; sources in the
 * package README.
 *
 * @example
 * ```ts
 * import { DEFAULT_ROUTER_PARAMS, type RouterParams } from '@kvc/kvc-router'
 * const p: RouterParams = { ...DEFAULT_ROUTER_PARAMS, tauReject: 5 }
 * ```
 */
export interface RouterParams {
  /** Tokens per KV block (page): converts matched blocks to tokens. */
  readonly pageSize: number
  /** `τ_append`: the largest append a D prefills itself (fast path). */
  readonly tauAppend: number
  /**
   * The session's own D keeps the fast path when part of the session's committed tail was
   * evicted from it, as long as the lost tail plus the append fits `τ_append`: the D re-prefills
   * the lost pages itself instead of the turn being reseeded through a P (block-level retention's
   * point). `false` requires the whole committed prefix to be resident (the spec's literal key 1).
   */
  readonly refillLostTail: boolean
  /** `τ_reject`: rejections of a session by a D before the D is excluded for it. */
  readonly tauReject: number
  /** `K`: load-floor bonus for unbound sessions, in blocks. */
  readonly loadFloorK: number
  /** `θ_shared`: boilerplate threshold of exclusive overlap (fraction of D workers). */
  readonly thetaShared: number
  /** Overlap counted in the score. */
  readonly overlapMode: OverlapMode
  /** Pending seeds per D (seeds admitted and not finished). */
  readonly pendingSeedsPerD: number
  /**
   * How a turn that cannot take the fast path is prefilled (`docs/design/algorithms.md#path-choice`):
   * `remote` (every such turn is seeded through a P, Algorithm 3 as first specified) or `adaptive`
   * (per turn, the D Route picked prefills it itself, a local seed, when the estimated completion
   * time says so; and a turn whose session's own D is paused waits for it when that is cheaper
   * than moving).
   */
  readonly pathChoice: PathChoiceMode
  /**
   * A turn whose session's own D is paused and which would take the fast path there
   * (`docs/design/algorithms.md#pause-or-evict`): `wait` (default) honours the pause; `cost` sends
   * it now when recomputing what the D would evict to make room costs less than the wait
   * (`chooseEvictOrWait`); the D's admission still decides.
   */
  readonly pauseChoice: PauseChoiceMode
  /**
   * `remote` path choice: a turn whose session's own D is paused (its pause hint), while the best
   * other D would re-prefill the session's history, waits for its own D when waiting, loading the
   * host-resident part back and prefilling the rest there is estimated no slower than migrating
   * (`chooseWaitOrMigrate`; `docs/design/host-tier.md#9-wait-for-the-own-d-or-migrate`). Only
   * while that D has not refused the session since its last success, and the pause ends before
   * the turn's deadline. Off by default. (The `adaptive` path choice always weighs waiting, by
   * its own estimate.)
   */
  readonly waitForOwnDecode: boolean
  /**
   * `adaptive` path choice: what one second of delay to one of the D's running decodes is worth
   * in seconds of the turn's time to first token (1: every request's latency counts the same).
   */
  readonly stallWeight: number
  /**
   * Hedged admission (`docs/design/algorithms.md#hedged-admission`): a seed-path admission RPC
   * unanswered after the `hedgeQuantile` of recent admission latencies is sent to the next D of
   * the ranking as well; the first admitting answer wins and the other lease is released.
   */
  readonly hedgeAdmissions: boolean
  /** The latency quantile after which a hedge goes out (0.95). */
  readonly hedgeQuantile: number
  /** The hedge delay's floor, ms (also its value before any latency was observed). */
  readonly hedgeMinDelayMs: number
  /**
   * Online self-tuning of `tauReject`, `pendingSeedsPerD` and `backoffBaseMs` from the traffic the
   * router observes, within documented bounds (`docs/design/algorithms.md#self-tuning`).
   */
  readonly selfTune: boolean
  /**
   * Admission on arrival (`docs/design/algorithms.md#admission-on-arrival`): a fast-path turn
   * whose D the router's view shows well below its pause threshold (`admitOnArrival`) is sent at
   * once with its admission request (`SendFastAction.admission`) instead of asking first; the D
   * decides when it arrives and a refusal comes back as the admission answer. Off by default: the
   * driver and the D must support it.
   */
  readonly admitOnArrival: boolean
  /** A negative admission answer younger than this is reused instead of a new RPC. */
  readonly admissionStalenessMs: number
  /** Timeout of one admission RPC (the driver enforces it and reports `admitTimeout`). */
  readonly admissionTimeoutMs: number
  /** Tries per admission RPC. */
  readonly admissionTries: number
  /** Backoff base: try `n` waits `random() × min(backoffCapMs, backoffBaseMs × 2^n)` (full jitter). */
  readonly backoffBaseMs: number
  readonly backoffCapMs: number
  /** Reservation lease requested from the D. */
  readonly leaseMs: number
  /** Decode reserve when a turn gives no `expectedOutputTokens` (its `max_tokens`). */
  readonly defaultDecodeReserve: number
  /** Consecutive failed transfers after which a P→D link is avoided. */
  readonly linkFailureThreshold: number
  /** How long an unhealthy link is avoided before one probe is allowed. */
  readonly linkCooldownMs: number
  /** Admission RPCs + sends per turn before it fails with `ATTEMPTS_EXHAUSTED`. */
  readonly maxAttempts: number
  /** Walks over the ranking per turn (each followed by a wait) before it fails. */
  readonly maxWalks: number
  /**
   * The turn's retry budget for failed sends: after this many sends or seeds of one turn failed
   * (worker errors, unreachable workers, failed transfers) it fails instead of trying further D
   * workers. A failure that repeats on every worker (a request no worker can serve) then costs a
   * few attempts, not `maxAttempts`.
   */
  readonly maxSendFailures: number
  /** Reset-on-success (true) or v1's permanent exclusions (false, for comparison only). */
  readonly resetOnSuccess: boolean
  /** When every eligible D is excluded for a session, clear its exclusions instead of waiting. */
  readonly releaseWhenAllExcluded: boolean
  /** Record a successful turn's prompt blocks on its D in the residency index (covers event lag). */
  readonly predictOnSuccess: boolean
  readonly slo: Readonly<Record<SloClass, SloBudget>>
}

/**
 * The defaults of `docs/design/algorithms.md#router-defaults` (every parameter in the README's table).
 *
 * @example
 * ```ts
 * import { DEFAULT_ROUTER_PARAMS } from '@kvc/kvc-router'
 * DEFAULT_ROUTER_PARAMS.tauAppend // 8192
 * ```
 */
export const DEFAULT_ROUTER_PARAMS: RouterParams = Object.freeze({
  pageSize: 16,
  tauAppend: 8192,
  refillLostTail: true,
  tauReject: 3,
  loadFloorK: 200,
  thetaShared: 0.5,
  overlapMode: 'exclusive',
  pendingSeedsPerD: 4,
  pathChoice: 'remote',
  pauseChoice: 'wait',
  waitForOwnDecode: false,
  stallWeight: 1,
  hedgeAdmissions: false,
  hedgeQuantile: 0.95,
  hedgeMinDelayMs: 5,
  selfTune: false,
  admitOnArrival: false,
  admissionStalenessMs: 50,
  admissionTimeoutMs: 500,
  admissionTries: 3,
  backoffBaseMs: 50,
  backoffCapMs: 2000,
  leaseMs: 5000,
  defaultDecodeReserve: 512,
  linkFailureThreshold: 2,
  linkCooldownMs: 30_000,
  maxAttempts: 64,
  maxWalks: 256,
  maxSendFailures: 8,
  resetOnSuccess: true,
  releaseWhenAllExcluded: true,
  predictOnSuccess: true,
  slo: Object.freeze({
    interactive: Object.freeze({ maxWaitMs: 30_000, seedShare: 1 }),
    batch: Object.freeze({ maxWaitMs: 60_000, seedShare: 0.75 }),
    background: Object.freeze({ maxWaitMs: 120_000, seedShare: 0.5 }),
  }),
})

/**
 * Overrides for {@link RouterParams}; `slo` entries are merged per class.
 *
 * @example
 * ```ts
 * import type { RouterParamsInput } from '@kvc/kvc-router'
 * const p: RouterParamsInput = { tauReject: 2, slo: { batch: { maxWaitMs: 10_000, seedShare: 0.5 } } }
 * ```
 */
export type RouterParamsInput = Partial<Omit<RouterParams, 'slo'>> & {
  readonly slo?: Partial<Record<SloClass, SloBudget>>
}

const isInt = (x: unknown, min: number): boolean => typeof x === 'number' && Number.isInteger(x) && x >= min
const isNum = (x: unknown, min: number): boolean => typeof x === 'number' && Number.isFinite(x) && x >= min
const isBool = (x: unknown): boolean => typeof x === 'boolean'

/**
 * The largest page size the router accepts, in tokens. Engines page KV in 1 to a few hundred
 * tokens (SGLang's `--page-size`, vLLM's block size); a larger page makes prefix reuse too coarse
 * for agentic appends to hit.
 *
 * @example
 * ```ts
 * import { MAX_PAGE_SIZE } from '@kvc/kvc-router'
 * MAX_PAGE_SIZE // 4096
 * ```
 */
export const MAX_PAGE_SIZE = 4096

type ScalarParam = Exclude<keyof RouterParams, 'slo'>

/**
 * The one rule of each router parameter: what it must be (for the error message) and the check.
 * `resolveRouterParams` applies it to every field, and the parts of the router that take a copy
 * of a parameter as an option of their own (the residency index's `pageSize` and `thetaShared`,
 * the cluster view's link health, `BlockKeys.fromTokens`' page size) apply the same rule.
 */
const RULES: {
  readonly [K in ScalarParam]: {
    readonly must: string
    readonly ok: (v: unknown, p: RouterParams) => boolean
  }
} = {
  pageSize: {
    must: `an integer in [1, ${MAX_PAGE_SIZE}]`,
    ok: (v) => isInt(v, 1) && (v as number) <= MAX_PAGE_SIZE,
  },
  tauAppend: { must: 'an integer >= 0', ok: (v) => isInt(v, 0) },
  refillLostTail: { must: 'a boolean', ok: isBool },
  tauReject: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  loadFloorK: { must: 'a number >= 0', ok: (v) => isNum(v, 0) },
  thetaShared: {
    must: 'a number in (0, 1]',
    ok: (v) => isNum(v, 0) && (v as number) > 0 && (v as number) <= 1,
  },
  overlapMode: {
    must: "'plain', 'exclusive' or 'sole'",
    ok: (v) => v === 'plain' || v === 'exclusive' || v === 'sole',
  },
  pendingSeedsPerD: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  pathChoice: { must: "'remote' or 'adaptive'", ok: (v) => v === 'remote' || v === 'adaptive' },
  pauseChoice: { must: "'wait' or 'cost'", ok: (v) => v === 'wait' || v === 'cost' },
  waitForOwnDecode: { must: 'a boolean', ok: isBool },
  stallWeight: { must: 'a number >= 0', ok: (v) => isNum(v, 0) },
  hedgeAdmissions: { must: 'a boolean', ok: isBool },
  hedgeQuantile: {
    must: 'a number in (0, 1)',
    ok: (v) => isNum(v, 0) && (v as number) > 0 && (v as number) < 1,
  },
  hedgeMinDelayMs: { must: 'a number >= 0', ok: (v) => isNum(v, 0) },
  selfTune: { must: 'a boolean', ok: isBool },
  admitOnArrival: { must: 'a boolean', ok: isBool },
  admissionStalenessMs: { must: 'a number >= 0', ok: (v) => isNum(v, 0) },
  admissionTimeoutMs: { must: 'a number >= 1', ok: (v) => isNum(v, 1) },
  admissionTries: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  backoffBaseMs: { must: 'a number >= 1', ok: (v) => isNum(v, 1) },
  backoffCapMs: { must: 'a number >= backoffBaseMs', ok: (v, p) => isNum(v, p.backoffBaseMs) },
  leaseMs: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  defaultDecodeReserve: { must: 'an integer >= 0', ok: (v) => isInt(v, 0) },
  linkFailureThreshold: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  linkCooldownMs: { must: 'a number >= 0', ok: (v) => isNum(v, 0) },
  maxAttempts: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  maxWalks: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  maxSendFailures: { must: 'an integer >= 1', ok: (v) => isInt(v, 1) },
  resetOnSuccess: { must: 'a boolean', ok: isBool },
  releaseWhenAllExcluded: { must: 'a boolean', ok: isBool },
  predictOnSuccess: { must: 'a boolean', ok: isBool },
}

/**
 * @internal Throws `INVALID_OPTION` unless `value` satisfies router parameter `name`'s rule
 * (`where` prefixes the message, e.g. `residency.` for the residency index's copy). Returns the
 * value.
 */
export function checkRouterParam<K extends ScalarParam>(
  name: K,
  value: unknown,
  where = '',
  params: RouterParams = DEFAULT_ROUTER_PARAMS,
): RouterParams[K] {
  const rule = RULES[name]
  checkOption(
    rule.ok(value, params),
    `${where}${name} must be ${rule.must}, got ${describeValue(value)}`,
    value,
  )
  return value as RouterParams[K]
}

/**
 * Merges overrides onto the defaults and validates every field.
 *
 * @throws RouterError `INVALID_OPTION` naming the first bad field, its rule and its value.
 *
 * @example
 * ```ts
 * import { resolveRouterParams } from '@kvc/kvc-router'
 * resolveRouterParams({ tauReject: 5 }).tauReject // 5
 * ```
 */
export function resolveRouterParams(input: RouterParamsInput = {}): RouterParams {
  const d = DEFAULT_ROUTER_PARAMS
  const p: RouterParams = {
    ...d,
    ...input,
    slo: {
      interactive: input.slo?.interactive ?? d.slo.interactive,
      batch: input.slo?.batch ?? d.slo.batch,
      background: input.slo?.background ?? d.slo.background,
    },
  }
  for (const name of Object.keys(RULES) as ScalarParam[]) checkRouterParam(name, p[name], '', p)
  for (const cls of ['interactive', 'batch', 'background'] as const) {
    const b = p.slo[cls]
    checkOption(
      typeof b === 'object' &&
        b !== null &&
        isNum(b.maxWaitMs, 0) &&
        isNum(b.seedShare, 0) &&
        b.seedShare <= 1,
      `slo.${cls} must be { maxWaitMs: a number >= 0, seedShare: a number in [0, 1] }, got ${describeValue(b)}`,
      b,
    )
  }
  return p
}
