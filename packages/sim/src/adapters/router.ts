/**
 * ADAPTER BOUNDARY — `@kvc/kvc-router`.
 *
 * Everything the simulator takes from the router package goes through this file: the Router
 * (Route / Dispatch state machine, residency index, cluster view), the D-side `admit`, its lease
 * book and the builders of a D's admission state and capacity report, the cost model, and the
 * baseline policies. The simulator never re-implements their algorithms; it
 * only names policies and wraps two ablation switches (`admission=off`, `backpressure=off`)
 * around the router's own objects.
 */
import {
  type AdmitOptions,
  BlockKeys,
  DEFAULT_ADMIT_OPTIONS,
  type RouterParamsInput,
  type RoutingPolicy,
  dataParallelCacheAwarePolicy,
  dynamoKvCostPolicy,
  kvcPolicy,
  llmdPrecisePrefixPolicy,
  powerOfTwoPolicy,
  randomPolicy,
  resolveRouterParams,
  roundRobinPolicy,
  sglangCacheAwarePolicy,
  stickySessionPolicy,
} from '@kvc/kvc-router'
import { SimError, SimErrorCode } from '../errors/simError.js'
import { type HostTierSpec, parseHostTier } from '../hostTier/hostTier.js'

export {
  admit,
  admitWorkerState,
  MAX_PAGE_SIZE,
  type AdmitOptions,
  BlockKeys,
  decodeCapacityReport,
  LeaseBook,
  Router,
  TurnDispatch,
  type AdmitRequest,
  type AdmitResponse,
  type AdmitWorkerState,
  type AdmitSession,
  type DecodePoolView,
  type DecodeSessionsView,
  type DecodeStateSource,
  type CapacityReport,
  type DispatchAction,
  type DispatchOutcome,
  type DispatchRecord,
  type DoneAction,
  type FailAction,
  type RouteContext,
  DEFAULT_TOPOLOGY_PARAMS,
  DEFAULT_RETRACTION_PARAMS,
  planRetraction,
  type RetractionSession,
  adviseTopology,
  type RoleSwitch,
  type TopologyAdvice,
  type TopologyParams,
  type WorkerTopologySignal,
  type QueueReport,
  type RouterParamsInput,
  type RoutingPolicy,
  type TurnFailureCause,
  type TurnRequest,
  type WaitAction,
} from '@kvc/kvc-router'
export {
  type CostModel,
  DEFAULT_COST_MODEL,
  decodeStepSeconds,
  loadBackSeconds,
  makeCostModel as makeRouterCostModel,
  prefillSeconds,
  RouterError,
  transferSeconds,
} from '@kvc/kvc-router'

/**
 * Policies `kvc-sim --policies` knows (all provided by `@kvc/kvc-router`):
 *
 * | name | what | topology |
 * |---|---|---|
 * | `kvc` | Algorithm 1–3: lexicographic Route, D-side Admit, Dispatch with reset-on-success; fast path to the D that holds the session | `nPmD` |
 * | `dp-cache-aware` | SGLang's cache-aware rule over colocated data-parallel workers (the research prototype's strongest baseline) | `N×DP` with N = P + D |
 * | `sglang-cache-aware` | SGLang router's cache-aware rule (P/D: the P by the rule, the D by load) | `nPmD`, `N×DP` |
 * | `round-robin`, `random`, `power-of-two`, `sticky-session` | SGLang router's policies (P/D: the same rule over P and D) | `nPmD`, `N×DP` |
 * | `dynamo-kv-cost` | Dynamo's KV router cost (P/D: decode stage by load, prefill router by KV overlap) | `nPmD`, `N×DP` |
 * | `llm-d-precise-prefix` | llm-d's precise prefix-cache scorer with its queue and KV-use scorers | `nPmD`, `N×DP` |
 * | `kvc-capacity-blind` | ablation, the research prototype's v5 routing (`docs/design/prototype.md#capacity-blind-routing`): `kvc` with key 2 (`capOk`) removed from Route's ranking, sessions pinned to the D they first landed on, and v5's fallback (after the pinned D rejects the fast path, a reseed through a P onto that D); built on the router's own ranking, Dispatch and Admit | `nPmD` |
 *
 * @example
 * ```ts
 * import { POLICY_NAMES } from '@kvc/sim'
 * POLICY_NAMES.includes('kvc') // true
 * ```
 */
export const POLICY_NAMES = [
  'kvc',
  'dp-cache-aware',
  'sglang-cache-aware',
  'round-robin',
  'random',
  'power-of-two',
  'sticky-session',
  'dynamo-kv-cost',
  'llm-d-precise-prefix',
  'kvc-capacity-blind',
] as const

/**
 * One of {@link POLICY_NAMES}.
 *
 * @example
 * ```ts
 * import type { PolicyName } from '@kvc/sim'
 * const p: PolicyName = 'dp-cache-aware'
 * ```
 */
export type PolicyName = (typeof POLICY_NAMES)[number]

/**
 * A policy with its options, parsed from `name[:key=value]...` (for example
 * `kvc:overlapMode=plain:loadFloorK=0`). Keys are the router's parameters (`tauAppend`,
 * `tauReject`, `loadFloorK`, `thetaShared`, `overlapMode`, `pendingSeedsPerD`, ...) plus the
 * simulator's switches:
 *
 * | key | values | effect |
 * |---|---|---|
 * | `granularity` | `block` (default), `session` | the D workers' session cache mode (`docs/design/algorithms.md#session-cache`) |
 * | `admission` | `on` (default), `off`, `slot` | `off`: Dispatch sends without asking the D (no capacity check, no pause hints); `slot`: the D's fast-path admission is the prototype's v5 (`admit_direct_append`: the append beyond the slot's committed length plus the output against free + evictable memory; nothing released, no lease, no pause hint) |
 * | `seedPath` | `transfer` (default), `pd` | `pd`: a seed goes as a plain SGLang P/D request (the D preallocates, then the P prefills and transfers), as v5's fallback through the P/D router did; `transfer`: the P prefills and the transfer waits for D memory |
 * | `backpressure` | `on` (default), `off` | `off`: the D's admission answers never carry a pause hint |
 * | `seedAdmission` | `on` (default), `off` | `off`: the D admits every seed-path request unchecked (no capacity check, no lease, no release, no pause hint): only the fast path is admitted, as in the prototype's v5, whose fallback went through the P/D router straight to a transfer (`docs/design/prototype.md#the-v5-paths`) |
 * | `seedSlot` | `on` (default), `off` | `off`: a seed-path transfer lands on the D as a plain request, outside the session's slot (only fast-path turns open or extend the slot), and the D's fast-path admission counts only the session's slot as held, so a session with no slot there needs room for its whole prompt: the prototype's v5, whose fallback went through the P/D router as a plain request and whose admission checked the slot's lengths (`docs/design/prototype.md#the-v5-paths`) |
 * | `release` | `pressure` (default), `reaper` | how a D's engine gets idle sessions' KV back: `pressure` releases idle sessions (least recently used first) when a prefill or a transfer is short of memory; `reaper` only releases sessions idle for `idleTtlS`, on a periodic sweep every `reaperIntervalS` (the prototype's v5, `docs/design/prototype.md#idle-only-lru`). Admission's own releases (Algorithm 2) apply in both |
 * | `idleTtlS`, `reaperIntervalS` | 120, 5 | the reaper's idle TTL and sweep period, simulated seconds (`release=reaper`) |
 * | `sync` | `off` (default), `on` | D→P incremental sync (`@kvc/dto-p-sync`) from every D to every P |
 * | `elastic` | `off` (default), `on` | `kvc` only: the router's elastic topology advisor switches workers between P and D during the run, draining each first (`elasticIntervalS`, default 10 s: how often it advises; `minPrefill`, default 1) |
 * | `retract` | `off` (default), `on`, `room` | `kvc` only: a D under memory pressure retracts its coldest hot sessions (`planRetraction` of `@kvc/kvc-router`: at a usage of 0.90 or more, down to 0.80): each finishes its running turn, then its lock goes and the router places its next turn on another D; `room`: only the sessions some other D can take below its pause threshold in the router's view (`placeableTokens`), and none that came to this D by a retraction and has not run a later turn |
 * | `syncBeta`, `syncShare`, `syncPinS` | 1024, 0.1, 30 | its staleness budget β (tokens), share of each P–D link's bandwidth, and pin time of synced pages on P (s) |
 * | `colocated` | `on`, `off` | baselines: run on colocated workers (`N×DP` with N = P + D of the run's topology) or P/D; default: `on` for `dp-cache-aware` and on an `N×DP` topology, else `off` |
 * | `retries` | integer ≥ 0 | baselines: retries of a failed request by the baseline's router (default: the SGLang gateway's 5; 0 for `dynamo-kv-cost` and `llm-d-precise-prefix`) |
 *
 * @example
 * ```ts
 * import type { PolicySpec } from '@kvc/sim'
 * const p: PolicySpec = { label: 'kvc', name: 'kvc', routerParams: {}, baselineOptions: {}, granularity: 'block', admission: true, backpressure: true, sync: undefined }
 * ```
 */
export interface PolicySpec {
  /** The string it was parsed from (the label in tables and reports). */
  readonly label: string
  readonly name: PolicyName
  readonly routerParams: RouterParamsInput
  /** Options of the SGLang cache-aware baselines (`defaults`, `cacheThreshold`, `balanceAbsThreshold`, `balanceRelThreshold`, `fallback`). */
  readonly baselineOptions: Readonly<Record<string, string | number>>
  readonly granularity: 'block' | 'session'
  readonly admission: boolean
  /**
   * `admission=slot`: the D's fast-path admission is the research prototype's v5
   * `admit_direct_append`: the append beyond the session slot's committed length, plus the output,
   * against free + evictable memory; no idle session released, no lease, no pause hint.
   */
  readonly slotAdmission?: boolean
  /**
   * `seedPath=pd`: a seed goes as a plain request of SGLang's PD disaggregation (the D
   * preallocates its KV, then the P prefills and transfers), as v5's fallback through the P/D
   * router did; absent: the P prefills and the transfer waits for D memory (kvc's seed path, whose
   * memory admission and a lease reserved).
   */
  readonly seedPath?: 'transfer' | 'pd'
  readonly backpressure: boolean
  /**
   * `seedAdmission=off`: the D answers seed-path admissions "admitted" without checking (v5's
   * fallback path); absent or `true`: Algorithm 2 on both paths.
   */
  readonly seedAdmission?: boolean
  /**
   * `seedSlot=off`: seeds land outside the session's slot and fast-path admission counts only the
   * slot as held (v5's two paths); absent or `true`: a seed opens or extends the slot, and
   * admission also counts the prompt's prefix in the D's tree.
   */
  readonly seedSlot?: boolean
  /**
   * How the D workers' engines get idle sessions' KV back (`release=...`; absent: `pressure`).
   * See {@link SessionRelease}.
   */
  readonly release?: SessionRelease
  /** `colocated=on|off` (baselines): colocated workers or P/D; absent: the policy's and topology's default. */
  readonly colocated?: boolean
  /** `retries=N` (baselines): retries of a failed request; absent: the baseline's router's default. */
  readonly retries?: number
  /**
   * `elastic=on` (`kvc` only): the elastic topology advisor switches workers' roles during the
   * run (`elasticIntervalS`, default 10: how often it advises; `minPrefill`, default 1).
   */
  readonly elastic?: { readonly intervalS: number; readonly minPrefill: number }
  /**
   * `retract=on` (`kvc` only): the D workers retract hot sessions under memory pressure;
   * `retract=room`: only those another D can take below its pause threshold (the router's view),
   * never one that just moved there.
   */
  readonly retract?: boolean | 'room'
  /** D→P incremental sync (`sync=on`; `kvc` only): staleness budget, share of each P–D link, pin time. */
  readonly sync:
    | { readonly betaTokens: number; readonly linkShare: number; readonly pinS: number }
    | undefined
  /**
   * `hostTier=2x` (`400k`, `2x+disk`, `none`): this policy's host KV tier, replacing the run's
   * `hostTier` (`--host-tier`); `null`: none, whatever the run says.
   */
  readonly hostTier?: HostTierSpec | null
}

/**
 * How a D worker's engine releases idle sessions (`kvc` D workers, which keep sessions):
 *
 * - `pressure` (the default): when a prefill or an incoming transfer is short of memory, idle
 *   sessions (no request in flight) give up their KV least recently used first, at once — the
 *   session cache's `evictIdleSessions({ needTokens })` and its `ensureFree` fallback.
 * - `reaper`: lazy release, as the research prototype's v5 did (`docs/design/prototype.md#idle-only-lru`:
 *   its LRU over idle streaming sessions ran 9–43 times per D while 90–153 transfers timed out). The
 *   engine never releases a session to make room; a sweep every `intervalS` releases the sessions
 *   idle for at least `idleTtlS` (`evictIdleSessions({ idleMs })`). A prefill or an incoming
 *   transfer that does not fit in free + evictable memory waits: for the sweep, for the tree to
 *   give pages back, for a request to end. The D reports only sessions idle for the TTL as
 *   releasable to its admission (Algorithm 2), which may release them a little before the sweep.
 *
 * In `pressure` mode admission may release any idle session (least recently used first) to admit
 * a request; `admission=off` turns that off with the rest of admission.
 *
 * @example
 * ```ts
 * import { parsePolicySpec } from '@kvc/sim'
 * parsePolicySpec('kvc:granularity=session:release=reaper:idleTtlS=60').release
 * // { mode: 'reaper', idleTtlS: 60, intervalS: 5 }
 * ```
 */
export type SessionRelease =
  | { readonly mode: 'pressure' }
  | { readonly mode: 'reaper'; readonly idleTtlS: number; readonly intervalS: number }

/**
 * Defaults of `release=reaper`: a 120 s idle TTL, swept every 5 s (**choices**: the research
 * prototype gives no value. Two minutes is far above its think times (p99 25.1 s,
 * `docs/design/prototype.md#time-scale`), so a live session is practically never reaped between
 * turns; with it, the prototype's v5 conditions on the built-in workload fail about as many turns
 * as the prototype measured: see the README, "Findings", and `docs/design/cost-model.md`).
 *
 * @example
 * ```ts
 * import { DEFAULT_REAPER } from '@kvc/sim'
 * DEFAULT_REAPER.idleTtlS // 120
 * ```
 */
export const DEFAULT_REAPER = Object.freeze({ idleTtlS: 120, intervalS: 5 })

const ROUTER_PARAM_KEYS = new Set(Object.keys(resolveRouterParams({})).filter((k) => k !== 'slo'))
const SGLANG_KEYS = new Set([
  'defaults',
  'cacheThreshold',
  'balanceAbsThreshold',
  'balanceRelThreshold',
  'fallback',
])
const DYNAMO_KEYS = new Set([
  'overlapScoreCredit',
  'prefillLoadScale',
  'overlapScoreCreditDecay',
  'temperature',
])
const LLMD_KEYS = new Set(['prefixWeight', 'kvUtilizationWeight', 'queueWeight'])
/** Options of each baseline that takes some (passed to its `@kvc/kvc-router` constructor). */
const BASELINE_KEYS: Partial<Record<string, ReadonlySet<string>>> = {
  'sglang-cache-aware': SGLANG_KEYS,
  'dp-cache-aware': SGLANG_KEYS,
  'dynamo-kv-cost': DYNAMO_KEYS,
  'llm-d-precise-prefix': LLMD_KEYS,
}
const KVC_NAMES: ReadonlySet<string> = new Set(['kvc', 'kvc-capacity-blind'])

function parseValue(key: string, raw: string, spec: string): string | number | boolean {
  if (raw === 'true' || raw === 'on') return true
  if (raw === 'false' || raw === 'off') return false
  if (raw !== '' && !Number.isNaN(Number(raw))) return Number(raw)
  if (/^[a-z][a-z-]*$/i.test(raw)) return raw
  throw new SimError(
    SimErrorCode.InvalidOption,
    `policy ${spec}: bad value ${JSON.stringify(raw)} for ${key}`,
    raw,
  )
}

/**
 * Parse a policy spec (see {@link PolicySpec}); throws `INVALID_OPTION` naming the bad part.
 *
 * @example
 * ```ts
 * import { parsePolicySpec } from '@kvc/sim'
 * parsePolicySpec('kvc:granularity=session').granularity // 'session'
 * parsePolicySpec('kvc:loadFloorK=0').routerParams // { loadFloorK: 0 }
 * ```
 */
export function parsePolicySpec(spec: string): PolicySpec {
  const parts = spec.trim().split(':')
  const name = parts[0]!.trim()
  if (!(POLICY_NAMES as readonly string[]).includes(name)) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `unknown policy ${JSON.stringify(name)}: choose from ${POLICY_NAMES.join(', ')}`,
      name,
    )
  }
  const routerParams: Record<string, unknown> = {}
  const baselineOptions: Record<string, string | number> = {}
  let granularity: 'block' | 'session' = 'block'
  let admission = true
  let backpressure = true
  let seedAdmission = true
  let seedSlot = true
  let sync = false
  let syncBeta = 1024
  let syncShare = 0.1
  let syncPinS = 30
  let release: 'pressure' | 'reaper' = 'pressure'
  let idleTtlS: number | undefined
  let reaperIntervalS: number | undefined
  let hostTier: HostTierSpec | null | undefined
  let colocated: boolean | undefined
  let retries: number | undefined
  let slotAdmission = false
  let seedPath: 'transfer' | 'pd' = 'transfer'
  const baselineKeys = BASELINE_KEYS[name]
  let elastic = false
  let retract: boolean | 'room' = false
  let elasticIntervalS = 10
  let minPrefill = 1
  for (const p of parts.slice(1)) {
    const eq = p.indexOf('=')
    if (eq <= 0)
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${spec}: expected key=value, got ${JSON.stringify(p)}`,
        p,
      )
    const key = p.slice(0, eq).trim()
    if (key === 'hostTier') {
      // `hostTier=2x`, `hostTier=400k+disk`, `hostTier=none`: `--host-tier` for this policy alone.
      hostTier =
        parseHostTier(
          p
            .slice(eq + 1)
            .trim()
            .replaceAll('+', ':'),
        ) ?? null
      continue
    }
    const value = parseValue(key, p.slice(eq + 1).trim(), spec)
    if (key === 'granularity') {
      if (value !== 'block' && value !== 'session') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: granularity must be block or session`,
          value,
        )
      }
      granularity = value
    } else if (key === 'release') {
      if (value !== 'pressure' && value !== 'reaper') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: release must be pressure or reaper`,
          value,
        )
      }
      release = value
    } else if (key === 'idleTtlS' || key === 'reaperIntervalS') {
      const ok =
        typeof value === 'number' && Number.isFinite(value) && (key === 'idleTtlS' ? value >= 0 : value > 0)
      if (!ok) {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: ${key} must be ${key === 'idleTtlS' ? 'a non-negative' : 'a positive'} number of seconds`,
          value,
        )
      }
      if (key === 'idleTtlS') idleTtlS = value as number
      else reaperIntervalS = value as number
    } else if (key === 'retract') {
      if (typeof value !== 'boolean' && value !== 'room')
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: retract must be on, off or room`,
          value,
        )
      retract = value
    } else if (key === 'elastic') {
      if (typeof value !== 'boolean')
        throw new SimError(SimErrorCode.InvalidOption, `policy ${spec}: elastic must be on or off`, value)
      elastic = value
    } else if (key === 'elasticIntervalS' || key === 'minPrefill') {
      const ok =
        typeof value === 'number' &&
        Number.isFinite(value) &&
        (key === 'elasticIntervalS' ? value > 0 : Number.isInteger(value) && value >= 0)
      if (!ok) {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: ${key} must be ${key === 'elasticIntervalS' ? 'a positive number of seconds' : 'a non-negative integer'}`,
          value,
        )
      }
      if (key === 'elasticIntervalS') elasticIntervalS = value as number
      else minPrefill = value as number
    } else if (key === 'sync') {
      if (typeof value !== 'boolean')
        throw new SimError(SimErrorCode.InvalidOption, `policy ${spec}: sync must be on or off`, value)
      sync = value
    } else if (key === 'syncBeta' || key === 'syncShare' || key === 'syncPinS') {
      const ok =
        typeof value === 'number' &&
        Number.isFinite(value) &&
        (key === 'syncShare'
          ? value > 0 && value <= 1
          : key === 'syncBeta'
            ? Number.isInteger(value) && value >= 0
            : value >= 0)
      if (!ok) {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: ${key} must be ${key === 'syncShare' ? 'in (0, 1]' : key === 'syncBeta' ? 'a non-negative integer (tokens)' : 'a non-negative number of seconds'}`,
          value,
        )
      }
      if (key === 'syncBeta') syncBeta = value as number
      else if (key === 'syncShare') syncShare = value as number
      else syncPinS = value as number
    } else if (key === 'admission' && value === 'slot') {
      slotAdmission = true
    } else if (key === 'seedPath') {
      if (value !== 'transfer' && value !== 'pd') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: seedPath must be transfer or pd`,
          value,
        )
      }
      seedPath = value
    } else if (
      key === 'admission' ||
      key === 'backpressure' ||
      key === 'seedAdmission' ||
      key === 'seedSlot'
    ) {
      if (typeof value !== 'boolean') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: ${key} must be on or off${key === 'admission' ? ' (or slot)' : ''}`,
          value,
        )
      }
      if (key === 'admission') admission = value
      else if (key === 'backpressure') backpressure = value
      else if (key === 'seedAdmission') seedAdmission = value
      else seedSlot = value
    } else if ((key === 'colocated' || key === 'retries') && !KVC_NAMES.has(name)) {
      if (key === 'colocated') {
        if (typeof value !== 'boolean') {
          throw new SimError(SimErrorCode.InvalidOption, `policy ${spec}: colocated must be on or off`, value)
        }
        if (name === 'dp-cache-aware' && !value) {
          throw new SimError(
            SimErrorCode.InvalidOption,
            `policy ${spec}: dp-cache-aware is colocated; for SGLang's cache-aware rule on P/D use sglang-cache-aware`,
            value,
          )
        }
        colocated = value
      } else {
        if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 100) {
          throw new SimError(
            SimErrorCode.InvalidOption,
            `policy ${spec}: retries must be an integer in [0, 100]`,
            value,
          )
        }
        retries = value
      }
    } else if (ROUTER_PARAM_KEYS.has(key)) {
      routerParams[key] = value
    } else if (baselineKeys?.has(key) === true) {
      if (typeof value === 'boolean') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${spec}: ${key} takes a number or a name`,
          value,
        )
      }
      baselineOptions[key] = value
    } else {
      const own = baselineKeys === undefined ? '' : `; ${name}: ${[...baselineKeys].join(', ')}`
      const where = KVC_NAMES.has(name)
        ? 'simulator: granularity, admission, backpressure, seedAdmission, seedSlot, seedPath, release, idleTtlS, reaperIntervalS, sync, syncBeta, syncShare, syncPinS, elastic, elasticIntervalS, minPrefill, retract'
        : 'baselines: colocated, retries'
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${spec}: unknown option ${JSON.stringify(key)} (router parameters: ${[...ROUTER_PARAM_KEYS].join(', ')}; ${where}${own})`,
        key,
      )
    }
  }
  if (release === 'pressure' && (idleTtlS !== undefined || reaperIntervalS !== undefined)) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `policy ${spec}: idleTtlS and reaperIntervalS need release=reaper`,
      spec,
    )
  }
  try {
    resolveRouterParams(routerParams as RouterParamsInput)
  } catch (err) {
    throw new SimError(SimErrorCode.InvalidOption, `policy ${spec}: ${(err as Error).message}`, routerParams)
  }
  const parsed: PolicySpec = {
    label: spec.trim(),
    name: name as PolicyName,
    routerParams: routerParams as RouterParamsInput,
    baselineOptions,
    granularity,
    admission,
    backpressure,
    ...(slotAdmission ? { slotAdmission } : {}),
    ...(seedPath === 'pd' ? { seedPath } : {}),
    ...(colocated === undefined ? {} : { colocated }),
    ...(retries === undefined ? {} : { retries }),
    ...(seedAdmission ? {} : { seedAdmission: false }),
    ...(seedSlot ? {} : { seedSlot: false }),
    ...(release === 'reaper'
      ? {
          release: {
            mode: 'reaper' as const,
            idleTtlS: idleTtlS ?? DEFAULT_REAPER.idleTtlS,
            intervalS: reaperIntervalS ?? DEFAULT_REAPER.intervalS,
          },
        }
      : {}),
    ...(elastic ? { elastic: { intervalS: elasticIntervalS, minPrefill } } : {}),
    ...(retract ? { retract } : {}),
    sync: sync ? { betaTokens: syncBeta, linkShare: syncShare, pinS: syncPinS } : undefined,
    ...(hostTier === undefined ? {} : { hostTier }),
  }
  try {
    createPolicy(parsed)
  } catch (err) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `policy ${spec}: ${(err as Error).message}`,
      baselineOptions,
    )
  }
  return parsed
}

/**
 * Whether a spec's policy reads KV events (the residency index): `kvc` and its ablation, Dynamo's
 * KV router and llm-d's precise scorer subscribe to the workers' events; the SGLang router's
 * policies do not (the cache-aware ones keep an approximate tree of their own), so the simulator
 * spares the events nobody reads.
 *
 * @example
 * ```ts
 * import { consumesKvEvents, parsePolicySpec } from '@kvc/sim'
 * consumesKvEvents(parsePolicySpec('dynamo-kv-cost')) // true
 * consumesKvEvents(parsePolicySpec('round-robin')) // false
 * ```
 */
export function consumesKvEvents(spec: PolicySpec): boolean {
  return KVC_NAMES.has(spec.name) || spec.name === 'dynamo-kv-cost' || spec.name === 'llm-d-precise-prefix'
}

/**
 * Whether a spec's policy runs on colocated workers: `colocated=` when given, else `dp-cache-aware`
 * always and every baseline on an `N×DP` topology; `kvc` never (it needs P and D workers).
 *
 * @example
 * ```ts
 * import { parsePolicySpec, runsColocated } from '@kvc/sim'
 * runsColocated(parsePolicySpec('round-robin'), 'pd') // false
 * runsColocated(parsePolicySpec('round-robin'), 'dp') // true
 * ```
 */
export function runsColocated(spec: PolicySpec, topology: 'pd' | 'dp'): boolean {
  if (KVC_NAMES.has(spec.name)) return false
  return spec.colocated ?? (spec.name === 'dp-cache-aware' || topology === 'dp')
}

/**
 * The router's policy object for a spec (a fresh one per run: baselines keep state). `colocated`
 * (default: `dp-cache-aware` only) builds a baseline for colocated workers (`pathMode: 'direct'`),
 * else for P/D (`seed`).
 *
 * @example
 * ```ts
 * import { createPolicy, parsePolicySpec } from '@kvc/sim'
 * createPolicy(parsePolicySpec('dp-cache-aware')).pathMode // 'direct'
 * createPolicy(parsePolicySpec('round-robin'), true).pathMode // 'direct'
 * ```
 */
export function createPolicy(spec: PolicySpec, colocated = runsColocated(spec, 'pd')): RoutingPolicy {
  const pathMode = colocated ? ('direct' as const) : ('seed' as const)
  const o = spec.baselineOptions
  let p: RoutingPolicy
  switch (spec.name) {
    case 'kvc':
      p = kvcPolicy()
      break
    case 'dp-cache-aware':
      p = dataParallelCacheAwarePolicy(o as Parameters<typeof dataParallelCacheAwarePolicy>[0])
      break
    case 'sglang-cache-aware':
      p = sglangCacheAwarePolicy({ ...(o as Parameters<typeof sglangCacheAwarePolicy>[0]), pathMode })
      break
    case 'round-robin':
      p = roundRobinPolicy({ pathMode })
      break
    case 'random':
      p = randomPolicy({ pathMode })
      break
    case 'power-of-two':
      p = powerOfTwoPolicy({ pathMode })
      break
    case 'sticky-session':
      p = stickySessionPolicy({ pathMode })
      break
    case 'dynamo-kv-cost':
      p = dynamoKvCostPolicy({ ...(o as Parameters<typeof dynamoKvCostPolicy>[0]), pathMode })
      break
    case 'llm-d-precise-prefix':
      p = llmdPrecisePrefixPolicy({ ...(o as Parameters<typeof llmdPrecisePrefixPolicy>[0]), pathMode })
      break
    case 'kvc-capacity-blind':
      p = capacityBlind(kvcPolicy())
      break
  }
  if (!spec.admission && p.usesAdmission) {
    const inner = p
    p = {
      ...inner,
      name: `${inner.name}-no-admission`,
      usesAdmission: false,
      rank: (c, t) => inner.rank(c, t),
    }
  }
  return p
}

/**
 * Ablation of Algorithm 1 without its capacity key, as the research prototype's v5 ran it: the router's own
 * `kvc` ranking is re-sorted by (prefix resident ∧ append ≤ τ_append, score, −load,
 * tie-break); a candidate is "fast" whenever its prefix is resident and the append small, full or
 * not; and a session that has a D is offered only that D while it is eligible (permanent pin).
 * A D that rejected the session's fast path since its last success is offered on the seed path
 * (v5's fallback: the turn goes through a P to the same D). Dispatch and Admit are the router's,
 * unchanged; so is its choice of P, which avoids links with recent failed transfers (the fix of
 * `docs/design/prototype.md#p-choice-blind-to-link-health`, which v5 lacked: Dispatch re-checks the
 * link before every seed).
 */
function capacityBlind(inner: RoutingPolicy): RoutingPolicy {
  return {
    ...inner,
    name: 'kvc-capacity-blind',
    rank(ctx, turn) {
      const d = inner.rank(ctx, turn)
      const tau = ctx.params.tauAppend
      const store = ctx.cluster.store
      const s = turn.sessionId
      let blind = d.candidates.map((c) => ({
        ...c,
        fast: c.prefixResident && c.appendTokens <= tau && store.rejects(s, c.workerId) === 0,
      }))
      const pinned = blind.filter((c) => c.workerId === d.boundWorker)
      if (pinned.length > 0) blind = pinned
      blind.sort(
        (a, b) =>
          Number(b.fast) - Number(a.fast) || b.score - a.score || a.load - b.load || a.tieBreak - b.tieBreak,
      )
      return { ...d, policy: 'kvc-capacity-blind', candidates: blind.map((c, i) => ({ ...c, rank: i })) }
    },
  }
}

/**
 * The D workers' admission options for a spec (`backpressure=off` zeroes every pause hint).
 *
 * @example
 * ```ts
 * import { admitOptionsFor, parsePolicySpec } from '@kvc/sim'
 * admitOptionsFor(parsePolicySpec('kvc:backpressure=off')).pause.maxPauseMs // 0
 * ```
 */
export function admitOptionsFor(spec: PolicySpec): AdmitOptions {
  const p = resolveRouterParams(spec.routerParams)
  const base: AdmitOptions = {
    ...DEFAULT_ADMIT_OPTIONS,
    maxAppendTokens: p.tauAppend,
    defaultDecodeReserve: p.defaultDecodeReserve,
  }
  if (spec.backpressure) return base
  return {
    ...base,
    pause: {
      ...base.pause,
      retractedPauseMs: 0,
      minPauseMs: 0,
      maxPauseMs: 0,
      msPerQueuedTransfer: 0,
      msPerBasisPoint: 0,
    },
  }
}

/**
 * Block keys of `tokens` (full pages) extending `prev`, the keys of an earlier prompt that shares
 * `sharedPages` leading pages with this one; only the new pages are hashed.
 *
 * @example
 * ```ts
 * import { extendBlockKeys, simBlockHasher } from '@kvc/sim'
 * const a = extendBlockKeys(undefined, 0, undefined, Uint32Array.of(1, 2, 3, 4), 2, simBlockHasher)
 * a.keys.length // 2
 * ```
 */
export function extendBlockKeys(
  prev: BlockKeys | undefined,
  sharedPages: number,
  prevDigests: readonly Uint8Array[] | undefined,
  tokens: Uint32Array,
  pageSize: number,
  hasher: import('@kvc/radix-cache').BlockHasher,
): { keys: BlockKeys; digests: Uint8Array[] } {
  const pages = Math.floor(tokens.length / pageSize)
  const keep = prev === undefined || prevDigests === undefined ? 0 : Math.min(sharedPages, prev.length, pages)
  const keys = new BlockKeys(Math.max(1, pages))
  const digests: Uint8Array[] = new Array(pages)
  for (let i = 0; i < keep; i++) {
    keys.hi[i] = prev!.hi[i]!
    keys.lo[i] = prev!.lo[i]!
    digests[i] = prevDigests![i]!
  }
  keys.length = keep
  let parent = keep === 0 ? undefined : digests[keep - 1]
  for (let p = keep; p < pages; p++) {
    const d = hasher.hashBlock(parent, tokens.subarray(p * pageSize, (p + 1) * pageSize), undefined)
    digests[p] = d
    keys.pushHash(hasher.blockId(d))
    parent = d
  }
  return { keys, digests }
}
