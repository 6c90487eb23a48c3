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
    const excluded: number[] = []
    let m = 0
    for (let j = 0; j < members.length; j++) if (!Number.isNaN(values[members[j]!]!)) m++
    const kept = new Float64Array(m)
    const keptCluster = new Int32Array(m)
    for (let j = 0, k = 0; j < members.length; j++) {
      const i = members[j]!
      if (Number.isNaN(values[i]!)) excluded.push(clusterOf[i]!)
      else {
        kept[k] = values[i]!
        keptCluster[k++] = clusterOf[i]!
      }
    }
    // Sorted by value alone (the typed array's own sort, no comparator calls): the order among
    // equal values changes where a walk crosses a rank within their run, never the value read.
    // Each entry's cluster goes to the next free place of its value's run.
    const sorted = kept.slice().sort()
    const cluster = new Int32Array(m)
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
    this.values = sorted
    this.cluster = cluster
    this.perCluster = new Int32Array(clusters)
    for (let j = 0; j < this.cluster.length; j++) this.perCluster[this.cluster[j]!]!++
    this.#excluded = Int32Array.from(excluded)
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
/** Numbers per cluster in {@link PreparedPolicy.sums}. */
const SUMS = 10
const M_INDEX = Object.fromEntries(CI_METRICS.map((m, i) => [m, i])) as Record<CiMetric, number>

/** One policy's columns, reduced to what a resample needs: sorted columns and per-cluster sums. */
class PreparedPolicy {
  readonly ttft: SortedColumn
  readonly e2e: SortedColumn
  readonly tpot: SortedColumn | undefined
  readonly taskSpan: SortedColumn | undefined
  readonly taskServed: SortedColumn | undefined
  readonly hasGood: boolean
  /**
   * Per cluster, {@link SUMS} numbers side by side (one cache line per cluster instead of one
   * array per sum): turns, Σ TTFT (at the time taken), Σ end-to-end, failed, fast, good, Σ finite
   * TPOT, their count, and the task's span and served time (0 without task columns).
   */
  readonly sums: Float64Array
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
    const sums = new Float64Array(C * SUMS)
    this.sums = sums
    clusters.forEach((members, k) => {
      const o = k * SUMS
      sums[o] = members.length
      for (let j = 0; j < members.length; j++) {
        const i = members[j]!
        sums[o + 1]! += c.elapsedTtft[i]!
        sums[o + 2]! += c.elapsed[i]!
        sums[o + 3]! += c.failed[i]!
        sums[o + 4]! += c.fast[i]!
        if (c.good !== undefined) sums[o + 5]! += c.good[i]!
        const t = c.tpot?.[i]
        if (t !== undefined && Number.isFinite(t)) {
          sums[o + 6]! += t
          sums[o + 7]!++
        }
      }
      if (c.task !== undefined) {
        sums[o + 8] = c.task.spanElapsed[k]!
        sums[o + 9] = c.task.servedElapsed[k]!
      }
    })
    if (c.gaps !== undefined) {
      const g = c.gaps
      const offsets = new Int32Array(C + 1)
      const buckets: number[] = []
      const counts: number[] = []
      const h = this.#hist
      // The buckets a cluster touched, ascending (a few of the histogram's 768 per cluster).
      const touched: number[] = []
      clusters.forEach((members, k) => {
        if (members.length === 1 && ascendingPositive(g, members[0]!)) {
          // One turn whose row is already merged: copied as it is.
          const i = members[0]!
          for (let e = g.offsets[i]!; e < g.offsets[i + 1]!; e++) {
            buckets.push(g.buckets[e]!)
            counts.push(g.counts[e]!)
          }
          offsets[k + 1] = buckets.length
          return
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
            buckets.push(b)
            counts.push(h[b]!)
          }
          h[b] = 0
        }
        touched.length = 0
        offsets[k + 1] = buckets.length
      })
      this.gapOffsets = offsets
      this.gapBuckets = Uint16Array.from(buckets)
      this.gapCounts = Float64Array.from(counts)
    }
  }

  /** Every metric of the resample with cluster multiplicities `counts`, into `out`. */
  metrics(counts: Int32Array, out: Float64Array): void {
    const C = counts.length
    const sums = this.sums
    let n = 0
    let sT = 0
    let sE = 0
    let failed = 0
    let fast = 0
    let good = 0
    let tpotSum = 0
    let tpotN = 0
    let sessions = 0
    let span = 0
    let served = 0
    for (let c = 0, o = 0; c < C; c++, o += SUMS) {
      const w = counts[c]!
      if (w === 0) continue
      n += w * sums[o]!
      sT += w * sums[o + 1]!
      sE += w * sums[o + 2]!
      failed += w * sums[o + 3]!
      fast += w * sums[o + 4]!
      good += w * sums[o + 5]!
      tpotSum += w * sums[o + 6]!
      tpotN += w * sums[o + 7]!
      sessions += w
      span += w * sums[o + 8]!
      served += w * sums[o + 9]!
    }
    const nan = Number.NaN
    const per = (x: number, d: number) => (d === 0 ? nan : x / d)
    out[M_INDEX.ttft_mean] = per(sT, n)
    this.ttft.quantiles(counts, Q3, out, M_INDEX.ttft_p50, n)
    if (this.tpot === undefined) out.fill(nan, M_INDEX.tpot_mean, M_INDEX.tpot_p99 + 1)
    else {
      out[M_INDEX.tpot_mean] = per(tpotSum, tpotN)
      this.tpot.quantiles(counts, Q3, out, M_INDEX.tpot_p50, n)
    }
    this.#itl(counts, out)
    out[M_INDEX.e2e_mean] = per(sE, n)
    this.e2e.quantiles(counts, Q3, out, M_INDEX.e2e_p50, n)
    out[M_INDEX.goodput] = this.hasGood ? per(good, n) : nan
    if (this.taskSpan === undefined) out.fill(nan, M_INDEX.task_mean, M_INDEX.task_served_p90 + 1)
    else {
      out[M_INDEX.task_mean] = per(span, sessions)
      this.taskSpan.quantiles(counts, Q2, out, M_INDEX.task_p50, sessions)
      out[M_INDEX.task_served_mean] = per(served, sessions)
      this.taskServed!.quantiles(counts, Q2, out, M_INDEX.task_served_p50, sessions)
    }
    out[M_INDEX.error_rate] = per(failed, n)
    out[M_INDEX.fast_path_rate] = per(fast, n)
  }

  #itl(counts: Int32Array, out: Float64Array): void {
    const offsets = this.gapOffsets
    if (offsets === undefined) {
      out.fill(Number.NaN, M_INDEX.itl_p50, M_INDEX.itl_p99 + 1)
      return
    }
    const h = this.#hist
    const buckets = this.gapBuckets!
    const cs = this.gapCounts!
    let total = 0
    for (let c = 0; c < counts.length; c++) {
      const w = counts[c]!
      if (w === 0) continue
      for (let e = offsets[c]!; e < offsets[c + 1]!; e++) {
        h[buckets[e]!]! += w * cs[e]!
        total += w * cs[e]!
      }
    }
    let k = 0
    let cum = 0
    for (let b = 0; b < GAP_BUCKETS && k < Q3.length; b++) {
      cum += h[b]!
      while (k < Q3.length && total > 0 && cum >= Q3[k]! * total * (1 - 1e-9)) {
        out[M_INDEX.itl_p50 + k] = gapBucketMs(b) / 1000
        k++
      }
    }
    for (; k < Q3.length; k++) out[M_INDEX.itl_p50 + k] = Number.NaN
    h.fill(0)
  }
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
  for (const s of layout.seeds) for (const c of s) turns += c.length
  return `${layout.seeds.map((s) => s.length).join(',')}/${turns}`
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

/** A policy's {@link PolicyBootstrap} over `layout`, with the draws of `resamples` and `seed`. */
export function bootstrapPolicy(
  c: PolicyColumns,
  layout: ClusterLayout,
  resamples: number,
  seed: number,
): PolicyBootstrap {
  const M = CI_METRICS.length
  const { clusters, clusterOf, all } = flatten(layout)
  const prepared = new PreparedPolicy(c, all, clusterOf, clusters)
  const ones = new Int32Array(clusters.length).fill(1)
  const point = new Float64Array(M)
  prepared.metrics(ones, point)
  const samples = Array.from({ length: M }, () => new Float64Array(resamples))
  const out = new Float64Array(M)
  let b = 0
  for (const counts of resamplesOf(layout, resamples, seed)) {
    prepared.metrics(counts, out)
    for (let m = 0; m < M; m++) samples[m]![b] = out[m]!
    b++
  }
  const estimates = {} as Record<CiMetric, Estimate>
  CI_METRICS.forEach((name, m) => {
    const [lo, hi] = interval(samples[m]!)
    estimates[name] = { value: point[m]!, lo, hi }
  })
  return { point, samples, estimates }
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
  const { clusters, clusterOf } = flatten(layout)
  const sorted = columns.map((c) => new SortedColumn(c, members, clusterOf, clusters.length))
  const ones = new Int32Array(clusters.length).fill(1)
  const point = new Float64Array(qs.length)
  const samples = columns.map(() => qs.map(() => new Float64Array(resamples)))
  const out = new Float64Array(qs.length)
  let b = 0
  for (const counts of resamplesOf(layout, resamples, seed)) {
    sorted.forEach((s, p) => {
      s.quantiles(counts, qs, out, 0)
      for (let k = 0; k < qs.length; k++) samples[p]![k]![b] = out[k]!
    })
    b++
  }
  return sorted.map((s, p) => {
    s.quantiles(ones, qs, point, 0)
    return qs.map((_, k) => {
      const [lo, hi] = interval(samples[p]![k]!)
      return { value: point[k]!, lo, hi }
    })
  })
}
