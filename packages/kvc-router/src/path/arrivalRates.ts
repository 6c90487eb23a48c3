/**
 * The rate at which turns arrive at each D for it to prefill, as the router sees them (its own
 * sends): the head-of-line input of the adaptive path choice. Pure: the caller passes the time.
 *
 * @module
 */
import { RouterError, describeValue } from '../errors/routerError.js'

interface Decayed {
  /** Arrivals counted so far, each weighted by `exp(−age / window)` at time `atMs`. */
  value: number
  atMs: number
}

function check(what: string, x: unknown, positive: boolean): void {
  if (typeof x !== 'number' || !Number.isFinite(x) || (positive ? x <= 0 : false)) {
    throw new RouterError(
      'INVALID_OPTION',
      `${what} must be a finite number${positive ? ' > 0' : ''}, got ${describeValue(x)}`,
      x,
    )
  }
}

/**
 * Arrivals per second at each worker, exponentially decayed over a window (default 60 s): an
 * arrival `a` seconds old counts `exp(−a / window) / window`, so under a steady rate the estimate
 * is that rate, and a burst fades within a few windows. O(1) per call; one entry per worker.
 * Time only moves forward: an arrival or a query earlier than the worker's last arrival counts
 * as at that arrival.
 *
 * @example
 * ```ts
 * import { ArrivalRates } from '@kvc/kvc-router'
 * const rates = new ArrivalRates(60)
 * for (let t = 0; t < 600_000; t += 500) rates.record('d0', t) // two turns a second for 10 min
 * rates.perSecond('d0', 600_000) // ≈ 2
 * rates.perSecond('d1', 600_000) // 0: nothing sent there
 * ```
 */
export class ArrivalRates {
  /** The decay window, seconds. */
  readonly windowS: number
  readonly #windowMs: number
  readonly #byWorker = new Map<string, Decayed>()

  /** @throws RouterError `INVALID_OPTION` when `windowS` is not a finite number above 0. */
  constructor(windowS = 60) {
    check('windowS', windowS, true)
    this.windowS = windowS
    this.#windowMs = windowS * 1000
  }

  /**
   * Counts one arrival at `workerId` at `nowMs`.
   *
   * @throws RouterError `INVALID_OPTION` when `nowMs` is not finite (nothing is counted).
   */
  record(workerId: string, nowMs: number): void {
    check('nowMs', nowMs, false)
    const e = this.#byWorker.get(workerId)
    if (e === undefined) {
      this.#byWorker.set(workerId, { value: 1, atMs: nowMs })
      return
    }
    if (nowMs > e.atMs) {
      e.value = e.value * Math.exp((e.atMs - nowMs) / this.#windowMs) + 1
      e.atMs = nowMs
    } else e.value += 1
  }

  /**
   * The arrival rate at `workerId` at `nowMs`, per second (0 for a worker with no arrival).
   *
   * @throws RouterError `INVALID_OPTION` when `nowMs` is not finite.
   */
  perSecond(workerId: string, nowMs: number): number {
    check('nowMs', nowMs, false)
    const e = this.#byWorker.get(workerId)
    if (e === undefined) return 0
    const decay = nowMs > e.atMs ? Math.exp((e.atMs - nowMs) / this.#windowMs) : 1
    return (e.value * decay) / this.windowS
  }

  /** Forgets `workerId` (a worker removed from the cluster). */
  forget(workerId: string): void {
    this.#byWorker.delete(workerId)
  }
}
