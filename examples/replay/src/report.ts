import { mkdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { type CiMetric, type ExperimentResult, renderHtmlReport, toStableJson } from '@kvc/sim'

/** One row of the simulated-vs-replayed comparison. */
export interface ComparisonRow {
  readonly policy: string
  readonly metric: string
  readonly simulated: number
  readonly replayed: number
}

/** For each policy after the reference: whether the simulation and the replay rank it the same way. */
export interface VerdictRow {
  readonly policy: string
  readonly reference: string
  readonly metric: CiMetric
  /** Paired difference policy − reference, simulated and replayed (`NaN` when not computable). */
  readonly simulated: number
  readonly replayed: number
  readonly agree: boolean
}

/** The simulated and replayed results side by side: every policy's headline metrics and the verdicts. */
export interface Comparison {
  readonly rows: readonly ComparisonRow[]
  readonly verdicts: readonly VerdictRow[]
}

const METRICS: readonly [string, CiMetric][] = [
  ['TTFT p50 (s)', 'ttft_p50'],
  ['TTFT p90 (s)', 'ttft_p90'],
  ['E2E p50 (s)', 'e2e_p50'],
  ['error rate', 'error_rate'],
  ['fast-path rate', 'fast_path_rate'],
]

/** Puts a simulated and a replayed experiment (same configuration) side by side. */
export function compareResults(simulated: ExperimentResult, replayed: ExperimentResult): Comparison {
  const rows: ComparisonRow[] = []
  for (const p of replayed.policies) {
    const s = simulated.policies.find((x) => x.policy === p.policy)
    if (s === undefined) continue
    for (const [label, m] of METRICS)
      rows.push({
        policy: p.policy,
        metric: label,
        simulated: s.estimates[m].value,
        replayed: p.estimates[m].value,
      })
    rows.push({
      policy: p.policy,
      metric: 'prefix hit ratio',
      simulated: s.prefixHitRatio,
      replayed: p.prefixHitRatio,
    })
  }
  const verdicts: VerdictRow[] = []
  for (const pr of replayed.paired) {
    const ps = simulated.paired.find((x) => x.policy === pr.policy)
    if (ps === undefined) continue
    for (const m of ['ttft_p50', 'ttft_p90', 'error_rate', 'fast_path_rate'] as const) {
      const a = ps.metrics[m]
      const b = pr.metrics[m]
      const sd = typeof a === 'string' ? Number.NaN : a.diff
      const rd = typeof b === 'string' ? Number.NaN : b.diff
      verdicts.push({
        policy: pr.policy,
        reference: pr.reference,
        metric: m,
        simulated: sd,
        replayed: rd,
        agree: Number.isFinite(sd) && Number.isFinite(rd) && Math.sign(sd) === Math.sign(rd),
      })
    }
  }
  return { rows, verdicts }
}

function fmt(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? '—' : 'failed'
  const a = Math.abs(x)
  return a !== 0 && (a < 0.001 || a >= 1e5) ? x.toExponential(2) : Number(x.toPrecision(3)).toString()
}

/** The comparison as a text table. */
export function renderComparison(c: Comparison): string {
  const rows = [
    ['policy', 'metric', 'simulated', 'replayed'],
    ...c.rows.map((r) => [r.policy, r.metric, fmt(r.simulated), fmt(r.replayed)]),
  ]
  const vrows = [
    ['policy vs reference', 'metric', 'Δ simulated', 'Δ replayed', 'same sign'],
    ...c.verdicts.map((v) => [
      `${v.policy} vs ${v.reference}`,
      v.metric,
      fmt(v.simulated),
      fmt(v.replayed),
      v.agree ? 'yes' : 'NO',
    ]),
  ]
  const table = (t: string[][]) => {
    const w = t[0]!.map((_, i) => Math.max(...t.map((r) => r[i]!.length)))
    return t.map((r) => r.map((x, i) => (i < 2 ? x.padEnd(w[i]!) : x.padStart(w[i]!))).join('  ')).join('\n')
  }
  return `${table(rows)}\n\n${c.verdicts.length === 0 ? '(one policy: no paired verdicts)' : table(vrows)}`
}

/** What the replay ran against, recorded beside the metrics. */
export interface ReplayInfo {
  readonly target: string
  readonly via: string
  readonly vocabSize: number
  readonly startedAt: string
  readonly wallS: number
}

/** The simulator's HTML report, relabelled for a replay (its charts' time axis is wall-clock time here). */
export function renderReplayHtml(result: ExperimentResult, info: ReplayInfo): string {
  return renderHtmlReport(result)
    .replace(/<title>kvc-sim report:/, '<title>kvc-replay report:')
    .replace(/<h1>kvc-sim:/, `<h1>kvc-replay (${info.target}, via ${info.via}):`)
    .replaceAll('simulated time (s)', 'time since the run started (s)')
}

/**
 * Writes `results.json` (the simulator's result object for the replayed runs, plus `replay` and,
 * when simulated too, `comparison`), `report.html`, and with a simulation `simulated.json` and
 * `simulated.html`. Returns the paths written.
 */
export function writeOutputs(
  outDir: string,
  real: ExperimentResult,
  info: ReplayInfo,
  simulated: ExperimentResult | undefined,
): string[] {
  const dir = resolve(outDir)
  mkdirSync(dir, { recursive: true })
  const comparison = simulated === undefined ? undefined : compareResults(simulated, real)
  const files: [string, string][] = [
    [
      'results.json',
      toStableJson({ ...real, replay: info, ...(comparison === undefined ? {} : { comparison }) }),
    ],
    ['report.html', renderReplayHtml(real, info)],
  ]
  if (simulated !== undefined) {
    files.push(['simulated.json', toStableJson(simulated)], ['simulated.html', renderHtmlReport(simulated)])
  }
  for (const [name, text] of files) writeFileSync(join(dir, name), text)
  return files.map(([name]) => join(outDir, name))
}
