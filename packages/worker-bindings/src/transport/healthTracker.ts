/**
 * Per-endpoint health: consecutive failures mark an endpoint unhealthy, a success (or a
 * successful probe) marks it healthy again. While an endpoint is unhealthy, the clients given
 * the tracker refuse calls to it (a circuit breaker), letting one trial call through after each
 * cool-down.
 *
 * @module
 */
import { AsyncLocalStorage } from 'node:async_hooks'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

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
  /**
   * Calls that timed out while the endpoint answered other calls: slow, not dead. They do not
   * count toward `failureThreshold` (see {@link EndpointHealthTracker.recordFailure}).
   */
  readonly slowCalls: number
}

/**
 * Latency of the calls to one path of an endpoint, as {@link EndpointHealthTracker.latency}
 * reports it: a smoothed mean and mean deviation (RFC 6298's estimator, as TCP times its
 * retransmissions), over successful calls.
 *
 * @example
 * ```ts
 * import { EndpointHealthTracker, type EndpointLatency } from '@kvc/worker-bindings'
 * const t = new EndpointHealthTracker()
 * t.recordSuccess('http://w:1', { latencyMs: 20, path: '/health' })
 * const l: EndpointLatency | undefined = t.latency('http://w:1', '/health') // { samples: 1, meanMs: 20, deviationMs: 10 }
 * ```
 */
export interface EndpointLatency {
  readonly samples: number
  readonly meanMs: number
  readonly deviationMs: number
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
  /**
   * Whether the clients given this tracker refuse calls to an unhealthy endpoint (default
   * `true`): such a call fails at once with `ENDPOINT_UNHEALTHY`, without being sent, except one
   * trial call after each cool-down. `false` keeps the tracker a pure observer: every call is
   * sent, outcomes are only recorded.
   */
  readonly refuseWhenUnhealthy?: boolean
  /**
   * How long (ms) an unhealthy endpoint refuses calls after its last failure before one trial
   * call may go through (default {@link DEFAULT_HEALTH_COOLDOWN_MS}). A failed trial, or any
   * other failure, starts the cool-down again. `Infinity`: never a trial call; only a success
   * recorded otherwise (a probe, see {@link EndpointHealthTracker.watch}) heals the endpoint.
   */
  readonly cooldownMs?: number
}

/**
 * Default {@link EndpointHealthTrackerOptions.cooldownMs}: 5,000 ms.
 *
 * @example
 * ```ts
 * import { DEFAULT_HEALTH_COOLDOWN_MS, EndpointHealthTracker } from '@kvc/worker-bindings'
 * const tracker = new EndpointHealthTracker({ cooldownMs: 2 * DEFAULT_HEALTH_COOLDOWN_MS })
 * ```
 */
export const DEFAULT_HEALTH_COOLDOWN_MS = 5_000

/**
 * Permission to send one call, from {@link EndpointHealthTracker.permitCall}.
 *
 * @example
 * ```ts
 * import { EndpointHealthTracker, type EndpointCallPermit } from '@kvc/worker-bindings'
 * const tracker = new EndpointHealthTracker()
 * const permit: EndpointCallPermit = tracker.permitCall('http://10.0.0.6:30000')
 * permit.trial // false: the endpoint is healthy
 * permit.release()
 * ```
 */
export interface EndpointCallPermit {
  /**
   * Whether this call is the one trial call to an unhealthy endpoint after its cool-down. Its
   * outcome decides: a success marks the endpoint healthy, a failure starts the cool-down again.
   */
  readonly trial: boolean
  /**
   * Call once the call ended (settled, aborted, or not sent after all): gives the trial slot back
   * so that the next trial can go. Idempotent; does nothing for a call that is not the trial.
   */
  release(): void
}

/** The permit of every call that is not a trial: nothing to give back. */
const PASS: EndpointCallPermit = Object.freeze({ trial: false, release() {} })

/** The probes running in the current async context: calls they make are never refused. */
const probeScope = new AsyncLocalStorage<{
  readonly tracker: EndpointHealthTracker
  readonly endpoint: string
}>()

interface Latency {
  samples: number
  mean: number
  dev: number
}

interface Entry {
  healthy: boolean
  failures: number
  slow: number
  /** Latency per path. */
  readonly latency: Map<string, Latency>
  lastSuccessAt: number | undefined
  lastFailureAt: number | undefined
  unhealthySince: number | undefined
  lastError: string | undefined
  /** The trial call in flight, if any (its permit). */
  trial: EndpointCallPermit | undefined
}

/**
 * Tracks the health of HTTP endpoints (keyed by base URL). Every client of this package reports
 * each call's outcome to its tracker: a success resets the failure count, a connection error, a
 * timeout or a 5xx counts as a failure (4xx answers and caller aborts do not: the endpoint
 * answered). After `failureThreshold` consecutive failures the endpoint is unhealthy until a
 * call or a probe succeeds. {@link EndpointHealthTracker.watch} probes unhealthy endpoints on an
 * interval (unref'd timers, cleared by {@link EndpointHealthTracker.close}).
 *
 * While an endpoint is unhealthy the clients given the tracker refuse calls to it, as a circuit
 * breaker does: a call fails at once with `ENDPOINT_UNHEALTHY` and sends nothing (retries of a
 * call stop too, with that call's last error). Once `cooldownMs` passed since the last failure,
 * one trial call goes through (half-open): its success marks the endpoint healthy, its failure
 * starts the cool-down again. Probes run by {@link EndpointHealthTracker.watch} (or inside
 * {@link EndpointHealthTracker.probe}) are never refused. `refuseWhenUnhealthy: false` turns
 * refusal off: the tracker then only records.
 *
 * Share one tracker between the clients of a fleet to read every worker's health in one place.
 *
 * @example
 * ```ts
 * import { EndpointHealthTracker, SglangClient } from '@kvc/worker-bindings'
 * const health = new EndpointHealthTracker({ failureThreshold: 2, cooldownMs: 3_000 })
 * const worker = new SglangClient({ baseURL: 'http://127.0.0.1:30000', healthTracker: health })
 * health.watch(worker.baseURL, () => worker.health(), 5_000) // probe while unhealthy
 * health.isHealthy(worker.baseURL) // true until two calls in a row fail; then calls fail fast
 * health.close()
 * ```
 */
export class EndpointHealthTracker {
  readonly failureThreshold: number
  /** Whether clients refuse calls to an unhealthy endpoint (see {@link EndpointHealthTrackerOptions.refuseWhenUnhealthy}). */
  readonly refuseWhenUnhealthy: boolean
  /** Cool-down (ms) before a trial call (see {@link EndpointHealthTrackerOptions.cooldownMs}). */
  readonly cooldownMs: number
  readonly #now: () => number
  readonly #onChange: ((health: EndpointHealth) => void) | undefined
  readonly #entries = new Map<string, Entry>()
  readonly #timers = new Map<string, ReturnType<typeof setInterval>>()
  readonly #probing = new Set<string>()

  constructor(options: EndpointHealthTrackerOptions = {}) {
    const t = options.failureThreshold ?? 3
    if (!Number.isInteger(t) || t < 1) {
      throw new WorkerBindingsError(
        'INVALID_OPTION',
        `failureThreshold must be an integer >= 1, got ${show(t)}`,
        {
          value: t,
        },
      )
    }
    const refuse = options.refuseWhenUnhealthy ?? true
    if (typeof refuse !== 'boolean') {
      throw new WorkerBindingsError(
        'INVALID_OPTION',
        `refuseWhenUnhealthy must be a boolean, got ${show(refuse)}`,
        { value: refuse },
      )
    }
    const cooldown = options.cooldownMs ?? DEFAULT_HEALTH_COOLDOWN_MS
    if (typeof cooldown !== 'number' || Number.isNaN(cooldown) || cooldown < 0) {
      throw new WorkerBindingsError(
        'INVALID_OPTION',
        `cooldownMs must be a number >= 0 (or Infinity), got ${show(cooldown)}`,
        { value: cooldown },
      )
    }
    this.failureThreshold = t
    this.refuseWhenUnhealthy = refuse
    this.cooldownMs = cooldown
    this.#now = options.now ?? Date.now
    this.#onChange = options.onChange
  }

  /**
   * Records a successful call to `endpoint`. With `latencyMs` (and the call's `path`), the call's
   * latency feeds the endpoint's latency estimate for that path ({@link EndpointHealthTracker.latency},
   * {@link EndpointHealthTracker.suggestTimeout}); the clients of this package pass both.
   */
  recordSuccess(endpoint: string, call?: { readonly latencyMs?: number; readonly path?: string }): void {
    const e = this.#entry(endpoint)
    const ms = call?.latencyMs
    if (ms !== undefined && Number.isFinite(ms) && ms >= 0) {
      const key = call?.path ?? ''
      const l = e.latency.get(key)
      if (l === undefined) e.latency.set(key, { samples: 1, mean: ms, dev: ms / 2 })
      else {
        // RFC 6298: RTTVAR ← 3/4 RTTVAR + 1/4 |SRTT − R|; SRTT ← 7/8 SRTT + 1/8 R.
        l.dev = 0.75 * l.dev + 0.25 * Math.abs(l.mean - ms)
        l.mean = 0.875 * l.mean + 0.125 * ms
        l.samples++
      }
    }
    const wasHealthy = e.healthy
    e.failures = 0
    e.healthy = true
    e.unhealthySince = undefined
    e.trial = undefined
    e.lastSuccessAt = this.#now()
    if (!wasHealthy) this.#onChange?.(this.state(endpoint))
  }

  /**
   * Records a failed call to `endpoint` (connection error, timeout, 5xx).
   *
   * Slow is not dead: a timeout (a `WorkerBindingsError` with code `TIMEOUT`) of a call that
   * started at `startedAt` (this tracker's clock) while the endpoint answered another call
   * successfully after that is counted as slow ({@link EndpointHealth.slowCalls}), not as a
   * failure. Only an endpoint that stays silent (refuses connections, answers 5xx, or answers
   * nothing at all) turns unhealthy: load that makes answers late must not make healthy workers
   * look dead.
   */
  recordFailure(endpoint: string, error?: unknown, startedAt?: number): void {
    const e = this.#entry(endpoint)
    if (
      startedAt !== undefined &&
      error instanceof WorkerBindingsError &&
      error.code === 'TIMEOUT' &&
      e.lastSuccessAt !== undefined &&
      e.lastSuccessAt >= startedAt
    ) {
      e.slow++
      return
    }
    e.failures++
    e.lastFailureAt = this.#now()
    e.lastError = error instanceof Error ? error.message : error === undefined ? undefined : String(error)
    if (e.healthy && e.failures >= this.failureThreshold) {
      e.healthy = false
      e.unhealthySince = e.lastFailureAt
      this.#onChange?.(this.state(endpoint))
    }
  }

  /** This tracker's clock (ms): what `startedAt` of {@link EndpointHealthTracker.recordFailure} is read on. */
  now(): number {
    return this.#now()
  }

  /** Whether `endpoint` answered a call successfully at or after `at` (this tracker's clock). */
  answeredSince(endpoint: string, at: number): boolean {
    const t = this.#entries.get(endpoint)?.lastSuccessAt
    return t !== undefined && t >= at
  }

  /**
   * The latency estimate of the calls to `path` on `endpoint` (`undefined` before the first
   * successful call with a latency).
   */
  latency(endpoint: string, path: string): EndpointLatency | undefined {
    const l = this.#entries.get(endpoint)?.latency.get(path)
    return l === undefined ? undefined : { samples: l.samples, meanMs: l.mean, deviationMs: l.dev }
  }

  /**
   * A timeout for the next call to `path` on `endpoint` that tracks its observed latency: the
   * smoothed mean plus four mean deviations (RFC 6298's retransmission timeout), never below
   * `floorMs` (the configured timeout) nor above `capMs`.
   *
   * @example
   * ```ts
   * import { EndpointHealthTracker } from '@kvc/worker-bindings'
   * const t = new EndpointHealthTracker()
   * t.suggestTimeout('http://w:1', '/health', 500, 5_000) // 500: nothing observed yet
   * for (let i = 0; i < 20; i++) t.recordSuccess('http://w:1', { latencyMs: 900, path: '/health' })
   * t.suggestTimeout('http://w:1', '/health', 500, 5_000) // about 900 + 4 × deviation
   * ```
   */
  suggestTimeout(endpoint: string, path: string, floorMs: number, capMs: number): number {
    const l = this.#entries.get(endpoint)?.latency.get(path)
    const rto = l === undefined ? floorMs : l.mean + 4 * l.dev
    return Math.min(Math.max(floorMs, capMs), Math.max(floorMs, rto))
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
      slowCalls: e?.slow ?? 0,
    }
  }

  /** Health of every endpoint seen so far. */
  states(): EndpointHealth[] {
    return [...this.#entries.keys()].map((k) => this.state(k))
  }

  /**
   * Asks whether a call to `endpoint` may be sent now; the clients of this package ask before
   * every attempt. Returns a permit when it may: the endpoint is healthy, refusal is off
   * (`refuseWhenUnhealthy: false`), the call runs inside a probe of this endpoint
   * ({@link EndpointHealthTracker.probe}, {@link EndpointHealthTracker.watch}), or it is the one
   * trial call after the cool-down (`permit.trial`). Record the call's outcome with
   * {@link EndpointHealthTracker.recordSuccess} / {@link EndpointHealthTracker.recordFailure}
   * and `release()` the permit when the call ended.
   *
   * @throws {@link WorkerBindingsError} `ENDPOINT_UNHEALTHY` (`value`: the endpoint's
   * {@link EndpointHealth}) when the call must not be sent. Nothing changes then.
   *
   * @example
   * ```ts
   * import { EndpointHealthTracker } from '@kvc/worker-bindings'
   * const tracker = new EndpointHealthTracker({ failureThreshold: 1 })
   * const url = 'http://10.0.0.6:30000'
   * tracker.recordFailure(url, new Error('connection refused'))
   * try {
   *   tracker.permitCall(url) // within the cool-down: refused
   * } catch (err) {
   *   console.log((err as Error).message) // names the endpoint, since when, how many failures
   * }
   * ```
   */
  permitCall(endpoint: string): EndpointCallPermit {
    if (!this.refuseWhenUnhealthy) return PASS
    const e = this.#entries.get(endpoint)
    if (e === undefined || e.healthy) return PASS
    const scope = probeScope.getStore()
    if (scope !== undefined && scope.tracker === this && scope.endpoint === endpoint) return PASS
    const now = this.#now()
    const readyAt = (e.lastFailureAt ?? Number.NEGATIVE_INFINITY) + this.cooldownMs
    if (e.trial === undefined && now >= readyAt) {
      const permit: EndpointCallPermit = {
        trial: true,
        release: () => {
          if (e.trial === permit) e.trial = undefined
        },
      }
      e.trial = permit
      return permit
    }
    const since = e.unhealthySince ?? now
    const last = e.lastError === undefined ? '' : ` (last: ${e.lastError})`
    const next =
      e.trial !== undefined
        ? 'a trial call is in flight'
        : readyAt === Number.POSITIVE_INFINITY
          ? 'no trial call is allowed (cooldownMs is Infinity): waiting for a probe to succeed'
          : `one trial call may go in ${readyAt - now} ms (cool-down ${this.cooldownMs} ms after the last failure)`
    throw new WorkerBindingsError(
      'ENDPOINT_UNHEALTHY',
      `${endpoint} is unhealthy since ${since} ms on the tracker's clock (${now - since} ms ago), after ${e.failures} consecutive failures${last}; the call was not sent: ${next}`,
      { value: this.state(endpoint), endpoint },
    )
  }

  /**
   * Runs `call` as a health probe of `endpoint`: the calls to `endpoint` it makes through
   * clients given this tracker are sent even while the endpoint is unhealthy (they record their
   * outcomes as usual). {@link EndpointHealthTracker.watch} runs its probes this way; use it for
   * a probe loop of your own.
   *
   * @example
   * ```ts
   * import { EndpointHealthTracker, SglangClient } from '@kvc/worker-bindings'
   * const health = new EndpointHealthTracker()
   * const worker = new SglangClient({ baseURL: 'http://127.0.0.1:30000', healthTracker: health })
   * setInterval(() => {
   *   health.probe(worker.baseURL, () => worker.health({ maxRetries: 0 })).catch(() => {}) // never refused
   * }, 2_000).unref()
   * ```
   */
  probe<T>(endpoint: string, call: () => Promise<T>): Promise<T> {
    return probeScope.run({ tracker: this, endpoint }, call)
  }

  /**
   * Probes `endpoint` with `probe` every `intervalMs` while it is unhealthy (one probe at a
   * time). A probe that resolves records a success, unless it resolves `false` (so
   * `() => client.isHealthy()` works as a probe); one that rejects records a failure. Calling
   * it again for the same endpoint replaces the previous watch. The probe runs as
   * {@link EndpointHealthTracker.probe} does: its calls to `endpoint` are never refused.
   */
  watch(endpoint: string, probe: () => Promise<unknown>, intervalMs: number): void {
    if (!(intervalMs > 0)) {
      throw new WorkerBindingsError('INVALID_OPTION', `intervalMs must be > 0, got ${show(intervalMs)}`, {
        value: intervalMs,
      })
    }
    this.unwatch(endpoint)
    const timer = setInterval(() => {
      if (this.isHealthy(endpoint) || this.#probing.has(endpoint)) return
      this.#probing.add(endpoint)
      this.probe(endpoint, probe).then(
        (answer) => {
          this.#probing.delete(endpoint)
          if (answer === false) this.recordFailure(endpoint, new Error('health probe answered false'))
          else this.recordSuccess(endpoint)
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
        slow: 0,
        latency: new Map(),
        lastSuccessAt: undefined,
        lastFailureAt: undefined,
        unhealthySince: undefined,
        lastError: undefined,
        trial: undefined,
      }
      this.#entries.set(endpoint, e)
    }
    return e
  }
}

function show(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : String(v)
}
