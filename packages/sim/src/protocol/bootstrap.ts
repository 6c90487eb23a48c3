import { Prng } from '../engine/prng.js'
import { quantileSorted } from '../metrics/quantiles.js'

/**
 * The metrics that get bootstrap confidence intervals and paired differences.
 *
 * @example
 * ```ts
 * import { CI_METRICS } from '@kvc/sim'
 * CI_METRICS[0] // 'ttft_mean'
 * ```
 */
export const CI_METRICS = [
  'ttft_mean',
  'ttft_p50',
  'ttft_p90',
  'ttft_p99',
  'e2e_mean',
  'e2e_p50',
  'e2e_p90',
  'e2e_p99',
  'error_rate',
  'fast_path_rate',
] as const

/**
 * One of {@link CI_METRICS}. Latencies are seconds; rates are fractions. For all of them lower is
 * better except `fast_path_rate`.
 *
 * @example
 * ```ts
 * import type { CiMetric } from '@kvc/sim'
 * const m: CiMetric = 'ttft_p90'
 * ```
 */
export type CiMetric = (typeof CI_METRICS)[number]

/**
 * Whether a larger value of the metric is better.
 *
 * @example
 * ```ts
 * import { higherIsBetter } from '@kvc/sim'
 * higherIsBetter('fast_path_rate') // true
 * ```
 */
export function higherIsBetter(m: CiMetric): boolean {
  return m === 'fast_path_rate'
}

/**
 * A point estimate with its bootstrap 95% interval (percentile method). `Infinity` appears when
 * failed turns reach a percentile (a failed turn counts as infinitely slow).
 *
 * @example
 * ```ts
 * import type { Estimate } from '@kvc/sim'
 * const e: Estimate = { value: 0.41, lo: 0.38, hi: 0.45 }
 * ```
 */
export interface Estimate {
  readonly value: number
  readonly lo: number
  readonly hi: number
}

/**
 * A paired difference `policy − reference` on the same resampled turns, with its 95% interval
 * and the share of resamples in which the policy is better.
 *
 * @example
 * ```ts
 * import type { PairedEstimate } from '@kvc/sim'
 * const d: PairedEstimate = { diff: -0.2, lo: -0.3, hi: -0.1, pBetter: 1, pWorse: 0 }
 * ```
 */
export interface PairedEstimate {
  readonly diff: number
  readonly lo: number
  readonly hi: number
  /** Share of resamples in which the policy is strictly better than the reference. */
  readonly pBetter: number
  /** Share of resamples in which it is strictly worse (ties count in neither). */
  readonly pWorse: number
}

/**
 * Per-turn columns of one policy, concatenated over the seeds in the same order for every policy
 * (so index `i` is the same turn of the same trial everywhere: the pairing).
 *
 * @example
 * ```ts
 * import type { PolicyColumns } from '@kvc/sim'
 * const n = (c: PolicyColumns) => c.ttft.length
 * ```
 */
export interface PolicyColumns {
  readonly ttft: Float64Array
  readonly e2e: Float64Array
  /** Time to completion, or to failure (for means). */
  readonly elapsedTtft: Float64Array
  readonly elapsed: Float64Array
  readonly failed: Uint8Array
  readonly fast: Uint8Array
}

/** Which turns make up each cluster (session, or request without sessions) of each seed. *
 * @example
 * ```ts
 * import type { ClusterLayout } from '@kvc/sim'
 * const layout: ClusterLayout = { seeds: [[Int32Array.of(0, 1), Int32Array.of(2)]] } // one seed, two sessions
 * ```
 */
export interface ClusterLayout {
  /** Per seed, the clusters: arrays of global turn indices. */
  readonly seeds: readonly (readonly Int32Array[])[]
}

/**
 * A column's values in the order a `Float64Array` sort gives them (NaN last, −0 before +0), with
 * each turn's rank: a resample's quantiles then come from counting its turns per rank (O(turns))
 * instead of sorting its values, with the same result.
 */
class RankedColumn {
  /** `sorted[r]`: the r-th smallest value. */
  readonly sorted: Float64Array
  /** `rank[i]`: turn i's position in `sorted`. */
  readonly rank: Int32Array
  /** Scratch: turns of the current resample per rank. */
  readonly counts: Int32Array

  constructor(values: Float64Array) {
    const n = values.length
    const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => compareF64(values[a]!, values[b]!))
    this.sorted = new Float64Array(n)
    this.rank = new Int32Array(n)
    this.counts = new Int32Array(n)
    for (let r = 0; r < n; r++) {
      this.sorted[r] = values[order[r]!]!
      this.rank[order[r]!] = r
    }
  }

  /**
   * `quantileSorted` of the resample `idx[0, n)` at 0.5, 0.9 and 0.99 into `out[at, at + 3)`:
   * the values at positions ⌈q·n⌉ − 1 of the resample sorted.
   */
  quantiles(idx: Int32Array, n: number, out: Float64Array, at: number): void {
    if (n === 0) {
      out[at] = Number.NaN
      out[at + 1] = Number.NaN
      out[at + 2] = Number.NaN
      return
    }
    const rank = this.rank
    const counts = this.counts
    for (let k = 0; k < n; k++) counts[rank[idx[k]!]!]!++
    const p50 = Math.min(n - 1, Math.max(0, Math.ceil(0.5 * n) - 1))
    const p90 = Math.min(n - 1, Math.max(0, Math.ceil(0.9 * n) - 1))
    const p99 = Math.min(n - 1, Math.max(0, Math.ceil(0.99 * n) - 1))
    const sorted = this.sorted
    let seen = 0
    let q = 0
    for (let r = 0; q < 3; r++) {
      seen += counts[r]!
      // Positions [seen before, seen) hold sorted[r].
      while (q < 3 && (q === 0 ? p50 : q === 1 ? p90 : p99) < seen) out[at + q++] = sorted[r]!
    }
    for (let k = 0; k < n; k++) counts[rank[idx[k]!]!] = 0
  }
}

/** The order of a `Float64Array` sort: numbers ascending, −0 before +0, NaN last. */
function compareF64(x: number, y: number): number {
  if (x !== x) return y !== y ? 0 : 1
  if (y !== y) return -1
  if (x < y) return -1
  if (x > y) return 1
  if (x === 0 && y === 0) return (Object.is(y, -0) ? 1 : 0) - (Object.is(x, -0) ? 1 : 0)
  return 0
}

/** A policy's columns with their ranked latencies. */
interface RankedPolicy {
  readonly c: PolicyColumns
  readonly ttft: RankedColumn
  readonly e2e: RankedColumn
}

function metricsOf(p: RankedPolicy, idx: Int32Array, n: number, out: Float64Array): void {
  const c = p.c
  let sumT = 0
  let sumE = 0
  let failed = 0
  let fast = 0
  for (let k = 0; k < n; k++) {
    const i = idx[k]!
    sumT += c.elapsedTtft[i]!
    sumE += c.elapsed[i]!
    failed += c.failed[i]!
    fast += c.fast[i]!
  }
  out[0] = n === 0 ? Number.NaN : sumT / n
  p.ttft.quantiles(idx, n, out, 1)
  out[4] = n === 0 ? Number.NaN : sumE / n
  p.e2e.quantiles(idx, n, out, 5)
  out[8] = n === 0 ? Number.NaN : failed / n
  out[9] = n === 0 ? Number.NaN : fast / n
}

function diffOf(a: number, b: number): number {
  if (a === b) return 0 // covers Infinity − Infinity: both failed at that percentile
  return a - b
}

/**
 * Cluster bootstrap over sessions (within each seed: the trials stay separate), paired across
 * policies: every resample draws the same clusters for every policy, so the differences compare
 * the same turns of the same trials. Returns, per policy, an {@link Estimate} per metric, and per
 * non-reference policy a {@link PairedEstimate} per metric against `reference`.
 *
 * @example
 * ```ts
 * import { pairedBootstrap } from '@kvc/sim'
 * const col = (t: number[]) => ({
 *   ttft: Float64Array.from(t), e2e: Float64Array.from(t), elapsedTtft: Float64Array.from(t),
 *   elapsed: Float64Array.from(t), failed: new Uint8Array(t.length), fast: new Uint8Array(t.length),
 * })
 * const layout = { seeds: [[Int32Array.of(0), Int32Array.of(1), Int32Array.of(2)]] }
 * const r = pairedBootstrap([col([1, 2, 3]), col([2, 3, 4])], layout, 0, 100, 7)
 * r.paired[1]?.ttft_mean.diff // 1
 * ```
 */
export function pairedBootstrap(
  policies: readonly PolicyColumns[],
  layout: ClusterLayout,
  reference: number,
  resamples: number,
  seed: number,
): {
  estimates: Record<CiMetric, Estimate>[]
  paired: (Record<CiMetric, PairedEstimate> | undefined)[]
} {
  const M = CI_METRICS.length
  const P = policies.length
  let total = 0
  for (const s of layout.seeds) for (const c of s) total += c.length
  const all = new Int32Array(total)
  {
    let k = 0
    for (const s of layout.seeds) for (const c of s) for (let j = 0; j < c.length; j++) all[k++] = c[j]!
  }
  const ranked: RankedPolicy[] = policies.map((c) => ({
    c,
    ttft: new RankedColumn(c.ttft),
    e2e: new RankedColumn(c.e2e),
  }))
  const point = ranked.map((p) => {
    const out = new Float64Array(M)
    metricsOf(p, all, total, out)
    return out
  })
  // samples[p][m][b]
  const samples = policies.map(() => Array.from({ length: M }, () => new Float64Array(resamples)))
  const rng = new Prng(seed, 'bootstrap')
  let idx = new Int32Array(Math.max(16, total * 2))
  const out = new Float64Array(M)
  for (let b = 0; b < resamples; b++) {
    let n = 0
    for (const clusters of layout.seeds) {
      const k = clusters.length
      for (let j = 0; j < k; j++) {
        const c = clusters[rng.int(k)]!
        if (n + c.length > idx.length) {
          const grown = new Int32Array((n + c.length) * 2)
          grown.set(idx.subarray(0, n))
          idx = grown
        }
        idx.set(c, n)
        n += c.length
      }
    }
    for (let p = 0; p < P; p++) {
      metricsOf(ranked[p]!, idx, n, out)
      for (let m = 0; m < M; m++) samples[p]![m]![b] = out[m]!
    }
  }
  const estimates = policies.map((_, p) => {
    const r = {} as Record<CiMetric, Estimate>
    CI_METRICS.forEach((name, m) => {
      const s = Float64Array.from(samples[p]![m]!).sort()
      r[name] = { value: point[p]![m]!, lo: quantileSorted(s, 0.025), hi: quantileSorted(s, 0.975) }
    })
    return r
  })
  const paired = policies.map((_, p) => {
    if (p === reference) return undefined
    const r = {} as Record<CiMetric, PairedEstimate>
    CI_METRICS.forEach((name, m) => {
      const d = new Float64Array(resamples)
      let better = 0
      let worse = 0
      const hib = higherIsBetter(name)
      for (let b = 0; b < resamples; b++) {
        const x = samples[p]![m]![b]!
        const y = samples[reference]![m]![b]!
        d[b] = diffOf(x, y)
        if (hib ? x > y : x < y) better++
        else if (hib ? x < y : x > y) worse++
      }
      d.sort()
      r[name] = {
        diff: diffOf(point[p]![m]!, point[reference]![m]!),
        lo: quantileSorted(d, 0.025),
        hi: quantileSorted(d, 0.975),
        pBetter: resamples === 0 ? Number.NaN : better / resamples,
        pWorse: resamples === 0 ? Number.NaN : worse / resamples,
      }
    })
    return r
  })
  return { estimates, paired }
}
