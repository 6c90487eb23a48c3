/**
 * Nearest-rank quantile of an ascending-sorted array (`Infinity` entries sort last, so a failed
 * turn counted as infinitely slow lands in the tail). `NaN` for an empty array.
 *
 * @example
 * ```ts
 * import { quantileSorted } from '@kvc/sim'
 * quantileSorted(Float64Array.of(1, 2, 3, 4), 0.5) // 2
 * quantileSorted(Float64Array.of(1, 2, 3, Infinity), 0.99) // Infinity: a failed turn
 * ```
 */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length
  if (n === 0) return Number.NaN
  const i = Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))
  return sorted[i]!
}

/**
 * Mean of the finite entries of `xs` (`NaN` when none).
 *
 * @example
 * ```ts
 * import { finiteMean } from '@kvc/sim'
 * finiteMean([1, 3, Infinity]) // 2
 * ```
 */
export function finiteMean(xs: ArrayLike<number>): number {
  let s = 0
  let n = 0
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i]!
    if (Number.isFinite(x)) {
      s += x
      n++
    }
  }
  return n === 0 ? Number.NaN : s / n
}

/**
 * Latency statistics of a set of turns under the protocol's rule: a failed turn is never
 * dropped. Percentiles count it as infinitely slow (so a p99 over a set with more than 1% of
 * failures is `Infinity`, printed "failed"); the mean counts it at the time it took to fail (a
 * lower bound), and `failed` says how many there were.
 *
 * @example
 * ```ts
 * import type { LatencyStats } from '@kvc/sim'
 * const s: LatencyStats = { n: 10, failed: 1, mean: 0.4, p50: 0.3, p90: 0.9, p99: Infinity }
 * ```
 */
export interface LatencyStats {
  readonly n: number
  readonly failed: number
  readonly mean: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
}

/**
 * {@link LatencyStats} of `values` (seconds; `Infinity` marks a failed turn) with `failMeans`
 * (the time each failed turn took, used in the mean). Sorts a copy.
 *
 * @example
 * ```ts
 * import { latencyStats } from '@kvc/sim'
 * latencyStats(Float64Array.of(0.1, 0.2, Infinity), Float64Array.of(0.1, 0.2, 30)).p50 // 0.2
 * ```
 */
export function latencyStats(values: Float64Array, meanValues: Float64Array): LatencyStats {
  const sorted = Float64Array.from(values).sort()
  let failed = 0
  for (let i = 0; i < values.length; i++) if (values[i] === Number.POSITIVE_INFINITY) failed++
  let s = 0
  for (let i = 0; i < meanValues.length; i++) s += meanValues[i]!
  return {
    n: values.length,
    failed,
    mean: values.length === 0 ? Number.NaN : s / meanValues.length,
    p50: quantileSorted(sorted, 0.5),
    p90: quantileSorted(sorted, 0.9),
    p99: quantileSorted(sorted, 0.99),
  }
}
