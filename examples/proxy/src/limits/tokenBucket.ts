import { ProxyError } from '../errors.js'

/** Options of {@link TokenBucket}. */
export interface TokenBucketOptions {
  /** Tokens added per second (> 0). */
  readonly ratePerSecond: number
  /** Most tokens the bucket holds (the burst, >= 1). It starts full. */
  readonly capacity: number
  /** Clock in milliseconds (injected in tests; `performance.now` in the proxy). */
  readonly now: () => number
}

function checkRate(ratePerSecond: number, capacity: number): void {
  if (!Number.isFinite(ratePerSecond) || ratePerSecond <= 0)
    throw new ProxyError(
      'INVALID_ARGUMENT',
      `ratePerSecond must be a finite number > 0, got ${ratePerSecond}`,
      ratePerSecond,
    )
  if (!Number.isFinite(capacity) || capacity < 1)
    throw new ProxyError(
      'INVALID_ARGUMENT',
      `capacity must be a finite number >= 1, got ${capacity}`,
      capacity,
    )
}

function checkCost(cost: number): void {
  if (!Number.isFinite(cost) || cost < 0)
    throw new ProxyError('INVALID_ARGUMENT', `cost must be a finite number >= 0, got ${cost}`, cost)
}

/**
 * A token bucket: `capacity` tokens at most, refilled at `ratePerSecond`, on an injected clock.
 * A take that the bucket cannot cover is refused with the time until it could be; a take larger
 * than the whole capacity is granted when the bucket is full and leaves it in debt (so a large
 * request is slowed, never refused forever). A clock that goes back adds nothing.
 *
 * @example
 * ```ts
 * import { TokenBucket } from '@kvc/example-proxy'
 * let t = 0
 * const b = new TokenBucket({ ratePerSecond: 2, capacity: 2, now: () => t })
 * b.take(1) // 0: granted
 * b.take(1) // 0
 * b.take(1) // 500: retry in 500 ms
 * t = 500
 * b.take(1) // 0
 * ```
 */
export class TokenBucket {
  readonly #now: () => number
  #rate: number
  #capacity: number
  #tokens: number
  #at: number

  constructor(options: TokenBucketOptions) {
    checkRate(options.ratePerSecond, options.capacity)
    this.#now = options.now
    this.#rate = options.ratePerSecond
    this.#capacity = options.capacity
    this.#tokens = options.capacity
    this.#at = options.now()
  }

  get ratePerSecond(): number {
    return this.#rate
  }

  get capacity(): number {
    return this.#capacity
  }

  /** Tokens in the bucket now (negative while in debt). */
  available(): number {
    this.#refill()
    return this.#tokens
  }

  /**
   * Takes `cost` tokens. Returns 0 when granted, else the milliseconds until the take could be
   * granted (nothing is taken then).
   */
  take(cost: number): number {
    checkCost(cost)
    this.#refill()
    if (this.#tokens >= cost || (cost > this.#capacity && this.#tokens >= this.#capacity)) {
      this.#tokens -= cost
      return 0
    }
    const need = Math.min(cost, this.#capacity) - this.#tokens
    return Math.max(1, Math.ceil((need / this.#rate) * 1000))
  }

  /** Gives back `n` tokens taken earlier and not used (never above the capacity). */
  refund(n: number): void {
    checkCost(n)
    this.#refill()
    this.#tokens = Math.min(this.#capacity, this.#tokens + n)
  }

  /** New rate and capacity (a configuration reload); the tokens held are kept, up to the new capacity. */
  reconfigure(ratePerSecond: number, capacity: number): void {
    checkRate(ratePerSecond, capacity)
    this.#refill()
    this.#rate = ratePerSecond
    this.#capacity = capacity
    this.#tokens = Math.min(this.#tokens, capacity)
  }

  #refill(): void {
    const now = this.#now()
    const dt = now - this.#at
    if (dt > 0) {
      this.#tokens = Math.min(this.#capacity, this.#tokens + (dt * this.#rate) / 1000)
      this.#at = now
    } else if (dt < 0) this.#at = now
  }
}
