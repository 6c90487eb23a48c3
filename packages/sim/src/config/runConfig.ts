import {
  MAX_PAGE_SIZE,
  type AdmitOptions,
  type PolicySpec,
  type RoutingPolicy,
  admitOptionsFor,
  createPolicy,
  parsePolicySpec,
  runsColocated,
} from '../adapters/router.js'
import { type Topology, formatTopology, topologyWorkers } from '../cluster/topology.js'
import type { Retention, SimRole } from '../cluster/worker.js'
import { type CostModel, makeCostModel } from '../cost/costModel.js'
import { SimError, SimErrorCode, checkOption } from '../errors/simError.js'
import type { FaultSpec } from '../faults/faults.js'
import { type GatewayRetry, gatewayRetryFor } from '../gateway/retry.js'
import { KvGeometry } from '../granularity/kvGeometry.js'
import type { Workload } from '../workload/types.js'
import { type ResolvedHostTier, admissionCostModel, resolveHostTier } from '../hostTier/hostTier.js'
import type { RunOptions } from './runOptions.js'

/** One worker of the cluster, in the order the simulation creates them. */
export interface WorkerPlan {
  readonly id: string
  readonly role: SimRole
  readonly retention: Retention
}

/** `release=reaper`: the D workers' idle TTL and sweep period (ms). */
export interface ReaperConfig {
  readonly idleMs: number
  readonly intervalMs: number
}

/** A run's options, checked and resolved: what every part of the simulation reads. */
export interface RunConfig {
  readonly options: RunOptions
  readonly workload: Workload
  readonly spec: PolicySpec
  readonly policy: RoutingPolicy
  readonly timeScale: number
  readonly pageSize: number
  readonly cost: CostModel
  /** A prefill that cannot get KV memory for this long fails (ms). */
  readonly memWaitMs: number
  /** Tokens allocated per prefill chunk. */
  readonly chunkTokens: number
  readonly horizonMs: number
  /** The replayer's session concurrency (`Infinity`: no limit). */
  readonly maxSessions: number
  readonly sampleMs: number
  readonly faults: readonly FaultSpec[]
  readonly admitOptions: AdmitOptions
  /** The topology the policy runs on (a `direct` policy runs P + D colocated workers). */
  readonly topology: Topology
  /** KV pool of each worker, tokens (a page multiple). */
  readonly capacity: number
  /** Token or block granularity: what the caches count, and how that converts to tokens. */
  readonly geometry: KvGeometry
  readonly workers: readonly WorkerPlan[]
  /** `release=reaper`; undefined: the engines release idle sessions under pressure. */
  readonly reaper: ReaperConfig | undefined
  /** Every caching worker's host KV tier (`--host-tier`); undefined: none. */
  readonly hostTier: ResolvedHostTier | undefined
  /**
   * A baseline's router and its retries (the turns bypass kvc's Dispatch); undefined for `kvc`
   * policies, whose turns the router's `TurnDispatch` drives.
   */
  readonly gateway: GatewayRetry | undefined
}

/**
 * Check a run's options and resolve their defaults, the policy, the topology it runs on, the
 * per-worker capacity and the workers; throws a `SimError` naming the first bad value.
 */
export function resolveRunConfig(options: RunOptions): RunConfig {
  const workload = options.workload
  checkOption(workload.turns.length > 0, 'the workload has no turns', workload.name)
  const spec = typeof options.policy === 'string' ? parsePolicySpec(options.policy) : options.policy
  const topology = topologyForPolicy(options.topology, spec)
  const policy = createPolicy(spec, topology.kind === 'dp')
  const timeScale = options.timeScale ?? 1
  checkOption(
    Number.isFinite(timeScale) && timeScale > 0,
    `timeScale must be a positive number, got ${timeScale}`,
    timeScale,
  )
  const pageSize = options.pageSize ?? workload.suggestedPageSize ?? 16
  checkOption(
    Number.isInteger(pageSize) && pageSize >= 1 && pageSize <= MAX_PAGE_SIZE,
    `pageSize must be an integer in [1, ${MAX_PAGE_SIZE}] (the router's range), got ${pageSize}`,
    pageSize,
  )
  const cost = makeCostModel(options.costModel)
  const memWaitMs = (options.memoryWaitTimeoutS ?? 30) * 1000
  const chunkTokens = options.prefillChunkTokens ?? 8192
  checkOption(
    Number.isInteger(chunkTokens) && chunkTokens >= 1,
    `prefillChunkTokens must be a positive integer, got ${chunkTokens}`,
    chunkTokens,
  )
  const horizonMs = (options.horizonS ?? 48 * 3600) * 1000
  const maxSessions = options.maxConcurrentSessions ?? Number.POSITIVE_INFINITY
  checkOption(
    maxSessions === Number.POSITIVE_INFINITY || (Number.isInteger(maxSessions) && maxSessions >= 1),
    `maxConcurrentSessions must be a positive integer, got ${String(options.maxConcurrentSessions)}`,
    options.maxConcurrentSessions,
  )
  const sampleMs = (options.sampleIntervalS ?? 5) * 1000
  checkOption(sampleMs > 0, 'sampleIntervalS must be > 0', options.sampleIntervalS)
  const faults = options.faults ?? []
  const admitOptions0 = admitOptionsFor(spec)
  if (topology.kind === 'pd' && topology.prefill === 0 && policy.pathMode === 'seed') {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `policy ${spec.label} needs at least one P worker`,
      topology,
    )
  }
  const capacity = resolveCapacity(cost.capacityTokens, pageSize, workload)
  const geometry = new KvGeometry(pageSize, workload.blockTokens ?? 1)
  // A policy's own `hostTier=` replaces the run's (`null`: none).
  const tierSpec = spec.hostTier !== undefined ? (spec.hostTier ?? undefined) : options.hostTier
  const hostTier =
    tierSpec === undefined
      ? undefined
      : resolveHostTier(tierSpec, capacity, pageSize, cost, workload.tokenScale)
  // With a host tier the D's admission weighs a session's host-resident tokens by the cost model.
  const admitOptions =
    hostTier === undefined
      ? admitOptions0
      : { ...admitOptions0, costModel: admissionCostModel(cost, hostTier.medium) }
  const workers = planWorkers(topology, policy)
  checkFaultTargets(faults, topology, workers)
  const reaper = checkPolicySwitches(spec, policy)
  if (!geometry.tokenLevel) {
    checkOption(
      workload.sessions === 0,
      'a block-granular workload has no sessions (its prompts are blocks, not text a session extends)',
      workload.sessions,
    )
    checkOption(
      spec.sync === undefined,
      `policy ${spec.label}: the D→P sync needs token granularity (its sink rebuilds pages from token ids)`,
      spec.label,
    )
  }
  return {
    options,
    workload,
    spec,
    policy,
    timeScale,
    pageSize,
    cost,
    memWaitMs,
    chunkTokens,
    horizonMs,
    maxSessions,
    sampleMs,
    faults,
    admitOptions,
    topology,
    capacity,
    geometry,
    workers,
    reaper,
    hostTier,
    gateway: policy.pathMode === 'kvc' ? undefined : gatewayRetryFor(spec.name, spec.retries),
  }
}

/**
 * The topology a policy runs on: a colocated baseline (`dp-cache-aware`, `colocated=on`, or any
 * baseline given an `N×DP` topology) on `N×DP` with N = P + D of the given one (the same GPU
 * count); the others on the given `nPmD`. `kvc` and `colocated=off` need P workers.
 */
function topologyForPolicy(given: Topology, spec: PolicySpec): Topology {
  const colocated = runsColocated(spec, given.kind)
  if (colocated) return given.kind === 'pd' ? { kind: 'dp', workers: topologyWorkers(given) } : given
  if (given.kind === 'dp') {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `policy ${spec.label} routes through P workers: give an nPmD topology (e.g. 2P6D), not ${formatTopology(given)}`,
      formatTopology(given),
    )
  }
  return given
}

/** Per-worker KV capacity: the cost model's, rounded down to pages; unlimited: the whole workload once. */
function resolveCapacity(cap: number, pageSize: number, workload: Workload): number {
  if (Number.isFinite(cap)) {
    const c = Math.floor(cap / pageSize) * pageSize
    checkOption(c >= pageSize, `capacity ${cap} is below one page of ${pageSize} tokens`, cap)
    checkOption(c <= 2 ** 31 - pageSize, `capacity ${cap} is above 2^31 tokens per worker`, cap)
    return c
  }
  // Unlimited: enough for every token of the workload, once.
  let total = 0
  const pad = (workload.suggestedPageSize ?? 0) + 2 * pageSize + 1
  for (const t of workload.turns) total += t.inputLength + t.outputLength + pad
  const c = Math.ceil(total / pageSize) * pageSize
  if (c > 2 ** 31 - pageSize) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `unlimited capacity needs ${c} tokens per worker, above 2^31: give a finite --capacity`,
      c,
    )
  }
  return c
}

/**
 * The workers of a topology: `w0…` colocated (prefix caches), or `p0…` then `d0…`, whose D
 * workers keep sessions only under a policy with a fast path.
 */
function planWorkers(topo: Topology, policy: RoutingPolicy): WorkerPlan[] {
  const plan: WorkerPlan[] = []
  if (topo.kind === 'dp') {
    for (let i = 0; i < topo.workers; i++) plan.push({ id: `w${i}`, role: 'colocated', retention: 'prefix' })
  } else {
    for (let i = 0; i < topo.prefill; i++) plan.push({ id: `p${i}`, role: 'prefill', retention: 'prefix' })
    const dRetention: Retention = policy.pathMode === 'kvc' ? 'sessions' : 'none'
    for (let i = 0; i < topo.decode; i++) plan.push({ id: `d${i}`, role: 'decode', retention: dRetention })
  }
  return plan
}

/** Every fault target names a worker (or link) of the topology, of the right role. */
function checkFaultTargets(
  faults: readonly FaultSpec[],
  topo: Topology,
  workers: readonly WorkerPlan[],
): void {
  const byId = new Map(workers.map((w) => [w.id, w]))
  for (const f of faults) {
    if (f.target === undefined) continue
    if (f.kind === 'link-flap') {
      const [p, d] = f.target.split('-')
      if (!byId.has(p!) || !byId.has(d!)) {
        throw new SimError(
          SimErrorCode.InvalidFault,
          `fault target ${f.target}: no such link in ${formatTopology(topo)}`,
          f.target,
        )
      }
    } else if (
      f.kind === 'd-death' ||
      f.kind === 'lost-kv-events' ||
      f.kind === 'corrupt-kv-events' ||
      f.kind === 'partial-transfer'
    ) {
      const w = byId.get(f.target)
      if (w === undefined || w.role === 'prefill') {
        throw new SimError(
          SimErrorCode.InvalidFault,
          `fault target ${f.target}: no such D worker in ${formatTopology(topo)} (workers: ${[...byId.keys()].join(', ')})`,
          f.target,
        )
      }
    } else if (f.kind === 'p-death') {
      const w = byId.get(f.target)
      if (w === undefined || w.role !== 'prefill') {
        throw new SimError(
          SimErrorCode.InvalidFault,
          `fault target ${f.target}: no such P worker in ${formatTopology(topo)} (workers: ${[...byId.keys()].join(', ')})`,
          f.target,
        )
      }
    }
  }
  if (topo.kind === 'dp' && faults.some((f) => f.kind === 'p-death')) {
    throw new SimError(
      SimErrorCode.InvalidFault,
      `p-death needs P workers; ${formatTopology(topo)} has none (colocated workers die with d-death)`,
      'p-death',
    )
  }
}

/** `seedSlot=off`, `release=reaper`, `sync=on`, `elastic=on` and `retract=on` need D workers that keep sessions. */
function checkPolicySwitches(spec: PolicySpec, policy: RoutingPolicy): ReaperConfig | undefined {
  const needsKvc = (what: string) => {
    if (policy.pathMode !== 'kvc') {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${spec.label}: ${what} needs the kvc fast path (D workers that keep sessions)`,
        spec.label,
      )
    }
  }
  if (spec.seedSlot === false) needsKvc('seedSlot=off')
  if (spec.slotAdmission === true) needsKvc('admission=slot')
  if (spec.seedPath === 'pd') needsKvc('seedPath=pd')
  let reaper: ReaperConfig | undefined
  const release = spec.release
  if (release?.mode === 'reaper') {
    needsKvc('release=reaper')
    reaper = { idleMs: release.idleTtlS * 1000, intervalMs: release.intervalS * 1000 }
  }
  if (spec.sync !== undefined) needsKvc('sync=on')
  if (spec.retract === true || spec.retract === 'room')
    needsKvc(`retract=${spec.retract === true ? 'on' : 'room'}`)
  if (spec.elastic !== undefined) {
    needsKvc('elastic=on')
    if (spec.sync !== undefined) {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${spec.label}: elastic=on and sync=on cannot be combined (the sync's links are fixed at start)`,
        spec.label,
      )
    }
  }
  return reaper
}
