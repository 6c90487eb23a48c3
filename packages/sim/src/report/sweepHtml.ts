import type { CiMetric, PairedEstimate } from '../protocol/bootstrap.js'
import type { SweepResult } from '../protocol/sweep.js'
import { HATCH_DEFS, REPORT_CSS, est, nameCell, verdictHtml } from './html.js'
import { esc, fmt, fmtDiff, lineChart } from './svg.js'
import { sloText, sweepVerdict } from './verdict.js'

function pairedCell(d: PairedEstimate | undefined, m: CiMetric): string {
  if (d === undefined) return '<td>–</td>'
  const rate = m === 'goodput' || m === 'error_rate'
  const f = rate
    ? (v: number) => `${Number.isFinite(v) ? (v * 100).toFixed(2) : fmt(v)} pp`
    : (v: number) => fmt(v, ' s')
  const main = rate ? `${d.diff > 0 ? '+' : ''}${f(d.diff)}` : fmtDiff(d.diff, ' s')
  const cls = d.pBetter >= 0.975 ? 'good' : d.pWorse >= 0.975 ? 'bad' : ''
  return `<td class="${cls}">${main}<br><span class="ci">[${f(d.lo)}, ${f(d.hi)}]</span></td>`
}

/**
 * Render the sweep report (`sweep.html`): the verdict with every crossover in words at the top,
 * charts of goodput, TTFT p90, TPOT p90 and the error rate against the axis per policy (95%
 * intervals as whiskers), the values behind them, and the paired differences of the reference
 * against every other policy at each point. Self-contained like the experiment report.
 *
 * @example
 * ```ts
 * import { renderSweepReport, runSweep } from '@kvc/sim'
 * const s = await runSweep({ workload: { kind: 'agentic', options: { sessions: 3, maxTurnsPerSession: 3 } },
 *   topology: '1P2D', policies: ['kvc', 'round-robin'], seeds: [1, 2], bootstrapResamples: 20,
 *   axis: 'time-scale', values: [1, 4] })
 * const html = renderSweepReport(s) // write it to sweep.html
 * ```
 */
export function renderSweepReport(s: SweepResult): string {
  const c = s.config
  const pts = s.points
  const policies = c.policies
  const xTicks = pts.map(
    (p) => [p.x, c.axis === 'capacity' ? p.label.replace(/^capacity /, '') : String(p.value)] as const,
  )
  /** A rate's axis: from 0, or zoomed to the tenths that hold the data when it all sits above 50%. */
  const rateAxis = (m: CiMetric) => {
    const lows = pts.flatMap((pt) => pt.policies.map((p) => p.estimates[m].lo)).filter(Number.isFinite)
    const highs = pts.flatMap((pt) => pt.policies.map((p) => p.estimates[m].hi)).filter(Number.isFinite)
    const lo = Math.min(1, ...lows)
    const hi = Math.max(0, ...highs)
    if (lo > 0.5) return { yMin: Math.floor(lo * 10 - 0.5) / 10, yMax: 1, percentY: true }
    return { yMax: Math.min(1, Math.max(0.05, Math.ceil(hi * 20) / 20)), percentY: true }
  }
  const chart = (m: CiMetric, title: string, yLabel: string, rate: boolean) =>
    lineChart({
      title,
      subtitle: `per policy, 95% CI, ${c.seeds.length} seeds per point`,
      series: policies.map((name) => {
        const at = pts.map((pt) => pt.policies.find((p) => p.policy === name)?.estimates[m])
        return {
          name,
          points: pts.map((pt, i) => [pt.x, at[i]?.value ?? Number.NaN] as const),
          lo: at.map((e) => e?.lo ?? Number.NaN),
          hi: at.map((e) => e?.hi ?? Number.NaN),
        }
      }),
      xLabel: c.axisLabel,
      xTicks,
      yLabel,
      ...(rate ? rateAxis(m) : { yLog: true }),
      markers: true,
    })
  const charts = [
    chart('goodput', `Goodput (${sloText(c.slo)})`, 'share of turns', true),
    chart('ttft_p90', 'TTFT p90', 'seconds', false),
    chart('tpot_p90', 'TPOT p90', 'seconds', false),
    chart('error_rate', 'Error rate', 'share of turns', true),
  ]
  const valuesTable = `<table><tr><th>${esc(c.axisLabel)}</th>${policies
    .map((p) => `<th>${nameCell(p)}<br><span class="ci">goodput · TTFT p90 · TPOT p90 (s)</span></th>`)
    .join('')}</tr>${pts
    .map(
      (pt) =>
        `<tr><td>${esc(String(pt.value))}</td>${policies
          .map((name) => {
            const e = pt.policies.find((p) => p.policy === name)?.estimates
            if (e === undefined) return '<td>–</td>'
            return `<td>${est(e.goodput, true)}<br>${est(e.ttft_p90)}<br>${est(e.tpot_p90)}</td>`
          })
          .join('')}</tr>`,
    )
    .join('')}</table>`
  const others = policies.filter((p) => p !== c.reference)
  const metrics: readonly [CiMetric, string][] = [
    ['goodput', 'Δ goodput'],
    ['ttft_p90', 'Δ TTFT p90'],
    ['tpot_p90', 'Δ TPOT p90'],
  ]
  const pairedTables = others
    .map(
      (o) =>
        `<h3>${nameCell(c.reference)} − ${nameCell(o)}</h3><table><tr><th>${esc(c.axisLabel)}</th>${metrics
          .map(([, h]) => `<th>${h}</th>`)
          .join('')}</tr>${pts
          .map((pt) => {
            const d = pt.pairwise.find((x) => x.policy === c.reference && x.other === o)?.metrics
            return `<tr><td>${esc(String(pt.value))}</td>${metrics.map(([m]) => pairedCell(d?.[m], m)).join('')}</tr>`
          })
          .join('')}</table>`,
    )
    .join('\n')
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvc-sim sweep: ${esc(c.axisLabel)}</title><style>${REPORT_CSS}</style></head>
<body><main>
${HATCH_DEFS}
<h1>kvc-sim sweep over ${esc(c.axisLabel)}: ${policies.map(nameCell).join(' vs ')}</h1>
${verdictHtml(sweepVerdict(s))}

<h2>Charts</h2>
<div class="grid-charts">${charts.map((x) => `<div class="card">${x}</div>`).join('')}</div>

<h2>Values</h2>
<p class="note">Each point is a paired experiment: every policy replays the same sessions and arrivals of each seed (the same seeds at every point). Brackets: bootstrap 95% intervals (${c.bootstrap.resamples} resamples of whole ${c.bootstrap.unit}s within each seed). Turns per trial: ${pts.map((p) => `${esc(String(p.value))}: ${[...new Set(p.turnsPerTrial)].join('/')}`).join(' · ')}.</p>
${valuesTable}

<h2>Paired differences</h2>
<p class="note">The reference minus each other policy on the same resampled turns; green = the reference is better in ≥ 97.5% of resamples, red = worse. A crossover is where the lead changes hands: the paired interval excludes zero on one side before it and on the other side after it.</p>
${pairedTables}

<h2>Configuration</h2>
<table class="kv">
<tr><td>axis</td><td>${esc(c.axisLabel)} (<code>--axis ${esc(c.axis)}</code>): ${pts.map((p) => esc(p.label)).join(', ')}</td></tr>
<tr><td>workload</td><td>${esc(c.workload.name)}${c.workload.sessions > 0 ? ` · ${c.workload.sessions} sessions` : ''}</td></tr>
<tr><td>topology</td><td>${esc(c.topology)}; a colocated policy runs the same GPUs as N×DP</td></tr>
<tr><td>fixed</td><td>time scale ${c.timeScale} · ${c.maxConcurrentSessions === undefined ? 'no session cap' : `at most ${c.maxConcurrentSessions} sessions at once`} · capacity ${c.capacityTokens === 'unlimited' ? 'unlimited' : `${c.capacityTokens.toLocaleString('en')} tokens`} per worker · faults ${esc(c.faults)} (the axis overrides its own)</td></tr>
<tr><td>seeds</td><td>${c.seeds.join(', ')}</td></tr>
<tr><td>SLOs</td><td>${esc(sloText(c.slo))}</td></tr>
<tr><td>policies</td><td>${policies.map((l) => `<code>${esc(l)}</code>`).join(' ')} (reference: ${esc(c.reference)})</td></tr>
<tr><td>kvc-sim</td><td>${esc(s.tool.version)}</td></tr>
</table>
</main></body></html>
`
}
