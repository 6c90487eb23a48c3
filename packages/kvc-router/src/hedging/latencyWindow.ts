import { RouterError, describeValue } from '../errors/routerError.js'

/**
 * The last `capacity` latencies of a kind of RPC, and their quantiles: the hedged admission's
 * delay (the `hedgeQuantile` of recent admission RPC latencies) and the self-tuner's view of the
 * RPCs. A ring buffer of `Float64Array` plus a sorted copy kept up to date by insertion, so a
 * quantile is a lookup and a sample costs O(capacity) moves at worst, with no allocation.
 *
 * @example
 * ```ts
 * import { LatencyWindow } from '@kvc/kvc-router'
 * const w = new LatencyWindow(8)
 * for (const ms of [2, 3, 2, 40, 2, 3]) w.record(ms)
 * w.quantile(0.5) // 2.5
 * w.quantile(0.95) // ≈ 31: the slow one
 * ```
 */
export class LatencyWindow {
  readonly capacity: number
  readonly #ring: Float64Array
  readonly #sorted: Float64Array
  #head = 0
  #size = 0
  #total = 0

  constructor(capacity = 256) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RouterError(
        'INVALID_OPTION',
        `capacity must be an integer >= 1, got ${describeValue(capacity)}`,
        capacity,
      )
    }
    this.capacity = capacity
    this.#ring = new Float64Array(capacity)
    this.#sorted = new Float64Array(capacity)
  }

  /** Samples held now (at most `capacity`). */
  get size(): number {
    return this.#size
  }

  /** Samples recorded since creation. */
  get total(): number {
    return this.#total
  }

  /**
   * Records one latency (ms), replacing the oldest when full.
   *
   * @throws RouterError `INVALID_LENGTH` on a negative or non-finite value (nothing recorded).
   *
   * @example
   * ```ts
   * import { LatencyWindow } from '@kvc/kvc-router'
   * const w = new LatencyWindow(2)
   * w.record(5)
   * w.record(7)
   * w.record(9) // 5 leaves
   * w.quantile(0) // 7
   * ```
   */
  record(ms: number): void {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
      throw new RouterError(
        'INVALID_LENGTH',
        `a latency must be a finite number >= 0, got ${describeValue(ms)}`,
        ms,
      )
    }
    const s = this.#sorted
    let n = this.#size
    if (n === this.capacity) {
      // Remove the oldest from the sorted copy.
      const old = this.#ring[this.#head]!
      let i = this.#find(old)
      for (; i < n - 1; i++) s[i] = s[i + 1]!
      n--
    }
    this.#ring[this.#head] = ms
    this.#head = (this.#head + 1) % this.capacity
    let i = n
    while (i > 0 && s[i - 1]! > ms) {
      s[i] = s[i - 1]!
      i--
    }
    s[i] = ms
    this.#size = n + 1
    this.#total++
  }

  /** Index of one copy of `v` in the sorted prefix (it is there). */
  #find(v: number): number {
    let lo = 0
    let hi = this.#size - 1
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.#sorted[mid]! < v) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  /**
   * The `q`-quantile of the held samples (linear interpolation between order statistics); `NaN`
   * when empty.
   *
   * @throws RouterError `INVALID_OPTION` unless `q` is in [0, 1].
   *
   * @example
   * ```ts
   * import { LatencyWindow } from '@kvc/kvc-router'
   * new LatencyWindow().quantile(0.9) // NaN: no sample yet
   * ```
   */
  quantile(q: number): number {
    if (typeof q !== 'number' || !(q >= 0 && q <= 1)) {
      throw new RouterError('INVALID_OPTION', `q must be in [0, 1], got ${describeValue(q)}`, q)
    }
    const n = this.#size
    if (n === 0) return Number.NaN
    const pos = q * (n - 1)
    const lo = Math.floor(pos)
    const hi = Math.min(n - 1, lo + 1)
    const f = pos - lo
    return this.#sorted[lo]! * (1 - f) + this.#sorted[hi]! * f
  }
}
