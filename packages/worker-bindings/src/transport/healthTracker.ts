/**
 * Per-endpoint health: consecutive failures mark an endpoint unhealthy, a success (or a
 * successful probe) marks it healthy again.
 *
 * @module
 */

/**
 * Health of one endpoint, as {@link EndpointHealthTracker.state} reports it.
 *
 * @example
 * ```ts
 * import { EndpointHealthTracker, type EndpointHealth } from '@kvc/worker-bindings'
 * const tracker = new EndpointHealthTracker()
 * const down: EndpointHealth[] = tracker.states().filter((s) => !s.healthy)
 * ```
 */
export interface EndpointHealth {
  readonly endpoint: string
  readonly healthy: boolean
  /** Failures since the last success. */
  readonly consecutiveFailures: number
  /** Clock time (ms) of the last success / failure, if any. */
  readonly lastSuccessAt: number | undefined
  readonly lastFailureAt: number | undefined
  /** Clock time (ms) the endpoint became unhealthy (undefined while healthy). */
  readonly unhealthySince: number | undefined
  /** Message of the last failure. */
  readonly lastError: string | undefined
}

/**
 * Options of {@link EndpointHealthTracker}.
 *
 * @example
 * ```ts
 * import { EndpointHealthTracker, type EndpointHealthTrackerOptions } from '@kvc/worker-bindings'
 * const opts: EndpointHealthTrackerOptions = { failureThreshold: 2, onChange: (h) => console.log(h.endpoint, h.healthy) }
 * const tracker = new EndpointHealthTracker(opts)
 * ```
 */
export interface EndpointHealthTrackerOptions {
  /** Consecutive failures that make an endpoint unhealthy (default 3). */
  readonly failureThreshold?: number
  /** Clock in ms (default `Date.now`). */
  readonly now?: () => number
  /** Called on every healthy ↔ unhealthy transition. */
  readonly onChange?: (health: EndpointHealth) => void
}

interface Entry {
  healthy: boolean
  failures: number
  lastSuccessAt: number | undefined
  lastFailureAt: number | undefined
  unhealthySince: number | undefined
  lastError: string | undefined
}

/**
 * Tracks the health of HTTP endpoints (keyed by base URL). Every client of this package reports
 * each call's outcome to its tracker: a success resets the failure count, a connection error, a
 * timeout or a 5xx counts as a failure (4xx answers and caller aborts do not: the endpoint
 * answered). After `failureThreshold` consecutive failures the endpoint is unhealthy until a
 * call or a probe succeeds. {@link EndpointHealthTracker.watch} probes unhealthy endpoints on an
 * interval (unref'd timers, cleared by {@link EndpointHealthTracker.close}).
 *
 * Share one tracker between the clients of a fleet to read every worker's health in one place.
 *
 * @example
 * ```ts
 * import { EndpointHealthTracker, SglangClient } from '@kvc/worker-bindings'
 * const health = new EndpointHealthTracker({ failureThreshold: 2 })
 * const worker = new SglangClient({ baseURL: 'http://127.0.0.1:30000', healthTracker: health })
 * health.watch(worker.baseURL, () => worker.health(), 5_000) // probe while unhealthy
 * health.isHealthy(worker.baseURL) // true until two calls in a row fail
 * health.close()
 * ```
 */
export class EndpointHealthTracker {
  readonly failureThreshold: number
  readonly #now: () => number
  readonly #onChange: ((health: EndpointHealth) => void) | undefined
  readonly #entries = new Map<string, Entry>()
  readonly #timers = new Map<string, ReturnType<typeof setInterval>>()
  readonly #probing = new Set<string>()

  constructor(options: EndpointHealthTrackerOptions = {}) {
    const t = options.failureThreshold ?? 3
    if (!Number.isInteger(t) || t < 1)
      throw new RangeError(`failureThreshold must be an integer >= 1, got ${t}`)
    this.failureThreshold = t
    this.#now = options.now ?? Date.now
    this.#onChange = options.onChange
  }

  /** Records a successful call to `endpoint`. */
  recordSuccess(endpoint: string): void {
    const e = this.#entry(endpoint)
    const wasHealthy = e.healthy
    e.failures = 0
    e.healthy = true
    e.unhealthySince = undefined
    e.lastSuccessAt = this.#now()
    if (!wasHealthy) this.#onChange?.(this.state(endpoint))
  }

  /** Records a failed call to `endpoint` (connection error, timeout, 5xx). */
  recordFailure(endpoint: string, error?: unknown): void {
    const e = this.#entry(endpoint)
    e.failures++
    e.lastFailureAt = this.#now()
    e.lastError = error instanceof Error ? error.message : error === undefined ? undefined : String(error)
    if (e.healthy && e.failures >= this.failureThreshold) {
      e.healthy = false
      e.unhealthySince = e.lastFailureAt
      this.#onChange?.(this.state(endpoint))
    }
  }

  /** Whether `endpoint` is healthy (an endpoint never seen is healthy). */
  isHealthy(endpoint: string): boolean {
    return this.#entries.get(endpoint)?.healthy ?? true
  }

  /** Health of `endpoint`. */
  state(endpoint: string): EndpointHealth {
    const e = this.#entries.get(endpoint)
    return {
      endpoint,
      healthy: e?.healthy ?? true,
      consecutiveFailures: e?.failures ?? 0,
      lastSuccessAt: e?.lastSuccessAt,
      lastFailureAt: e?.lastFailureAt,
      unhealthySince: e?.unhealthySince,
      lastError: e?.lastError,
    }
  }

  /** Health of every endpoint seen so far. */
  states(): EndpointHealth[] {
    return [...this.#entries.keys()].map((k) => this.state(k))
  }

  /**
   * Probes `endpoint` with `probe` every `intervalMs` while it is unhealthy (one probe at a
   * time). A probe that resolves records a success; one that rejects records a failure. Calling
   * it again for the same endpoint replaces the previous watch.
   */
  watch(endpoint: string, probe: () => Promise<unknown>, intervalMs: number): void {
    if (!(intervalMs > 0)) throw new RangeError(`intervalMs must be > 0, got ${intervalMs}`)
    this.unwatch(endpoint)
    const timer = setInterval(() => {
      if (this.isHealthy(endpoint) || this.#probing.has(endpoint)) return
      this.#probing.add(endpoint)
      probe().then(
        () => {
          this.#probing.delete(endpoint)
          this.recordSuccess(endpoint)
        },
        (err: unknown) => {
          this.#probing.delete(endpoint)
          this.recordFailure(endpoint, err)
        },
      )
    }, intervalMs)
    timer.unref?.()
    this.#timers.set(endpoint, timer)
  }

  /** Stops probing `endpoint`. */
  unwatch(endpoint: string): void {
    const t = this.#timers.get(endpoint)
    if (t !== undefined) clearInterval(t)
    this.#timers.delete(endpoint)
  }

  /** Stops every probe timer. */
  close(): void {
    for (const t of this.#timers.values()) clearInterval(t)
    this.#timers.clear()
  }

  #entry(endpoint: string): Entry {
    let e = this.#entries.get(endpoint)
    if (e === undefined) {
      e = {
        healthy: true,
        failures: 0,
        lastSuccessAt: undefined,
        lastFailureAt: undefined,
        unhealthySince: undefined,
        lastError: undefined,
      }
      this.#entries.set(endpoint, e)
    }
    return e
  }
}
