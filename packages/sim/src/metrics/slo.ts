import type { TurnRecord } from './types.js'

/**
 * Service-level objectives of a turn: its time to first token and its time per output token
 * (TPOT, the mean gap between its tokens after the first). A turn is **good** when it completed
 * and met both; goodput is the share of all turns that are good (DistServe, OSDI'24,
 * arXiv:2401.09670, which defines goodput by the same pair of SLOs).
 *
 * @example
 * ```ts
 * import type { Slo } from '@kvc/sim'
 * const interactive: Slo = { ttftS: 0.5, tpotS: 0.05 }
 * ```
 */
export interface Slo {
  /** Largest acceptable time to first token, seconds. */
  readonly ttftS: number
  /** Largest acceptable time per output token after the first, seconds. */
  readonly tpotS: number
}

/**
 * The default SLOs: TTFT ≤ 2 s and TPOT ≤ 25 ms, the pair NVIDIA Dynamo's KV-routing benchmark
 * measures goodput at (Qwen3-32B on the Mooncake conversation trace, whose prompts are long
 * multi-turn histories as here; its "ITL" is AIPerf's per-request inter-token latency, which is
 * TPOT). 25 ms is about twice the cost model's decode step of a small batch, so a turn misses it
 * when prefills stall its batch for a while, the interference disaggregation is meant to remove.
 *
 * @example
 * ```ts
 * import { DEFAULT_SLO } from '@kvc/sim'
 * DEFAULT_SLO.tpotS // 0.025
 * ```
 */
export const DEFAULT_SLO: Slo = { ttftS: 2, tpotS: 0.025 }

/**
 * Seconds per output token after the first: `(end − first token) / (output − 1)`. `Infinity` for
 * a failed turn, `NaN` for a turn of at most one output token (it has no gap).
 *
 * @example
 * ```ts
 * import { tpotOf, type TurnRecord } from '@kvc/sim'
 * const slowDecode = (rs: TurnRecord[]) => rs.filter((r) => tpotOf(r) > 0.05)
 * ```
 */
export function tpotOf(r: TurnRecord): number {
  if (r.status !== 'completed') return Number.POSITIVE_INFINITY
  if (r.outputLength <= 1) return Number.NaN
  return (r.endMs - r.firstTokenMs) / 1000 / (r.outputLength - 1)
}

/**
 * Whether a turn is good under `slo`: completed, first token within `ttftS`, and TPOT within
 * `tpotS` (a turn of one output token has no TPOT and meets it, as in vLLM's goodput).
 *
 * @example
 * ```ts
 * import { DEFAULT_SLO, meetsSlo, type TurnRecord } from '@kvc/sim'
 * const goodput = (rs: TurnRecord[]) => rs.filter((r) => meetsSlo(r, DEFAULT_SLO)).length / rs.length
 * ```
 */
export function meetsSlo(r: TurnRecord, slo: Slo): boolean {
  if (r.status !== 'completed') return false
  if ((r.firstTokenMs - r.arrivalMs) / 1000 > slo.ttftS) return false
  const tpot = tpotOf(r)
  return Number.isNaN(tpot) || tpot <= slo.tpotS
}

/**
 * An agent's task: one session from its first turn's arrival to its last turn's end. `spanS`
 * includes the workload's think and tool gaps between turns (what the agent's user waits);
 * `servedS` sums the turns' own end-to-end times, leaving the gaps out (what the serving design
 * controls). A session with a failed turn did not complete its task: `failed` is true and both
 * times are what it took until its last turn ended.
 *
 * @example
 * ```ts
 * import type { SessionTask } from '@kvc/sim'
 * const t: SessionTask = { session: 0, turns: 3, spanS: 40, servedS: 4.5, failed: false }
 * ```
 */
export interface SessionTask {
  readonly session: number
  readonly turns: number
  readonly spanS: number
  readonly servedS: number
  readonly failed: boolean
}

/**
 * The {@link SessionTask} of every session with turns in `records`, by session index.
 *
 * @example
 * ```ts
 * import { generateAgenticWorkload, runSimulation, sessionTasks } from '@kvc/sim'
 * const r = runSimulation({ workload: generateAgenticWorkload({ seed: 1, sessions: 2, maxTurnsPerSession: 3 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 1 }, policy: 'kvc', seed: 1 })
 * sessionTasks(r.records).length // 2
 * ```
 */
export function sessionTasks(records: readonly TurnRecord[]): SessionTask[] {
  const by = new Map<number, { first: number; last: number; served: number; n: number; failed: boolean }>()
  for (const r of records) {
    if (r.session < 0) continue
    let s = by.get(r.session)
    if (s === undefined) {
      s = { first: r.arrivalMs, last: r.endMs, served: 0, n: 0, failed: false }
      by.set(r.session, s)
    }
    if (r.arrivalMs < s.first) s.first = r.arrivalMs
    if (r.endMs > s.last) s.last = r.endMs
    s.served += r.endMs - r.arrivalMs
    s.n++
    if (r.status !== 'completed') s.failed = true
  }
  return [...by.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([session, s]) => ({
      session,
      turns: s.n,
      spanS: (s.last - s.first) / 1000,
      servedS: s.served / 1000,
      failed: s.failed,
    }))
}
