import { parseTopology, topologyWorkers } from '../cluster/topology.js'
import { checkOption } from '../errors/simError.js'
import { DEFAULT_SLO, type Slo } from '../metrics/slo.js'
import type { RunResult } from '../metrics/runResult.js'
import type { CiMetric, Estimate, PairedEstimate } from './bootstrap.js'
import {
  type ExperimentConfig,
  type ExperimentPlan,
  type ExperimentResult,
  type Runner,
  type RunTask,
  SIM_VERSION,
  inProcessRunner,
  planExperiment,
  summarizeExperiment,
} from './experiment.js'

/**
 * The axes `kvc-sim sweep` can vary:
 * - `time-scale`: load, by compressing think times and arrival gaps (2 = twice as fast);
 * - `max-concurrent-sessions`: the replayer's session concurrency;
 * - `sessions`: sessions of the built-in workload;
 * - `capacity`: KV tokens per worker;
 * - `pd-ratio`: the P:D split of a fixed number of GPUs (`1P7D`, `2P6D`, ...; colocated policies
 *   run the same `N×DP` at every point).
 *
 * @example
 * ```ts
 * import { SWEEP_AXES } from '@kvc/sim'
 * SWEEP_AXES.includes('time-scale') // true
 * ```
 */
export const SWEEP_AXES = [
  'time-scale',
  'max-concurrent-sessions',
  'sessions',
  'capacity',
  'pd-ratio',
] as const

/**
 * One of {@link SWEEP_AXES}.
 *
 * @example
 * ```ts
 * import type { SweepAxis } from '@kvc/sim'
 * const a: SweepAxis = 'capacity'
 * ```
 */
export type SweepAxis = (typeof SWEEP_AXES)[number]

/**
 * The metrics a sweep charts and names crossovers on: goodput, TTFT p90 and TPOT p90.
 *
 * @example
 * ```ts
 * import { SWEEP_METRICS } from '@kvc/sim'
 * SWEEP_METRICS[0] // 'goodput'
 * ```
 */
export const SWEEP_METRICS = ['goodput', 'ttft_p90', 'tpot_p90'] as const satisfies readonly CiMetric[]

/**
 * A sweep: one experiment (policies × seeds, paired) per value of one axis, every other setting
 * fixed. Every point uses the same seeds, so every policy at every point replays the same
 * sessions and arrivals of each seed.
 *
 * @example
 * ```ts
 * import type { SweepConfig } from '@kvc/sim'
 * const s: SweepConfig = { workload: { kind: 'agentic' }, topology: '2P6D', policies: ['kvc', 'dp-cache-aware'],
 *   seeds: [1, 2, 3], axis: 'time-scale', values: [1, 2, 4, 8] }
 * ```
 */
export interface SweepConfig extends Omit<ExperimentConfig, 'usagePoints'> {
  readonly axis: SweepAxis
  /** The grid: numbers (`pd-ratio`: topologies such as `'2P6D'`), at least two, distinct. */
  readonly values: readonly (number | string)[]
}

/**
 * One policy at one sweep point: every {@link CiMetric} with its bootstrap 95% interval.
 *
 * @example
 * ```ts
 * import type { SweepPolicyPoint } from '@kvc/sim'
 * const goodput = (p: SweepPolicyPoint) => p.estimates.goodput.value
 * ```
 */
export interface SweepPolicyPoint {
  readonly policy: string
  readonly topology: string
  readonly turns: number
  readonly failed: number
  readonly estimates: Readonly<Record<CiMetric, Estimate>>
}

/**
 * One value of the axis and what every policy did there.
 *
 * @example
 * ```ts
 * import type { SweepPoint } from '@kvc/sim'
 * const label = (p: SweepPoint) => p.label // 'time scale 2'
 * ```
 */
export interface SweepPoint {
  readonly value: number | string
  /** The value in words (`time scale 2`, `capacity 200K`, `2P6D`). */
  readonly label: string
  /** Where the point sits on the chart's x axis (the value; `pd-ratio`: the number of P workers). */
  readonly x: number
  readonly turnsPerTrial: readonly number[]
  readonly policies: readonly SweepPolicyPoint[]
  /** Every ordered pair of policies, `policy − other`, paired on the same resamples. */
  readonly pairwise: ExperimentResult['pairwise']
}

/**
 * Who is ahead of whom on a run of consecutive points: `leader` is better with a 95% interval of
 * the paired difference that excludes zero, `undefined` where the interval includes it (a tie).
 * `minAbs`/`maxAbs` bound the size of the difference over the run.
 *
 * @example
 * ```ts
 * import type { CrossoverSegment } from '@kvc/sim'
 * const s: CrossoverSegment = { from: 0, to: 2, leader: 'kvc', minAbs: 0.01, maxAbs: 0.04 }
 * ```
 */
export interface CrossoverSegment {
  /** Indices of the first and last point of the run. */
  readonly from: number
  readonly to: number
  readonly leader: string | undefined
  readonly minAbs: number
  readonly maxAbs: number
}

/**
 * How a pair of policies compares along the axis on one metric, and the sentence that says it.
 * A crossover is where the lead changes hands: between the last point one policy was
 * significantly better and the first point the other was (ties in between stay ties).
 *
 * @example
 * ```ts
 * import type { Crossover } from '@kvc/sim'
 * const flips = (c: Crossover) => c.crossings.length
 * ```
 */
export interface Crossover {
  readonly policy: string
  readonly other: string
  readonly metric: (typeof SWEEP_METRICS)[number]
  readonly segments: readonly CrossoverSegment[]
  /** Each change of leader: after point `after` (the last where `from` led), before `before` (the first where `to` leads). */
  readonly crossings: readonly {
    readonly after: number
    readonly before: number
    readonly from: string
    readonly to: string
  }[]
  readonly text: string
}

/**
 * What `kvc-sim sweep` computes (and writes as `sweep.json`).
 *
 * @example
 * ```ts
 * import type { SweepResult } from '@kvc/sim'
 * const sentences = (r: SweepResult) => r.crossovers.map((c) => c.text)
 * ```
 */
export interface SweepResult {
  readonly tool: { readonly name: 'kvc-sim'; readonly version: string }
  readonly config: {
    readonly axis: SweepAxis
    /** The axis in words (`time scale`). */
    readonly axisLabel: string
    readonly values: readonly (number | string)[]
    readonly workload: { readonly name: string; readonly kind: string; readonly sessions: number }
    readonly topology: string
    readonly policies: readonly string[]
    readonly reference: string
    readonly seeds: readonly number[]
    readonly timeScale: number
    readonly maxConcurrentSessions?: number
    readonly capacityTokens: number | 'unlimited'
    readonly slo: Slo
    readonly faults: string
    readonly bootstrap: ExperimentResult['config']['bootstrap']
  }
  readonly points: readonly SweepPoint[]
  /** Reference policy against every other, on each of {@link SWEEP_METRICS}. */
  readonly crossovers: readonly Crossover[]
}

const AXIS_LABEL: Record<SweepAxis, string> = {
  'time-scale': 'time scale',
  'max-concurrent-sessions': 'concurrent sessions',
  sessions: 'sessions',
  capacity: 'KV capacity',
  'pd-ratio': 'P:D split',
}

function compactTokens(v: number): string {
  if (!Number.isFinite(v)) return 'unlimited'
  if (v >= 1e6 && v % 1e5 === 0) return `${v / 1e6}M`
  if (v >= 1e3 && v % 100 === 0) return `${v / 1e3}K`
  return String(v)
}

/** A point's value in words. */
function pointLabel(axis: SweepAxis, v: number | string): string {
  switch (axis) {
    case 'time-scale':
      return `time scale ${v}`
    case 'max-concurrent-sessions':
      return `${v} concurrent sessions`
    case 'sessions':
      return `${v} sessions`
    case 'capacity':
      return `capacity ${compactTokens(Number(v))}`
    case 'pd-ratio':
      return String(v)
  }
}

/** A run of points in words: `time scale 1–3`, `2P6D–4P4D`, `capacity 100K`. */
function rangeLabel(axis: SweepAxis, points: readonly SweepPoint[], from: number, to: number): string {
  const a = points[from]!.value
  const b = points[to]!.value
  if (from === to) return pointLabel(axis, a)
  switch (axis) {
    case 'time-scale':
      return `time scale ${a}–${b}`
    case 'max-concurrent-sessions':
      return `${a}–${b} concurrent sessions`
    case 'sessions':
      return `${a}–${b} sessions`
    case 'capacity':
      return `capacity ${compactTokens(Number(a))}–${compactTokens(Number(b))}`
    case 'pd-ratio':
      return `${a}–${b}`
  }
}

/** The experiment of one point: the base configuration with the axis set to `v`. */
function pointConfig(config: SweepConfig, v: number | string): ExperimentConfig {
  const { axis: _a, values: _v, ...base } = config
  switch (config.axis) {
    case 'time-scale':
      return { ...base, timeScale: Number(v) }
    case 'max-concurrent-sessions':
      return { ...base, maxConcurrentSessions: Number(v) }
    case 'sessions': {
      checkOption(
        base.workload.kind === 'agentic',
        'the sessions axis applies to the built-in workload only',
        v,
      )
      const w = base.workload as Extract<ExperimentConfig['workload'], { kind: 'agentic' }>
      return { ...base, workload: { kind: 'agentic', options: { ...w.options, sessions: Number(v) } } }
    }
    case 'capacity':
      return { ...base, costModel: { ...base.costModel, capacityTokens: Number(v) } }
    case 'pd-ratio':
      return { ...base, topology: String(v) }
  }
}

/** Check the grid: at least two distinct values, valid for the axis (before anything runs). */
function checkValues(config: SweepConfig): void {
  const vs = config.values
  checkOption(vs.length >= 2, `a sweep needs at least two values of ${config.axis}`, vs)
  checkOption(new Set(vs.map(String)).size === vs.length, `sweep values of ${config.axis} repeat`, vs)
  if (config.axis === 'pd-ratio') {
    const tops = vs.map((v) => parseTopology(String(v)))
    checkOption(
      tops.every((t) => t.kind === 'pd'),
      'pd-ratio values are nPmD topologies (1P7D, 2P6D, ...)',
      vs,
    )
    checkOption(
      new Set(tops.map(topologyWorkers)).size === 1,
      'pd-ratio values must all use the same number of GPUs (1P7D, 2P6D, 4P4D: 8 each)',
      vs,
    )
    return
  }
  for (const v of vs) {
    const n = Number(v)
    const integer = config.axis !== 'time-scale' && config.axis !== 'capacity'
    checkOption(
      typeof v === 'number' &&
        n > 0 &&
        (Number.isFinite(n) || config.axis === 'capacity') &&
        (!integer || Number.isInteger(n)),
      `sweep value ${String(v)} of ${config.axis}: must be a positive ${integer ? 'integer' : 'number'}`,
      v,
    )
  }
}

/** Where a point sits on the x axis. */
function pointX(axis: SweepAxis, v: number | string): number {
  if (axis !== 'pd-ratio') return Number(v)
  const t = parseTopology(String(v))
  return t.kind === 'pd' ? t.prefill : 0
}

/**
 * Run a sweep: one paired experiment per value of the axis (all runs of all points through one
 * runner, so worker threads stay busy across points), then the crossovers of the reference policy
 * against every other on goodput, TTFT p90 and TPOT p90. Deterministic, whatever the runner.
 *
 * @throws SimError `INVALID_OPTION` for a bad grid or configuration, before anything runs.
 *
 * @example
 * ```ts
 * import { runSweep } from '@kvc/sim'
 * const r = await runSweep({
 *   workload: { kind: 'agentic', options: { sessions: 4, maxTurnsPerSession: 5 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2], bootstrapResamples: 30,
 *   axis: 'time-scale', values: [1, 4],
 * })
 * r.crossovers.map((c) => c.text) // one sentence per metric
 * ```
 */
export async function runSweep(
  config: SweepConfig,
  options: {
    readonly runner?: Runner
    /** Progress of a task (numbered across all points: point-major, then policy, then seed). */
    readonly onProgress?: (task: number, ended: number, total: number) => void
  } = {},
): Promise<SweepResult> {
  checkOption(
    (SWEEP_AXES as readonly string[]).includes(config.axis),
    `unknown sweep axis "${config.axis}" (use ${SWEEP_AXES.join(', ')})`,
    config.axis,
  )
  checkValues(config)
  const plans: ExperimentPlan[] = config.values.map((v) => planExperiment(pointConfig(config, v)))
  const tasks: RunTask[] = []
  const base: number[] = []
  for (const plan of plans) {
    base.push(tasks.length)
    for (const t of plan.tasks) tasks.push({ ...t, index: tasks.length })
  }
  base.push(tasks.length)
  const pointOf = (task: number) => {
    let i = 0
    while (base[i + 1]! <= task) i++
    return i
  }
  const pending = plans.map((p) => new Array<RunResult | undefined>(p.tasks.length))
  const left = plans.map((p) => p.tasks.length)
  const summaries: (ExperimentResult | undefined)[] = plans.map(() => undefined)
  const take = (task: number, result: RunResult) => {
    const i = pointOf(task)
    if (pending[i]![task - base[i]!] !== undefined) return
    pending[i]![task - base[i]!] = result
    if (--left[i]! === 0) {
      summaries[i] = summarizeExperiment(plans[i]!, pending[i] as RunResult[], true)
      pending[i] = []
    }
  }
  const runner = options.runner ?? inProcessRunner
  const returned = await runner(tasks, options.onProgress ?? (() => {}), take)
  returned.forEach((r, task) => {
    if (r !== undefined) take(task, r)
  })
  const points: SweepPoint[] = summaries.map((s, i) => {
    checkOption(s !== undefined, 'a sweep point did not get all its runs back from the runner', i)
    const v = config.values[i]!
    return {
      value: v,
      label: pointLabel(config.axis, v),
      x: pointX(config.axis, v),
      turnsPerTrial: s!.config.turnsPerTrial,
      policies: s!.policies.map((p) => ({
        policy: p.policy,
        topology: p.topology,
        turns: p.turns,
        failed: p.failed,
        estimates: p.estimates,
      })),
      pairwise: s!.pairwise,
    }
  })
  const first = summaries[0]!
  const c = first.config
  return {
    tool: { name: 'kvc-sim', version: SIM_VERSION },
    config: {
      axis: config.axis,
      axisLabel: AXIS_LABEL[config.axis],
      values: [...config.values],
      workload: { name: c.workload.name, kind: c.workload.kind, sessions: c.workload.sessions },
      topology: config.axis === 'pd-ratio' ? config.values.map(String).join(', ') : c.topology,
      policies: c.policies,
      reference: c.reference,
      seeds: c.seeds,
      timeScale: c.timeScale,
      ...(c.maxConcurrentSessions === undefined ? {} : { maxConcurrentSessions: c.maxConcurrentSessions }),
      capacityTokens: c.capacityTokens,
      slo: config.slo ?? DEFAULT_SLO,
      faults: c.faults,
      bootstrap: c.bootstrap,
    },
    points,
    crossovers: sweepCrossovers(config.axis, points, c.reference),
  }
}

/** The sign of the reference's lead at each point: its name, the other's, or undefined (a tie). */
function leaders(
  points: readonly SweepPoint[],
  a: string,
  b: string,
  metric: CiMetric,
): { leader: string | undefined; abs: number }[] {
  return points.map((pt) => {
    const d: PairedEstimate | undefined = pt.pairwise.find((x) => x.policy === a && x.other === b)?.metrics[
      metric
    ]
    if (d === undefined) return { leader: undefined, abs: Number.NaN }
    const higher = metric === 'goodput'
    // The paired difference a − b: a is better where its whole interval lies on a's side.
    const aBetter = higher ? d.lo > 0 : d.hi < 0
    const bBetter = higher ? d.hi < 0 : d.lo > 0
    return { leader: aBetter ? a : bBetter ? b : undefined, abs: Math.abs(d.diff) }
  })
}

const METRIC_WORDS: Record<(typeof SWEEP_METRICS)[number], string> = {
  goodput: 'goodput',
  ttft_p90: 'TTFT p90',
  tpot_p90: 'TPOT p90',
}

/** The size of a lead over a run of points, in one unit: `2.0–3.1 pp`, `4.6–13 ms`, `0.30–1.2 s`. */
function amount(metric: (typeof SWEEP_METRICS)[number], lo: number, hi: number): string {
  if (!Number.isFinite(hi) || !Number.isFinite(lo)) return 'a percentile failed turns reach'
  const [k, unit, digits] = metric === 'goodput' ? [100, 'pp', 1] : hi < 1 ? [1000, 'ms', -1] : [1, 's', -1]
  const one = (x: number) => {
    const v = x * k
    return digits > 0 ? v.toFixed(digits) : v >= 100 ? v.toFixed(0) : v.toPrecision(2)
  }
  return one(lo) === one(hi) ? `${one(lo)} ${unit}` : `${one(lo)}–${one(hi)} ${unit}`
}

/**
 * The crossovers of `reference` against every other policy along the points, on each of
 * {@link SWEEP_METRICS}, from the paired 95% intervals (never from point estimates alone).
 *
 * @example
 * ```ts
 * import { sweepCrossovers, type SweepResult } from '@kvc/sim'
 * const again = (r: SweepResult) => sweepCrossovers(r.config.axis, r.points, r.config.reference)
 * ```
 */
export function sweepCrossovers(
  axis: SweepAxis,
  points: readonly SweepPoint[],
  reference: string,
): Crossover[] {
  const out: Crossover[] = []
  const policies = points[0]?.policies.map((p) => p.policy) ?? []
  for (const other of policies) {
    if (other === reference) continue
    for (const metric of SWEEP_METRICS) {
      const ls = leaders(points, reference, other, metric)
      const segments: CrossoverSegment[] = []
      ls.forEach((l, i) => {
        const last = segments[segments.length - 1]
        if (last !== undefined && last.leader === l.leader) {
          segments[segments.length - 1] = {
            ...last,
            to: i,
            minAbs: Math.min(last.minAbs, l.abs),
            maxAbs: Math.max(last.maxAbs, l.abs),
          }
        } else segments.push({ from: i, to: i, leader: l.leader, minAbs: l.abs, maxAbs: l.abs })
      })
      const crossings: Crossover['crossings'][number][] = []
      let lastLead: { name: string; at: number } | undefined
      for (const s of segments) {
        if (s.leader === undefined) continue
        if (lastLead !== undefined && lastLead.name !== s.leader)
          crossings.push({ after: lastLead.at, before: s.from, from: lastLead.name, to: s.leader })
        lastLead = { name: s.leader, at: s.to }
      }
      out.push({
        policy: reference,
        other,
        metric,
        segments,
        crossings,
        text: crossoverText(axis, points, reference, other, metric, segments, crossings),
      })
    }
  }
  return out
}

function crossoverText(
  axis: SweepAxis,
  points: readonly SweepPoint[],
  a: string,
  b: string,
  metric: (typeof SWEEP_METRICS)[number],
  segments: readonly CrossoverSegment[],
  crossings: Crossover['crossings'],
): string {
  const m = METRIC_WORDS[metric]
  const range = (s: CrossoverSegment) => rangeLabel(axis, points, s.from, s.to)
  const all = rangeLabel(axis, points, 0, points.length - 1)
  const lead = (s: CrossoverSegment) =>
    s.leader === undefined
      ? `no significant difference at ${range(s)}`
      : `${s.leader} leads at ${range(s)} by ${amount(metric, s.minAbs, s.maxAbs)}`
  const leader = segments.find((s) => s.leader !== undefined)?.leader
  if (leader === undefined) return `On ${m}, ${a} and ${b} do not differ significantly anywhere in ${all}.`
  const loser = leader === a ? b : a
  if (segments.length === 1) {
    const s = segments[0]!
    return `On ${m}, ${leader} leads ${loser} across ${all}, by ${amount(metric, s.minAbs, s.maxAbs)}.`
  }
  if (crossings.length === 0)
    return `On ${m}, ${leader} ≥ ${loser} across ${all}: ${segments.map(lead).join('; ')}.`
  if (crossings.length === 1) {
    const c = crossings[0]!
    const upTo = segments.filter((s) => s.to < c.before)
    const after = segments.filter((s) => s.from >= c.before)
    const lastOk = upTo[upTo.length - 1]!.to
    return (
      `On ${m}, ${c.from} ≥ ${c.to} up to ${pointLabel(axis, points[lastOk]!.value)} ` +
      `(${upTo.map(lead).join('; ')}); beyond it ${after.map(lead).join('; ')}.`
    )
  }
  return `On ${m}, the lead between ${a} and ${b} changes hands ${crossings.length} times: ${segments.map(lead).join('; ')}.`
}
