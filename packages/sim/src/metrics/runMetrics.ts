import { GAP_BUCKETS, type DecodeGapHistograms, gapHistogramQuantiles } from './decodeGaps.js'
import { type LatencyStats, latencyStats } from './quantiles.js'
import type { RunResult } from './runResult.js'
import { DEFAULT_SLO, type Slo, meetsSlo, sessionTasks, tpotOf } from './slo.js'
import type { TurnRecord } from './types.js'

/**
 * Inter-token latency pooled over every gap of every completed turn (seconds): its mean (exact:
 * Σ decode time ÷ Σ gaps) and percentiles (from the gap histograms, within ±1.1%). `NaN` without
 * gap data.
 *
 * @example
 * ```ts
 * import type { ItlStats } from '@kvc/sim'
 * const s: ItlStats = { gaps: 12_000, mean: 0.0131, p50: 0.0124, p90: 0.0142, p99: 0.21 }
 * ```
 */
export interface ItlStats {
  readonly gaps: number
  readonly mean: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
}

/**
 * The metrics of `docs/design/simulation.md#metrics` for one run (one policy, one seed). Latencies in seconds. Failed
 * turns are never dropped: they count in `turns`, in the error rate, and in the latency
 * statistics as described in {@link LatencyStats}.
 *
 * @example
 * ```ts
 * import type { RunMetrics } from '@kvc/sim'
 * const summary = (m: RunMetrics) => `${m.completed}/${m.turns} ok, TTFT p50 ${m.ttft.p50.toFixed(3)} s`
 * ```
 */
export interface RunMetrics {
  readonly turns: number
  readonly completed: number
  readonly failed: number
  readonly errorRate: number
  readonly failedByCause: Readonly<Record<string, number>>
  readonly ttft: LatencyStats
  /**
   * Time per output token after the first, over turns with at least two output tokens; failed
   * turns count as infinitely slow in the percentiles, and the mean is over completed turns.
   */
  readonly tpot: LatencyStats
  readonly itl: ItlStats
  readonly e2e: LatencyStats
  /** The SLOs goodput is measured against. */
  readonly slo: Slo
  /** Share of all turns that completed within both SLOs. */
  readonly goodput: number
  /** Good turns per simulated second (makespan). */
  readonly goodTurnsPerS: number
  /** Agent task completion per session, first arrival to last end (think and tool gaps included); failed sessions as failed turns. */
  readonly task: LatencyStats
  /** The same without the gaps: the sum of the session's turns' end-to-end times. */
  readonly taskServed: LatencyStats
  /** Completed turns per simulated second (makespan). */
  readonly throughputTurnsPerS: number
  /** Output tokens of completed turns per simulated second. */
  readonly outputTokensPerS: number
  /** Share of all turns served on the fast path (direct to the D holding the session). */
  readonly fastPathRate: number
  readonly paths: Readonly<Record<'fast' | 'local' | 'seed' | 'direct', number>>
  /** Seed-path and local-seed turns of sessions past their first turn (the history was re-prefilled, by a P or by the D). */
  readonly reseeds: number
  /** Turns whose session moved to another D. */
  readonly migrations: number
  /** Evictions on D (or colocated) workers, and tokens freed per eviction. */
  readonly decodeEvictions: number
  readonly decodeTokensPerEviction: number
  /** Evictions on P workers, and tokens freed per eviction. */
  readonly prefillEvictions: number
  readonly prefillTokensPerEviction: number
  /** Σ prompt tokens found cached where the prompt was computed ÷ Σ prompt tokens. */
  readonly prefixHitRatio: number
  /** Bytes moved over P→D links. */
  readonly kvTransferBytes: number
  /** Peak KV usage over the D (or colocated) workers, 0..1. */
  readonly peakDecodeUsage: number
  /** Per session (sessions with turns): fast-path turns ÷ turns. */
  readonly sessionFastPathRates: readonly number[]
  /** Sessions per fast-path-rate bucket: [0,20%), [20,40%), [40,60%), [60,80%), [80,100%]. */
  readonly sessionFastPathHistogram: readonly number[]
}

/** Seconds from arrival to first token; `Infinity` for a failed turn. *
 * @example
 * ```ts
 * import { ttftOf, type TurnRecord } from '@kvc/sim'
 * const slow = (rs: TurnRecord[]) => rs.filter((r) => ttftOf(r) > 1)
 * ```
 */
export function ttftOf(r: TurnRecord): number {
  return r.status === 'completed' ? (r.firstTokenMs - r.arrivalMs) / 1000 : Number.POSITIVE_INFINITY
}

/** Seconds from arrival to the end; `Infinity` for a failed turn. *
 * @example
 * ```ts
 * import { e2eOf, type TurnRecord } from '@kvc/sim'
 * const total = (rs: TurnRecord[]) => rs.reduce((a, r) => a + e2eOf(r), 0) // Infinity if any failed
 * ```
 */
export function e2eOf(r: TurnRecord): number {
  return r.status === 'completed' ? (r.endMs - r.arrivalMs) / 1000 : Number.POSITIVE_INFINITY
}

/** Seconds a turn took to end (to fail, for a failed turn). *
 * @example
 * ```ts
 * import { elapsedOf, type TurnRecord } from '@kvc/sim'
 * const timeToFail = (r: TurnRecord) => (r.status === 'failed' ? elapsedOf(r) : 0)
 * ```
 */
export function elapsedOf(r: TurnRecord): number {
  return (r.endMs - r.arrivalMs) / 1000
}

/**
 * Fast-path-rate bucket of a session (0..4, see {@link RunMetrics.sessionFastPathHistogram}).
 *
 * @example
 * ```ts
 * import { fastPathBucket } from '@kvc/sim'
 * fastPathBucket(0.95) // 4
 * ```
 */
export function fastPathBucket(rate: number): number {
  return Math.min(4, Math.floor(rate * 5))
}

/**
 * Latency statistics of a list of records (TTFT or end-to-end).
 *
 * @example
 * ```ts
 * import { latencyOf } from '@kvc/sim'
 * latencyOf([], 'ttft').n // 0
 * ```
 */
export function latencyOf(records: readonly TurnRecord[], which: 'ttft' | 'e2e'): LatencyStats {
  const v = new Float64Array(records.length)
  const m = new Float64Array(records.length)
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!
    v[i] = which === 'ttft' ? ttftOf(r) : e2eOf(r)
    m[i] = r.status === 'completed' ? v[i]! : elapsedOf(r)
  }
  return latencyStats(v, m)
}

/**
 * TPOT statistics of a list of records (see {@link RunMetrics.tpot}).
 *
 * @example
 * ```ts
 * import { tpotStats } from '@kvc/sim'
 * tpotStats([]).n // 0
 * ```
 */
export function tpotStats(records: readonly TurnRecord[]): LatencyStats {
  const v: number[] = []
  const m: number[] = []
  for (const r of records) {
    const t = tpotOf(r)
    if (Number.isNaN(t)) continue
    v.push(t)
    if (Number.isFinite(t)) m.push(t)
  }
  return latencyStats(Float64Array.from(v), Float64Array.from(m))
}

/**
 * Pooled inter-token latency of the completed turns of `records` (`gaps`: the run's per-turn gap
 * histograms, rows by record index).
 *
 * @example
 * ```ts
 * import { itlStats } from '@kvc/sim'
 * itlStats([], undefined).p50 // NaN
 * ```
 */
export function itlStats(records: readonly TurnRecord[], gaps: DecodeGapHistograms | undefined): ItlStats {
  let decodeMs = 0
  let n = 0
  for (const r of records) {
    if (r.status !== 'completed' || r.outputLength <= 1) continue
    decodeMs += r.endMs - r.firstTokenMs
    n += r.outputLength - 1
  }
  const mean = n === 0 ? Number.NaN : decodeMs / 1000 / n
  if (gaps === undefined) return { gaps: n, mean, p50: Number.NaN, p90: Number.NaN, p99: Number.NaN }
  const hist = new Float64Array(GAP_BUCKETS)
  let total = 0
  for (let k = 0; k < gaps.counts.length; k++) {
    hist[gaps.buckets[k]!]! += gaps.counts[k]!
    total += gaps.counts[k]!
  }
  const [p50, p90, p99] = gapHistogramQuantiles(hist, total, [0.5, 0.9, 0.99])
  return { gaps: n, mean, p50: p50!, p90: p90!, p99: p99! }
}

function taskStats(records: readonly TurnRecord[]): { task: LatencyStats; taskServed: LatencyStats } {
  const tasks = sessionTasks(records)
  const span = new Float64Array(tasks.length)
  const spanMean = new Float64Array(tasks.length)
  const served = new Float64Array(tasks.length)
  const servedMean = new Float64Array(tasks.length)
  tasks.forEach((t, i) => {
    span[i] = t.failed ? Number.POSITIVE_INFINITY : t.spanS
    spanMean[i] = t.spanS
    served[i] = t.failed ? Number.POSITIVE_INFINITY : t.servedS
    servedMean[i] = t.servedS
  })
  return { task: latencyStats(span, spanMean), taskServed: latencyStats(served, servedMean) }
}

/**
 * Compute {@link RunMetrics} from a run result.
 *
 * @example
 * ```ts
 * import { computeRunMetrics, generateAgenticWorkload, runSimulation } from '@kvc/sim'
 * const r = runSimulation({ workload: generateAgenticWorkload({ seed: 1, sessions: 3, maxTurnsPerSession: 4 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 2 }, policy: 'kvc', seed: 1 })
 * computeRunMetrics(r, 98_304).turns // every turn of the workload
 * ```
 */
export function computeRunMetrics(
  run: RunResult,
  kvBytesPerToken: number,
  slo: Slo = DEFAULT_SLO,
): RunMetrics {
  const recs = run.records
  let completed = 0
  let outTokens = 0
  let cached = 0
  let input = 0
  let transferred = 0
  let reseeds = 0
  let migrations = 0
  const paths = { fast: 0, local: 0, seed: 0, direct: 0 }
  const perSession = new Map<number, { n: number; fast: number }>()
  let good = 0
  for (const r of recs) {
    if (meetsSlo(r, slo)) good++
    input += r.inputLength
    cached += r.cachedTokens
    transferred += r.transferredTokens
    if (r.status === 'completed') {
      completed++
      outTokens += r.outputLength
      if (r.path !== undefined) paths[r.path]++
      if ((r.path === 'seed' || r.path === 'local') && r.turnIndex > 0) reseeds++
      if (r.migrated) migrations++
    }
    if (r.session >= 0) {
      let s = perSession.get(r.session)
      if (s === undefined) {
        s = { n: 0, fast: 0 }
        perSession.set(r.session, s)
      }
      s.n++
      if (r.status === 'completed' && r.path === 'fast') s.fast++
    }
  }
  const rates = [...perSession.entries()].sort((a, b) => a[0] - b[0]).map(([, s]) => s.fast / s.n)
  const hist = [0, 0, 0, 0, 0]
  for (const x of rates) hist[fastPathBucket(x)]!++
  let dEv = 0
  let dTok = 0
  let pEv = 0
  let pTok = 0
  for (const e of run.evictions) {
    const role = run.usage.find((u) => u.workerId === e.workerId)?.role
    if (role === 'prefill') {
      pEv += e.evictions
      pTok += e.evictedTokens
    } else {
      dEv += e.evictions
      dTok += e.evictedTokens
    }
  }
  let peak = 0
  for (const u of run.usage) {
    if (u.role === 'prefill') continue
    for (const x of u.usage) if (x > peak) peak = x
  }
  const failedByCause: Record<string, number> = { ...run.accounting.failedByCause }
  const span = run.makespanS > 0 ? run.makespanS : 1
  return {
    turns: recs.length,
    completed,
    failed: recs.length - completed,
    errorRate: recs.length === 0 ? 0 : (recs.length - completed) / recs.length,
    failedByCause,
    ttft: latencyOf(recs, 'ttft'),
    tpot: tpotStats(recs),
    itl: itlStats(recs, run.decodeGaps),
    e2e: latencyOf(recs, 'e2e'),
    slo,
    goodput: recs.length === 0 ? 0 : good / recs.length,
    goodTurnsPerS: good / span,
    ...taskStats(recs),
    throughputTurnsPerS: completed / span,
    outputTokensPerS: outTokens / span,
    fastPathRate: recs.length === 0 ? 0 : paths.fast / recs.length,
    paths,
    reseeds,
    migrations,
    decodeEvictions: dEv,
    decodeTokensPerEviction: dEv === 0 ? 0 : dTok / dEv,
    prefillEvictions: pEv,
    prefillTokensPerEviction: pEv === 0 ? 0 : pTok / pEv,
    prefixHitRatio: input === 0 ? 0 : cached / input,
    kvTransferBytes: transferred * kvBytesPerToken,
    peakDecodeUsage: peak,
    sessionFastPathRates: rates,
    sessionFastPathHistogram: hist,
  }
}
