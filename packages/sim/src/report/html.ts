import type { CiMetric, Estimate } from '../protocol/bootstrap.js'
import type { ExperimentResult, Stratum } from '../protocol/experiment.js'
import { barChart, esc, fmt, fmtDiff, lineChart, stackedBarChart } from './svg.js'

const CSS = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#fafbfc}
main{max-width:1320px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:18px;margin:34px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}p,li{max-width:980px}
table{border-collapse:collapse;margin:8px 0 14px;font-variant-numeric:tabular-nums;background:#fff}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:right;vertical-align:top;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}th{background:#f0f3f6}
td:first-child,th:first-child{text-align:left}.ci{color:#57606a;font-size:12px}.good{color:#116329;font-weight:600}.bad{color:#a40e26;font-weight:600}
.grid-charts{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:6px}
svg .ct{font-size:14px;font-weight:600}svg .tick{font-size:11px;fill:#444}svg .grid{stroke:#e6e9ed}svg .axis{stroke:#555}
svg .whisker{stroke:#111;stroke-width:1.2}.kv td{text-align:left}.note{color:#57606a;font-size:13px}
code{background:#eff1f3;padding:1px 4px;border-radius:3px}
`

const METRIC_LABEL: Record<CiMetric, string> = {
  ttft_mean: 'TTFT mean',
  ttft_p50: 'TTFT p50',
  ttft_p90: 'TTFT p90',
  ttft_p99: 'TTFT p99',
  e2e_mean: 'E2E mean',
  e2e_p50: 'E2E p50',
  e2e_p90: 'E2E p90',
  e2e_p99: 'E2E p99',
  error_rate: 'error rate',
  fast_path_rate: 'fast-path rate',
}

function pct(x: number): string {
  return Number.isFinite(x) ? `${(x * 100).toFixed(x < 0.01 && x > 0 ? 2 : 1)}%` : fmt(x)
}

function est(e: Estimate, rate = false): string {
  const f = rate ? pct : (v: number) => fmt(v, ' s')
  return `${f(e.value)}<br><span class="ci">[${f(e.lo)}, ${f(e.hi)}]</span>`
}

function strataTable(title: string, strata: readonly Stratum[], labels: readonly string[]): string {
  if (strata.length === 0) return ''
  const head = `<tr><th>${esc(title)}</th><th>turns</th>${labels
    .map((l) => `<th>${esc(l)}<br><span class="ci">TTFT p50 / p90 · err · fast</span></th>`)
    .join('')}</tr>`
  const rows = strata
    .map(
      (s) =>
        `<tr><td>${esc(s.bucket)}</td><td>${s.turns}</td>${labels
          .map((l) => {
            const p = s.policies[l]!
            return `<td>${fmt(p.ttftP50, ' s')} / ${fmt(p.ttftP90, ' s')} · ${pct(p.errorRate)} · ${pct(p.fastPathRate)}</td>`
          })
          .join('')}</tr>`,
    )
    .join('')
  return `<div class="scroll"><table>${head}${rows}</table></div>`
}

function strataChart(title: string, strata: readonly Stratum[], labels: readonly string[]): string {
  if (strata.length === 0) return ''
  return barChart({
    title,
    groups: strata.map((s) => s.bucket),
    series: labels.map((l) => ({ name: l, values: strata.map((s) => s.policies[l]!.ttftP50) })),
    yLabel: 'TTFT p50 (s)',
    log: true,
  })
}

/**
 * Render a self-contained HTML report of an experiment: the verdict table with bootstrap 95%
 * intervals, paired differences against the reference policy, charts as inline SVG (latency
 * percentiles, TTFT CDF, failures by cause, per-session fast-path distribution, KV usage over
 * time per D, strata by turn index, append size and overlap), every run, and the accounting. No
 * script and no external resource: it opens offline and prints.
 *
 * @example
 * ```ts
 * import { renderHtmlReport, runExperiment } from '@kvc/sim'
 * const result = await runExperiment({ workload: { kind: 'agentic', options: { sessions: 3, maxTurnsPerSession: 3 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2, 3], bootstrapResamples: 20 })
 * const html = renderHtmlReport(result) // write it to report.html
 * ```
 */
export function renderHtmlReport(r: ExperimentResult): string {
  const c = r.config
  const labels = r.policies.map((p) => p.policy)
  const w = c.workload
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
      title: 'Time to first token (95% CI; failed turns count as infinitely slow)',
      groups: ['mean', 'p50', 'p90', 'p99'],
      series: ciSeries(['ttft_mean', 'ttft_p50', 'ttft_p90', 'ttft_p99']),
      yLabel: 'seconds',
      log: true,
    }),
  )
  charts.push(
    barChart({
      title: 'End-to-end latency (95% CI)',
      groups: ['mean', 'p50', 'p90', 'p99'],
      series: ciSeries(['e2e_mean', 'e2e_p50', 'e2e_p90', 'e2e_p99']),
      yLabel: 'seconds',
      log: true,
    }),
  )
  charts.push(
    lineChart({
      title: 'TTFT distribution (completed turns; the curve stops at the completed share)',
      series: r.policies.map((p) => ({ name: p.policy, points: p.ttftCdf })),
      xLabel: 'TTFT (s, log scale)',
      yLabel: 'share of turns',
      xLog: true,
      yMax: 1,
      percentY: true,
    }),
  )
  const causes = [...new Set(r.policies.flatMap((p) => Object.keys(p.failedByCause)))].sort()
  charts.push(
    stackedBarChart({
      title: 'Failed turns by cause (share of all turns)',
      groups: labels,
      stacks: causes.map((cause) => ({
        name: cause,
        values: r.policies.map((p) => (p.turns === 0 ? 0 : (p.failedByCause[cause] ?? 0) / p.turns)),
      })),
      yLabel: 'share of turns',
      percent: true,
    }),
  )
  // Policies without a fast path (every turn through a P, or colocated workers) have every session
  // at 0% by construction: they are left out of the per-session fast-path views (no bars; the
  // legend keeps each policy's color).
  const fastPolicies = r.policies.filter((p) => p.pathMode === 'kvc')
  const hasSessions = fastPolicies.some((p) => p.sessionFastPathHistogram.some((x) => x > 0))
  if (hasSessions) {
    charts.push(
      barChart({
        title: 'Sessions by their fast-path rate (bimodal = some sessions starve)',
        groups: ['0–20%', '20–40%', '40–60%', '60–80%', '80–100%'],
        series: r.policies.map((p) => ({
          name: p.pathMode === 'kvc' ? p.policy : `${p.policy} (no fast path)`,
          values:
            p.pathMode === 'kvc'
              ? p.sessionFastPathHistogram
              : p.sessionFastPathHistogram.map(() => Number.NaN),
        })),
        yLabel: 'sessions (all seeds)',
      }),
    )
  }
  charts.push(
    barChart({
      title: 'Error rate and fast-path rate (95% CI)',
      groups: ['error rate', 'fast-path rate'],
      series: ciSeries(['error_rate', 'fast_path_rate']),
      yLabel: 'share of turns',
      percent: true,
    }),
  )
  const usageCharts = r.policies.map((p) =>
    lineChart({
      title: p.policy,
      subtitle: `KV usage per ${p.pathMode === 'direct' ? 'colocated worker' : 'D worker'}, seed ${c.seeds[0]}`,
      series: p.usage.map((u) => ({
        name: u.workerId,
        points: u.timesS.map((t, i) => [t, u.usage[i]!] as const),
      })),
      xLabel: 'simulated time (s)',
      yLabel: 'pool occupied',
      yMax: 1,
      percentY: true,
      width: 430,
      height: 260,
      step: true,
    }),
  )
  const verdict = r.policies
    .map((p) => {
      const e = p.estimates
      const causesTxt = Object.entries(p.failedByCause)
        .map(([k, v]) => `${esc(k)}: ${v}`)
        .join(', ')
      return `<tr><td><b>${esc(p.policy)}</b><br><span class="ci">${esc(p.topology)} · ${esc(p.pathMode)}</span></td>
<td>${est(e.ttft_mean)}</td><td>${est(e.ttft_p50)}</td><td>${est(e.ttft_p90)}</td><td>${est(e.ttft_p99)}</td>
<td>${est(e.e2e_p50)}</td><td>${est(e.e2e_p90)}</td><td>${est(e.e2e_p99)}</td>
<td>${est(e.error_rate, true)}<br><span class="ci">${p.failed} of ${p.turns}${causesTxt === '' ? '' : `: ${causesTxt}`}</span></td>
<td>${est(e.fast_path_rate, true)}</td>
<td>${p.reseeds}</td><td>${p.migrations}</td>
<td>${p.decodeEvictions}<br><span class="ci">${fmt(p.decodeTokensPerEviction)} tok each</span></td>
<td>${pct(p.prefixHitRatio)}</td><td>${fmt(p.kvTransferGB)}</td><td>${fmt(p.throughputTurnsPerS)}</td><td>${pct(p.peakDecodeUsage)}</td></tr>`
    })
    .join('\n')
  const metricsShown: CiMetric[] = [
    'ttft_mean',
    'ttft_p50',
    'ttft_p90',
    'ttft_p99',
    'e2e_p50',
    'e2e_p90',
    'error_rate',
    'fast_path_rate',
  ]
  const paired = r.paired
    .map(
      (pp) =>
        `<tr><td>${esc(pp.policy)}</td>${metricsShown
          .map((m) => {
            const d = pp.metrics[m]
            const rate = m === 'error_rate' || m === 'fast_path_rate'
            const f = rate
              ? (v: number) => `${Number.isFinite(v) ? (v * 100).toFixed(2) : fmt(v)} pp`
              : (v: number) => fmt(v, ' s')
            const main = rate ? f(d.diff) : fmtDiff(d.diff, ' s')
            const better = d.pBetter >= 0.975 ? 'good' : d.pWorse >= 0.975 ? 'bad' : ''
            return `<td class="${better}">${main}<br><span class="ci">[${f(d.lo)}, ${f(d.hi)}] · better in ${(d.pBetter * 100).toFixed(0)}%</span></td>`
          })
          .join('')}</tr>`,
    )
    .join('\n')
  const runs = r.runs
    .map(
      (x) =>
        `<tr><td>${esc(x.policy)}</td><td>${x.seed}</td><td>${x.metrics.turns}</td><td>${x.metrics.completed}</td><td>${x.metrics.failed}</td>
<td>${fmt(x.metrics.ttft.mean, ' s')}</td><td>${fmt(x.metrics.ttft.p50, ' s')}</td><td>${fmt(x.metrics.ttft.p99, ' s')}</td><td>${fmt(x.metrics.e2e.p50, ' s')}</td>
<td>${pct(x.metrics.fastPathRate)}</td><td>${x.metrics.reseeds}</td><td>${fmt(x.makespanS, ' s')}</td>
<td>${x.accounting.balanced && x.accounting.poolsBalanced ? '✔' : '✘'}</td></tr>`,
    )
    .join('\n')
  const noFast = r.policies.filter((p) => p.pathMode !== 'kvc').map((p) => p.policy)
  const starvation = fastPolicies
    .filter((p) => p.starvation.starved + p.starvation.lucky > 0)
    .map(
      (p) =>
        `<tr><td>${esc(p.policy)}</td><td>${p.starvation.starved}</td><td>${fmt(p.starvation.starvedMeanPeakInput)}</td><td>${p.starvation.lucky}</td><td>${fmt(p.starvation.luckyMeanPeakInput)}</td></tr>`,
    )
    .join('')
  const cm = c.costModel
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvc-sim report: ${esc(labels.join(' vs '))}</title><style>${CSS}</style></head>
<body><main>
<svg width="0" height="0" style="position:absolute"><defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#a40e26" stroke-width="2"/></pattern></defs></svg>
<h1>kvc-sim: ${esc(labels.join(' vs '))}</h1>
<p class="note">Workload <b>${esc(w.name)}</b> (${esc(w.source)}) · ${w.requests} turns${w.sessions > 0 ? ` in ${w.sessions} sessions` : ''} per trial ·
topology <b>${esc(c.topology)}</b> · <b>time scale ${c.timeScale}</b>${c.timeScale !== 1 ? ' (think times and arrivals compressed: the research prototype found this can flip verdicts)' : ''} ·${c.maxConcurrentSessions === undefined ? '' : ` at most ${c.maxConcurrentSessions} sessions at once ·`}
seeds ${c.seeds.join(', ')} · KV capacity ${c.capacityTokens === 'unlimited' ? 'unlimited' : `${c.capacityTokens.toLocaleString('en')} tokens`} per worker · page ${c.pageSize} tokens${c.granularity === 'block' ? ' (block granularity)' : ''} ·
faults: ${esc(c.faults)} · kvc-sim ${esc(r.tool.version)}</p>

<h2>How to read this report</h2>
<ul>
<li>Every policy ran on the <b>same trials</b>: for each seed the same sessions, turns, prompts and think times (paired comparison). Numbers pool all seeds; the brackets are <b>bootstrap 95% intervals</b> (${c.bootstrap.resamples} resamples of whole ${c.bootstrap.unit}s within each seed).</li>
<li><b>Failed turns are never filtered out.</b> They count in the error rate, in the percentiles as infinitely slow (a percentile reached by failures prints <i>failed</i>), and in the means at the time they took to fail (a lower bound).</li>
<li>The <b>paired table</b> gives each policy minus the reference <b>${esc(c.reference)}</b> on the same resampled turns: negative latency differences are better; green = better in ≥ 97.5% of resamples, red = worse in ≥ 97.5% (ties count as neither).</li>
<li><b>Fast path</b> = the turn went straight to the D worker holding the session, which prefilled only the append; <b>reseed</b> = a later turn of a session went through a P again; colocated (DP) workers serve every turn <i>direct</i>.</li>
<li>The decisions (routing, admission, retention, eviction) are made by the real packages; only GPU time and link time come from the cost model below.</li>
</ul>

<h2>Verdict</h2>
<div class="scroll"><table>
<tr><th>policy</th><th>TTFT mean</th><th>TTFT p50</th><th>TTFT p90</th><th>TTFT p99</th><th>E2E p50</th><th>E2E p90</th><th>E2E p99</th><th>errors</th><th>fast path</th><th>reseeds</th><th>migrations</th><th>D evictions</th><th>prefix hit</th><th>KV moved (GB/trial)</th><th>turns/s</th><th>peak D usage</th></tr>
${verdict}
</table></div>

<h2>Paired differences against ${esc(c.reference)}</h2>
${
  r.paired.length === 0
    ? '<p class="note">Only one policy: nothing to pair.</p>'
    : `<div class="scroll"><table><tr><th>policy − ${esc(c.reference)}</th>${metricsShown.map((m) => `<th>${METRIC_LABEL[m]}</th>`).join('')}</tr>${paired}</table></div>`
}

<h2>Charts</h2>
<div class="grid-charts">${charts.map((x) => `<div class="card">${x}</div>`).join('')}</div>

<h2>KV usage over time</h2>
<p class="note">Occupied share of each worker's KV pool (cached + running) in the first trial. A D pinned at 100% while others idle is the overlap pinning the research prototype saw on a shared boilerplate; every D full is where transfer timeouts cascade without backpressure, as in the prototype's v5.</p>
<div class="grid-charts">${usageCharts.map((x) => `<div class="card">${x}</div>`).join('')}</div>

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
<p class="note">The same turns for every policy, bucketed by properties of the workload (not of the policy): turn index, append size, and overlap (the share of the prompt an ideal cache would already hold).</p>
<div class="grid-charts">
<div class="card">${strataChart('TTFT p50 by turn index', r.strata.turnIndex, labels)}</div>
<div class="card">${strataChart('TTFT p50 by append size (tokens)', r.strata.appendTokens, labels)}</div>
<div class="card">${strataChart('TTFT p50 by overlap', r.strata.overlap, labels)}</div>
</div>
<h3>By turn index</h3>${strataTable('turn index', r.strata.turnIndex, labels)}
<h3>By append size</h3>${strataTable('append tokens', r.strata.appendTokens, labels)}
<h3>By overlap</h3>${strataTable('overlap', r.strata.overlap, labels)}

<h2>Every run</h2>
<table><tr><th>policy</th><th>seed</th><th>turns</th><th>completed</th><th>failed</th><th>TTFT mean</th><th>TTFT p50</th><th>TTFT p99</th><th>E2E p50</th><th>fast path</th><th>reseeds</th><th>makespan</th><th>accounting</th></tr>
${runs}</table>
<p class="note">Accounting ✔: every turn ended exactly once (completed + failed = turns) and every live worker's KV pool balances (free + evictable + protected + request-owned + session-held = size).</p>

<h2>Configuration</h2>
<table class="kv">
<tr><td>workload</td><td>${esc(w.name)} · ${w.requests} turns · ${w.sessions} sessions · input mean ${fmt(w.inputTokens.mean)} / p99 ${fmt(w.inputTokens.p99)} tokens · output mean ${fmt(w.outputTokens.mean)} · ideal prefix hit ${pct(w.idealHitRatioTokens)} of tokens${w.thinkS === undefined ? '' : ` · think time p50 ${fmt(w.thinkS.p50, ' s')}, p99 ${fmt(w.thinkS.p99, ' s')}`}${w.notes.length === 0 ? '' : ` · ${esc(w.notes.join('; '))}`}</td></tr>
<tr><td>prefill</td><td>α + n/τ + γ·n·(c + n/2): α = ${cm.prefillFixedS} s, τ = ${cm.prefillTokensPerS} tokens/s, γ = ${cm.prefillQuadraticS} s/token²</td></tr>
<tr><td>decode step</td><td>δ0 + δ1·batchTokens: δ0 = ${cm.decodeStepS} s, δ1 = ${cm.decodeStepPerTokenS} s/token</td></tr>
<tr><td>KV transfer</td><td>${cm.kvBytesPerToken} B/token over ${cm.linkGbps} Gb/s links, ${cm.transferSetupS} s setup, timeout ${cm.transferTimeoutS} s</td></tr>
<tr><td>admission RPC</td><td>${cm.admitRpcS} ± ${cm.admitRpcJitterS} s</td></tr>
<tr><td>capacity</td><td>${c.capacityTokens === 'unlimited' ? 'unlimited' : `${c.capacityTokens.toLocaleString('en')} tokens`} per worker, page ${c.pageSize}</td></tr>
<tr><td>policies</td><td>${labels.map((l) => `<code>${esc(l)}</code>`).join(' ')}</td></tr>
</table>
</main></body></html>
`
}
