import type { DispatchRecord } from '../dispatch/types.js'
import type { RouteDecision } from '../route/types.js'

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + ' '.repeat(n - s.length)
}

function fmt(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(1)
}

/**
 * Renders a route decision as a short, fixed-width table: one line per candidate with every key
 * of the ranking and the key that placed it above the next one, then the workers left out.
 *
 * @example
 * ```ts
 * import { Router, renderRoute } from '@kvc/kvc-router'
 * const router = new Router({ now: () => 0, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 50_000 },
 *   { id: 'd1', role: 'decode', capacityTokens: 5_000 },
 * ] })
 * console.log(renderRoute(router.route({ sessionId: 's', promptTokens: 9_000 })))
 * // route s (kvc, 9000 tokens, 0 blocks, unbound, mean load 0)
 * //   #  worker  fast  capOk  score  overlap  bonus  load  tie  append  need   avail  by
 * //   0  d0      no    yes    0      0        0      0     ...
 * ```
 */
export function renderRoute(d: RouteDecision): string {
  const head = `route ${d.sessionId} (${d.policy}, ${d.promptTokens} tokens, ${d.queryBlocks} blocks, ${
    d.boundWorker === undefined ? 'unbound' : `bound to ${d.boundWorker}`
  }, mean load ${fmt(d.meanLoad)}${d.exclusionsReleased ? ', exclusions released' : ''})`
  const cols = [
    '#',
    'worker',
    'fast',
    'capOk',
    'score',
    'overlap',
    'bonus',
    'load',
    'tie',
    'append',
    'need',
    'avail',
    'by',
  ]
  const rows: string[][] = d.candidates.map((c) => [
    String(c.rank),
    c.workerId,
    c.fast ? 'yes' : 'no',
    c.capOk ? 'yes' : 'no',
    fmt(c.score),
    String(c.overlapBlocks),
    fmt(c.bonus),
    String(c.load),
    String(c.tieBreak),
    String(c.appendTokens),
    String(c.needTokens),
    String(c.availableTokens),
    c.decidedBy + (c.note === undefined ? '' : ` (${c.note})`),
  ])
  const widths = cols.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (r: readonly string[]) =>
    `  ${r.map((x, i) => (i === r.length - 1 ? x : pad(x, widths[i]!))).join('  ')}`.trimEnd()
  const out = [head, line(cols), ...rows.map(line)]
  for (const w of d.ineligible) {
    out.push(`  -  ${w.workerId}: ${w.reason}${w.until === undefined ? '' : ` until ${fmt(w.until)}`}`)
  }
  if (d.candidates.length === 0 && d.ineligible.length === 0) out.push('  (no D worker)')
  return out.join('\n')
}

/**
 * Renders a turn's dispatch record: the outcome line, then every step (route walks, admissions,
 * rejections, exclusions, waits, sends), then the first route decision.
 *
 * @example
 * ```ts
 * import { Router, renderDispatch } from '@kvc/kvc-router'
 * const turn = new Router({ now: () => 0, random: () => 0 }).dispatch({ sessionId: 's', promptTokens: 10 })
 * const fail = turn.abort()
 * console.log(renderDispatch(fail.record))
 * // turn s#1 (session s, interactive, kvc): fail: aborted after 0 attempts, 0 walks
 * //   @0 fail  aborted (TURN_FINISHED)
 * ```
 */
export function renderDispatch(r: DispatchRecord): string {
  const end =
    r.outcome === 'done'
      ? `done: ${r.path} on ${r.workerId}`
      : r.outcome === 'fail'
        ? `fail: ${r.cause}`
        : 'running'
  const out = [
    `turn ${r.turnId} (session ${r.sessionId}, ${r.sloClass}, ${r.policy}): ${end} after ${r.attempts} attempts, ${r.walks} walks${
      r.endedAt === undefined ? '' : `, ${fmt(r.endedAt - r.startedAt)} ms`
    }`,
  ]
  for (const s of r.steps) {
    const who =
      s.workerId === undefined ? '' : ` ${s.prefillId === undefined ? '' : `${s.prefillId}→`}${s.workerId}`
    out.push(`  @${fmt(s.at)} ${s.kind}${who}  ${s.detail}`)
  }
  const first = r.routes[0]
  if (first !== undefined) {
    out.push(
      ...renderRoute(first)
        .split('\n')
        .map((l) => `  ${l}`),
    )
  }
  return out.join('\n')
}
