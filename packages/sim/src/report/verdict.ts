import { parseTopology, topologyWorkers } from '../cluster/topology.js'
import type { CiMetric, PairedEstimate } from '../protocol/bootstrap.js'
import type { ExperimentResult, PolicySummary } from '../protocol/experiment.js'
import type { SweepResult } from '../protocol/sweep.js'
import { fmt } from './svg.js'

/**
 * The conclusion of an experiment (or a sweep) in words, generated from its numbers: a headline
 * (who wins on goodput, or that nobody does), the other decisive facts, the conditions it holds
 * under, and the crossovers a sweep found.
 *
 * @example
 * ```ts
 * import type { Verdict } from '@kvc/sim'
 * const text = (v: Verdict) => [v.headline, ...v.details].join(' ')
 * ```
 */
export interface Verdict {
  readonly headline: string
  readonly details: readonly string[]
  readonly conditions: string
  readonly crossovers: readonly string[]
}

function pct(x: number): string {
  return Number.isFinite(x) ? `${(x * 100).toFixed(1)}%` : fmt(x)
}

const NB = '\u00a0'

function pp(d: PairedEstimate): string {
  const small = Math.max(Math.abs(d.diff), Math.abs(d.lo), Math.abs(d.hi)) < 0.01
  const f = (x: number) => (Number.isFinite(x) ? (x * 100).toFixed(small ? 2 : 1) : fmt(x))
  return `${d.diff > 0 ? '+' : ''}${f(d.diff)}${NB}pp [${f(d.lo)}, ${f(d.hi)}]`
}

/** A duration in seconds, or in milliseconds below 1 s (`12.3 ms`, `0.074 ms`, `2.41 s`). */
function secs(x: number): string {
  if (!Number.isFinite(x)) return fmt(x)
  return Math.abs(x) >= 1 || x === 0 ? fmt(x, `${NB}s`) : fmt(x * 1000, `${NB}ms`)
}

/** A paired difference in the unit its size calls for, the interval in the same unit. */
function sdiff(d: PairedEstimate): string {
  if (!Number.isFinite(d.diff)) return fmt(d.diff)
  const ms = Math.abs(d.diff) < 1
  const k = ms ? 1000 : 1
  const unit = ms ? `${NB}ms` : `${NB}s`
  return `${d.diff > 0 ? '+' : ''}${fmt(d.diff * k, unit)} [${fmt(d.lo * k)}, ${fmt(d.hi * k)}]`
}

/** `a` against `b` on `m`: better, worse, or no significant difference (the 95% interval holds 0). */
function compare(d: PairedEstimate | undefined, m: CiMetric): 'better' | 'worse' | 'tie' {
  if (d === undefined || Number.isNaN(d.lo) || Number.isNaN(d.hi)) return 'tie'
  const higher = m === 'goodput' || m === 'fast_path_rate'
  if (higher ? d.lo > 0 : d.hi < 0) return 'better'
  if (higher ? d.hi < 0 : d.lo > 0) return 'worse'
  return 'tie'
}

function gpus(topology: string): number | undefined {
  try {
    return topologyWorkers(parseTopology(topology))
  } catch {
    return undefined
  }
}

/** The topologies in words, with the note that they use the same GPUs when they do. */
export function topologyNote(policies: readonly { policy: string; topology: string }[]): string {
  const by = new Map<string, string[]>()
  for (const p of policies) by.set(p.topology, [...(by.get(p.topology) ?? []), p.policy])
  if (by.size === 1) {
    const [t] = by.keys()
    return `topology ${t} (${gpus(t!) ?? '?'} GPUs)`
  }
  const counts = new Set([...by.keys()].map(gpus))
  const list = [...by.entries()].map(([t, ps]) => `${t} for ${ps.join(', ')}`).join(', ')
  return counts.size === 1
    ? `topology ${list}: ${[...by.keys()].join(' and ')} use the same ${[...counts][0]} GPUs`
    : `topology ${list} (different GPU counts: compare per GPU)`
}

/** "TTFT ≤ 2 s and TPOT ≤ 25 ms". */
export function sloText(slo: { ttftS: number; tpotS: number }): string {
  const t = (s: number) =>
    s < 1 ? `${Number((s * 1000).toPrecision(4))}${NB}ms` : `${Number(s.toPrecision(4))}${NB}s`
  return `TTFT${NB}≤${NB}${t(slo.ttftS)} and TPOT${NB}≤${NB}${t(slo.tpotS)}`
}

/** "4,289–4,675 turns per trial" (or one number when every trial has as many). */
export function turnsPerTrialText(turns: readonly number[]): string {
  if (turns.length === 0) return 'no turns'
  const lo = Math.min(...turns)
  const hi = Math.max(...turns)
  return lo === hi
    ? `${lo.toLocaleString('en')} turns per trial`
    : `${lo.toLocaleString('en')}–${hi.toLocaleString('en')} turns per trial`
}

function conditions(r: ExperimentResult): string {
  const c = r.config
  const w = c.workload
  return (
    `Conditions: ${w.kind === 'agentic' ? 'built-in agentic workload' : `trace ${w.name}`} ` +
    `(${turnsPerTrialText(c.turnsPerTrial)}${w.sessions > 0 ? ` in ${w.sessions} sessions` : ''}); ` +
    `${topologyNote(r.policies)}; time scale ${c.timeScale}` +
    `${c.maxConcurrentSessions === undefined ? ', no session cap' : `, at most ${c.maxConcurrentSessions} sessions at once`}; ` +
    `KV capacity ${c.capacityTokens === 'unlimited' ? 'unlimited' : `${c.capacityTokens.toLocaleString('en')} tokens`} per worker; ` +
    `${c.seeds.length} seed${c.seeds.length === 1 ? '' : 's'} (${c.seeds.join(', ')}); SLOs ${sloText(c.slo)}; faults ${c.faults}.`
  )
}

/**
 * Who is fastest on a lower-is-better latency metric, against the goodput leader `top` (or, when
 * `top` is the fastest, against the runner-up on that metric).
 */
function latencyFact(
  r: ExperimentResult,
  top: PolicySummary,
  m: CiMetric,
  words: string,
): string | undefined {
  const ranked = r.policies
    .filter((p) => !Number.isNaN(p.estimates[m].value))
    .sort((a, b) => a.estimates[m].value - b.estimates[m].value)
  if (ranked.length < 2) return undefined
  const a = ranked[0]!
  if (a.estimates[m].value === Number.POSITIVE_INFINITY) {
    return `On ${words}, failed turns reach the percentile under every policy (more than ${m.endsWith('p99') ? '1' : '10'}% failed).`
  }
  const b = a === top ? ranked[1]! : top
  const d = pairOf(r, a.policy, b.policy, m)
  const va = secs(a.estimates[m].value)
  const vb = secs(b.estimates[m].value)
  return compare(d, m) === 'better'
    ? `On ${words}, ${a.policy} is fastest: ${va} against ${vb} for ${b.policy} (${sdiff(d!)}).`
    : `On ${words}, ${a.policy} (${va}) and ${b.policy} (${vb}) do not differ significantly.`
}

function pairOf(r: ExperimentResult, a: string, b: string, m: CiMetric): PairedEstimate | undefined {
  return r.pairwise.find((x) => x.policy === a && x.other === b)?.metrics[m]
}

/**
 * The verdict of an experiment, from its paired estimates: the headline is about goodput (the
 * share of turns meeting both SLOs, DistServe's measure), then TTFT p90, TPOT p90, failures and
 * task completion; a sweep adds where the verdict changes along its axis.
 *
 * @example
 * ```ts
 * import { experimentVerdict, runExperiment } from '@kvc/sim'
 * const r = await runExperiment({ workload: { kind: 'agentic', options: { sessions: 3, maxTurnsPerSession: 3 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2, 3], bootstrapResamples: 20 })
 * console.log(experimentVerdict(r).headline)
 * ```
 */
export function experimentVerdict(r: ExperimentResult, sweep?: SweepResult): Verdict {
  const c = r.config
  const slo = sloText(c.slo)
  const ranked = [...r.policies].sort((a, b) => b.estimates.goodput.value - a.estimates.goodput.value)
  const top = ranked[0]!
  const g = (p: PolicySummary) => pct(p.estimates.goodput.value)
  let headline: string
  if (ranked.length === 1) {
    const e = top.estimates
    headline =
      `${top.policy} alone: ${g(top)} of turns meet ${slo} (goodput, 95% CI ${pct(e.goodput.lo)}–${pct(e.goodput.hi)}); ` +
      `TTFT p90 ${secs(e.ttft_p90.value)}, TPOT p90 ${secs(e.tpot_p90.value)}, ${pct(e.error_rate.value)} failed. ` +
      'Nothing to compare against: kvc-sim compare runs several policies on the same trials.'
  } else {
    const tied = ranked
      .slice(1)
      .filter((p) => compare(pairOf(r, top.policy, p.policy, 'goodput'), 'goodput') !== 'better')
    const second = ranked[1]!
    if (tied.length === 0) {
      headline =
        `${top.policy} serves this workload best: ${g(top)} of its turns meet ${slo}, against ${g(second)} for ` +
        `${second.policy}, the runner-up (${pp(pairOf(r, top.policy, second.policy, 'goodput')!)} on the same turns).`
    } else {
      const names = [top, ...tied].map((p) => `${p.policy} (${g(p)})`).join(', ')
      const d = pairOf(r, top.policy, tied[0]!.policy, 'goodput')!
      headline =
        `No policy wins on goodput: ${names} of turns meet ${slo}, and the paired difference between the first two ` +
        `(${pp(d)}) includes zero.`
    }
  }
  const details: string[] = []
  if (ranked.length > 1) {
    const t = latencyFact(r, top, 'ttft_p90', 'TTFT p90')
    if (t !== undefined) details.push(t)
    const d = latencyFact(r, top, 'tpot_p90', 'TPOT p90 (decode speed)')
    if (d !== undefined) details.push(d)
    const failing = r.policies.filter((p) => p.failed > 0)
    if (failing.length > 0) {
      const each = failing.map((p) => {
        const cause = Object.entries(p.failedByCause).sort((x, y) => y[1] - x[1])[0]
        return `${p.policy} ${pct(p.estimates.error_rate.value)}${cause === undefined ? '' : ` (mostly ${cause[0]})`}`
      })
      details.push(
        `Failed turns: ${each.join(', ')}${failing.length < r.policies.length ? '; the others none' : ''}.`,
      )
    } else details.push('No turn failed.')
    const withTasks = ranked.filter((p) => !Number.isNaN(p.estimates.task_p50.value)).slice(0, 2)
    if (withTasks.length === 2) {
      const [a, b] = withTasks as [PolicySummary, PolicySummary]
      const d = pairOf(r, a.policy, b.policy, 'task_served_p50')
      details.push(
        `An agent's task (a whole session) takes a median ${secs(a.estimates.task_p50.value)} with ${a.policy} and ` +
          `${secs(b.estimates.task_p50.value)} with ${b.policy}, of which serving (without think and tool gaps) ` +
          `${secs(a.estimates.task_served_p50.value)} and ${secs(b.estimates.task_served_p50.value)}` +
          `${d === undefined ? '' : compare(d, 'task_served_p50') === 'tie' ? ' (no significant difference)' : ` (${sdiff(d)})`}.`,
      )
    }
  }
  const crossovers =
    sweep === undefined
      ? []
      : sweep.crossovers
          .filter((x) => r.config.policies.includes(x.policy) && r.config.policies.includes(x.other))
          .map((x) => x.text)
  if (sweep === undefined && ranked.length > 1) {
    details.push(
      'This is one operating point: kvc-sim sweep shows where the verdict changes with load, capacity or the P:D split.',
    )
  }
  return { headline, details, conditions: conditions(r), crossovers }
}

/**
 * The verdict of a sweep: which policy leads on goodput at each end of the axis, and every
 * crossover in words.
 *
 * @example
 * ```ts
 * import { runSweep, sweepVerdict } from '@kvc/sim'
 * const s = await runSweep({ workload: { kind: 'agentic', options: { sessions: 3, maxTurnsPerSession: 3 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2], bootstrapResamples: 20,
 *   axis: 'time-scale', values: [1, 4] })
 * console.log(sweepVerdict(s).crossovers.join('\n'))
 * ```
 */
export function sweepVerdict(s: SweepResult): Verdict {
  const c = s.config
  /** Who leads on goodput at point `i`: a policy significantly ahead of all others, or the tied group. */
  const atPoint = (i: number) => {
    const pt = s.points[i]!
    const ranked = [...pt.policies].sort((a, b) => b.estimates.goodput.value - a.estimates.goodput.value)
    const top = ranked[0]!
    const tied = ranked
      .slice(1)
      .filter(
        (p) =>
          compare(
            pt.pairwise.find((x) => x.policy === top.policy && x.other === p.policy)?.metrics.goodput,
            'goodput',
          ) !== 'better',
      )
    return tied.length === 0
      ? `at ${pt.label}, ${top.policy} leads on goodput (${pct(top.estimates.goodput.value)})`
      : `at ${pt.label}, ${[top, ...tied].map((p) => `${p.policy} (${pct(p.estimates.goodput.value)})`).join(', ')} tie on goodput`
  }
  const ends = `${atPoint(0)}; ${atPoint(s.points.length - 1)}`
  const goodputFlips = s.crossovers.filter((x) => x.metric === 'goodput' && x.crossings.length > 0)
  const headline =
    goodputFlips.length === 0
      ? `${ends[0]!.toUpperCase()}${ends.slice(1)}; the goodput lead between ${c.reference} and each other policy never changes hands along the ${c.axisLabel} axis.`
      : `${ends[0]!.toUpperCase()}${ends.slice(1)}; the goodput lead changes hands between ${goodputFlips
          .map((x) => `${x.policy} and ${x.other}`)
          .join(', ')} (below).`
  const pts = s.points
  const turns = pts.flatMap((p) => p.turnsPerTrial)
  const conditionsText =
    `Conditions: ${c.workload.kind === 'agentic' ? 'built-in agentic workload' : `trace ${c.workload.name}`} ` +
    `(${turnsPerTrialText(turns)}${c.workload.sessions > 0 && c.axis !== 'sessions' ? ` in ${c.workload.sessions} sessions` : ''}); ` +
    `${c.axisLabel} varied over ${pts.map((p) => p.value).join(', ')}; ` +
    `${c.axis === 'pd-ratio' ? 'the same GPUs at every point' : topologyNote(pts[0]!.policies)}` +
    `${c.axis === 'time-scale' ? '' : `, time scale ${c.timeScale}`}` +
    `${c.axis === 'max-concurrent-sessions' ? '' : c.maxConcurrentSessions === undefined ? ', no session cap' : `, at most ${c.maxConcurrentSessions} sessions at once`}` +
    `${c.axis === 'capacity' ? '' : `, KV capacity ${c.capacityTokens === 'unlimited' ? 'unlimited' : `${c.capacityTokens.toLocaleString('en')} tokens`} per worker`}; ` +
    `${c.seeds.length} seed${c.seeds.length === 1 ? '' : 's'} per point, paired; SLOs ${sloText(c.slo)}; faults ${c.faults}. ` +
    'A policy is ahead where the 95% interval of the paired difference excludes zero; "≥" means never significantly behind.'
  return {
    headline,
    details: [],
    conditions: conditionsText,
    crossovers: s.crossovers.map((x) => x.text),
  }
}

/**
 * A verdict as plain text wrapped to `width` columns (the CLI prints it above its tables).
 *
 * @example
 * ```ts
 * import { verdictText } from '@kvc/sim'
 * verdictText({ headline: 'kvc wins.', details: [], conditions: 'Conditions: …', crossovers: [] }, 100)
 * ```
 */
export function verdictText(v: Verdict, width = 118): string {
  const wrap = (text: string, indent = '') => {
    const words = text.split(/ +/)
    const lines: string[] = []
    let cur = ''
    for (const w of words) {
      if (cur !== '' && cur.length + 1 + w.length > width - indent.length) {
        lines.push(indent + cur)
        cur = w
      } else cur = cur === '' ? w : `${cur} ${w}`
    }
    if (cur !== '') lines.push(indent + cur)
    return lines.join('\n')
  }
  const parts = [wrap(`Verdict: ${[v.headline, ...v.details].join(' ')}`)]
  if (v.crossovers.length > 0) parts.push(v.crossovers.map((x) => wrap(`- ${x}`, '')).join('\n'))
  parts.push(wrap(v.conditions))
  return parts.join('\n')
}
