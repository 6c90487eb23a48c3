import type { CiMetric, Estimate, PairedEstimate } from '../protocol/bootstrap.js'
import type { ExperimentResult, Stratum } from '../protocol/experiment.js'
import type { SweepResult } from '../protocol/sweep.js'
import { PALETTE, barChart, esc, fmt, fmtDiff, lineChart, stackedBarChart } from './svg.js'
import { type Verdict, experimentVerdict, sloText, topologyNote, turnsPerTrialText } from './verdict.js'

/** The report's style sheet (shared with the sweep page): tables and a two-column chart grid fit 1280 px. */
export const REPORT_CSS = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#fafbfc}
main{max-width:1320px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:22px;margin:8px 0 6px;overflow-wrap:anywhere}h2{font-size:18px;margin:30px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}p,li{max-width:1040px}
.verdict{font-size:15px;background:#fff;border:1px solid #d0d7de;border-left:4px solid #0072B2;border-radius:4px;padding:10px 16px;max-width:none;margin:12px 0}
.verdict p{margin:6px 0;max-width:none}.verdict ul{margin:6px 0;padding-left:20px}.verdict li{max-width:none}
table{border-collapse:collapse;margin:8px 0 14px;font-variant-numeric:tabular-nums;background:#fff}
th,td{border:1px solid #d0d7de;padding:4px 7px;text-align:right;vertical-align:top}
th{background:#f0f3f6;font-weight:600}td{white-space:nowrap}
td:first-child,th:first-child{text-align:left}td.name{white-space:normal;min-width:8em;max-width:15em;overflow-wrap:anywhere}
.ci{color:#57606a;font-size:12px}.good{color:#116329;font-weight:600}.bad{color:#a40e26;font-weight:600}
.grid-charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:12px}
.grid-usage{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:6px;min-width:0}
svg.chart{width:100%;height:auto;display:block}
svg .ct{font-size:14px;font-weight:600}svg .tick{font-size:11px;fill:#444}svg .grid{stroke:#e6e9ed}svg .axis{stroke:#555}
svg .whisker{stroke:#111;stroke-width:1.2}.kv td{text-align:left;white-space:normal}.note{color:#57606a;font-size:13px}
code{background:#eff1f3;padding:1px 4px;border-radius:3px}
`

/** Hatched fill for failed percentiles (referenced by the charts). */
export const HATCH_DEFS =
  '<svg width="0" height="0" style="position:absolute"><defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#a40e26" stroke-width="2"/></pattern></defs></svg>'

const METRIC_LABEL: Record<CiMetric, string> = {
  ttft_mean: 'TTFT mean',
  ttft_p50: 'TTFT p50',
  ttft_p90: 'TTFT p90',
  ttft_p99: 'TTFT p99',
  tpot_mean: 'TPOT mean',
  tpot_p50: 'TPOT p50',
  tpot_p90: 'TPOT p90',
  tpot_p99: 'TPOT p99',
  itl_p50: 'ITL p50',
  itl_p90: 'ITL p90',
  itl_p99: 'ITL p99',
  e2e_mean: 'E2E mean',
  e2e_p50: 'E2E p50',
  e2e_p90: 'E2E p90',
  e2e_p99: 'E2E p99',
  goodput: 'goodput',
  task_mean: 'task mean',
  task_p50: 'task p50',
  task_p90: 'task p90',
  task_served_mean: 'task served mean',
  task_served_p50: 'task served p50',
  task_served_p90: 'task served p90',
  error_rate: 'error rate',
  fast_path_rate: 'fast-path rate',
}

/** Label of a metric for headers and legends. */
export function metricLabel(m: CiMetric): string {
  return METRIC_LABEL[m]
}

const RATES: ReadonlySet<CiMetric> = new Set(['goodput', 'error_rate', 'fast_path_rate'])

function pct(x: number): string {
  return Number.isFinite(x) ? `${(x * 100).toFixed(x < 0.01 && x > 0 ? 2 : 1)}%` : fmt(x)
}

/** A policy label that may break after its option separators. */
export function nameCell(label: string): string {
  return esc(label).replace(/:/g, ':<wbr>')
}

/** A value with its interval on a second line (seconds without unit: the header has it). */
export function est(e: Estimate, rate = false): string {
  const f = rate ? pct : (v: number) => fmt(v)
  return `${f(e.value)}<br><span class="ci">[${f(e.lo)}, ${f(e.hi)}]</span>`
}

/** The verdict block: headline in bold, details, crossovers as a list, conditions. */
export function verdictHtml(v: Verdict): string {
  return `<div class="verdict"><p><b>${esc(v.headline)}</b> ${v.details.map(esc).join(' ')}</p>${
    v.crossovers.length === 0 ? '' : `<ul>${v.crossovers.map((x) => `<li>${esc(x)}</li>`).join('')}</ul>`
  }<p class="note">${esc(v.conditions)}</p></div>`
}

function strataChart(
  title: string,
  strata: readonly Stratum[],
  labels: readonly string[],
  which: 'ttftP50' | 'ttftP90',
): string {
  if (strata.length === 0) return ''
  return barChart({
    title,
    subtitle: '95% CI; the same turns for every policy',
    groups: strata.map((s) => s.bucket),
    series: labels.map((l) => ({
      name: l,
      values: strata.map((s) => s.policies[l]![which].value),
      lo: strata.map((s) => s.policies[l]![which].lo),
      hi: strata.map((s) => s.policies[l]![which].hi),
    })),
    yLabel: `${which === 'ttftP50' ? 'TTFT p50' : 'TTFT p90'} (s)`,
    log: true,
  })
}

function strataTable(title: string, strata: readonly Stratum[], labels: readonly string[]): string {
  if (strata.length === 0) return ''
  const head = `<tr><th>${esc(title)}</th><th>turns</th>${labels
    .map(
      (l) =>
        `<th>${nameCell(l)}<br><span class="ci">TTFT p50 / p90 (s)<br>goodput · errors · fast</span></th>`,
    )
    .join('')}</tr>`
  const rows = strata
    .map(
      (s) =>
        `<tr><td>${esc(s.bucket)}</td><td>${s.turns}</td>${labels
          .map((l) => {
            const p = s.policies[l]!
            return `<td>${fmt(p.ttftP50.value)} / ${fmt(p.ttftP90.value)}<br><span class="ci">${pct(p.goodput)} · ${pct(p.errorRate)} · ${pct(p.fastPathRate)}</span></td>`
          })
          .join('')}</tr>`,
    )
    .join('')
  return `<table>${head}${rows}</table>`
}

function pairedCell(d: PairedEstimate, m: CiMetric, ms: boolean): string {
  const rate = RATES.has(m)
  const k = ms ? 1000 : 1
  const f = rate
    ? (v: number) => `${Number.isFinite(v) ? (v * 100).toFixed(2) : fmt(v)}`
    : (v: number) => fmt(v * k)
  const main = rate ? `${d.diff > 0 ? '+' : ''}${f(d.diff)}` : fmtDiff(d.diff * k)
  const cls = d.pBetter >= 0.975 ? 'good' : d.pWorse >= 0.975 ? 'bad' : ''
  return `<td class="${cls}">${main}<br><span class="ci">[${f(d.lo)}, ${f(d.hi)}]<br>better in ${Number.isFinite(d.pBetter) ? (d.pBetter * 100).toFixed(0) : '–'}%</span></td>`
}

/** A row of paired latency differences reads in ms when every difference is below a second. */
function rowInMs(ds: readonly PairedEstimate[]): boolean {
  return ds.every((d) => [d.diff, d.lo, d.hi].every((x) => !Number.isFinite(x) || Math.abs(x) < 1))
}

const PAIRED_ROWS: readonly CiMetric[] = [
  'goodput',
  'ttft_mean',
  'ttft_p50',
  'ttft_p90',
  'ttft_p99',
  'tpot_p50',
  'tpot_p90',
  'tpot_p99',
  'itl_p50',
  'itl_p99',
  'e2e_p50',
  'e2e_p90',
  'task_p50',
  'task_served_p50',
  'error_rate',
  'fast_path_rate',
]

/**
 * The host tier's table: shown when the run or a policy has a host tier (`--host-tier`, `hostTier=`)
 * or a turn loaded KV back, so a user reads what the tier bought against the policies without one.
 */
function hostTierSection(r: ExperimentResult): string {
  const tiered =
    r.config.hostTier !== undefined ||
    r.policies.some((p) => p.hostTier.loadBacks > 0 || p.policy.includes('hostTier='))
  if (!tiered) return ''
  const rows = r.policies
    .map(
      (p) =>
        `<tr><td class="name">${nameCell(p.policy)}</td><td>${p.hostTier.loadBacks}</td><td>${fmt(p.hostTier.loadedBackTokens)}</td><td>${fmt(p.hostTier.reprefilledTokens)}</td><td>${fmt(p.hostTier.peerFetchedTokens)}</td><td>${p.reseeds}</td><td>${p.migrations}</td><td>${est(p.estimates.ttft_p99)}</td></tr>`,
    )
    .join('\n')
  return `<h2>Host tier</h2>
<p class="note">Load-backs are prefills that copied part of their prompt back from the worker's host tier instead of computing it; re-prefilled tokens are what later turns of a session computed again of their own history. Tokens are per trial (mean over seeds), load-backs, reseeds and migrations summed over seeds. A migration cannot load back: the host tier belongs to the session's previous D; with peer fetch (<code>hostTier=4x+peer</code>) its P reads what that D still holds over the link instead (fetched from peers).</p>
<table>
<tr><th>policy</th><th>load-backs</th><th>loaded back (tok/trial)</th><th>re-prefilled (tok/trial)</th><th>fetched from peers (tok/trial)</th><th>reseeds</th><th>migrations</th><th>TTFT p99 (s)</th></tr>
${rows}
</table>
`
}

/**
 * Render a self-contained HTML report of an experiment: the verdict in words at the top (with a
 * sweep's crossovers when one is given), the results with bootstrap 95% intervals (goodput,
 * TTFT, TPOT, ITL, end-to-end, task completion, errors), paired differences against the reference
 * policy, charts as inline SVG (latency percentiles, decode speed, rates, task times, TTFT CDF,
 * failures by cause, per-session fast-path distribution, KV usage over time per D, strata with
 * intervals), every run, and the accounting. No script and no external resource: it opens
 * offline and prints; tables and charts fit a 1280 px window.
 *
 * @example
 * ```ts
 * import { renderHtmlReport, runExperiment } from '@kvc/sim'
 * const result = await runExperiment({ workload: { kind: 'agentic', options: { sessions: 3, maxTurnsPerSession: 3 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2, 3], bootstrapResamples: 20 })
 * const html = renderHtmlReport(result) // write it to report.html
 * ```
 */
export function renderHtmlReport(
  r: ExperimentResult,
  options: { readonly sweep?: SweepResult } = {},
): string {
  const c = r.config
  const labels = r.policies.map((p) => p.policy)
  const w = c.workload
  const verdict = experimentVerdict(r, options.sweep)
  const charts: string[] = []
  const ciSeries = (ms: readonly CiMetric[]) =>
    r.policies.map((p) => ({
      name: p.policy,
      values: ms.map((m) => p.estimates[m].value),
      lo: ms.map((m) => p.estimates[m].lo),
      hi: ms.map((m) => p.estimates[m].hi),
    }))
  charts.push(
    barChart({
      title: 'Time to first token',
      subtitle: '95% CI; failed turns count as infinitely slow',
      groups: ['mean', 'p50', 'p90', 'p99'],
      series: ciSeries(['ttft_mean', 'ttft_p50', 'ttft_p90', 'ttft_p99']),
      yLabel: 'seconds',
      log: true,
    }),
  )
  charts.push(
    barChart({
      title: 'Decode speed: TPOT per turn and ITL per token',
      subtitle: `95% CI; TPOT SLO ${sloText(c.slo).split(' and ')[1]}`,
      groups: ['TPOT p50', 'TPOT p90', 'TPOT p99', 'ITL p50', 'ITL p90', 'ITL p99'],
      series: ciSeries(['tpot_p50', 'tpot_p90', 'tpot_p99', 'itl_p50', 'itl_p90', 'itl_p99']),
      yLabel: 'seconds',
      log: true,
    }),
  )
  charts.push(
    barChart({
      title: 'Goodput, errors and the fast path',
      subtitle: `share of turns, 95% CI; goodput: completed with ${sloText(c.slo)}`,
      groups: ['goodput', 'error rate', 'fast-path rate'],
      series: ciSeries(['goodput', 'error_rate', 'fast_path_rate']),
      yLabel: 'share of turns',
      percent: true,
    }),
  )
  charts.push(
    barChart({
      title: 'End-to-end latency per turn',
      subtitle: '95% CI',
      groups: ['mean', 'p50', 'p90', 'p99'],
      series: ciSeries(['e2e_mean', 'e2e_p50', 'e2e_p90', 'e2e_p99']),
      yLabel: 'seconds',
      log: true,
    }),
  )
  const hasTasks = r.policies.some((p) => Number.isFinite(p.estimates.task_p50.value))
  if (hasTasks) {
    charts.push(
      barChart({
        title: 'Agent task completion per session',
        subtitle: '95% CI; with the think and tool gaps, and served time alone',
        groups: ['task p50', 'task p90', 'served p50', 'served p90'],
        series: ciSeries(['task_p50', 'task_p90', 'task_served_p50', 'task_served_p90']),
        yLabel: 'seconds',
        log: true,
      }),
    )
  }
  charts.push(
    lineChart({
      title: 'TTFT distribution',
      subtitle: 'completed turns; a curve stops at its completed share',
      series: r.policies.map((p) => ({ name: p.policy, points: p.ttftCdf })),
      xLabel: 'TTFT (s, log scale)',
      yLabel: 'share of turns',
      xLog: true,
      yMax: 1,
      percentY: true,
    }),
  )
  const causes = [...new Set(r.policies.flatMap((p) => Object.keys(p.failedByCause)))].sort()
  if (causes.length > 0) {
    charts.push(
      stackedBarChart({
        title: 'Failed turns by cause',
        subtitle: 'share of all turns',
        groups: labels,
        stacks: causes.map((cause) => ({
          name: cause,
          values: r.policies.map((p) => (p.turns === 0 ? 0 : (p.failedByCause[cause] ?? 0) / p.turns)),
        })),
        yLabel: 'share of turns',
        percent: true,
      }),
    )
  }
  // Policies without a fast path (every turn through a P, or colocated workers) have every session
  // at 0% by construction: they are left out of the per-session fast-path views.
  const fastPolicies = r.policies.filter((p) => p.pathMode === 'kvc')
  const noFast = r.policies.filter((p) => p.pathMode !== 'kvc').map((p) => p.policy)
  const hasSessions = fastPolicies.some((p) => p.sessionFastPathHistogram.some((x) => x > 0))
  if (hasSessions) {
    charts.push(
      barChart({
        title: 'Sessions by their fast-path rate',
        subtitle: `bimodal = some sessions starve${noFast.length === 0 ? '' : `; without a fast path, left out: ${noFast.join(', ')}`}`,
        groups: ['0–20%', '20–40%', '40–60%', '60–80%', '80–100%'],
        series: fastPolicies.map((p) => ({
          name: p.policy,
          values: p.sessionFastPathHistogram,
          color: PALETTE[r.policies.indexOf(p) % PALETTE.length]!,
        })),
        yLabel: 'sessions (all seeds)',
      }),
    )
  }
  // Every panel on one time axis, so the runs' lengths compare at a glance.
  const tMax = Math.max(1, ...r.policies.flatMap((p) => p.usage.flatMap((u) => u.timesS)))
  const usageCharts = r.policies.map((p) =>
    lineChart({
      title: p.policy,
      subtitle: `KV usage per ${p.pathMode === 'direct' ? 'colocated worker' : 'D worker'} (${p.topology}), seed ${c.seeds[0]}`,
      series: p.usage.map((u) => ({
        name: u.workerId,
        points: u.timesS.map((t, i) => [t, u.usage[i]!] as const),
      })),
      xLabel: 'simulated time (s)',
      yLabel: 'pool occupied',
      xMin: 0,
      xMax: tMax,
      yMax: 1,
      percentY: true,
      width: 440,
      plotHeight: 180,
      step: true,
    }),
  )
  const results = r.policies
    .map((p) => {
      const e = p.estimates
      const causesTxt = Object.entries(p.failedByCause)
        .map(([k, v]) => `${k}: ${v}`)
        .join(', ')
      return `<tr><td class="name"><b>${nameCell(p.policy)}</b><br><span class="ci">${esc(p.topology)} · ${esc(p.pathMode)}</span></td>
<td>${est(e.goodput, true)}</td><td>${est(e.ttft_p50)}</td><td>${est(e.ttft_p90)}</td><td>${est(e.ttft_p99)}</td>
<td>${est(e.tpot_p90)}</td><td>${est(e.itl_p99)}</td><td>${est(e.e2e_p90)}</td><td>${est(e.task_p50)}</td>
<td title="${esc(causesTxt === '' ? 'no failures' : causesTxt)}">${est(e.error_rate, true)}</td></tr>`
    })
    .join('\n')
  const mechanics = r.policies
    .map(
      (p) =>
        `<tr><td class="name">${nameCell(p.policy)}</td><td>${esc(p.topology)}</td><td>${esc(p.pathMode)}</td><td>${pct(p.estimates.fast_path_rate.value)}</td>
<td>${p.reseeds}</td><td>${p.migrations}</td><td>${p.decodeEvictions}<br><span class="ci">${fmt(p.decodeTokensPerEviction)} tok each</span></td>
<td>${pct(p.prefixHitRatio)}</td><td>${fmt(p.kvTransferGB)}</td><td>${fmt(p.throughputTurnsPerS)}</td><td>${pct(p.peakDecodeUsage)}</td>
<td>${p.failed} of ${p.turns}${
          Object.keys(p.failedByCause).length === 0
            ? ''
            : `<br><span class="ci">${Object.entries(p.failedByCause)
                .map(([k, v]) => `${esc(k)} ${v}`)
                .join('<br>')}</span>`
        }</td></tr>`,
    )
    .join('\n')
  const others = r.paired.map((pp) => pp.policy)
  const pairedRows = PAIRED_ROWS.filter((m) => r.paired.some((pp) => !Number.isNaN(pp.metrics[m].diff)))
    .map((m) => {
      const ms = !RATES.has(m) && rowInMs(r.paired.map((pp) => pp.metrics[m]))
      const unit = RATES.has(m) ? ' (pp)' : ms ? ' (ms)' : ' (s)'
      return `<tr><td>${METRIC_LABEL[m]}${unit}</td>${r.paired.map((pp) => pairedCell(pp.metrics[m], m, ms)).join('')}</tr>`
    })
    .join('\n')
  const runs = r.runs
    .map(
      (x) =>
        `<tr><td class="name">${nameCell(x.policy)}</td><td>${x.seed}</td><td>${x.metrics.turns}</td><td>${x.metrics.completed}</td><td>${x.metrics.failed}</td>
<td>${pct(x.metrics.goodput)}</td><td>${fmt(x.metrics.ttft.p50)}</td><td>${fmt(x.metrics.ttft.p99)}</td><td>${fmt(x.metrics.tpot.p90)}</td><td>${fmt(x.metrics.itl.p99)}</td>
<td>${pct(x.metrics.fastPathRate)}</td><td>${x.metrics.reseeds}</td><td>${fmt(x.makespanS)}</td>
<td>${x.accounting.balanced && x.accounting.poolsBalanced ? '✔' : '✘'}</td></tr>`,
    )
    .join('\n')
  const starvation = fastPolicies
    .filter((p) => p.starvation.starved + p.starvation.lucky > 0)
    .map(
      (p) =>
        `<tr><td class="name">${nameCell(p.policy)}</td><td>${p.starvation.starved}</td><td>${fmt(p.starvation.starvedMeanPeakInput)}</td><td>${p.starvation.lucky}</td><td>${fmt(p.starvation.luckyMeanPeakInput)}</td></tr>`,
    )
    .join('')
  const rust = labels.some((l) => /(^|:)defaults=rust(:|$)/.test(l))
  const cm = c.costModel
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvc-sim report: ${esc(labels.join(' vs '))}</title><style>${REPORT_CSS}</style></head>
<body><main>
${HATCH_DEFS}
<h1>kvc-sim: ${labels.map(nameCell).join(' vs ')}</h1>
${verdictHtml(verdict)}
<p class="note">Workload <b>${esc(w.name)}</b> (${esc(w.source)}) · page ${c.pageSize} tokens${c.granularity === 'block' ? ' (block granularity)' : ''} · <b>time scale ${c.timeScale}</b>${c.timeScale !== 1 ? ' (think times and arrivals compressed: the research prototype found this can flip verdicts)' : ''} · kvc-sim ${esc(r.tool.version)}</p>

<h2>Results</h2>
<table>
<tr><th>policy</th><th>goodput</th><th>TTFT p50 (s)</th><th>TTFT p90 (s)</th><th>TTFT p99 (s)</th><th>TPOT p90 (s)</th><th>ITL p99 (s)</th><th>E2E p90 (s)</th><th>task p50 (s)</th><th>errors</th></tr>
${results}
</table>
<p class="note">Pooled over the seeds, with bootstrap 95% intervals. Goodput: share of all turns that completed with ${esc(sloText(c.slo))}. TPOT: a turn's mean time per output token after the first; ITL: every gap between two tokens, pooled. Task: one session from its first arrival to its last end (with the think and tool gaps). Hover over an error rate for its causes.</p>

<h2>Paired differences against ${nameCell(c.reference)}</h2>
${
  r.paired.length === 0
    ? '<p class="note">Only one policy: nothing to pair.</p>'
    : `<table><tr><th>metric</th>${others.map((o) => `<th>${nameCell(o)} − ${nameCell(c.reference)}</th>`).join('')}</tr>
${pairedRows}</table>
<p class="note">The same resampled turns for both policies; rates in percentage points. Negative latency differences and positive goodput differences favour the policy; green = better in ≥ 97.5% of resamples, red = worse in ≥ 97.5% (ties count as neither).</p>`
}

<h2>How to read this report</h2>
<ul>
<li>Every policy ran on the <b>same trials</b>: for each seed the same sessions, turns, prompts and think times (paired comparison). Numbers pool all seeds; the brackets are <b>bootstrap 95% intervals</b> (${c.bootstrap.resamples} resamples of whole ${c.bootstrap.unit}s within each seed).</li>
<li><b>Failed turns are never filtered out.</b> They count in the error rate, against goodput, in the percentiles as infinitely slow (a percentile reached by failures prints <i>failed</i>), and in the means at the time they took to fail (a lower bound).</li>
<li><b>Fast path</b> = the turn went straight to the D worker holding the session, which prefilled only the append; <b>reseed</b> = a later turn of a session went through a P again; colocated (DP) workers serve every turn <i>direct</i>. A prefill on a worker pauses its decode batch, which is what TPOT and ITL show.</li>
<li>${esc(topologyNote(r.policies))}: a colocated policy runs the same GPUs as N×DP.${rust ? ' <code>defaults=rust</code>: the baseline runs with the defaults of sgl-router’s Rust cache-aware policy (balance thresholds 0.5 / 32 / 1.1) rather than its Python ones, which would put every session of this workload on one worker (the @kvc/sim README, “Policies”).' : ''}</li>
<li>The decisions (routing, admission, retention, eviction) are made by the real packages; only GPU time and link time come from the cost model below.</li>
</ul>

<h2>Charts</h2>
${causes.length === 0 ? '<p class="note">No turn failed under any policy (no chart of failures by cause).</p>' : ''}
<div class="grid-charts">${charts.map((x) => `<div class="card">${x}</div>`).join('')}</div>

<h2>Mechanics</h2>
<table>
<tr><th>policy</th><th>topology</th><th>path</th><th>fast path</th><th>reseeds</th><th>migrations</th><th>D evictions</th><th>prefix hit</th><th>KV moved (GB/trial)</th><th>turns/s</th><th>peak D usage</th><th>failed turns</th></tr>
${mechanics}
</table>
${hostTierSection(r)}

<h2>KV usage over time</h2>
<p class="note">Occupied share of each worker's KV pool (cached + running) in the first trial, every panel on the same time axis. A D pinned at 100% while others idle is the overlap pinning the research prototype saw on a shared boilerplate; every D full is where transfer timeouts cascade without backpressure, as in the prototype's v5.</p>
<div class="grid-usage">${usageCharts.map((x) => `<div class="card">${x}</div>`).join('')}</div>

${
  starvation === ''
    ? ''
    : `<h2>Starved sessions</h2><p class="note">Sessions served on the fast path less than 20% of the time vs at least 80%, with their mean peak prompt. The research prototype found the starved ones 2× larger: capacity-blind routing starves the largest sessions.${
        noFast.length === 0
          ? ''
          : ` Left out: ${noFast.map(esc).join(', ')}, which have no fast path (every session at 0% by construction).`
      }</p>
<table><tr><th>policy</th><th>starved (&lt;20%)</th><th>their mean peak prompt</th><th>well served (≥80%)</th><th>their mean peak prompt</th></tr>${starvation}</table>`
}

<h2>Strata</h2>
<p class="note">The same turns for every policy, bucketed by properties of the workload (not of the policy): turn index, append size, and overlap (the share of the prompt an ideal cache would already hold). Whiskers: bootstrap 95% intervals on the same resamples as above.</p>
<div class="grid-charts">
<div class="card">${strataChart('TTFT p50 by turn index', r.strata.turnIndex, labels, 'ttftP50')}</div>
<div class="card">${strataChart('TTFT p90 by turn index', r.strata.turnIndex, labels, 'ttftP90')}</div>
<div class="card">${strataChart('TTFT p50 by append size (tokens)', r.strata.appendTokens, labels, 'ttftP50')}</div>
<div class="card">${strataChart('TTFT p50 by overlap', r.strata.overlap, labels, 'ttftP50')}</div>
</div>
<h3>By turn index</h3>${strataTable('turn index', r.strata.turnIndex, labels)}
<h3>By append size</h3>${strataTable('append tokens', r.strata.appendTokens, labels)}
<h3>By overlap</h3>${strataTable('overlap', r.strata.overlap, labels)}

<h2>Every run</h2>
<table><tr><th>policy</th><th>seed</th><th>turns</th><th>completed</th><th>failed</th><th>goodput</th><th>TTFT p50 (s)</th><th>TTFT p99 (s)</th><th>TPOT p90 (s)</th><th>ITL p99 (s)</th><th>fast path</th><th>reseeds</th><th>makespan (s)</th><th>accounting</th></tr>
${runs}</table>
<p class="note">Accounting ✔: every turn ended exactly once (completed + failed = turns) and every live worker's KV pool balances (free + evictable + protected + request-owned + session-held = size).</p>

<h2>Configuration</h2>
<table class="kv">
<tr><td>workload</td><td>${esc(w.name)} · ${esc(turnsPerTrialText(c.turnsPerTrial))} (seed ${c.seeds[0]}: ${w.requests}) · ${w.sessions} sessions · input mean ${fmt(w.inputTokens.mean)} / p99 ${fmt(w.inputTokens.p99)} tokens · output mean ${fmt(w.outputTokens.mean)} · ideal prefix hit ${pct(w.idealHitRatioTokens)} of tokens${w.thinkS === undefined ? '' : ` · think time p50 ${fmt(w.thinkS.p50, ' s')}, p99 ${fmt(w.thinkS.p99, ' s')}`}${w.notes.length === 0 ? '' : ` · ${esc(w.notes.join('; '))}`}</td></tr>
<tr><td>prefill</td><td>α + n/τ + γ·n·(c + n/2): α = ${cm.prefillFixedS} s, τ = ${cm.prefillTokensPerS} tokens/s, γ = ${cm.prefillQuadraticS} s/token²</td></tr>
<tr><td>decode step</td><td>δ0 + δ1·batchTokens: δ0 = ${cm.decodeStepS} s, δ1 = ${cm.decodeStepPerTokenS} s/token; a prefill on the worker pauses its batch</td></tr>
<tr><td>KV transfer</td><td>${cm.kvBytesPerToken} B/token over ${cm.linkGbps} Gb/s links, ${cm.transferSetupS} s setup, timeout ${cm.transferTimeoutS} s</td></tr>
<tr><td>admission RPC</td><td>${cm.admitRpcS} ± ${cm.admitRpcJitterS} s</td></tr>
<tr><td>capacity</td><td>${c.capacityTokens === 'unlimited' ? 'unlimited' : `${c.capacityTokens.toLocaleString('en')} tokens`} per worker, page ${c.pageSize}</td></tr>
<tr><td>SLOs</td><td>${esc(sloText(c.slo))} (goodput: the share of turns meeting both)</td></tr>
<tr><td>policies</td><td>${labels.map((l) => `<code>${esc(l)}</code>`).join(' ')}</td></tr>
</table>
</main></body></html>
`
}
