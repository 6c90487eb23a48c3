import type { CiMetric, PairedEstimate } from '../protocol/bootstrap.js'
import type { ExperimentResult } from '../protocol/experiment.js'
import type { SweepResult } from '../protocol/sweep.js'
import { fmt, fmtDiff } from './svg.js'
import { sloText, turnsPerTrialText } from './verdict.js'

function pct(x: number): string {
  return Number.isFinite(x) ? `${(x * 100).toFixed(1)}%` : fmt(x)
}

function pad(s: string, n: number, right = false): string {
  const w = [...s].length
  return w >= n ? s : right ? ' '.repeat(n - w) + s : s + ' '.repeat(n - w)
}

/** Longest policy label printed as is; longer ones are cut and spelled out under the table. */
const LABEL_MAX = 24

/**
 * Short labels for the printed tables: `:defaults=rust` becomes `†` (explained once under the
 * table), and a label still longer than {@link LABEL_MAX} is cut with `…` and listed in full.
 */
function shortLabels(labels: readonly string[]): { short: Map<string, string>; notes: string[] } {
  const short = new Map<string, string>()
  const notes: string[] = []
  let rust = false
  for (const l of labels) {
    let s = l.replace(/:defaults=rust(?=:|$)/, '†')
    if (s !== l) rust = true
    if ([...s].length > LABEL_MAX) {
      s = `${[...s].slice(0, LABEL_MAX - 1).join('')}…`
      notes.push(`${s} = ${l}`)
    }
    short.set(l, s)
  }
  if (rust) {
    notes.unshift(
      "† = :defaults=rust, the baseline with sgl-router's Rust cache-aware defaults (see the @kvc/sim README, Policies)",
    )
  }
  return { short, notes }
}

/** Left-aligned first column(s), right-aligned numbers, two spaces between columns. */
function grid(head: readonly string[], rows: readonly (readonly string[])[], leftColumns: number): string[] {
  const widths = head.map((h, c) => Math.max([...h].length, ...rows.map((row) => [...row[c]!].length)))
  const line = (cells: readonly string[]) =>
    cells
      .map((s, c) => pad(s, widths[c]!, c >= leftColumns))
      .join('  ')
      .trimEnd()
  const sep = widths.map((w) => '─'.repeat(w)).join('  ')
  return [line(head), sep, ...rows.map(line)]
}

/** Wrap `text` to `width` columns at spaces. */
export function wrapColumns(text: string, width: number): string {
  const lines: string[] = []
  let cur = ''
  for (const w of text.split(/ +/)) {
    if (cur !== '' && cur.length + 1 + w.length > width) {
      lines.push(cur)
      cur = w
    } else cur = cur === '' ? w : `${cur} ${w}`
  }
  if (cur !== '') lines.push(cur)
  return lines.join('\n')
}

function pairedText(d: PairedEstimate, m: CiMetric): string {
  if (m === 'goodput') {
    const f = (x: number) => (Number.isFinite(x) ? (x * 100).toFixed(2) : fmt(x))
    return `${d.diff > 0 ? '+' : ''}${f(d.diff)} pp [${f(d.lo)}, ${f(d.hi)}]`
  }
  return `${fmtDiff(d.diff, 's')} [${fmt(d.lo)}, ${fmt(d.hi)}]`
}

/**
 * The tables `kvc-sim compare` and `run` print, about 120 columns wide: one row per policy with
 * goodput, TTFT, TPOT, ITL and end-to-end percentiles, the error rate and the fast-path rate;
 * with two policies or more, the paired differences against the reference with their 95%
 * intervals (goodput, TTFT p90, TPOT p90); then what the labels' marks mean and the conditions.
 *
 * @example
 * ```ts
 * import { renderComparisonTable, runExperiment } from '@kvc/sim'
 * const r = await runExperiment({ workload: { kind: 'agentic', options: { sessions: 2, maxTurnsPerSession: 2 } },
 *   topology: '1P1D', policies: ['kvc'], seeds: [1, 2, 3], bootstrapResamples: 10 })
 * console.log(renderComparisonTable(r))
 * ```
 */
export function renderComparisonTable(r: ExperimentResult): string {
  const { short, notes } = shortLabels(r.policies.map((p) => p.policy))
  const head = [
    'policy',
    'topology',
    'goodput',
    'TTFT p50',
    'TTFT p90',
    'TTFT p99',
    'TPOT p90',
    'ITL p99',
    'E2E p90',
    'errors',
    'fast path',
  ]
  const rows = r.policies.map((p) => {
    const e = p.estimates
    return [
      short.get(p.policy)!,
      p.topology,
      pct(e.goodput.value),
      fmt(e.ttft_p50.value, 's'),
      fmt(e.ttft_p90.value, 's'),
      fmt(e.ttft_p99.value, 's'),
      fmt(e.tpot_p90.value, 's'),
      fmt(e.itl_p99.value, 's'),
      fmt(e.e2e_p90.value, 's'),
      pct(e.error_rate.value),
      pct(e.fast_path_rate.value),
    ]
  })
  const out = grid(head, rows, 2)
  if (r.paired.length > 0) {
    const metrics: readonly [CiMetric, string][] = [
      ['goodput', 'Δ goodput [95% CI]'],
      ['ttft_p90', 'Δ TTFT p90 [95% CI]'],
      ['tpot_p90', 'Δ TPOT p90 [95% CI]'],
    ]
    out.push(
      '',
      `Paired against ${short.get(r.config.reference)} (policy − reference, on the same resampled turns):`,
    )
    out.push(
      ...grid(
        ['policy', ...metrics.map(([, h]) => h)],
        r.paired.map((pp) => [short.get(pp.policy)!, ...metrics.map(([m]) => pairedText(pp.metrics[m], m))]),
        1,
      ),
    )
  }
  const failing = r.policies.filter((p) => p.failed > 0)
  if (failing.length > 0) {
    out.push(
      '',
      ...failing.map((p) => {
        const causes = Object.entries(p.failedByCause)
          .sort((a, b) => b[1] - a[1])
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')
        return wrapColumns(`${short.get(p.policy)} failed ${p.failed} of ${p.turns} turns: ${causes}.`, 118)
      }),
    )
  }
  const c = r.config
  const foot =
    `${c.seeds.length} seeds × ${c.policies.length} ${c.policies.length === 1 ? 'policy' : 'policies'} on ${c.workload.name} ` +
    `(${turnsPerTrialText(c.turnsPerTrial)}${c.granularity === 'block' ? ', block granularity' : ''}), time scale ${c.timeScale}` +
    `${c.maxConcurrentSessions === undefined ? '' : `, at most ${c.maxConcurrentSessions} sessions at once`}, ` +
    `capacity ${c.capacityTokens === 'unlimited' ? 'unlimited' : c.capacityTokens.toLocaleString('en')} tokens/worker, ` +
    `SLOs ${sloText(c.slo)} (goodput = share of turns meeting both). ` +
    'Failed turns count as infinitely slow in percentiles ("failed").'
  return [...out, '', ...notes.map((n) => wrapColumns(n, 118)), wrapColumns(foot, 118)].join('\n')
}

/** A sweep value for a table cell (`200K` for a capacity). */
function axisValue(s: SweepResult, v: number | string): string {
  if (s.config.axis !== 'capacity' || typeof v !== 'number') return String(v)
  if (!Number.isFinite(v)) return 'unlimited'
  return v >= 1e6 && v % 1e5 === 0 ? `${v / 1e6}M` : v >= 1e3 && v % 100 === 0 ? `${v / 1e3}K` : String(v)
}

/**
 * The table `kvc-sim sweep` prints: per axis value, each policy's goodput and TTFT/TPOT p90.
 *
 * @example
 * ```ts
 * import { renderSweepTable, runSweep } from '@kvc/sim'
 * const s = await runSweep({ workload: { kind: 'agentic', options: { sessions: 2, maxTurnsPerSession: 2 } },
 *   topology: '1P1D', policies: ['kvc', 'round-robin'], seeds: [1, 2], bootstrapResamples: 10,
 *   axis: 'time-scale', values: [1, 2] })
 * console.log(renderSweepTable(s))
 * ```
 */
export function renderSweepTable(s: SweepResult): string {
  const { short, notes } = shortLabels(s.config.policies)
  const rows: string[][] = []
  for (const pt of s.points) {
    pt.policies.forEach((p, i) => {
      const e = p.estimates
      const bare = (x: number) => (Number.isFinite(x) ? (x * 100).toFixed(1) : fmt(x))
      rows.push([
        i === 0 ? axisValue(s, pt.value) : '',
        short.get(p.policy)!,
        `${pct(e.goodput.value)} [${bare(e.goodput.lo)}, ${bare(e.goodput.hi)}]`,
        `${fmt(e.ttft_p90.value, 's')} [${fmt(e.ttft_p90.lo)}, ${fmt(e.ttft_p90.hi)}]`,
        `${fmt(e.tpot_p90.value, 's')} [${fmt(e.tpot_p90.lo)}, ${fmt(e.tpot_p90.hi)}]`,
        pct(e.error_rate.value),
      ])
    })
  }
  const out = grid(
    [s.config.axisLabel, 'policy', 'goodput [95% CI]', 'TTFT p90 [95% CI]', 'TPOT p90 [95% CI]', 'errors'],
    rows,
    2,
  )
  return [...out, '', ...notes.map((n) => wrapColumns(n, 118))].join('\n').trimEnd()
}
