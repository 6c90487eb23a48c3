import { Prng } from '../engine/prng.js'
import { type DecodeGapHistograms, GAP_BUCKETS, gapBucketMs } from '../metrics/decodeGaps.js'
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
  'tpot_mean',
  'tpot_p50',
  'tpot_p90',
  'tpot_p99',
  'itl_p50',
  'itl_p90',
  'itl_p99',
  'e2e_mean',
  'e2e_p50',
  'e2e_p90',
  'e2e_p99',
  'goodput',
  'task_mean',
  'task_p50',
  'task_p90',
  'task_served_mean',
  'task_served_p50',
  'task_served_p90',
  'error_rate',
  'fast_path_rate',
] as const

/**
 * One of {@link CI_METRICS}. Latencies are seconds; rates are fractions. For all of them lower is
 * better except `goodput` and `fast_path_rate`. `tpot_*` are per turn (turns with two output
 * tokens or more), `itl_*` pool every gap between tokens, `task_*` are per session (first arrival
 * to last end; `task_served_*` without the think and tool gaps).
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
 * higherIsBetter('goodput') // true
 * ```
 */
export function higherIsBetter(m: CiMetric): boolean {
  return m === 'fast_path_rate' || m === 'goodput'
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
 * (so index `i` is the same turn of the same trial everywhere: the pairing). The optional columns
 * feed the decode-side and task metrics; without them those metrics are `NaN`.
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
  /** TPOT per turn, seconds (`NaN`: fewer than two output tokens; `Infinity`: failed). */
  readonly tpot?: Float64Array
  /** 1 where the turn completed within both SLOs. */
  readonly good?: Uint8Array
  /** Each turn's gap histogram (rows by turn index, over the concatenated seeds). */
  readonly gaps?: DecodeGapHistograms
  /**
   * Per cluster of the {@link ClusterLayout} (numbered seed by seed, in layout order): the task's
   * span and served time (`Infinity` for a session with a failed turn), and the same at the time
   * taken (for means).
   */
  readonly task?: {
    readonly span: Float64Array
    readonly spanElapsed: Float64Array
    readonly served: Float64Array
    readonly servedElapsed: Float64Array
  }
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
 * A column sorted once, so that a resample's nearest-rank quantiles are one walk weighted by how
 * many times each cluster was drawn (the same values a sort of the resampled turns would give,
 * without sorting per resample). Quantiles up to the median walk up from the smallest value,
 * higher ones down from the largest (a p99 visits 1% of the column, not 99%).
 */
class SortedColumn {
  readonly values: Float64Array
  readonly cluster: Int32Array
  /** Entries per cluster (for the resample's total weight). */
  readonly perCluster: Int32Array
  /**
   * The clusters of the members left out for a `NaN` value, one per member: with `complete`, the
   * resample's weight is its turn count minus their draws.
   */
  readonly #excluded: Int32Array
  /** Whether the members were every turn of every cluster (so `total − excluded` is the weight). */
  readonly #complete: boolean

  constructor(
    values: Float64Array,
    members: Int32Array,
    clusterOf: Int32Array,
    clusters: number,
    complete = false,
  ) {
    const m = members.length - countNaN(values, members)
    const kept = new Float64Array(m)
    const keptCluster = new Int32Array(m)
    const excluded = new Int32Array(members.length - m)
    split(values, members, clusterOf, kept, keptCluster, excluded)
    // Sorted by value alone (the typed array's own sort, no comparator calls): the order among
    // equal values changes where a walk crosses a rank within their run, never the value read.
    // Each entry's cluster goes to the next free place of its value's run.
    const sorted = kept.slice().sort()
    const cluster = new Int32Array(m)
    placeInRuns(kept, keptCluster, sorted, cluster)
    this.values = sorted
    this.cluster = cluster
    this.perCluster = entriesPerCluster(cluster, clusters)
    this.#excluded = excluded
    this.#complete = complete
  }

  /**
   * The resample's weight: entries counted with their cluster's multiplicity. `total` is the
   * resample's turn count when known (then only the excluded members are visited), else -1.
   */
  #weight(counts: Int32Array, total: number): number {
    let w = 0
    if (total >= 0 && this.#complete && this.#excluded.length < this.cluster.length) {
      const ex = this.#excluded
      w = total
      for (let e = 0; e < ex.length; e++) w -= counts[ex[e]!]!
    } else if (this.cluster.length < counts.length) {
      const cl = this.cluster
      for (let j = 0; j < cl.length; j++) w += counts[cl[j]!]!
    } else {
      const per = this.perCluster
      for (let c = 0; c < counts.length; c++) w += counts[c]! * per[c]!
    }
    return w
  }

  /**
   * Nearest-rank quantiles `qs` (ascending) of the resample with cluster multiplicities `counts`,
   * into `out[at…]`. `total`: the resample's turn count, when the caller knows it (else -1).
   */
  quantiles(counts: Int32Array, qs: readonly number[], out: Float64Array, at: number, total = -1): void {
    const w = this.#weight(counts, total)
    if (w === 0) {
      for (let k = 0; k < qs.length; k++) out[at + k] = Number.NaN
      return
    }
    const cl = this.cluster
    const vs = this.values
    // Ranks up to half the weight: the smallest entry whose cumulative weight reaches the rank.
    let k = 0
    let cum = 0
    let j = 0
    for (; k < qs.length; k++) {
      const rank = Math.min(w, Math.max(1, Math.ceil(qs[k]! * w)))
      if (rank * 2 > w) break
      while (cum < rank) cum += counts[cl[j++]!]!
      out[at + k] = vs[j - 1]!
    }
    // Higher ranks, from the top: the same entry is the one where the weight above it stays
    // at most `w − rank` and the weight from it on exceeds it.
    let above = 0
    let i = cl.length
    for (let m = qs.length - 1; m >= k; m--) {
      const lim = w - Math.min(w, Math.max(1, Math.ceil(qs[m]! * w)))
      while (above <= lim) above += counts[cl[--i]!]!
      out[at + m] = vs[i]!
    }
  }
}

const Q3 = [0.5, 0.9, 0.99] as const
const Q2 = [0.5, 0.9] as const
/** The per-cluster sums of {@link PreparedPolicy.sums}, in this order. */
const SUM_TURNS = 0
const SUM_TTFT = 1
const SUM_E2E = 2
const SUM_FAILED = 3
const SUM_FAST = 4
const SUM_GOOD = 5
const SUM_TPOT = 6
const SUM_TPOT_N = 7
const SUM_SPAN = 8
const SUM_SERVED = 9
const SUMS = 10
const M_INDEX = Object.fromEntries(CI_METRICS.map((m, i) => [m, i])) as Record<CiMetric, number>
const M_TTFT_MEAN = M_INDEX.ttft_mean
const M_TTFT_P50 = M_INDEX.ttft_p50
const M_TPOT_MEAN = M_INDEX.tpot_mean
const M_TPOT_P50 = M_INDEX.tpot_p50
const M_TPOT_P99 = M_INDEX.tpot_p99
const M_ITL_P50 = M_INDEX.itl_p50
const M_ITL_P99 = M_INDEX.itl_p99
const M_E2E_MEAN = M_INDEX.e2e_mean
const M_E2E_P50 = M_INDEX.e2e_p50
const M_GOODPUT = M_INDEX.goodput
const M_TASK_MEAN = M_INDEX.task_mean
const M_TASK_P50 = M_INDEX.task_p50
const M_TASK_SERVED_MEAN = M_INDEX.task_served_mean
const M_TASK_SERVED_P50 = M_INDEX.task_served_p50
const M_TASK_SERVED_P90 = M_INDEX.task_served_p90
const M_ERROR_RATE = M_INDEX.error_rate
const M_FAST_PATH_RATE = M_INDEX.fast_path_rate

/** One policy's columns, reduced to what a resample needs: sorted columns and per-cluster sums. */
class PreparedPolicy {
  readonly ttft: SortedColumn
  readonly e2e: SortedColumn
  readonly tpot: SortedColumn | undefined
  readonly taskSpan: SortedColumn | undefined
  readonly taskServed: SortedColumn | undefined
  readonly hasGood: boolean
  /**
   * Per cluster, {@link SUMS} sums, one array each (`SUM_*`): turns, Σ TTFT (at the time taken),
   * Σ end-to-end, failed, fast, good, Σ finite TPOT, their count, and the task's span and served
   * time (0 without task columns). A resample's totals are one pass over each array
   * ({@link weightedSum}).
   */
  readonly sums: readonly Float64Array[]
  /** Per sum, whether every cluster's value is finite (its pass may then skip no cluster). */
  readonly #finite: readonly boolean[]
  /** Gap histograms merged per cluster (compressed rows). */
  readonly gapOffsets: Int32Array | undefined
  readonly gapBuckets: Uint16Array | undefined
  readonly gapCounts: Float64Array | undefined
  readonly #hist = new Float64Array(GAP_BUCKETS)

  constructor(c: PolicyColumns, all: Int32Array, clusterOf: Int32Array, clusters: readonly Int32Array[]) {
    const C = clusters.length
    const ids = Int32Array.from({ length: C }, (_, i) => i)
    // `all` is every turn of every cluster, `ids` every cluster: complete columns.
    this.ttft = new SortedColumn(c.ttft, all, clusterOf, C, true)
    this.e2e = new SortedColumn(c.e2e, all, clusterOf, C, true)
    this.tpot = c.tpot === undefined ? undefined : new SortedColumn(c.tpot, all, clusterOf, C, true)
    this.taskSpan = c.task === undefined ? undefined : new SortedColumn(c.task.span, ids, ids, C, true)
    this.taskServed = c.task === undefined ? undefined : new SortedColumn(c.task.served, ids, ids, C, true)
    this.hasGood = c.good !== undefined
    const sums = Array.from({ length: SUMS }, () => new Float64Array(C))
    this.sums = sums
    const ttft = sums[SUM_TTFT]!
    const e2e = sums[SUM_E2E]!
    const failed = sums[SUM_FAILED]!
    const fast = sums[SUM_FAST]!
    const good = sums[SUM_GOOD]!
    const tpot = sums[SUM_TPOT]!
    const tpotN = sums[SUM_TPOT_N]!
    clusters.forEach((members, k) => {
      sums[SUM_TURNS]![k] = members.length
      for (let j = 0; j < members.length; j++) {
        const i = members[j]!
        ttft[k]! += c.elapsedTtft[i]!
        e2e[k]! += c.elapsed[i]!
        failed[k]! += c.failed[i]!
        fast[k]! += c.fast[i]!
        if (c.good !== undefined) good[k]! += c.good[i]!
        const t = c.tpot?.[i]
        if (t !== undefined && Number.isFinite(t)) {
          tpot[k]! += t
          tpotN[k]!++
        }
      }
      if (c.task !== undefined) {
        sums[SUM_SPAN]![k] = c.task.spanElapsed[k]!
        sums[SUM_SERVED]![k] = c.task.servedElapsed[k]!
      }
    })
    this.#finite = sums.map((x) => x.every(Number.isFinite))
    if (c.gaps !== undefined) {
      const merged = mergeClusterGaps(c.gaps, clusters, this.#hist)
      this.gapOffsets = merged.offsets
      this.gapBuckets = merged.buckets
      this.gapCounts = merged.counts
    }
  }

  /** Every metric of the resample with cluster multiplicities `counts`, into `out`. */
  metrics(counts: Int32Array, out: Float64Array): void {
    const n = this.#sum(SUM_TURNS, counts)
    const sessions = clusterDraws(counts)
    out[M_TTFT_MEAN] = ratio(this.#sum(SUM_TTFT, counts), n)
    this.ttft.quantiles(counts, Q3, out, M_TTFT_P50, n)
    if (this.tpot === undefined) out.fill(Number.NaN, M_TPOT_MEAN, M_TPOT_P99 + 1)
    else {
      out[M_TPOT_MEAN] = ratio(this.#sum(SUM_TPOT, counts), this.#sum(SUM_TPOT_N, counts))
      this.tpot.quantiles(counts, Q3, out, M_TPOT_P50, n)
    }
    this.#itl(counts, out)
    out[M_E2E_MEAN] = ratio(this.#sum(SUM_E2E, counts), n)
    this.e2e.quantiles(counts, Q3, out, M_E2E_P50, n)
    out[M_GOODPUT] = this.hasGood ? ratio(this.#sum(SUM_GOOD, counts), n) : Number.NaN
    if (this.taskSpan === undefined) out.fill(Number.NaN, M_TASK_MEAN, M_TASK_SERVED_P90 + 1)
    else {
      out[M_TASK_MEAN] = ratio(this.#sum(SUM_SPAN, counts), sessions)
      this.taskSpan.quantiles(counts, Q2, out, M_TASK_P50, sessions)
      out[M_TASK_SERVED_MEAN] = ratio(this.#sum(SUM_SERVED, counts), sessions)
      this.taskServed!.quantiles(counts, Q2, out, M_TASK_SERVED_P50, sessions)
    }
    out[M_ERROR_RATE] = ratio(this.#sum(SUM_FAILED, counts), n)
    out[M_FAST_PATH_RATE] = ratio(this.#sum(SUM_FAST, counts), n)
  }

  /** Sum `k` of the resample: Σ over clusters of draws × the cluster's sum, in cluster order. */
  #sum(k: number, counts: Int32Array): number {
    return this.#finite[k]! ? weightedSumFinite(this.sums[k]!, counts) : weightedSum(this.sums[k]!, counts)
  }

  #itl(counts: Int32Array, out: Float64Array): void {
    const offsets = this.gapOffsets
    if (offsets === undefined) {
      out.fill(Number.NaN, M_ITL_P50, M_ITL_P99 + 1)
      return
    }
    const h = this.#hist
    const total = mergeGapRows(counts, offsets, this.gapBuckets!, this.gapCounts!, h)
    gapQuantilesInto(h, total, out, M_ITL_P50)
  }
}

/** How many entries each of `clusters` clusters has, given each entry's `cluster`. */
function entriesPerCluster(cluster: Int32Array, clusters: number): Int32Array {
  const per = new Int32Array(clusters)
  for (let j = 0; j < cluster.length; j++) per[cluster[j]!]!++
  return per
}

/** How many of the members have no value (`NaN`). */
function countNaN(values: Float64Array, members: Int32Array): number {
  let n = 0
  for (let j = 0; j < members.length; j++) if (Number.isNaN(values[members[j]!]!)) n++
  return n
}

/**
 * The members of a column with a value (`kept`, with their clusters) and the clusters of those
 * without (`NaN`: `excluded`), in member order.
 */
function split(
  values: Float64Array,
  members: Int32Array,
  clusterOf: Int32Array,
  kept: Float64Array,
  keptCluster: Int32Array,
  excluded: Int32Array,
): void {
  for (let j = 0, k = 0, x = 0; j < members.length; j++) {
    const i = members[j]!
    const v = values[i]!
    if (Number.isNaN(v)) excluded[x++] = clusterOf[i]!
    else {
      kept[k] = v
      keptCluster[k++] = clusterOf[i]!
    }
  }
}

/**
 * `cluster[p]`: the cluster of the entry at place `p` of `sorted` (`kept` sorted): each entry of
 * `kept` goes to the next free place of its value's run in `sorted`.
 */
function placeInRuns(
  kept: Float64Array,
  keptCluster: Int32Array,
  sorted: Float64Array,
  cluster: Int32Array,
): void {
  const m = kept.length
  const placed = new Int32Array(m)
  for (let k = 0; k < m; k++) {
    const v = kept[k]!
    let lo = 0
    let hi = m
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (sorted[mid]! < v) lo = mid + 1
      else hi = mid
    }
    cluster[lo + placed[lo]!++] = keptCluster[k]!
  }
}

/*
 * The per-resample passes are small functions that end right after their loop: V8 compiles a long
 * loop on the fly (on-stack replacement) before the code after it ever ran, and a method that went
 * on after its loop left that compiled loop on every call (once per resample; it was most of the
 * bootstrap's time in a fresh process).
 */

/**
 * Σ `counts[c] · x[c]` over the clusters drawn, in cluster order (`x[c]` may be infinite: a
 * cluster not drawn adds nothing, not `0 · ∞`).
 */
function weightedSum(x: Float64Array, counts: Int32Array): number {
  let s = 0
  for (let c = 0; c < counts.length; c++) {
    const w = counts[c]!
    if (w !== 0) s += w * x[c]!
  }
  return s
}

/**
 * {@link weightedSum} of a finite `x`, without the branch: a cluster not drawn adds ±0, which
 * leaves every sum as it was (the same bits).
 */
function weightedSumFinite(x: Float64Array, counts: Int32Array): number {
  let s = 0
  for (let c = 0; c < counts.length; c++) s += counts[c]! * x[c]!
  return s
}

/** Clusters drawn in all (Σ `counts`). */
function clusterDraws(counts: Int32Array): number {
  let s = 0
  for (let c = 0; c < counts.length; c++) s += counts[c]!
  return s
}

/**
 * Adds the gap rows of the clusters drawn, each `counts[c]` times, into the dense histogram `h`
 * (in cluster order); returns the gaps added.
 */
function mergeGapRows(
  counts: Int32Array,
  offsets: Int32Array,
  buckets: Uint16Array,
  cs: Float64Array,
  h: Float64Array,
): number {
  let total = 0
  for (let c = 0; c < counts.length; c++) {
    const w = counts[c]!
    if (w === 0) continue
    for (let e = offsets[c]!; e < offsets[c + 1]!; e++) {
      h[buckets[e]!]! += w * cs[e]!
      total += w * cs[e]!
    }
  }
  return total
}

/**
 * The gap quantiles {@link Q3} of the dense histogram `h` holding `total` gaps, in seconds, into
 * `out[at…]` (`NaN` when empty); leaves `h` zeroed. Nearest rank over fractional counts: the first
 * bucket whose cumulative count reaches q·total.
 */
function gapQuantilesInto(h: Float64Array, total: number, out: Float64Array, at: number): void {
  for (let k = 0; k < Q3.length; k++) out[at + k] = Number.NaN
  let k = 0
  let cum = 0
  for (let b = 0; b < h.length; b++) {
    cum += h[b]!
    h[b] = 0
    while (k < Q3.length && total > 0 && cum >= Q3[k]! * total * (1 - 1e-9)) {
      out[at + k] = gapBucketMs(b) / 1000
      k++
    }
  }
}

function ratio(x: number, d: number): number {
  return d === 0 ? Number.NaN : x / d
}

/**
 * Each cluster's gap rows merged into one row of ascending buckets (compressed rows, one per
 * cluster). `h`: a zeroed dense histogram to merge in (left zeroed).
 */
function mergeClusterGaps(
  g: DecodeGapHistograms,
  clusters: readonly Int32Array[],
  h: Float64Array,
): { offsets: Int32Array; buckets: Uint16Array; counts: Float64Array } {
  const C = clusters.length
  const offsets = new Int32Array(C + 1)
  // A merged row has at most the entries of its turns' rows.
  let bound = 0
  for (let k = 0; k < C; k++) {
    const members = clusters[k]!
    for (let j = 0; j < members.length; j++) bound += g.offsets[members[j]! + 1]! - g.offsets[members[j]!]!
  }
  const buckets = new Uint16Array(bound)
  const counts = new Float64Array(bound)
  // The buckets a cluster touched, ascending (a few of the histogram's 768 per cluster).
  const touched: number[] = []
  let n = 0
  for (let k = 0; k < C; k++) {
    const members = clusters[k]!
    if (members.length === 1 && ascendingPositive(g, members[0]!)) {
      // One turn whose row is already merged: copied as it is.
      const i = members[0]!
      for (let e = g.offsets[i]!; e < g.offsets[i + 1]!; e++) {
        buckets[n] = g.buckets[e]!
        counts[n++] = g.counts[e]!
      }
      offsets[k + 1] = n
      continue
    }
    for (let j = 0; j < members.length; j++) {
      const i = members[j]!
      for (let e = g.offsets[i]!; e < g.offsets[i + 1]!; e++) {
        const b = g.buckets[e]!
        if (h[b] === 0) touched.push(b)
        h[b]! += g.counts[e]!
      }
    }
    if (touched.length > 1) touched.sort((a, b) => a - b)
    for (let t = 0; t < touched.length; t++) {
      const b = touched[t]!
      if (h[b]! > 0) {
        buckets[n] = b
        counts[n++] = h[b]!
      }
      h[b] = 0
    }
    touched.length = 0
    offsets[k + 1] = n
  }
  return { offsets, buckets: buckets.slice(0, n), counts: counts.slice(0, n) }
}

/** Whether turn `i`'s gap row has strictly ascending buckets and positive counts (a merged row). */
function ascendingPositive(g: DecodeGapHistograms, i: number): boolean {
  for (let e = g.offsets[i]!, prev = -1; e < g.offsets[i + 1]!; e++) {
    const b = g.buckets[e]!
    if (b <= prev || !(g.counts[e]! > 0)) return false
    prev = b
  }
  return true
}

function diffOf(a: number, b: number): number {
  if (a === b) return 0 // covers Infinity − Infinity: both failed at that percentile
  return a - b
}

/** The clusters of a layout, numbered seed by seed, and the cluster of every turn. */
function flatten(layout: ClusterLayout): Flat {
  const shape = shapeOf(layout)
  const kept = flattened.get(layout)
  if (kept !== undefined && kept.shape === shape) return kept.flat
  const clusters = layout.seeds.flatMap((s) => [...s])
  let total = 0
  let maxTurn = -1
  for (const c of clusters) {
    total += c.length
    for (let j = 0; j < c.length; j++) if (c[j]! > maxTurn) maxTurn = c[j]!
  }
  const clusterOf = new Int32Array(maxTurn + 1).fill(-1)
  const all = new Int32Array(total)
  let k = 0
  clusters.forEach((c, ci) => {
    for (let j = 0; j < c.length; j++) {
      clusterOf[c[j]!] = ci
      all[k++] = c[j]!
    }
  })
  const flat = { clusters, clusterOf, all }
  flattened.set(layout, { shape, flat })
  return flat
}

interface Flat {
  readonly clusters: readonly Int32Array[]
  readonly clusterOf: Int32Array
  readonly all: Int32Array
}

/** A layout's flattened form, kept with it (every stratum asks again). */
const flattened = new WeakMap<ClusterLayout, { shape: string; flat: Flat }>()

/** Clusters per seed, and turns in all: what a kept draw or flattening must match. */
function shapeOf(layout: ClusterLayout): string {
  let turns = 0
  for (const s of layout.seeds) turns += turnsOf(s)
  return `${layout.seeds.map((s) => s.length).join(',')}/${turns}`
}

/** Turns in the clusters `s`. */
function turnsOf(s: readonly Int32Array[]): number {
  let turns = 0
  for (let k = 0; k < s.length; k++) turns += s[k]!.length
  return turns
}

/**
 * Draws the resamples: per resample, how many times each cluster was drawn (whole clusters with
 * replacement, as many as the seed has, within each seed). The same seed and layout always give
 * the same draws, so separate bootstraps on one layout (the main one, the strata) are paired too;
 * the draws of the last seed and count asked of a layout are kept with it (the strata ask again).
 */
function resamplesOf(layout: ClusterLayout, resamples: number, seed: number): readonly Int32Array[] {
  const shape = layout.seeds.map((s) => s.length).join(',')
  const kept = drawn.get(layout)
  if (kept !== undefined && kept.resamples === resamples && kept.seed === seed && kept.shape === shape)
    return kept.draws
  const draws = drawResamples(
    layout.seeds.map((s) => s.length),
    resamples,
    seed,
  )
  drawn.set(layout, { resamples, seed, shape, draws })
  return draws
}

/**
 * The draws of {@link resamplesOf} for a layout with `clustersPerSeed` clusters in each seed:
 * they depend on nothing else, so they can be drawn before the runs end (on another thread).
 */
export function drawResamples(
  clustersPerSeed: readonly number[],
  resamples: number,
  seed: number,
): Int32Array[] {
  const rng = new Prng(seed, 'bootstrap')
  let C = 0
  for (const k of clustersPerSeed) C += k
  const draws: Int32Array[] = []
  for (let b = 0; b < resamples; b++) {
    const counts = new Int32Array(C)
    let base = 0
    for (const k of clustersPerSeed) {
      for (let j = 0; j < k; j++) counts[base + rng.int(k)]!++
      base += k
    }
    draws.push(counts)
  }
  return draws
}

/**
 * Keeps `draws`, drawn by {@link drawResamples} for `clustersPerSeed`, with `layout` for later
 * bootstraps on it with the same count and seed, when the layout has that shape; `false`
 * (nothing kept) when it has not.
 */
export function keepDraws(
  layout: ClusterLayout,
  resamples: number,
  seed: number,
  clustersPerSeed: readonly number[],
  draws: readonly Int32Array[],
): boolean {
  const shape = layout.seeds.map((s) => s.length).join(',')
  if (shape !== clustersPerSeed.join(',') || draws.length !== resamples) return false
  drawn.set(layout, { resamples, seed, shape, draws })
  return true
}

const drawn = new WeakMap<
  ClusterLayout,
  { resamples: number; seed: number; shape: string; draws: readonly Int32Array[] }
>()

function interval(samples: Float64Array): [number, number] {
  const s = Float64Array.from(samples).sort()
  return [quantileSorted(s, 0.025), quantileSorted(s, 0.975)]
}

/**
 * Cluster bootstrap over sessions (within each seed: the trials stay separate), paired across
 * policies: every resample draws the same clusters for every policy, so the differences compare
 * the same turns of the same trials. Returns, per policy, an {@link Estimate} per metric; per
 * non-reference policy a {@link PairedEstimate} per metric against `reference`; and `pairwise[p][q]`,
 * policy `p` minus policy `q`, for every pair (undefined where `p === q`).
 *
 * Quantiles are nearest-rank on the resampled turns, computed by one walk over each column sorted
 * once (no sort per resample).
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
  pairwise: (Record<CiMetric, PairedEstimate> | undefined)[][]
} {
  return pairBootstraps(
    policies.map((c) => bootstrapPolicy(c, layout, resamples, seed)),
    reference,
    resamples,
  )
}

/**
 * One policy's part of {@link pairedBootstrap}: its point values, its resampled values (per metric,
 * per resample) and its estimates. Each policy's part depends on nothing but its own columns, the
 * layout and the draws, so it can be computed as soon as that policy's runs have ended.
 */
export interface PolicyBootstrap {
  readonly point: Float64Array
  /** `samples[m][b]`: metric `m` of resample `b`. */
  readonly samples: readonly Float64Array[]
  readonly estimates: Record<CiMetric, Estimate>
}

/**
 * Resampled values computed elsewhere (another thread): those of resamples `from` to
 * `from + samples[0].length − 1`, one array per metric (or per column and quantile).
 */
export interface ResampledRange {
  readonly from: number
  readonly samples: readonly Float64Array[]
}

/** A policy's {@link PolicyBootstrap} over `layout`, with the draws of `resamples` and `seed`. */
export function bootstrapPolicy(
  c: PolicyColumns,
  layout: ClusterLayout,
  resamples: number,
  seed: number,
): PolicyBootstrap {
  return new PolicyBootstrapper(c, layout, resamples, seed).finish()
}

/**
 * {@link bootstrapPolicy} in parts: resamples computed here ({@link compute}) or on another thread
 * ({@link resampleMetrics}, then {@link give}), then the estimates ({@link finish}); the same
 * result whoever computed which resamples.
 */
export class PolicyBootstrapper {
  readonly #prepared: PreparedPolicy
  readonly #layout: ClusterLayout
  readonly #seed: number
  readonly #samples: Float64Array[]
  /** Per resample, 1 once computed or given. */
  readonly #done: Uint8Array
  readonly #point: Float64Array

  constructor(c: PolicyColumns, layout: ClusterLayout, resamples: number, seed: number) {
    const M = CI_METRICS.length
    const { clusters, clusterOf, all } = flatten(layout)
    this.#prepared = new PreparedPolicy(c, all, clusterOf, clusters)
    this.#layout = layout
    this.#seed = seed
    this.#samples = Array.from({ length: M }, () => new Float64Array(resamples))
    this.#done = new Uint8Array(resamples)
    this.#point = new Float64Array(M)
    this.#prepared.metrics(new Int32Array(clusters.length).fill(1), this.#point)
  }

  /** Computes resamples `from` to `to − 1` (those not done yet). */
  compute(from: number, to: number): void {
    const draws = resamplesOf(this.#layout, this.#done.length, this.#seed)
    const out = new Float64Array(CI_METRICS.length)
    for (let b = Math.max(0, from); b < Math.min(to, this.#done.length); b++) {
      if (this.#done[b] === 1) continue
      this.#prepared.metrics(draws[b]!, out)
      for (let m = 0; m < out.length; m++) this.#samples[m]![b] = out[m]!
      this.#done[b] = 1
    }
  }

  /** Takes resamples computed elsewhere ({@link resampleMetrics} on the same columns, layout and draws). */
  give(range: ResampledRange): void {
    giveRange(this.#samples, this.#done, range)
  }

  /** The bootstrap (the resamples neither computed nor given are computed now). */
  finish(): PolicyBootstrap {
    this.compute(0, this.#done.length)
    const estimates = {} as Record<CiMetric, Estimate>
    CI_METRICS.forEach((name, m) => {
      const [lo, hi] = interval(this.#samples[m]!)
      estimates[name] = { value: this.#point[m]!, lo, hi }
    })
    return { point: this.#point, samples: this.#samples, estimates }
  }
}

/**
 * The metrics of a policy's resamples `from` to `to − 1` with the cluster draws `draws` (indexed
 * by resample; {@link drawResamples}): what {@link PolicyBootstrapper.compute} computes, on
 * another thread. One array per metric of {@link CI_METRICS}.
 */
export function resampleMetrics(
  c: PolicyColumns,
  layout: ClusterLayout,
  draws: readonly Int32Array[],
  from: number,
  to: number,
): Float64Array[] {
  const M = CI_METRICS.length
  const { clusters, clusterOf, all } = flatten(layout)
  const prepared = new PreparedPolicy(c, all, clusterOf, clusters)
  const samples = Array.from({ length: M }, () => new Float64Array(to - from))
  const out = new Float64Array(M)
  for (let b = from; b < to; b++) {
    prepared.metrics(draws[b]!, out)
    for (let m = 0; m < M; m++) samples[m]![b - from] = out[m]!
  }
  return samples
}

/** Copies `range` into `samples` (ignored if its shape does not fit) and marks its resamples done. */
function giveRange(samples: Float64Array[], done: Uint8Array, range: ResampledRange): void {
  const n = Math.min(range.samples[0]?.length ?? 0, done.length - range.from)
  if (range.from < 0 || range.samples.length !== samples.length || n <= 0) return
  if (range.samples.some((x) => x.length < n)) return
  for (let m = 0; m < samples.length; m++) samples[m]!.set(range.samples[m]!.subarray(0, n), range.from)
  done.fill(1, range.from, range.from + n)
}

/**
 * A layout in three flat arrays (what another thread can be given of it cheaply): the clusters per
 * seed, and cluster `k`'s turns `all[starts[k]]` to `all[starts[k + 1] − 1]`, numbered seed by seed.
 */
export interface PackedLayout {
  readonly clustersPerSeed: readonly number[]
  readonly starts: Int32Array
  readonly all: Int32Array
}

/** `layout` as a {@link PackedLayout}. */
export function packLayout(layout: ClusterLayout): PackedLayout {
  const { clusters, all } = flatten(layout)
  const starts = new Int32Array(clusters.length + 1)
  for (let k = 0; k < clusters.length; k++) starts[k + 1] = starts[k]! + clusters[k]!.length
  return { clustersPerSeed: layout.seeds.map((s) => s.length), starts, all }
}

/** The layout of a {@link PackedLayout} (its clusters are views of `all`). */
export function unpackLayout(p: PackedLayout): ClusterLayout {
  const seeds: Int32Array[][] = []
  let k = 0
  for (const n of p.clustersPerSeed) {
    const clusters: Int32Array[] = new Array(n)
    for (let j = 0; j < n; j++, k++) clusters[j] = p.all.subarray(p.starts[k]!, p.starts[k + 1]!)
    seeds.push(clusters)
  }
  return { seeds }
}

/**
 * {@link pairedBootstrap}'s result from every policy's {@link PolicyBootstrap} (same layout, count
 * and seed): the estimates, and the differences on the same resamples.
 */
export function pairBootstraps(
  parts: readonly PolicyBootstrap[],
  reference: number,
  resamples: number,
): {
  estimates: Record<CiMetric, Estimate>[]
  paired: (Record<CiMetric, PairedEstimate> | undefined)[]
  pairwise: (Record<CiMetric, PairedEstimate> | undefined)[][]
} {
  const estimates = parts.map((x) => x.estimates)
  const point = parts.map((x) => x.point)
  const samples = parts.map((x) => x.samples)
  const policies = parts
  const pair = (p: number, q: number): Record<CiMetric, PairedEstimate> => {
    const r = {} as Record<CiMetric, PairedEstimate>
    const d = new Float64Array(resamples)
    CI_METRICS.forEach((name, m) => {
      let better = 0
      let worse = 0
      const hib = higherIsBetter(name)
      for (let k = 0; k < resamples; k++) {
        const x = samples[p]![m]![k]!
        const y = samples[q]![m]![k]!
        d[k] = diffOf(x, y)
        if (hib ? x > y : x < y) better++
        else if (hib ? x < y : x > y) worse++
      }
      const [lo, hi] = interval(d)
      r[name] = {
        diff: diffOf(point[p]![m]!, point[q]![m]!),
        lo,
        hi,
        pBetter: resamples === 0 ? Number.NaN : better / resamples,
        pWorse: resamples === 0 ? Number.NaN : worse / resamples,
      }
    })
    return r
  }
  const pairwise = policies.map((_, p) => policies.map((__, q) => (p === q ? undefined : pair(p, q))))
  const paired = policies.map((_, p) => (p === reference ? undefined : pairwise[p]![reference]))
  return { estimates, paired, pairwise }
}

/**
 * Bootstrap intervals of quantiles of one per-turn column restricted to some turns (a stratum),
 * with the same draws as {@link pairedBootstrap} on the same layout and seed. Returns, per policy,
 * an {@link Estimate} per quantile (`NaN` where the stratum is empty).
 *
 * @example
 * ```ts
 * import { stratumBootstrap } from '@kvc/sim'
 * const layout = { seeds: [[Int32Array.of(0, 1), Int32Array.of(2, 3)]] }
 * const ttft = [Float64Array.of(1, 2, 3, 4)]
 * stratumBootstrap(ttft, Int32Array.of(0, 2), layout, [0.5], 50, 1)[0]![0]!.value // 1
 * ```
 */
export function stratumBootstrap(
  columns: readonly Float64Array[],
  members: Int32Array,
  layout: ClusterLayout,
  qs: readonly number[],
  resamples: number,
  seed: number,
): Estimate[][] {
  return new StratumBootstrapper(columns, members, layout, qs, resamples, seed).finish()
}

/**
 * {@link stratumBootstrap} in parts, as {@link PolicyBootstrapper}: resamples computed here or on
 * another thread ({@link resampleStratum}), then the estimates.
 */
export class StratumBootstrapper {
  readonly #sorted: SortedColumn[]
  readonly #qs: readonly number[]
  readonly #layout: ClusterLayout
  readonly #seed: number
  /** One array per column and quantile (column-major). */
  readonly #samples: Float64Array[]
  readonly #done: Uint8Array
  readonly #clusters: number

  constructor(
    columns: readonly Float64Array[],
    members: Int32Array,
    layout: ClusterLayout,
    qs: readonly number[],
    resamples: number,
    seed: number,
  ) {
    const { clusters, clusterOf } = flatten(layout)
    this.#sorted = columns.map((c) => new SortedColumn(c, members, clusterOf, clusters.length))
    this.#qs = qs
    this.#layout = layout
    this.#seed = seed
    this.#samples = columns.flatMap(() => qs.map(() => new Float64Array(resamples)))
    this.#done = new Uint8Array(resamples)
    this.#clusters = clusters.length
  }

  /** Computes resamples `from` to `to − 1` (those not done yet). */
  compute(from: number, to: number): void {
    const draws = resamplesOf(this.#layout, this.#done.length, this.#seed)
    const qs = this.#qs
    const out = new Float64Array(qs.length)
    for (let b = Math.max(0, from); b < Math.min(to, this.#done.length); b++) {
      if (this.#done[b] === 1) continue
      this.#sorted.forEach((s, p) => {
        s.quantiles(draws[b]!, qs, out, 0)
        for (let k = 0; k < qs.length; k++) this.#samples[p * qs.length + k]![b] = out[k]!
      })
      this.#done[b] = 1
    }
  }

  /** Takes resamples computed elsewhere ({@link resampleStratum} on the same columns, members, layout and draws). */
  give(range: ResampledRange): void {
    giveRange(this.#samples, this.#done, range)
  }

  /** Per column, an {@link Estimate} per quantile (the resamples not done yet are computed now). */
  finish(): Estimate[][] {
    this.compute(0, this.#done.length)
    const qs = this.#qs
    const ones = new Int32Array(this.#clusters).fill(1)
    const point = new Float64Array(qs.length)
    return this.#sorted.map((s, p) => {
      s.quantiles(ones, qs, point, 0)
      return qs.map((_, k) => {
        const [lo, hi] = interval(this.#samples[p * qs.length + k]!)
        return { value: point[k]!, lo, hi }
      })
    })
  }
}

/**
 * What {@link StratumBootstrapper.compute} computes, on another thread: the quantiles `qs` of each
 * column over `members` in resamples `from` to `to − 1` with the cluster draws `draws` (indexed by
 * resample), one array per column and quantile (column-major).
 */
export function resampleStratum(
  columns: readonly Float64Array[],
  members: Int32Array,
  layout: ClusterLayout,
  qs: readonly number[],
  draws: readonly Int32Array[],
  from: number,
  to: number,
): Float64Array[] {
  const { clusters, clusterOf } = flatten(layout)
  const sorted = columns.map((c) => new SortedColumn(c, members, clusterOf, clusters.length))
  const samples = columns.flatMap(() => qs.map(() => new Float64Array(to - from)))
  const out = new Float64Array(qs.length)
  for (let b = from; b < to; b++) {
    sorted.forEach((s, p) => {
      s.quantiles(draws[b]!, qs, out, 0)
      for (let k = 0; k < qs.length; k++) samples[p * qs.length + k]![b - from] = out[k]!
    })
  }
  return samples
}
