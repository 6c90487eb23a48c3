import type { ExperimentResult } from '../protocol/experiment.js'
import { fmt, fmtDiff } from './svg.js'

function pct(x: number): string {
  return Number.isFinite(x) ? `${(x * 100).toFixed(1)}%` : fmt(x)
}

function pad(s: string, n: number, right = false): string {
  const w = [...s].length
  return w >= n ? s : right ? ' '.repeat(n - w) + s : s + ' '.repeat(n - w)
}

/**
 * The comparison table `kvc-sim compare` prints: one row per policy with TTFT and end-to-end
 * percentiles (95% intervals in brackets for p50 and p90), the error rate with its main cause,
 * the fast-path rate, and the paired TTFT-p90 difference against the reference policy.
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
  const head = [
    'policy',
    'topology',
    'TTFT p50 [95% CI]',
    'TTFT p90 [95% CI]',
    'TTFT p99',
    'E2E p50',
    'E2E p90',
    'errors',
    'fast path',
    `ΔTTFT p90 vs ${r.config.reference}`,
  ]
  const rows = r.policies.map((p, i) => {
    const e = p.estimates
    const ci = (m: 'ttft_p50' | 'ttft_p90') => `${fmt(e[m].value, 's')} [${fmt(e[m].lo)}, ${fmt(e[m].hi)}]`
    const causes = Object.entries(p.failedByCause).sort((a, b) => b[1] - a[1])
    const top = causes[0] === undefined ? '' : ` (${causes[0][0]})`
    const paired = i === 0 ? '—' : r.paired[i - 1]!.metrics.ttft_p90
    const d =
      typeof paired === 'string'
        ? paired
        : `${fmtDiff(paired.diff, 's')} [${fmt(paired.lo)}, ${fmt(paired.hi)}]`
    return [
      p.policy,
      p.topology,
      ci('ttft_p50'),
      ci('ttft_p90'),
      fmt(e.ttft_p99.value, 's'),
      fmt(e.e2e_p50.value, 's'),
      fmt(e.e2e_p90.value, 's'),
      `${pct(e.error_rate.value)}${top}`,
      pct(e.fast_path_rate.value),
      d,
    ]
  })
  const widths = head.map((h, c) => Math.max([...h].length, ...rows.map((row) => [...row[c]!].length)))
  const line = (cells: string[]) => cells.map((s, c) => pad(s, widths[c]!, c >= 2)).join('  ')
  const sep = widths.map((w) => '─'.repeat(w)).join('  ')
  const c = r.config
  const foot =
    `${c.seeds.length} seeds × ${c.policies.length} policies on ${c.workload.name} (${c.workload.requests} turns per trial${c.granularity === 'block' ? ', block granularity' : ''}), ` +
    `time scale ${c.timeScale}${c.maxConcurrentSessions === undefined ? '' : `, at most ${c.maxConcurrentSessions} sessions at once`}, capacity ${c.capacityTokens === 'unlimited' ? 'unlimited' : c.capacityTokens} tokens/worker. ` +
    'Failed turns count as infinitely slow in percentiles ("failed").'
  return [line(head), sep, ...rows.map(line), '', foot].join('\n')
}
