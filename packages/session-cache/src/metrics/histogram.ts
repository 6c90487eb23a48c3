import { SessionCacheError, SessionCacheErrorCode } from '../errors/sessionCacheError.js'

/**
 * Default bucket upper bounds (tokens) of the tokens-freed-per-eviction histogram: one page of
 * 16 up to 256K tokens, in powers of four. The research prototype's numbers sit at both ends: ~24
 * tokens per eviction block-level (expected), ~67K per eviction session-level (measured;
 * `docs/design/prototype.md#session-level-eviction`).
 *
 * @example
 * ```ts
 * import { DEFAULT_EVICTION_BUCKETS, Histogram } from '@kvc/session-cache'
 * const h = new Histogram([...DEFAULT_EVICTION_BUCKETS, 1_048_576]) // one more bucket for 1M-token sessions
 * ```
 */
export const DEFAULT_EVICTION_BUCKETS: readonly number[] = [16, 64, 256, 1024, 4096, 16384, 65536, 262144]

/**
 * A read-only copy of a {@link Histogram}.
 *
 * @example
 * ```ts
 * const { count, mean, max, counts } = sc.stats().evictionHistogram
 * console.log(`${count} evictions, ${mean} tokens on average, ${max} at most`, counts)
 * ```
 */
export interface HistogramSnapshot {
  /** Bucket upper bounds, ascending (a value `v` falls in the first bucket with `v <= bound`). */
  readonly bounds: readonly number[]
  /** Observations per bucket; one more entry than `bounds` (the last is `> bounds[last]`). */
  readonly counts: readonly number[]
  /** Number of observations. */
  readonly count: number
  /** Sum of the observations. */
  readonly sum: number
  /** Largest observation (0 when empty). */
  readonly max: number
  /** `sum / count` (0 when empty). */
  readonly mean: number
}

/**
 * A fixed-bucket histogram, like a Prometheus histogram (non-cumulative counts here; sum and max
 * kept exactly). Used for the tokens freed by each eviction.
 *
 * @example
 * ```ts
 * import { Histogram } from '@kvc/session-cache'
 * const h = new Histogram([16, 256])
 * h.observe(16)
 * h.observe(300)
 * h.snapshot() // { bounds: [16, 256], counts: [1, 0, 1], count: 2, sum: 316, max: 300, mean: 158 }
 * ```
 */
export class Histogram {
  readonly #bounds: readonly number[]
  readonly #counts: Float64Array
  #count = 0
  #sum = 0
  #max = 0

  /**
   * `bounds`: strictly ascending finite upper bounds (at least one); anything else is refused
   * with `INVALID_OPTION`.
   */
  constructor(bounds: readonly number[] = DEFAULT_EVICTION_BUCKETS) {
    if (!Array.isArray(bounds) || bounds.length === 0) {
      throw new SessionCacheError(
        SessionCacheErrorCode.InvalidOption,
        'histogram bounds must be a non-empty array',
        bounds,
      )
    }
    for (let i = 0; i < bounds.length; i++) {
      const b = bounds[i]
      if (typeof b !== 'number' || !Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]!)) {
        throw new SessionCacheError(
          SessionCacheErrorCode.InvalidOption,
          `histogram bounds must be finite and strictly ascending, got ${String(bounds)}`,
          bounds,
        )
      }
    }
    this.#bounds = bounds.slice()
    this.#counts = new Float64Array(bounds.length + 1)
  }

  /** Record one observation. */
  observe(value: number): void {
    const b = this.#bounds
    let i = 0
    while (i < b.length && value > b[i]!) i++
    this.#counts[i]!++
    this.#count++
    this.#sum += value
    if (value > this.#max) this.#max = value
  }

  /** A copy of the current state. */
  snapshot(): HistogramSnapshot {
    return {
      bounds: this.#bounds.slice(),
      counts: Array.from(this.#counts),
      count: this.#count,
      sum: this.#sum,
      max: this.#max,
      mean: this.#count === 0 ? 0 : this.#sum / this.#count,
    }
  }
}
