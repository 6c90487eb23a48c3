/**
 * Inter-token latency (ITL) of a discrete-event decode model, without per-token work.
 *
 * What ITL means here: a worker's decode batch advances in lockstep steps, one token per sequence
 * per step, each step taking `decodeStepSeconds(batch tokens)`; a prefill on the same worker (the
 * fast path's append, a colocated worker's prompt) stalls the batch until it ends, since prefill
 * is not chunked in this model. The gap between two tokens of a sequence is therefore the duration
 * of the step that produced the second one, stretched by any stall that fell inside it: every
 * sequence in the batch during a stall has exactly one gap that contains it. ITL statistics pool
 * these gaps over all tokens of all completed turns (vLLM's `ITL`: every gap between consecutive
 * chunks, pooled across requests), so long outputs weigh more than short ones; TPOT is the
 * per-turn mean gap.
 *
 * How it is counted: the simulator never visits individual steps. Between two changes of a batch
 * (a sequence joins or leaves, a prefill starts or ends) the step time is constant, so each worker
 * keeps one cumulative histogram of the gaps its batch produced: a segment of `Δt` at step time
 * `s` adds `Δt / s` gaps (fractional while a step is under way) to the bucket of `s`; when a stall
 * of `D` ends, one gap moves from the bucket of `s` to the bucket of `s + D`. Because every
 * sequence in a batch sees the same gaps, a turn's own histogram is the worker's histogram at its
 * end minus the one at its first token: one copy when it joins, one difference when it ends, and
 * no work per token. Gaps are kept in logarithmic buckets ({@link GAP_BUCKETS_PER_OCTAVE} per
 * octave from {@link GAP_MIN_MS}), so a quantile read back is within ±1.1% of the exact gap.
 *
 * @module
 */

/** Buckets per doubling of the gap: a bucket's middle is within 1.1% of every gap in it. */
export const GAP_BUCKETS_PER_OCTAVE = 32
/** Lower edge of the first bucket, ms (shorter gaps land in it). */
export const GAP_MIN_MS = 0.1
/** Number of buckets: 24 octaves from {@link GAP_MIN_MS}, up to about 28 minutes (longer gaps land in the last). */
export const GAP_BUCKETS = GAP_BUCKETS_PER_OCTAVE * 24

/**
 * The bucket of a gap of `ms` milliseconds.
 *
 * @example
 * ```ts
 * import { gapBucket, gapBucketMs } from '@kvc/sim'
 * gapBucketMs(gapBucket(12)) // ≈ 12 (within 1.1%)
 * ```
 */
export function gapBucket(ms: number): number {
  if (!(ms > GAP_MIN_MS)) return 0
  const b = Math.floor(Math.log2(ms / GAP_MIN_MS) * GAP_BUCKETS_PER_OCTAVE)
  return b >= GAP_BUCKETS ? GAP_BUCKETS - 1 : b
}

/**
 * The representative gap of a bucket (its geometric middle), ms.
 *
 * @example
 * ```ts
 * import { gapBucketMs } from '@kvc/sim'
 * gapBucketMs(0) // ≈ 0.101
 * ```
 */
export function gapBucketMs(bucket: number): number {
  return GAP_MIN_MS * 2 ** ((bucket + 0.5) / GAP_BUCKETS_PER_OCTAVE)
}

/**
 * Every turn's decode gaps as a sparse histogram in compressed rows: the gaps of turn `i` are
 * `counts[k]` gaps in bucket `buckets[k]` for `k` in `offsets[i] .. offsets[i + 1]`. Counts are
 * fractional where a turn began or ended inside a step, and sum to about `outputLength − 1`.
 * Failed turns have no row entries.
 *
 * @example
 * ```ts
 * import type { DecodeGapHistograms } from '@kvc/sim'
 * const gapsOf = (h: DecodeGapHistograms, turn: number) => h.offsets[turn + 1]! - h.offsets[turn]!
 * ```
 */
export interface DecodeGapHistograms {
  readonly offsets: Int32Array
  readonly buckets: Uint16Array
  readonly counts: Float32Array
}

/**
 * The nearest-rank quantiles `qs` (ascending) of a dense gap histogram holding `total` gaps, in
 * seconds; `NaN` where the histogram is empty.
 *
 * @example
 * ```ts
 * import { GAP_BUCKETS, gapBucket, gapHistogramQuantiles } from '@kvc/sim'
 * const h = new Float64Array(GAP_BUCKETS)
 * h[gapBucket(12)] = 99
 * h[gapBucket(500)] = 1
 * gapHistogramQuantiles(h, 100, [0.5, 0.99]) // [≈ 0.012, ≈ 0.012]; the 100th gap is the stall
 * ```
 */
export function gapHistogramQuantiles(hist: Float64Array, total: number, qs: readonly number[]): number[] {
  const out = qs.map(() => Number.NaN)
  if (!(total > 0)) return out
  let q = 0
  let cum = 0
  // Nearest rank over fractional counts: the first bucket whose cumulative count reaches q·total.
  for (let b = 0; b < hist.length && q < qs.length; b++) {
    cum += hist[b]!
    while (q < qs.length && cum >= qs[q]! * total * (1 - 1e-9)) out[q++] = gapBucketMs(b) / 1000
  }
  while (q < qs.length) out[q++] = gapBucketMs(hist.length - 1) / 1000
  return out
}

/**
 * The recorder the decode model feeds: per worker, a cumulative histogram of the gaps its batch
 * produced; per turn decoding, a snapshot of it taken at the first token. See the module comment.
 *
 * @example
 * ```ts
 * import { DecodeGapRecorder, gapBucket } from '@kvc/sim'
 * const r = new DecodeGapRecorder(1)
 * r.join(0, 0)
 * r.advance(0, 100, 10, 1) // 10 steps of 10 ms
 * r.advance(0, 500, Infinity, 1) // a prefill stalls the batch for 500 ms
 * r.advance(0, 50, 10, 1) // 5 more steps, the first of them stretched by the stall
 * r.finish(0, 0)
 * const h = r.histograms(() => true)
 * h.buckets[0] === gapBucket(10) && h.counts[0] // 14 gaps of 10 ms, then 1 of 510 ms
 * ```
 */
export class DecodeGapRecorder {
  readonly #cum: (Float64Array | undefined)[] = []
  // Per worker: the lowest and highest bucket its histogram ever touched (the rest is zero), so a
  // snapshot copies and a finish scans only that range. Snapshots outside a join are all zero.
  readonly #lo: number[] = []
  readonly #hi: number[] = []
  // Per worker: the stall under way, its step time before, and the turns that joined during it.
  readonly #stallMs: number[] = []
  readonly #joinedInStall: { turn: number; stallMs: number }[][] = []
  readonly #snap: (Float64Array | undefined)[]
  readonly #free: Float64Array[] = []
  // Per-turn rows, in the order turns ended; compressed by turn id at the end.
  readonly #rowStart: Int32Array
  readonly #rowLen: Int32Array
  #buckets = new Uint16Array(1024)
  #counts = new Float32Array(1024)
  #used = 0

  /** For `turns` turns (ids `0..turns-1`); workers are numbered from 0, as many as come. */
  constructor(turns: number) {
    this.#snap = new Array(turns).fill(undefined)
    this.#rowStart = new Int32Array(turns)
    this.#rowLen = new Int32Array(turns)
  }

  #hist(w: number): Float64Array {
    let h = this.#cum[w]
    if (h === undefined) {
      h = new Float64Array(GAP_BUCKETS)
      this.#cum[w] = h
      this.#lo[w] = GAP_BUCKETS
      this.#hi[w] = -1
    }
    return h
  }

  /** Worker `w`'s histogram (made by `#hist`) touches bucket `b`. */
  #touch(w: number, b: number): void {
    if (b < this.#lo[w]!) this.#lo[w] = b
    if (b > this.#hi[w]!) this.#hi[w] = b
  }

  /**
   * Worker `w`'s batch of `batch` sequences ran `dtMs` at a step time of `stepMs` (`Infinity`:
   * stalled by a prefill).
   */
  advance(w: number, dtMs: number, stepMs: number, batch: number): void {
    if (batch === 0) {
      this.#stallMs[w] = 0
      const list = this.#joinedInStall[w]
      if (list !== undefined) list.length = 0
      return
    }
    if (!(dtMs > 0)) return
    if (!Number.isFinite(stepMs)) {
      this.#stallMs[w] = (this.#stallMs[w] ?? 0) + dtMs
      return
    }
    // The step under way when the stall began ends in this segment, stretched by the stall.
    if ((this.#stallMs[w] ?? 0) > 0) this.#endStall(w, stepMs)
    const h = this.#hist(w)
    const b = gapBucket(stepMs)
    this.#touch(w, b)
    h[b]! += dtMs / stepMs
  }

  /**
   * A stall of `D` ends into steps of `stepMs`: one gap of every sequence in the batch moves from
   * the bucket of `stepMs` to that of `stepMs + D`. A sequence that joined `Dj` into the stall
   * (typically after its own prefill) gets `stepMs + D − Dj` instead, by correcting its snapshot.
   */
  #endStall(w: number, stepMs: number): void {
    const h = this.#hist(w)
    const stall = this.#stallMs[w]!
    const plain = gapBucket(stepMs)
    const stretched = gapBucket(stepMs + stall)
    this.#touch(w, plain)
    this.#touch(w, stretched)
    h[plain]! -= 1
    h[stretched]! += 1
    // The corrections below stay between `plain` and `stretched`, inside the touched range.
    for (const j of this.#joinedInStall[w] ?? []) {
      const s = this.#snap[j.turn]
      if (s === undefined) continue
      const rest = stall - j.stallMs
      s[plain]! -= 1
      s[stretched]! += 1
      if (rest > 0) {
        s[plain]! += 1
        s[gapBucket(stepMs + rest)]! -= 1
      }
    }
    this.#stallMs[w] = 0
    const list = this.#joinedInStall[w]
    if (list !== undefined) list.length = 0
  }

  /** Turn `turn` produced its first token on worker `w` and joins its batch. */
  join(w: number, turn: number): void {
    const s = this.#free.pop() ?? new Float64Array(GAP_BUCKETS)
    const h = this.#hist(w)
    const lo = this.#lo[w]!
    const hi = this.#hi[w]!
    if (lo <= hi) s.set(h.subarray(lo, hi + 1), lo)
    const old = this.#snap[turn]
    if (old !== undefined) this.#free.push(old.fill(0))
    this.#snap[turn] = s
    const stall = this.#stallMs[w] ?? 0
    if (stall > 0) {
      let list = this.#joinedInStall[w]
      if (list === undefined) {
        list = []
        this.#joinedInStall[w] = list
      }
      list.push({ turn, stallMs: stall })
    }
  }

  /** Turn `turn` produced its last token on worker `w`: its gaps are recorded. */
  finish(w: number, turn: number): void {
    const s = this.#snap[turn]
    if (s === undefined) return
    this.#snap[turn] = undefined
    const h = this.#hist(w)
    this.#rowStart[turn] = this.#used
    let n = 0
    // Outside the worker's touched range both are zero (`s` was written only inside it).
    const lo = this.#lo[w]!
    const hi = this.#hi[w]!
    for (let b = lo; b <= hi; b++) {
      const d = h[b]! - s[b]!
      if (d > 1e-6) {
        this.#push(b, d)
        n++
      }
    }
    this.#rowLen[turn] = n
    if (lo <= hi) s.fill(0, lo, hi + 1)
    this.#free.push(s)
  }

  /** Turn `turn` left its batch without finishing (abandoned, failed): its gaps are not kept. */
  drop(turn: number): void {
    const s = this.#snap[turn]
    if (s === undefined) return
    this.#snap[turn] = undefined
    this.#free.push(s.fill(0))
  }

  #push(b: number, c: number): void {
    if (this.#used === this.#buckets.length) {
      const nb = new Uint16Array(this.#used * 2)
      nb.set(this.#buckets)
      this.#buckets = nb
      const nc = new Float32Array(this.#used * 2)
      nc.set(this.#counts)
      this.#counts = nc
    }
    this.#buckets[this.#used] = b
    this.#counts[this.#used] = c
    this.#used++
  }

  /**
   * The per-turn histograms, rows by turn id; `completed(turn)` says which turns count (a turn
   * recorded in an attempt that later failed has none).
   */
  histograms(completed: (turn: number) => boolean): DecodeGapHistograms {
    const n = this.#rowLen.length
    const offsets = new Int32Array(n + 1)
    for (let t = 0; t < n; t++) offsets[t + 1] = offsets[t]! + (completed(t) ? this.#rowLen[t]! : 0)
    const buckets = new Uint16Array(offsets[n]!)
    const counts = new Float32Array(offsets[n]!)
    for (let t = 0; t < n; t++) {
      if (!completed(t)) continue
      const a = this.#rowStart[t]!
      const len = this.#rowLen[t]!
      buckets.set(this.#buckets.subarray(a, a + len), offsets[t]!)
      counts.set(this.#counts.subarray(a, a + len), offsets[t]!)
    }
    return { offsets, buckets, counts }
  }
}
