import { hostTierFigures } from '../hostTier/figures.js'
import type { HostTierSpec } from '../hostTier/hostTier.js'
import { type PolicySpec, parsePolicySpec } from '../adapters/router.js'
import { runSimulation } from '../cluster/simulation.js'
import type { RunOptions } from '../config/runOptions.js'
import type { RunResult } from '../metrics/runResult.js'
import { type Topology, formatTopology, parseTopology } from '../cluster/topology.js'
import { type CostModel, makeCostModel } from '../cost/costModel.js'
import { checkOption } from '../errors/simError.js'
import type { SimGranularity } from '../granularity/kvGeometry.js'
import { type FaultSpec, formatFaults } from '../faults/faults.js'
import { type RunMetrics, computeRunMetrics, fastPathBucket, ttftOf } from '../metrics/runMetrics.js'
import { quantileSorted } from '../metrics/quantiles.js'
import { DEFAULT_SLO, type Slo } from '../metrics/slo.js'
import type { TurnRecord } from '../metrics/types.js'
import { type AgenticWorkloadOptions, generateAgenticWorkload } from '../workload/agentic.js'
import { type LoadTraceOptions, detectTraceFormat, loadTrace } from '../workload/loadTrace.js'
import { type TraceStats, computeTraceStats } from '../workload/stats.js'
import type { Workload } from '../workload/types.js'
import { clusterLayout, policyColumns } from './columns.js'
import {
  type CiMetric,
  type ClusterLayout,
  type Estimate,
  type PairedEstimate,
  type PolicyColumns,
  drawResamples,
  type PackedLayout,
  type PolicyBootstrap,
  PolicyBootstrapper,
  StratumBootstrapper,
  keepDraws,
  packLayout,
  pairBootstraps,
  resampleMetrics,
  resampleStratum,
  unpackLayout,
} from './bootstrap.js'

/**
 * Where the turns come from: the built-in agentic generator (regenerated per seed, so every
 * trial has its own sessions, and every policy of a trial sees the same ones), or a trace file
 * (the same turns in every trial; seeds then vary the router's randomness, RPC jitter and faults).
 *
 * @example
 * ```ts
 * import type { WorkloadSource } from '@kvc/sim'
 * const a: WorkloadSource = { kind: 'agentic' }
 * // a trace fetched as docs/design/traces.md says
 * const b: WorkloadSource = { kind: 'trace', path: 'traces/conversation_trace.jsonl' }
 * ```
 */
export type WorkloadSource =
  | { readonly kind: 'agentic'; readonly options?: Omit<AgenticWorkloadOptions, 'seed'> }
  | ({ readonly kind: 'trace'; readonly path: string } & LoadTraceOptions)

/**
 * An experiment: policies × seeds on one workload and topology, compared by the protocol of
 * `docs/design/simulation.md#evaluation-protocol`.
 *
 * @example
 * ```ts
 * import type { ExperimentConfig } from '@kvc/sim'
 * const c: ExperimentConfig = { workload: { kind: 'agentic' }, topology: '2P6D', policies: ['kvc', 'round-robin'], seeds: [1, 2, 3] }
 * ```
 */
export interface ExperimentConfig {
  readonly workload: WorkloadSource
  readonly topology: Topology | string
  /** Policy specs; the first is the reference of the paired comparisons. */
  readonly policies: readonly string[]
  /** Trial seeds (the protocol asks for at least 3). */
  readonly seeds: readonly number[]
  readonly timeScale?: number
  readonly costModel?: Partial<CostModel>
  readonly pageSize?: number
  readonly faults?: readonly FaultSpec[]
  readonly evictGranularity?: RunOptions['evictGranularity']
  /** The replayer's session concurrency ({@link RunOptions.maxConcurrentSessions}); unset: none. */
  readonly maxConcurrentSessions?: number
  /** Every worker's host KV tier ({@link RunOptions.hostTier}; a policy's `hostTier=` replaces it). */
  readonly hostTier?: HostTierSpec
  /** The SLOs goodput is measured against (default {@link DEFAULT_SLO}: TTFT 2 s, TPOT 25 ms). */
  readonly slo?: Slo
  /** Bootstrap resamples (default 200). */
  readonly bootstrapResamples?: number
  /** Points per usage series in the result (default 240). */
  readonly usagePoints?: number
}

/**
 * One run to execute (what a runner needs; serializable, so a worker thread can run it).
 *
 * @example
 * ```ts
 * import type { RunTask } from '@kvc/sim'
 * const t: RunTask = { index: 0, policy: 'kvc', seed: 1, workload: { kind: 'agentic' }, topology: '2P6D',
 *   timeScale: 1, costModel: {}, faults: [] }
 * ```
 */
export interface RunTask {
  readonly index: number
  readonly policy: string
  readonly seed: number
  readonly workload: WorkloadSource
  readonly topology: string
  readonly timeScale: number
  readonly costModel: Partial<CostModel>
  readonly pageSize?: number
  readonly faults: readonly FaultSpec[]
  readonly evictGranularity?: RunOptions['evictGranularity']
  readonly maxConcurrentSessions?: number
  readonly hostTier?: HostTierSpec
}

/**
 * Runs tasks (in process by default; the CLI uses worker threads). `onProgress` receives the
 * task index and its ended / total turns. With `onResult`, each result is handed over as its task
 * ends and the returned array may leave it out (a hole), so a long sweep need not hold every run's
 * records at once; without it, the returned array holds every result in task order.
 *
 * @example
 * ```ts
 * import { inProcessRunner, type Runner } from '@kvc/sim'
 * const r: Runner = inProcessRunner
 * ```
 */
export type Runner = (
  tasks: readonly RunTask[],
  onProgress: (task: number, ended: number, total: number) => void,
  onResult?: (task: number, result: RunResult) => void,
) => Promise<RunResult[]>

const workloadCache = new Map<string, Workload>()

/**
 * The generated workloads this thread built last, newest first (a workload is immutable: runs
 * only read it). The policies of a comparison run on the same trials, so a thread that runs
 * several of them generates each trial's workload once.
 */
const recentGenerated: { key: string; workload: Workload }[] = []
const RECENT_GENERATED = 3

/**
 * The workload of a task (traces are loaded once per process; the generator runs per seed, its
 * last few workloads reused).
 *
 * @example
 * ```ts
 * import { buildWorkload } from '@kvc/sim'
 * buildWorkload({ kind: 'agentic', options: { sessions: 2 } }, 1).sessions // 2
 * ```
 */
export function buildWorkload(source: WorkloadSource, seed: number): Workload {
  if (source.kind === 'agentic') {
    const key = `${seed} ${JSON.stringify(source.options ?? {})}`
    const i = recentGenerated.findIndex((r) => r.key === key)
    const hit = i < 0 ? undefined : recentGenerated.splice(i, 1)[0]!
    const workload = hit?.workload ?? generateAgenticWorkload({ ...source.options, seed })
    recentGenerated.unshift({ key, workload })
    if (recentGenerated.length > RECENT_GENERATED) recentGenerated.length = RECENT_GENERATED
    return workload
  }
  const { kind: _k, path, ...opts } = source
  const key = JSON.stringify(source)
  let w = workloadCache.get(key)
  if (w === undefined) {
    w = loadTrace(path, opts)
    workloadCache.set(key, w)
  }
  return w
}

/**
 * Execute one task in this thread.
 *
 * @example
 * ```ts
 * import { executeTask } from '@kvc/sim'
 * const r = executeTask({ index: 0, policy: 'round-robin', seed: 1, workload: { kind: 'agentic', options: { sessions: 2, maxTurnsPerSession: 2 } },
 *   topology: '1P2D', timeScale: 1, costModel: {}, faults: [] })
 * r.accounting.balanced // true
 * ```
 */
export function executeTask(task: RunTask, onProgress?: (ended: number, total: number) => void): RunResult {
  const workload = buildWorkload(task.workload, task.seed)
  return runSimulation({
    workload,
    topology: parseTopology(task.topology),
    policy: task.policy,
    seed: task.seed,
    timeScale: task.timeScale,
    costModel: task.costModel,
    faults: task.faults,
    ...(task.pageSize === undefined ? {} : { pageSize: task.pageSize }),
    ...(task.evictGranularity === undefined ? {} : { evictGranularity: task.evictGranularity }),
    ...(task.maxConcurrentSessions === undefined
      ? {}
      : { maxConcurrentSessions: task.maxConcurrentSessions }),
    ...(task.hostTier === undefined ? {} : { hostTier: task.hostTier }),
    ...(onProgress === undefined ? {} : { onProgress }),
  })
}

/**
 * The default runner: one task after the other, in this thread.
 *
 * @example
 * ```ts
 * import { inProcessRunner } from '@kvc/sim'
 * typeof inProcessRunner // 'function'
 * ```
 */
export const inProcessRunner: Runner = async (tasks, onProgress, onResult) => {
  const out: RunResult[] = new Array(tasks.length)
  for (const t of tasks) {
    const r = executeTask(t, (e, n) => onProgress(t.index, e, n))
    if (onResult === undefined) out[t.index] = r
    else onResult(t.index, r)
  }
  return out
}

/**
 * Summary of one run in an experiment result.
 *
 * @example
 * ```ts
 * import type { RunSummary } from '@kvc/sim'
 * const line = (r: RunSummary) => `${r.policy} seed ${r.seed}: ${r.metrics.failed} failed`
 * ```
 */
export interface RunSummary {
  readonly policy: string
  readonly seed: number
  readonly topology: string
  readonly makespanS: number
  readonly metrics: Omit<RunMetrics, 'sessionFastPathRates'>
  readonly accounting: RunResult['accounting']
  readonly counters: RunResult['counters']
}

/**
 * One stratum (bucket) of turns and each policy's results in it, pooled over the seeds.
 *
 * @example
 * ```ts
 * import type { Stratum } from '@kvc/sim'
 * const s: Stratum = { bucket: '1-4', turns: 100, policies: {} }
 * ```
 */
export interface Stratum {
  readonly bucket: string
  /** Turns in the bucket, all seeds (per policy; the same turns for every policy). */
  readonly turns: number
  readonly policies: Readonly<
    Record<
      string,
      {
        /** TTFT percentiles with bootstrap 95% intervals (the same resamples as the main estimates). */
        readonly ttftP50: Estimate
        readonly ttftP90: Estimate
        readonly tpotP90: number
        readonly e2eP50: number
        readonly goodput: number
        readonly errorRate: number
        readonly fastPathRate: number
      }
    >
  >
}

/**
 * Per-policy results: estimates with 95% intervals, pooled counts, the per-session fast-path
 * distribution (the bimodality of `docs/design/prototype.md#capacity-blind-routing`), and KV usage
 * over time of the first seed.
 *
 * @example
 * ```ts
 * import type { PolicySummary } from '@kvc/sim'
 * const p90 = (p: PolicySummary) => p.estimates.ttft_p90
 * ```
 */
export interface PolicySummary {
  readonly policy: string
  readonly policyName: string
  readonly pathMode: string
  readonly topology: string
  readonly estimates: Readonly<Record<CiMetric, Estimate>>
  readonly turns: number
  readonly failed: number
  readonly failedByCause: Readonly<Record<string, number>>
  readonly paths: Readonly<Record<'fast' | 'local' | 'seed' | 'direct', number>>
  readonly reseeds: number
  readonly migrations: number
  /**
   * Host tier: prefills that loaded part of their prompt back (all seeds), the tokens loaded back
   * and the tokens later turns computed again of their own history, per trial (mean over seeds),
   * and with peer fetch (`hostTier=4x+peer`) the tokens seeds read from the sessions' old D workers
   * instead of recomputing them, per trial. See {@link hostTierFigures}.
   */
  readonly hostTier: {
    readonly loadBacks: number
    readonly loadedBackTokens: number
    readonly reprefilledTokens: number
    readonly peerFetchedTokens: number
  }
  readonly prefixHitRatio: number
  readonly kvTransferGB: number
  readonly decodeEvictions: number
  readonly decodeTokensPerEviction: number
  readonly prefillEvictions: number
  readonly prefillTokensPerEviction: number
  readonly throughputTurnsPerS: number
  readonly peakDecodeUsage: number
  /** Sessions per fast-path bucket [0,20), [20,40), [40,60), [60,80), [80,100]%, all seeds. */
  readonly sessionFastPathHistogram: readonly number[]
  /** Sessions below 20% fast path vs at or above 80%, with their mean peak prompt (tokens). */
  readonly starvation: {
    readonly starved: number
    readonly starvedMeanPeakInput: number
    readonly lucky: number
    readonly luckyMeanPeakInput: number
  }
  /** KV usage over time (first seed), D or colocated workers. */
  readonly usage: readonly {
    readonly workerId: string
    readonly timesS: readonly number[]
    readonly usage: readonly number[]
  }[]
  /** TTFT CDF points (seconds, cumulative share; failed turns excluded from the curve, reported in `failed`). */
  readonly ttftCdf: readonly (readonly [number, number])[]
}

/**
 * What `kvc-sim compare` computes (and writes as JSON): the configuration, every run, the
 * per-policy estimates with bootstrap intervals, paired differences against the first policy,
 * and strata by turn index, append size and overlap.
 *
 * @example
 * ```ts
 * import type { ExperimentResult } from '@kvc/sim'
 * const best = (r: ExperimentResult) => r.policies.reduce((a, b) => (a.estimates.ttft_p90.value <= b.estimates.ttft_p90.value ? a : b))
 * ```
 */
export interface ExperimentResult {
  readonly tool: { readonly name: 'kvc-sim'; readonly version: string }
  readonly config: {
    readonly workload: TraceStats & { readonly kind: string; readonly notes: readonly string[] }
    readonly topology: string
    /**
     * `'block'` when the caches counted units of blocks (a hash-id trace; see `KvGeometry`); absent
     * at token granularity, so a token-level run's `results.json` is what it was before blocks.
     */
    readonly granularity?: SimGranularity
    readonly policies: readonly string[]
    readonly reference: string
    readonly seeds: readonly number[]
    readonly timeScale: number
    readonly pageSize: number
    readonly capacityTokens: number | 'unlimited'
    readonly costModel: CostModel
    readonly faults: string
    /** The replayer's session concurrency, when one was set. */
    readonly maxConcurrentSessions?: number
    /** The run's host KV tier (`--host-tier`), when one was set. */
    readonly hostTier?: HostTierSpec
    /** The SLOs of goodput. */
    readonly slo: Slo
    /** Turns of each trial, in seed order (generated workloads differ per seed). */
    readonly turnsPerTrial: readonly number[]
    readonly bootstrap: {
      readonly resamples: number
      readonly unit: 'session' | 'request'
      readonly level: 0.95
    }
  }
  readonly runs: readonly RunSummary[]
  readonly policies: readonly PolicySummary[]
  readonly paired: readonly {
    readonly policy: string
    readonly reference: string
    readonly metrics: Readonly<Record<CiMetric, PairedEstimate>>
  }[]
  /** Every ordered pair of policies, `policy − other`, on the same resamples (what the verdict reads). */
  readonly pairwise: readonly {
    readonly policy: string
    readonly other: string
    readonly metrics: Readonly<Record<CiMetric, PairedEstimate>>
  }[]
  readonly strata: {
    readonly turnIndex: readonly Stratum[]
    readonly appendTokens: readonly Stratum[]
    readonly overlap: readonly Stratum[]
  }
}

/** Version written into results (kept in sync with package.json by a test). *
 * @example
 * ```ts
 * import { SIM_VERSION } from '@kvc/sim'
 * console.log(`kvc-sim ${SIM_VERSION}`)
 * ```
 */
export const SIM_VERSION = '0.0.0'

const TURN_BUCKETS: readonly [string, number, number][] = [
  ['0', 0, 1],
  ['1-4', 1, 5],
  ['5-19', 5, 20],
  ['20-49', 20, 50],
  ['50+', 50, Number.POSITIVE_INFINITY],
]
const APPEND_BUCKETS: readonly [string, number, number][] = [
  ['<256', 0, 256],
  ['256-1K', 256, 1024],
  ['1K-4K', 1024, 4096],
  ['4K-8K', 4096, 8192],
  ['>=8K', 8192, Number.POSITIVE_INFINITY],
]
const OVERLAP_BUCKETS: readonly [string, number, number][] = [
  ['<50%', 0, 0.5],
  ['50-80%', 0.5, 0.8],
  ['80-95%', 0.8, 0.95],
  ['95-99%', 0.95, 0.99],
  ['>=99%', 0.99, Number.POSITIVE_INFINITY],
]

/** One stratum's members: the reference policy's turns (global indices) whose key is in the bucket. */
interface StratumMembers {
  readonly bucket: string
  readonly idx: Int32Array
  /** Whether the stratum is every turn (its intervals are then the main bootstrap's). */
  readonly whole: boolean
}

/**
 * The non-empty strata of the turns by `key` of the reference policy's records `ref` (the same
 * turns for every policy).
 */
function strataMembers(
  ref: readonly TurnRecord[],
  buckets: readonly [string, number, number][],
  key: (r: TurnRecord) => number,
): StratumMembers[] {
  // One pass: each turn's bucket (the buckets do not overlap), then each bucket's members in order.
  const n = ref.length
  const which = new Int8Array(n).fill(-1)
  const sizes = new Int32Array(buckets.length)
  for (let i = 0; i < n; i++) {
    const k = key(ref[i]!)
    for (let b = 0; b < buckets.length; b++) {
      if (k >= buckets[b]![1] && k < buckets[b]![2]) {
        which[i] = b
        sizes[b]!++
        break
      }
    }
  }
  const idx = Array.from(sizes, (m) => new Int32Array(m))
  const filled = new Int32Array(buckets.length)
  for (let i = 0; i < n; i++) {
    const b = which[i]!
    if (b >= 0) idx[b]![filled[b]!++] = i
  }
  const out: StratumMembers[] = []
  buckets.forEach(([name], b) => {
    if (sizes[b] === 0) return
    out.push({ bucket: name, idx: idx[b]!, whole: sizes[b] === n })
  })
  return out
}

type StratumFigures = Stratum['policies'][string]

/** The quantiles of a stratum's TTFT bootstrap (p50 and p90). */
const STRATUM_QS = [0.5, 0.9] as const

/**
 * One policy's figures in each stratum but its TTFT quantiles, read from its columns (they hold
 * each turn's end-to-end time, TPOT, failure, fast path and SLO).
 */
function stratumFigures(
  strata: readonly StratumMembers[],
  c: PolicyColumns,
): Omit<StratumFigures, 'ttftP50' | 'ttftP90'>[] {
  return strata.map(({ idx }) => {
    const n = idx.length
    const e = new Float64Array(n)
    let nTpot = 0
    let failed = 0
    let fast = 0
    let good = 0
    for (let k = 0; k < n; k++) {
      const i = idx[k]!
      e[k] = c.e2e[i]!
      if (!Number.isNaN(c.tpot![i]!)) nTpot++
      failed += c.failed[i]!
      fast += c.fast[i]!
      good += c.good![i]!
    }
    const tp = new Float64Array(nTpot)
    for (let k = 0, j = 0; k < n; k++) {
      const x = c.tpot![idx[k]!]!
      if (!Number.isNaN(x)) tp[j++] = x
    }
    return {
      tpotP90: quantileSorted(tp.sort(), 0.9),
      e2eP50: quantileSorted(e.sort(), 0.5),
      goodput: good / n,
      errorRate: failed / n,
      fastPathRate: fast / n,
    }
  })
}

/**
 * A stratum's TTFT p50 and p90 with intervals: with no bootstrap of its own (a stratum of every
 * turn, such as a trace's only turn index, is the whole sample), the main bootstrap's `whole`
 * estimates, from the same draws.
 */
function stratumTtft(
  boot: StratumBootstrapper | undefined,
  whole: Readonly<Record<CiMetric, Estimate>>,
): readonly Estimate[] {
  return boot === undefined ? [whole.ttft_p50, whole.ttft_p90] : boot.finish()[0]!
}

/** Every policy's figures (`figures[p]`, in stratum order) joined into strata, policies in label order. */
function joinStrata(
  labels: readonly string[],
  strata: readonly StratumMembers[],
  figures: readonly (readonly StratumFigures[])[],
): Stratum[] {
  return strata.map((m, k) => {
    const policies: Record<string, StratumFigures> = {}
    labels.forEach((label, p) => {
      policies[label] = figures[p]![k]!
    })
    return { bucket: m.bucket, turns: m.idx.length, policies }
  })
}

function downsample(times: readonly number[], vals: readonly number[], points: number) {
  if (times.length <= points) return { timesS: [...times], usage: [...vals] }
  const step = times.length / points
  const t: number[] = []
  const v: number[] = []
  for (let i = 0; i < points; i++) {
    const a = Math.floor(i * step)
    const b = Math.max(a + 1, Math.floor((i + 1) * step))
    let m = 0
    for (let j = a; j < b; j++) if (vals[j]! > m) m = vals[j]!
    t.push(times[a]!)
    v.push(m)
  }
  return { timesS: t, usage: v }
}

function cdf(recs: readonly TurnRecord[], points = 60): [number, number][] {
  const done = recs.filter((r) => r.status === 'completed').map(ttftOf)
  if (done.length === 0) return []
  const s = Float64Array.from(done).sort()
  const out: [number, number][] = []
  for (let i = 1; i <= points; i++) {
    const q = i / points
    out.push([quantileSorted(s, q), (q * done.length) / recs.length])
  }
  return out
}

/**
 * Run an experiment: every policy on every seed (paired: a trial's workload is the same for all
 * policies), then the protocol's statistics. Deterministic: the same config gives the same result,
 * whatever the runner.
 *
 * @example
 * ```ts
 * import { runExperiment } from '@kvc/sim'
 * const r = await runExperiment({
 *   workload: { kind: 'agentic', options: { sessions: 4, maxTurnsPerSession: 6 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2, 3], bootstrapResamples: 50,
 * })
 * r.paired[0]?.metrics.ttft_p50.diff // round-robin minus kvc, seconds
 * ```
 */
export async function runExperiment(
  config: ExperimentConfig,
  options: {
    readonly runner?: Runner
    readonly onProgress?: (task: number, ended: number, total: number) => void
    /** Receives the raw run results (every turn record), in task order: policy-major, then seed. */
    readonly onResults?: (results: readonly RunResult[]) => void
    /**
     * Computes the summary's part that does not need the runs ({@link prepareSummary}), started
     * before them: the CLI runs it on a spare thread while the runs go. Unset, or if it fails, the
     * summary computes it after the runs. The result is the same either way.
     */
    readonly prepare?: (job: SummaryPrepJob) => Promise<SummaryPrep>
    /**
     * Computes a share of a policy's bootstrap on another thread ({@link computeResampleShare})
     * while this thread computes the rest: the CLI's `run` gives it to the thread that prepared
     * the summary. Unset, or if it fails, this thread computes everything. The same result either way.
     */
    readonly share?: (job: ResampleShareJob) => Promise<ResampleShare>
  } = {},
): Promise<ExperimentResult> {
  const plan = planExperiment(config)
  const runner = options.runner ?? inProcessRunner
  const prepared = options.prepare?.(summaryPrepJob(plan)).catch(() => undefined)
  // Each run's metrics are computed as it ends, while the other runs go, not after the last one,
  // and so is each policy's part of the summary once its runs and the reference policy's have ended.
  const kv = plan.cost.kvBytesPerToken
  const slo = plan.config.slo ?? DEFAULT_SLO
  const ended: RunResult[] = new Array(plan.tasks.length)
  const summary = new SummaryBuilder(plan, false, prepared !== undefined, options.share)
  prepared?.then((p) => summary.prepare(p))
  const returned = await runner(plan.tasks, options.onProgress ?? (() => {}), (task, result) => {
    ended[task] = result
    earlyMetrics.set(result, { kv, slo, metrics: computeRunMetrics(result, kv, slo) })
    summary.add(task, result)
  })
  const results = plan.tasks.map((_, i) => ended[i] ?? returned[i]!)
  options.onResults?.(results)
  const prep = await prepared
  await summary.settled()
  return summary.finish(results, prep)
}

/** Run metrics computed by `runExperiment` as each run ended, with the arguments they were computed with. */
const earlyMetrics = new WeakMap<RunResult, { kv: number; slo: Slo; metrics: RunMetrics }>()

/** `computeRunMetrics(run, kvBytesPerToken, slo)`, taken from {@link earlyMetrics} when computed already. */
function runMetricsOf(run: RunResult, kvBytesPerToken: number, slo: Slo): RunMetrics {
  const e = earlyMetrics.get(run)
  if (e !== undefined && e.kv === kvBytesPerToken && e.slo.ttftS === slo.ttftS && e.slo.tpotS === slo.tpotS) {
    return e.metrics
  }
  return computeRunMetrics(run, kvBytesPerToken, slo)
}

/**
 * What an experiment's summary needs that does not depend on its runs (see
 * {@link prepareSummary}): the first seed's workload, the page size the runs will use, and the
 * bootstrap's count, seed and, when known before the runs, clusters per seed (a trace: the same
 * turns in every trial; the built-in workload's sessions are known per seed only after generating it).
 *
 * @example
 * ```ts
 * import type { SummaryPrepJob } from '@kvc/sim'
 * const job: SummaryPrepJob = { workload: { kind: 'agentic' }, seed: 1, pageSize: 16, resamples: 200, bootSeed: 1 ^ 0x5eed }
 * ```
 */
export interface SummaryPrepJob {
  readonly workload: WorkloadSource
  /** The first seed (its workload's statistics describe the experiment). */
  readonly seed: number
  readonly pageSize: number
  readonly resamples: number
  readonly bootSeed: number
  readonly clustersPerSeed?: readonly number[]
}

/**
 * The part of an experiment's summary computed from its workload alone: the workload's
 * statistics and, with `clustersPerSeed`, the bootstrap's resample draws (cluster counts).
 *
 * @example
 * ```ts
 * import type { SummaryPrep } from '@kvc/sim'
 * const pages = (p: SummaryPrep) => p.stats.totalPages
 * ```
 */
export interface SummaryPrep {
  readonly job: SummaryPrepJob
  readonly stats: TraceStats
  readonly draws?: readonly Int32Array[]
}

/**
 * Whether another thread can build the workload again for little next to its statistics: the
 * built-in generator and the number-only traces (Mooncake, Azure), not LMCache traces, whose
 * loading tokenizes every prompt's text (seconds, where their statistics take milliseconds).
 *
 * @example
 * ```ts
 * import { cheapToRebuild } from '@kvc/sim'
 * cheapToRebuild({ kind: 'agentic' }) // true
 * ```
 */
export function cheapToRebuild(source: WorkloadSource): boolean {
  if (source.kind === 'agentic') return true
  const format = source.format ?? 'auto'
  return (format === 'auto' ? detectTraceFormat(source.path) : format) !== 'lmcache'
}

/** The page size a plan's runs use: the configured one, else the workload's suggestion, else 16. */
function runPageSize(plan: ExperimentPlan): number {
  return plan.config.pageSize ?? plan.w0.suggestedPageSize ?? 16
}

/** The bootstrap's clusters in one trial of workload `w`: sessions (and session-less turns), or turns. */
function clustersOf(w: Workload): number {
  if (w.sessions === 0) return w.turns.length
  const sessions = new Set<number>()
  let loose = 0
  for (const t of w.turns) {
    if (t.session >= 0) sessions.add(t.session)
    else loose++
  }
  return sessions.size + loose
}

function summaryPrepJob(plan: ExperimentPlan): SummaryPrepJob {
  const { config, w0, resamples } = plan
  return {
    workload: config.workload,
    seed: config.seeds[0]!,
    pageSize: runPageSize(plan),
    resamples,
    bootSeed: config.seeds[0]! ^ 0x5eed,
    // A trace gives every trial the same turns; each seed of the built-in workload has its own.
    ...(config.workload.kind === 'trace' ? { clustersPerSeed: config.seeds.map(() => clustersOf(w0)) } : {}),
  }
}

/**
 * Compute the part of an experiment's summary that does not need its runs (pure: the same job
 * gives the same result on any thread). `runExperiment` uses it only where it matches what the
 * runs produced (their page size, the bootstrap layout's shape).
 *
 * @example
 * ```ts
 * import { prepareSummary } from '@kvc/sim'
 * const p = prepareSummary({ workload: { kind: 'agentic', options: { sessions: 2 } }, seed: 1, pageSize: 16, resamples: 10, bootSeed: 7 })
 * p.stats.sessions // 2
 * ```
 */
export function prepareSummary(job: SummaryPrepJob): SummaryPrep {
  const w = buildWorkload(job.workload, job.seed)
  return {
    job,
    stats: computeTraceStats(w, job.pageSize),
    ...(job.clustersPerSeed === undefined
      ? {}
      : { draws: drawResamples(job.clustersPerSeed, job.resamples, job.bootSeed) }),
  }
}

/**
 * A share of one policy's bootstrap for another thread (`runExperiment`'s `share`): its per-turn
 * columns, the bootstrap's clusters, and the members of the strata whose TTFT p50 and p90 get
 * intervals; the thread computes resamples `0` to `to − 1` of all of them
 * ({@link computeResampleShare}) while this one computes the others.
 *
 * @example
 * ```ts
 * import type { ResampleShareJob } from '@kvc/sim'
 * const half = (job: ResampleShareJob) => job.to / job.resamples // 0.5
 * ```
 */
export interface ResampleShareJob {
  readonly columns: PolicyColumns
  readonly layout: PackedLayout
  readonly strata: readonly Int32Array[]
  readonly resamples: number
  readonly bootSeed: number
  readonly to: number
}

/**
 * What {@link computeResampleShare} gives back: the resampled metrics (one array per metric of
 * `CI_METRICS`, resamples `0` to `to − 1`) and, per stratum of the job, its TTFT p50 and p90.
 *
 * @example
 * ```ts
 * import type { ResampleShare } from '@kvc/sim'
 * const resamples = (s: ResampleShare) => s.metrics[0]?.length ?? 0
 * ```
 */
export interface ResampleShare {
  readonly metrics: readonly Float64Array[]
  readonly strata: readonly (readonly Float64Array[])[]
}

/**
 * Compute a {@link ResampleShareJob} (pure: the same job gives the same share on any thread).
 * `draws`: the bootstrap's draws for the job's layout, count and seed when the thread has them
 * (from its {@link prepareSummary}); else they are drawn again (the same ones).
 *
 * @example
 * ```ts
 * import { computeResampleShare } from '@kvc/sim'
 * const ones = Float64Array.of(1, 1)
 * const share = computeResampleShare({
 *   columns: { ttft: ones, e2e: ones, elapsedTtft: ones, elapsed: ones, failed: new Uint8Array(2), fast: new Uint8Array(2) },
 *   layout: { clustersPerSeed: [2], starts: Int32Array.of(0, 1, 2), all: Int32Array.of(0, 1) },
 *   strata: [], resamples: 10, bootSeed: 1, to: 5,
 * })
 * share.metrics[0]!.length // 5
 * ```
 */
export function computeResampleShare(job: ResampleShareJob, draws?: readonly Int32Array[]): ResampleShare {
  checkShareJob(job)
  const layout = unpackLayout(job.layout)
  const d =
    draws !== undefined && draws.length >= job.to
      ? draws
      : drawResamples(job.layout.clustersPerSeed, job.to, job.bootSeed)
  return {
    metrics: resampleMetrics(job.columns, layout, d, 0, job.to),
    strata: job.strata.map((m) => resampleStratum([job.columns.ttft], m, layout, STRATUM_QS, d, 0, job.to)),
  }
}

/**
 * A {@link ResampleShareJob} that can be computed (throws `INVALID_OPTION` naming the bad value):
 * `to` an integer in [0, resamples], the packed layout's bounds consistent with its clusters, and
 * every request index of the layout and the strata inside the columns.
 */
function checkShareJob(job: ResampleShareJob): void {
  const { layout, columns, strata } = job
  checkOption(
    Number.isInteger(job.resamples) && job.resamples >= 1,
    'resamples must be an integer ≥ 1',
    job.resamples,
  )
  checkOption(
    Number.isInteger(job.to) && job.to >= 0 && job.to <= job.resamples,
    'to must be an integer in [0, resamples]',
    job.to,
  )
  let clusters = 0
  for (const n of layout.clustersPerSeed) {
    checkOption(
      Number.isInteger(n) && n >= 1,
      'clustersPerSeed must hold integers ≥ 1',
      layout.clustersPerSeed,
    )
    clusters += n
  }
  const { starts, all } = layout
  checkOption(
    starts.length === clusters + 1,
    'starts must hold one bound per cluster and a last one',
    starts.length,
  )
  checkOption(
    starts[0] === 0 && starts[clusters] === all.length,
    'starts must run from 0 to all.length',
    starts,
  )
  for (let k = 0; k < clusters; k++)
    checkOption(starts[k]! <= starts[k + 1]!, 'starts must not decrease', starts)
  const n = columns.ttft.length
  for (const c of [
    columns.e2e,
    columns.elapsedTtft,
    columns.elapsed,
    columns.failed,
    columns.fast,
    columns.tpot,
    columns.good,
  ])
    checkOption(
      c === undefined || c.length === n,
      `every column must hold ${n} requests, as ttft does`,
      c?.length,
    )
  const inside = (a: Int32Array) => a.every((i) => i >= 0 && i < n)
  checkOption(inside(all), `the layout's request indices must lie in [0, ${n})`, all)
  for (const m of strata) checkOption(inside(m), `a stratum's request indices must lie in [0, ${n})`, m)
}

/** An experiment checked and turned into tasks (policy-major, then seed), ready to run. */
export interface ExperimentPlan {
  readonly config: ExperimentConfig
  readonly specs: readonly PolicySpec[]
  readonly topology: Topology
  readonly cost: CostModel
  readonly timeScale: number
  readonly faults: readonly FaultSpec[]
  readonly resamples: number
  /** The first seed's workload (its statistics describe the experiment). */
  readonly w0: Workload
  readonly tasks: readonly RunTask[]
}

/**
 * Check an experiment's configuration (throws `INVALID_OPTION` naming the bad value, before
 * anything runs) and list its tasks.
 */
export function planExperiment(config: ExperimentConfig): ExperimentPlan {
  const topology = typeof config.topology === 'string' ? parseTopology(config.topology) : config.topology
  checkOption(config.policies.length >= 1, 'give at least one policy', config.policies)
  checkOption(config.seeds.length >= 1, 'give at least one seed', config.seeds)
  checkOption(
    new Set(config.policies).size === config.policies.length,
    'policies must be distinct',
    config.policies,
  )
  checkOption(new Set(config.seeds).size === config.seeds.length, 'seeds must be distinct', config.seeds)
  const specs: PolicySpec[] = config.policies.map(parsePolicySpec)
  const cost = makeCostModel(config.costModel)
  const timeScale = config.timeScale ?? 1
  const faults = config.faults ?? []
  const resamples = config.bootstrapResamples ?? 200
  const slo = config.slo ?? DEFAULT_SLO
  checkOption(
    slo.ttftS > 0 && slo.tpotS > 0 && Number.isFinite(slo.ttftS) && Number.isFinite(slo.tpotS),
    'slo: ttftS and tpotS must be positive finite seconds',
    slo,
  )
  checkOption(
    Number.isInteger(resamples) && resamples >= 0,
    'bootstrapResamples must be a non-negative integer',
    resamples,
  )
  const tasks: RunTask[] = []
  for (const spec of specs) {
    for (const seed of config.seeds) {
      tasks.push({
        index: tasks.length,
        policy: spec.label,
        seed,
        workload: config.workload,
        topology: formatTopology(topology),
        timeScale,
        costModel: config.costModel ?? {},
        faults,
        ...(config.pageSize === undefined ? {} : { pageSize: config.pageSize }),
        ...(config.evictGranularity === undefined ? {} : { evictGranularity: config.evictGranularity }),
        ...(config.maxConcurrentSessions === undefined
          ? {}
          : { maxConcurrentSessions: config.maxConcurrentSessions }),
        ...(config.hostTier === undefined ? {} : { hostTier: config.hostTier }),
      })
    }
  }
  // Validate the workload before the long part.
  const w0 = buildWorkload(config.workload, config.seeds[0]!)
  return { config, specs, topology, cost, timeScale, faults, resamples, w0, tasks }
}

/**
 * The protocol's statistics of a planned experiment's results (in task order). `lean` leaves out
 * what only the HTML report of one experiment shows (strata, usage series, CDFs): a sweep's points.
 * `prepared`: {@link prepareSummary} of this experiment, computed earlier (used where it matches).
 */
export function summarizeExperiment(
  plan: ExperimentPlan,
  results: readonly RunResult[],
  lean = false,
  prepared?: SummaryPrep,
): ExperimentResult {
  return new SummaryBuilder(plan, lean).finish(results, prepared)
}

/** What every policy's part of a summary needs from the reference policy's runs. */
interface ReferenceParts {
  readonly layout: ClusterLayout
  readonly strata: {
    readonly turnIndex: readonly StratumMembers[]
    readonly appendTokens: readonly StratumMembers[]
    readonly overlap: readonly StratumMembers[]
  }
}

/** One policy's part of a summary: it needs only that policy's runs and the reference's. */
interface PolicyPart {
  /** Its runs' metrics, in seed order. */
  readonly metrics: readonly RunMetrics[]
  readonly summary: PolicySummary
  readonly boot: PolicyBootstrap
  readonly strata: {
    readonly turnIndex: readonly StratumFigures[]
    readonly appendTokens: readonly StratumFigures[]
    readonly overlap: readonly StratumFigures[]
  }
}

/** A policy's part waiting for the share of its bootstrap another thread computes. */
interface PendingPart {
  readonly pending: Promise<ResampleShare | undefined>
  /**
   * Computes here a few of the resamples given to the other thread, from the top of its range
   * down; `false` when none was left.
   */
  readonly steal: () => boolean
  /** The part, with that share (`undefined`: none came; this thread computes what is left). */
  readonly complete: (share: ResampleShare | undefined) => PolicyPart
}

/** Resamples the main thread takes at a time from the other thread's share while it waits for it. */
const STEAL_RESAMPLES = 8

/**
 * An experiment's summary built as its runs end: once the reference policy's runs have all ended
 * (the bootstrap's clusters and the strata are its turns), each policy whose runs have all ended
 * gets its columns, bootstrap, strata figures and summary, so that little is left after the last
 * run (the pairs' differences and the report's assembly). The result is the same whatever the
 * order in which the runs end.
 */
class SummaryBuilder {
  readonly #plan: ExperimentPlan
  readonly #lean: boolean
  readonly #S: number
  readonly #slo: Slo
  readonly #bootSeed: number
  #ended: (RunResult | undefined)[]
  #ref: ReferenceParts | undefined
  #parts: (PolicyPart | PendingPart | undefined)[]
  #prep: SummaryPrep | undefined
  readonly #share: ((job: ResampleShareJob) => Promise<ResampleShare>) | undefined
  /** Whether a preparation is on its way (parts wait for its draws). */
  #waiting: boolean

  /**
   * `preparing`: a preparation will come through {@link prepare}; `share`: computes a share of a
   * policy's bootstrap on another thread (see `runExperiment`).
   */
  constructor(
    plan: ExperimentPlan,
    lean: boolean,
    preparing = false,
    share?: (job: ResampleShareJob) => Promise<ResampleShare>,
  ) {
    this.#waiting = preparing
    this.#share = share
    this.#plan = plan
    this.#lean = lean
    this.#S = plan.config.seeds.length
    this.#slo = plan.config.slo ?? DEFAULT_SLO
    this.#bootSeed = plan.config.seeds[0]! ^ 0x5eed
    this.#ended = new Array(plan.tasks.length)
    this.#parts = new Array(plan.specs.length)
  }

  /**
   * Gives the summary's part prepared before the runs ({@link prepareSummary}; `undefined`: none
   * came), used where it matches, and computes what the runs ended so far allow.
   */
  prepare(prepared: SummaryPrep | undefined): void {
    if (prepared !== undefined) this.#prep = prepared
    this.#waiting = false
    this.#advance()
  }

  /** Records that task `task` ended with `run`, and computes what that completes. */
  add(task: number, run: RunResult): void {
    this.#ended[task] = run
    this.#advance()
  }

  /** Resolves once every part waiting for another thread's share has it (or has given up on it). */
  async settled(): Promise<void> {
    for (let p = 0; p < this.#parts.length; p++) {
      const x = this.#parts[p]
      if (x !== undefined && 'pending' in x) {
        // Meanwhile this thread computes the other thread's resamples itself, from the top down, a
        // few at a time (yielding so that the share's message can come in): it never waits longer
        // than it would take to compute them all, and a share that comes first ends it.
        const box: { arrived: boolean; got?: ResampleShare } = { arrived: false }
        void x.pending.then((got) => {
          box.arrived = true
          if (got !== undefined) box.got = got
        })
        await undefined // a share already here is taken first
        while (!box.arrived && x.steal()) await new Promise((r) => setImmediate(r))
        if (this.#parts[p] === x) this.#parts[p] = x.complete(box.got)
      }
    }
  }

  /**
   * Computes the parts that the ended runs allow (not before the preparation, whose bootstrap
   * draws the parts use). A failure leaves the part to {@link finish}, which reports it.
   */
  #advance(): void {
    if (this.#waiting) return
    try {
      if (this.#ref === undefined) {
        const refRuns = this.#runsOf(0)
        if (refRuns === undefined) return
        this.#ref = this.#reference(refRuns)
      }
      for (let p = 0; p < this.#parts.length; p++) this.#partOf(p)
    } catch {
      // Computed again by `finish`.
    }
  }

  /**
   * The summary of `results` (in task order). What was computed from other run objects than these
   * is computed again; `prepared` is used where it matches.
   */
  finish(results: readonly RunResult[], prepared?: SummaryPrep): ExperimentResult {
    if (results.some((r, i) => this.#ended[i] !== r)) {
      this.#ended = new Array(results.length)
      this.#ref = undefined
      this.#parts = new Array(this.#plan.specs.length)
    }
    if (prepared !== undefined) this.#prep = prepared
    const { config, specs, topology, cost, timeScale, faults, resamples, w0 } = this.#plan
    const byPolicy = specs.map((_, p) => results.slice(p * this.#S, (p + 1) * this.#S))
    const prep = this.#matching(results[0]!.pageSize)
    results.forEach((r, i) => {
      this.#ended[i] = r
    })
    if (this.#ref === undefined) this.#ref = this.#reference(byPolicy[0]!)
    const ref = this.#ref
    const parts = specs.map((_, p) => this.#partOf(p, true)!)
    const slo = this.#slo
    const metrics = parts.flatMap((x) => x.metrics)
    const sessionsUnit = w0.sessions > 0
    const boot = pairBootstraps(
      parts.map((x) => x.boot),
      0,
      resamples,
    )
    const labels = specs.map((s) => s.label)
    const strata = (kind: 'turnIndex' | 'appendTokens' | 'overlap') =>
      this.#lean
        ? []
        : joinStrata(
            labels,
            ref.strata[kind],
            parts.map((x) => x.strata[kind]),
          )
    // The runs' page size (`pageSize`, else the workload's suggestion, else 16), as the caches paged.
    const stats = prep?.stats ?? computeTraceStats(w0, results[0]!.pageSize)
    const capacity = Number.isFinite(cost.capacityTokens)
      ? results[0]!.capacityTokens
      : ('unlimited' as const)
    return {
      tool: { name: 'kvc-sim', version: SIM_VERSION },
      config: {
        workload: { ...stats, kind: config.workload.kind, notes: w0.notes },
        topology: formatTopology(topology),
        ...(w0.blockTokens === undefined ? {} : { granularity: 'block' as const }),
        policies: labels,
        reference: labels[0]!,
        seeds: [...config.seeds],
        timeScale,
        pageSize: results[0]!.pageSize,
        capacityTokens: capacity,
        costModel: cost,
        faults: formatFaults(faults),
        ...(config.maxConcurrentSessions === undefined
          ? {}
          : { maxConcurrentSessions: config.maxConcurrentSessions }),
        ...(config.hostTier === undefined ? {} : { hostTier: config.hostTier }),
        slo,
        turnsPerTrial: byPolicy[0]!.map((r) => r.records.length),
        bootstrap: { resamples, unit: sessionsUnit ? 'session' : 'request', level: 0.95 },
      },
      runs: results.map((r, i) => {
        const { sessionFastPathRates: _drop, ...m } = metrics[i]!
        return {
          policy: r.policy,
          seed: r.seed,
          topology: r.topology,
          makespanS: r.makespanS,
          metrics: m,
          accounting: r.accounting,
          counters: r.counters,
        }
      }),
      policies: parts.map((x) => x.summary),
      paired: specs
        .slice(1)
        .map((s, i) => ({ policy: s.label, reference: labels[0]!, metrics: boot.paired[i + 1]! })),
      pairwise: specs.flatMap((s, p) =>
        specs.flatMap((o, q) =>
          p === q ? [] : [{ policy: s.label, other: o.label, metrics: boot.pairwise[p]![q]! }],
        ),
      ),
      strata: {
        turnIndex: strata('turnIndex'),
        appendTokens: strata('appendTokens'),
        overlap: strata('overlap'),
      },
    }
  }

  /** The preparation, if it is this experiment's and matches what the runs did (their page size). */
  #matching(pageSize: number): SummaryPrep | undefined {
    const { config } = this.#plan
    const prep = this.#prep
    return prep !== undefined &&
      prep.job.pageSize === pageSize &&
      prep.job.seed === config.seeds[0] &&
      JSON.stringify(prep.job.workload) === JSON.stringify(config.workload)
      ? prep
      : undefined
  }

  /** Policy `p`'s runs in seed order, when they have all ended. */
  #runsOf(p: number): RunResult[] | undefined {
    const runs: RunResult[] = []
    for (let i = p * this.#S; i < (p + 1) * this.#S; i++) {
      const r = this.#ended[i]
      if (r === undefined) return undefined
      runs.push(r)
    }
    return runs
  }

  /** The bootstrap's clusters and the strata, from the reference policy's runs. */
  #reference(runs: readonly RunResult[]): ReferenceParts {
    const layout = clusterLayout(
      runs.map((r) => r.records),
      this.#plan.w0.sessions > 0,
    )
    // The bootstrap's draws made before the runs, when they fit.
    const prep = this.#matching(runs[0]!.pageSize)
    if (prep?.draws !== undefined && prep.job.bootSeed === this.#bootSeed) {
      keepDraws(layout, this.#plan.resamples, this.#bootSeed, prep.job.clustersPerSeed!, prep.draws)
    }
    if (this.#lean) return { layout, strata: { turnIndex: [], appendTokens: [], overlap: [] } }
    // The reference policy's turns over all seeds, in column order (strata are the same turns for all).
    const ref = runs.flatMap((r) => r.records as TurnRecord[])
    return {
      layout,
      strata: {
        turnIndex: strataMembers(ref, TURN_BUCKETS, (r) => r.turnIndex),
        appendTokens: strataMembers(ref, APPEND_BUCKETS, (r) => r.appendTokens),
        overlap: strataMembers(ref, OVERLAP_BUCKETS, (r) => r.reuseFraction),
      },
    }
  }

  /**
   * Policy `p`'s part, computed now if its runs and the reference's have all ended. `wait`: a part
   * still waiting for another thread's share is completed without it (this thread computes it).
   */
  #partOf(p: number, wait = false): PolicyPart | undefined {
    const kept = this.#parts[p]
    if (kept !== undefined) {
      if (!('pending' in kept)) return kept
      if (!wait) return undefined
      const part = kept.complete(undefined)
      this.#parts[p] = part
      return part
    }
    if (this.#ref === undefined) return undefined
    const runs = this.#runsOf(p)
    if (runs === undefined) return undefined
    const part = this.#policyPart(p, runs, this.#ref)
    this.#parts[p] = part
    return 'pending' in part ? (wait ? this.#partOf(p, true) : undefined) : part
  }

  #policyPart(p: number, runs: readonly RunResult[], ref: ReferenceParts): PolicyPart | PendingPart {
    const { config, specs, cost, resamples, w0 } = this.#plan
    const S = this.#S
    const slo = this.#slo
    const lean = this.#lean
    const spec = specs[p]!
    const sessionsUnit = w0.sessions > 0
    const columns = policyColumns(runs, ref.layout, slo, sessionsUnit)
    const booter = new PolicyBootstrapper(columns, ref.layout, resamples, this.#bootSeed)
    const strataBoots = (strata: readonly StratumMembers[]) =>
      strata.map((m) =>
        m.whole
          ? undefined
          : new StratumBootstrapper([columns.ttft], m.idx, ref.layout, STRATUM_QS, resamples, this.#bootSeed),
      )
    const boots = {
      turnIndex: strataBoots(ref.strata.turnIndex),
      appendTokens: strataBoots(ref.strata.appendTokens),
      overlap: strataBoots(ref.strata.overlap),
    }
    const shared = [...boots.turnIndex, ...boots.appendTokens, ...boots.overlap]
    const sharedMembers = [...ref.strata.turnIndex, ...ref.strata.appendTokens, ...ref.strata.overlap]
      .filter((m) => !m.whole)
      .map((m) => m.idx)
    // Half the resamples go to another thread when there is one; this thread computes the other half.
    let pending: Promise<ResampleShare | undefined> | undefined
    /** The other thread's resamples not taken back yet: `0 … next − 1`. */
    let next = 0
    if (this.#share !== undefined && resamples >= 2) {
      const to = resamples >> 1
      pending = this.#share({
        columns,
        layout: packLayout(ref.layout),
        strata: sharedMembers,
        resamples,
        bootSeed: this.#bootSeed,
        to,
      }).catch(() => undefined)
      booter.compute(to, resamples)
      for (const b of shared) b?.compute(to, resamples)
      next = to
    }
    const steal = (): boolean => {
      if (next <= 0) return false
      const from = Math.max(0, next - STEAL_RESAMPLES)
      booter.compute(from, next)
      for (const b of shared) b?.compute(from, next)
      next = from
      return true
    }
    const ms = runs.map((r) => runMetricsOf(r, cost.kvBytesPerToken, slo))
    const sum = (f: (m: RunMetrics) => number) => ms.reduce((a, m) => a + f(m), 0)
    const failedByCause: Record<string, number> = {}
    for (const m of ms)
      for (const [k, v] of Object.entries(m.failedByCause)) failedByCause[k] = (failedByCause[k] ?? 0) + v
    const hist = [0, 0, 0, 0, 0]
    let starved = 0
    let starvedPeak = 0
    let lucky = 0
    let luckyPeak = 0
    runs.forEach((run) => {
      const per = new Map<number, { n: number; fast: number; peak: number }>()
      for (const r of run.records) {
        if (r.session < 0) continue
        let s = per.get(r.session)
        if (s === undefined) {
          s = { n: 0, fast: 0, peak: 0 }
          per.set(r.session, s)
        }
        s.n++
        if (r.status === 'completed' && r.path === 'fast') s.fast++
        if (r.inputLength > s.peak) s.peak = r.inputLength
      }
      for (const s of per.values()) {
        const rate = s.fast / s.n
        hist[fastPathBucket(rate)]!++
        if (rate < 0.2) {
          starved++
          starvedPeak += s.peak
        } else if (rate >= 0.8) {
          lucky++
          luckyPeak += s.peak
        }
      }
    })
    const decEv = sum((m) => m.decodeEvictions)
    const preEv = sum((m) => m.prefillEvictions)
    const allRecs = runs.flatMap((r) => r.records as TurnRecord[])
    const tiers = runs.map(hostTierFigures)
    const peak = Math.max(...ms.map((m) => m.peakDecodeUsage))
    const points = config.usagePoints ?? 240
    const usage = lean
      ? []
      : runs[0]!.usage
          .filter((u) => u.role !== 'prefill')
          .map((u) => ({ workerId: u.workerId, ...downsample(u.timesS, u.usage, points) }))
    const ttftCdf = lean ? [] : cdf(allRecs)
    // What the strata show besides TTFT needs no resample: computed before the share comes back.
    const rest = {
      turnIndex: stratumFigures(ref.strata.turnIndex, columns),
      appendTokens: stratumFigures(ref.strata.appendTokens, columns),
      overlap: stratumFigures(ref.strata.overlap, columns),
    }
    const complete = (got: ResampleShare | undefined): PolicyPart => {
      if (got !== undefined) {
        booter.give({ from: 0, samples: got.metrics })
        const given = shared.filter((b) => b !== undefined)
        if (got.strata.length === given.length) {
          for (let i = 0; i < given.length; i++) given[i]!.give({ from: 0, samples: got.strata[i]! })
        }
      }
      const boot = booter.finish()
      const summary: PolicySummary = {
        policy: spec.label,
        policyName: runs[0]!.policyName,
        pathMode: runs[0]!.pathMode,
        topology: runs[0]!.topology,
        estimates: boot.estimates,
        turns: sum((m) => m.turns),
        failed: sum((m) => m.failed),
        failedByCause: Object.fromEntries(Object.entries(failedByCause).sort(([a], [b]) => (a < b ? -1 : 1))),
        paths: {
          fast: sum((m) => m.paths.fast),
          local: sum((m) => m.paths.local),
          seed: sum((m) => m.paths.seed),
          direct: sum((m) => m.paths.direct),
        },
        reseeds: sum((m) => m.reseeds),
        migrations: sum((m) => m.migrations),
        hostTier: {
          loadBacks: tiers.reduce((a, f) => a + f.loadBacks, 0),
          loadedBackTokens: tiers.reduce((a, f) => a + f.loadedBackTokens, 0) / S,
          reprefilledTokens: tiers.reduce((a, f) => a + f.reprefilledTokens, 0) / S,
          peerFetchedTokens: tiers.reduce((a, f) => a + f.peerFetchedTokens, 0) / S,
        },
        prefixHitRatio: sum((m) => m.prefixHitRatio) / S,
        kvTransferGB: sum((m) => m.kvTransferBytes) / S / 1e9,
        decodeEvictions: decEv,
        decodeTokensPerEviction:
          decEv === 0 ? 0 : sum((m) => m.decodeEvictions * m.decodeTokensPerEviction) / decEv,
        prefillEvictions: preEv,
        prefillTokensPerEviction:
          preEv === 0 ? 0 : sum((m) => m.prefillEvictions * m.prefillTokensPerEviction) / preEv,
        throughputTurnsPerS: sum((m) => m.throughputTurnsPerS) / S,
        peakDecodeUsage: peak,
        sessionFastPathHistogram: hist,
        starvation: {
          starved,
          starvedMeanPeakInput: starved === 0 ? 0 : starvedPeak / starved,
          lucky,
          luckyMeanPeakInput: lucky === 0 ? 0 : luckyPeak / lucky,
        },
        usage,
        ttftCdf,
      }
      // Each stratum's TTFT quantiles (bootstrapped), then its other figures.
      const figures = (
        rest: readonly Omit<StratumFigures, 'ttftP50' | 'ttftP90'>[],
        sb: readonly (StratumBootstrapper | undefined)[],
      ): StratumFigures[] =>
        rest.map((r, k) => {
          const ttft = stratumTtft(sb[k], boot.estimates)
          return { ttftP50: ttft[0]!, ttftP90: ttft[1]!, ...r }
        })
      return {
        metrics: ms,
        summary,
        boot,
        strata: {
          turnIndex: figures(rest.turnIndex, boots.turnIndex),
          appendTokens: figures(rest.appendTokens, boots.appendTokens),
          overlap: figures(rest.overlap, boots.overlap),
        },
      }
    }
    return pending === undefined ? complete(undefined) : { pending, steal, complete }
  }
}
