/**
 * The HTTP layer every client of this package shares: base URL, default headers, per-call
 * timeout and `AbortSignal`, retries with backoff for idempotent calls, typed errors and
 * health tracking.
 *
 * @module
 */
import { backoffDelayMs } from '@kvc/kvc-router'
import { WorkerApiError, WorkerBindingsError } from '../errors/workerBindingsError.js'
import { stringifyJson } from '../json/json.js'
import type { EndpointCallPermit, EndpointHealthTracker } from './healthTracker.js'
import {
  DEFAULT_RETRY_POLICY,
  type ResolvedRetryPolicy,
  type RetryPolicy,
  isRetryableStatus,
  parseRetryAfter,
} from './retry.js'
import { abortableSleep, abortedError } from './sleep.js'

/**
 * The `fetch` signature the transport needs (the global `fetch`, undici's, or a test double).
 *
 * @example
 * ```ts
 * import { SglangClient, type FetchLike } from '@kvc/worker-bindings'
 * const logged: FetchLike = (url, init) => {
 *   console.log(init.method, url)
 *   return fetch(url, init)
 * }
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:30000', fetch: logged })
 * ```
 */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>

/**
 * Options shared by every client of this package.
 *
 * @example
 * ```ts
 * import { MooncakeMasterClient, type ClientOptions } from '@kvc/worker-bindings'
 * const opts: ClientOptions = { baseURL: 'http://10.0.0.2:9003', timeout: 5_000, maxRetries: 3, defaultHeaders: { 'x-team': 'infra' } }
 * const master = new MooncakeMasterClient(opts)
 * ```
 */
export interface ClientOptions {
  /** Base URL of the endpoint, e.g. `http://127.0.0.1:30000` (a path prefix is kept). */
  readonly baseURL: string
  /** `fetch` implementation (default: the global `fetch`). */
  readonly fetch?: FetchLike
  /** Per-attempt timeout in ms (default 60,000; the admission client uses 500). For streams: until the headers, then between chunks. */
  readonly timeout?: number
  /** Retries of idempotent calls (default 2). Non-idempotent calls (`generate`, chat) are never retried. */
  readonly maxRetries?: number
  /** Backoff between retries (default {@link DEFAULT_RETRY_POLICY}). */
  readonly retry?: RetryPolicy
  /** Headers sent with every call (e.g. `authorization`). */
  readonly defaultHeaders?: Readonly<Record<string, string>>
  /**
   * Receives every call's outcome (default: none). Unless the tracker was built with
   * `refuseWhenUnhealthy: false`, it also refuses calls while the endpoint is unhealthy: they
   * fail at once with `ENDPOINT_UNHEALTHY`, sending nothing (one trial call per cool-down goes
   * through).
   */
  readonly healthTracker?: EndpointHealthTracker
  /** Randomness for jitter, in `[0, 1)` (default `Math.random`). */
  readonly random?: () => number
}

/**
 * Per-call options.
 *
 * @example
 * ```ts
 * import { SglangClient, type CallOptions } from '@kvc/worker-bindings'
 * const opts: CallOptions = { signal: AbortSignal.timeout(2_000), maxRetries: 0 }
 * await new SglangClient({ baseURL: 'http://127.0.0.1:30000' }).getLoad(opts)
 * ```
 */
export interface CallOptions {
  /** Aborts the call (and any retry wait); the call fails with `ABORTED` and is never retried. */
  readonly signal?: AbortSignal
  /** Overrides the client's timeout for this call (ms). */
  readonly timeout?: number
  /**
   * Lets the timeout track the endpoint's observed latency, up to `maxTimeout` ms (slow is not
   * dead). With it, an attempt waits the larger of `timeout` and the latency estimate of the path
   * (mean + 4 deviations, `EndpointHealthTracker.suggestTimeout`); and when that expires while the
   * endpoint answered other calls since the attempt was sent (it is slow, not dead), the attempt
   * keeps waiting, up to `maxTimeout` in all. Needs the client's health tracker (without one it
   * does nothing). Not for streams once their headers arrived.
   */
  readonly maxTimeout?: number
  /** Overrides the client's `maxRetries` for this call (idempotent calls only). */
  readonly maxRetries?: number
  /** Extra headers for this call. */
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * What to send.
 *
 * @example
 * ```ts
 * import { HttpTransport, type HttpRequestSpec } from '@kvc/worker-bindings'
 * const spec: HttpRequestSpec = { method: 'GET', path: '/get_load', idempotent: true }
 * await new HttpTransport({ baseURL: 'http://127.0.0.1:30000' }).json(spec)
 * ```
 */
export interface HttpRequestSpec {
  readonly method: 'GET' | 'POST' | 'PUT' | 'DELETE'
  /** Path relative to the base URL (leading `/` optional; `''` is the base URL itself). */
  readonly path: string
  readonly query?: Readonly<Record<string, string | number | boolean | undefined>>
  /** A JSON value (serialized with `bigint` support) or, with `rawBody`, a string. */
  readonly body?: unknown
  /** Send `body` as-is (a string) with this content type. */
  readonly rawBody?: { readonly contentType: string }
  /** Whether the call may be repeated safely; only idempotent calls are retried. */
  readonly idempotent: boolean
  /** Statuses (besides 2xx) that are answers, not errors (e.g. 404 on a lookup). */
  readonly acceptStatus?: readonly number[]
}

/**
 * A fully read answer.
 *
 * @example
 * ```ts
 * import { HttpTransport } from '@kvc/worker-bindings'
 * const http = new HttpTransport({ baseURL: 'http://127.0.0.1:30000' })
 * const { status, text } = await http.text({ method: 'POST', path: '/flush_cache', idempotent: true, acceptStatus: [400] })
 * ```
 */
export interface HttpTextResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
}

/**
 * An answer whose body is still streaming.
 *
 * @example
 * ```ts
 * import { HttpTransport } from '@kvc/worker-bindings'
 * const http = new HttpTransport({ baseURL: 'http://127.0.0.1:30000' })
 * const res = await http.stream({ method: 'POST', path: '/generate', body: { text: 'hi', stream: true }, idempotent: false })
 * for await (const bytes of res.body) console.log(bytes.length)
 * ```
 */
export interface HttpStreamResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  /** The body chunks; ending the iteration early closes the connection. */
  readonly body: AsyncIterable<Uint8Array>
  /** Closes the connection (idempotent). */
  cancel(): void
}

const TIMEOUT = Symbol('kvc-timeout')

/**
 * The shared HTTP transport. Clients build one from their {@link ClientOptions}; it is exported
 * for integrators who add calls of their own with the same behaviour.
 *
 * Behaviour of every call:
 * - a per-attempt timeout (`TIMEOUT`) and the caller's `AbortSignal` (`ABORTED`, never retried);
 * - idempotent calls are retried up to `maxRetries` times on connection errors, timeouts and
 *   408/409/429/5xx, waiting `retry-after(-ms)` when the server gives one (up to
 *   `maxRetryAfterMs`), else the exponential backoff with jitter;
 * - non-idempotent calls are sent once;
 * - a non-2xx answer becomes a {@link WorkerApiError} (status, headers, body excerpt);
 * - every outcome is reported to the health tracker; every timer and listener is cleaned up;
 * - with a health tracker that refuses calls (the default), a call to an unhealthy endpoint
 *   fails with `ENDPOINT_UNHEALTHY` before anything is sent, and retries stop (with the last
 *   attempt's error) once the endpoint turned unhealthy.
 *
 *
 * @example
 * ```ts
 * import { HttpTransport } from '@kvc/worker-bindings'
 * const http = new HttpTransport({ baseURL: 'http://127.0.0.1:30000', timeout: 2_000 })
 * const info = await http.json({ method: 'GET', path: '/get_model_info', idempotent: true })
 * ```
 */
export class HttpTransport {
  /** Normalized base URL (no trailing slash). */
  readonly baseURL: string
  readonly timeout: number
  readonly maxRetries: number
  readonly retry: ResolvedRetryPolicy
  readonly #fetch: FetchLike
  readonly #headers: Readonly<Record<string, string>>
  readonly #health: EndpointHealthTracker | undefined
  readonly #random: () => number

  constructor(options: ClientOptions) {
    if (typeof options.baseURL !== 'string') {
      throw new WorkerBindingsError('INVALID_OPTION', 'baseURL must be a string', { value: options.baseURL })
    }
    let url: URL
    try {
      url = new URL(options.baseURL)
    } catch (cause) {
      throw new WorkerBindingsError('INVALID_OPTION', `baseURL is not a URL: ${options.baseURL}`, {
        value: options.baseURL,
        cause,
      })
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new WorkerBindingsError('INVALID_OPTION', `baseURL must be http(s), got ${url.protocol}`, {
        value: options.baseURL,
      })
    }
    this.baseURL = `${url.origin}${url.pathname.replace(/\/+$/, '')}`
    const timeout = options.timeout ?? 60_000
    checkNonNegative('timeout', timeout)
    const maxRetries = options.maxRetries ?? 2
    if (!Number.isInteger(maxRetries) || maxRetries < 0) {
      throw new WorkerBindingsError(
        'INVALID_OPTION',
        `maxRetries must be an integer >= 0, got ${maxRetries}`,
        {
          value: maxRetries,
        },
      )
    }
    this.timeout = timeout
    this.maxRetries = maxRetries
    this.retry = { ...DEFAULT_RETRY_POLICY, ...options.retry }
    checkNonNegative('retry.baseDelayMs', this.retry.baseDelayMs)
    checkNonNegative('retry.maxDelayMs', this.retry.maxDelayMs)
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init))
    this.#headers = { ...options.defaultHeaders }
    this.#health = options.healthTracker
    this.#random = options.random ?? Math.random
  }

  /** The full URL of `path` with `query`. */
  url(path: string, query?: HttpRequestSpec['query']): string {
    const p = path === '' || path.startsWith('/') ? path : `/${path}`
    let u = `${this.baseURL}${p}`
    if (query !== undefined) {
      const qs = new URLSearchParams()
      for (const [k, v] of Object.entries(query)) if (v !== undefined) qs.append(k, String(v))
      const s = qs.toString()
      if (s.length > 0) u += `${u.includes('?') ? '&' : '?'}${s}`
    }
    return u
  }

  /** Sends the request and reads the whole answer as text. Non-2xx answers throw {@link WorkerApiError}. */
  async text(spec: HttpRequestSpec, options: CallOptions = {}): Promise<HttpTextResponse> {
    return this.#run(spec, options, async (res, done) => {
      const text = await res.text()
      done()
      return { status: res.status, headers: headersOf(res), text }
    })
  }

  /** Sends the request and decodes the JSON answer (`BAD_RESPONSE` if it is not JSON). */
  async json<T = unknown>(spec: HttpRequestSpec, options: CallOptions = {}): Promise<T> {
    const res = await this.text(spec, options)
    return parseJsonBody<T>(res.text, `${spec.method} ${spec.path}`, this.baseURL)
  }

  /**
   * Sends the request and returns once the headers arrived. The body streams; the timeout then
   * applies to each wait for the next chunk (an idle timeout). Retries happen only before the
   * first byte of the body is handed out.
   */
  async stream(spec: HttpRequestSpec, options: CallOptions = {}): Promise<HttpStreamResponse> {
    return this.#run(spec, options, async (res, done, ctx) => {
      const reader = res.body?.getReader()
      if (reader === undefined) {
        done()
        return { status: res.status, headers: headersOf(res), body: emptyBody(), cancel() {} }
      }
      return makeStream(res, reader, ctx, done, this.baseURL)
    })
  }

  async #run<T>(
    spec: HttpRequestSpec,
    options: CallOptions,
    onOk: (res: Response, done: () => void, ctx: AttemptContext) => Promise<T>,
  ): Promise<T> {
    const timeout = options.timeout ?? this.timeout
    checkNonNegative('timeout', timeout)
    const maxRetries = spec.idempotent ? (options.maxRetries ?? this.maxRetries) : 0
    const url = this.url(spec.path, spec.query)
    const label = `${spec.method} ${spec.path}`
    const headers: Record<string, string> = {
      accept: 'application/json, text/event-stream, text/plain',
      ...this.#headers,
    }
    let body: string | undefined
    if (spec.body !== undefined) {
      if (spec.rawBody !== undefined) {
        body = String(spec.body)
        headers['content-type'] = spec.rawBody.contentType
      } else {
        body = stringifyJson(spec.body)
        headers['content-type'] = 'application/json'
      }
    }
    Object.assign(headers, options.headers)
    const userSignal = options.signal
    if (userSignal?.aborted) throw abortedError(userSignal, this.baseURL)
    const health = this.#health
    const maxTimeout = options.maxTimeout
    if (maxTimeout !== undefined) checkNonNegative('maxTimeout', maxTimeout)
    // A tracker that refuses calls throws ENDPOINT_UNHEALTHY here, before anything is sent.
    let permit = this.#health?.permitCall(this.baseURL)
    try {
      for (let attempt = 0; ; attempt++) {
        if (userSignal?.aborted) throw abortedError(userSignal, this.baseURL)
        const startedAt = health?.now() ?? 0
        const t0 = performance.now()
        const base =
          maxTimeout === undefined || health === undefined
            ? timeout
            : health.suggestTimeout(this.baseURL, spec.path, timeout, maxTimeout)
        // Slow, not dead: past its timeout an attempt keeps waiting (up to maxTimeout) while the
        // endpoint answers other calls.
        const extend =
          maxTimeout === undefined || health === undefined
            ? undefined
            : () => {
                const elapsed = performance.now() - t0
                return health.answeredSince(this.baseURL, startedAt) && elapsed < maxTimeout
                  ? Math.min(base, maxTimeout - elapsed)
                  : 0
              }
        const ctx = new AttemptContext(userSignal, base, extend)
        const latency = () => ({ latencyMs: performance.now() - t0, path: spec.path })
        let error: WorkerBindingsError
        let retryAfter: number | undefined
        try {
          const init: RequestInit = { method: spec.method, headers, signal: ctx.signal }
          if (body !== undefined) init.body = body
          const res = await this.#fetch(url, init)
          if (res.ok || spec.acceptStatus?.includes(res.status)) {
            const out = await onOk(res, () => ctx.dispose(), ctx)
            this.#health?.recordSuccess(this.baseURL, latency())
            return out
          }
          const text = await res.text().catch(() => '')
          ctx.dispose()
          const h = headersOf(res)
          retryAfter = parseRetryAfter(h)
          error = new WorkerApiError({
            status: res.status,
            headers: h,
            body: text,
            request: label,
            endpoint: this.baseURL,
            retryAfterMs: retryAfter,
          })
          if (res.status >= 500) this.#health?.recordFailure(this.baseURL, error)
          else this.#health?.recordSuccess(this.baseURL, latency())
          if (!isRetryableStatus(res.status)) throw error
        } catch (cause) {
          ctx.dispose()
          if (cause instanceof WorkerApiError) throw cause
          if (cause instanceof WorkerBindingsError) {
            error = cause
          } else if (userSignal?.aborted) {
            throw abortedError(userSignal, this.baseURL)
          } else if (ctx.timedOut) {
            const waited = Math.round(performance.now() - t0)
            error = new WorkerBindingsError(
              'TIMEOUT',
              `${label} timed out after ${waited === timeout || maxTimeout === undefined ? timeout : waited} ms`,
              { value: timeout, endpoint: this.baseURL, cause },
            )
            this.#health?.recordFailure(this.baseURL, error, startedAt)
          } else {
            error = new WorkerBindingsError('CONNECTION', `${label} failed: ${describeNetworkError(cause)}`, {
              endpoint: this.baseURL,
              cause,
            })
            this.#health?.recordFailure(this.baseURL, error)
          }
          if (error.code !== 'TIMEOUT' && error.code !== 'CONNECTION') throw error
        }
        if (attempt >= maxRetries) throw error
        let delay = backoffDelayMs(attempt, this.retry, this.#random)
        if (retryAfter !== undefined) {
          if (retryAfter > this.retry.maxRetryAfterMs) throw error
          delay = retryAfter
        }
        // No retry once the endpoint turned unhealthy (the tracker refuses it): the last error stands.
        const before = this.#permitAgain(permit)
        if (before === null) throw error
        permit = before
        await abortableSleep(delay, userSignal, this.baseURL)
        if (permit?.trial !== true) {
          const after = this.#permitAgain(permit)
          if (after === null) throw error
          permit = after
        }
      }
    } finally {
      permit?.release()
    }
  }

  /**
   * Gives `permit` back and asks the tracker again before a retry: `undefined` without a
   * tracker, `null` when the tracker now refuses the call.
   */
  #permitAgain(permit: EndpointCallPermit | undefined): EndpointCallPermit | undefined | null {
    permit?.release()
    if (this.#health === undefined) return undefined
    try {
      return this.#health.permitCall(this.baseURL)
    } catch (err) {
      if (err instanceof WorkerBindingsError && err.code === 'ENDPOINT_UNHEALTHY') return null
      throw err
    }
  }
}

/** One attempt's abort controller: the caller's signal, the timeout, and explicit cancellation. */
class AttemptContext {
  readonly #controller = new AbortController()
  readonly #user: AbortSignal | undefined
  readonly #onUserAbort: () => void
  /** Asked when the timeout expires: more ms to wait (slow, not dead), or 0 to time out. */
  #extend: (() => number) | undefined
  #timer: ReturnType<typeof setTimeout> | undefined
  #deferred: ReturnType<typeof setImmediate> | undefined
  #timedOut = false
  #disposed = false

  /** The attempt's timeout (ms); for a stream, the idle timeout between chunks. */
  readonly timeoutMs: number

  constructor(user: AbortSignal | undefined, timeoutMs: number, extend?: () => number) {
    this.timeoutMs = timeoutMs
    this.#extend = extend
    this.#user = user
    this.#onUserAbort = () => this.#controller.abort(user?.reason)
    user?.addEventListener('abort', this.#onUserAbort, { once: true })
    this.arm(timeoutMs)
  }

  get signal(): AbortSignal {
    return this.#controller.signal
  }

  get timedOut(): boolean {
    return this.#timedOut
  }

  get userAborted(): boolean {
    return this.#user?.aborted === true
  }

  /** (Re)starts the timeout. */
  arm(timeoutMs: number): void {
    this.disarm()
    if (this.#disposed || timeoutMs === Number.POSITIVE_INFINITY) return
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      // A timer that fires after the event loop was held up runs before the I/O that arrived
      // meanwhile: give that I/O one turn (the answer may be there) before timing out.
      this.#deferred = setImmediate(() => {
        this.#deferred = undefined
        if (this.#disposed) return
        const more = this.#extend?.() ?? 0
        if (more > 0) {
          this.arm(more)
          return
        }
        this.#timedOut = true
        this.#controller.abort(TIMEOUT)
      })
    }, timeoutMs)
  }

  /** Stops asking for more time: a plain timeout from now on (a stream's idle timeout). */
  fixed(): void {
    this.#extend = undefined
  }

  disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
    if (this.#deferred !== undefined) clearImmediate(this.#deferred)
    this.#deferred = undefined
  }

  abort(): void {
    this.#controller.abort()
  }

  dispose(): void {
    if (this.#disposed) return
    this.#disposed = true
    this.disarm()
    this.#user?.removeEventListener('abort', this.#onUserAbort)
  }
}

function makeStream(
  res: Response,
  reader: ReadableStreamDefaultReader<Uint8Array>,
  ctx: AttemptContext,
  done: () => void,
  endpoint: string,
): HttpStreamResponse {
  // The headers arrived: from now on the timeout is an idle timeout, re-armed before each read.
  const idleMs = ctx.timeoutMs
  ctx.disarm()
  ctx.fixed()
  let finished = false
  let iterating = false
  const finish = (cancel: boolean): void => {
    if (finished) return
    finished = true
    if (cancel) {
      ctx.abort()
      reader.cancel().catch(() => {})
    }
    reader.releaseLock?.()
    done()
  }
  const body: AsyncIterable<Uint8Array> = {
    [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
      if (iterating)
        throw new WorkerBindingsError('INVALID_ARGUMENT', 'a response body can be iterated only once')
      iterating = true
      return {
        async next(): Promise<IteratorResult<Uint8Array>> {
          if (finished) return { done: true, value: undefined }
          ctx.arm(idleMs)
          try {
            const r = await reader.read()
            ctx.disarm()
            if (r.done) {
              finish(false)
              return { done: true, value: undefined }
            }
            return { done: false, value: r.value }
          } catch (cause) {
            const timedOut = ctx.timedOut
            const userAborted = ctx.userAborted
            finish(true)
            if (userAborted) {
              throw new WorkerBindingsError('ABORTED', 'the stream was aborted by its AbortSignal', {
                cause,
                endpoint,
              })
            }
            if (timedOut) {
              throw new WorkerBindingsError('TIMEOUT', `no data for ${idleMs} ms on the stream`, {
                value: idleMs,
                cause,
                endpoint,
              })
            }
            throw new WorkerBindingsError('CONNECTION', `the stream broke: ${describeNetworkError(cause)}`, {
              cause,
              endpoint,
            })
          }
        },
        async return(): Promise<IteratorResult<Uint8Array>> {
          finish(true)
          return { done: true, value: undefined }
        },
      }
    },
  }
  return { status: res.status, headers: headersOf(res), body, cancel: () => finish(true) }
}

async function* emptyBody(): AsyncGenerator<Uint8Array> {}

/** Lower-case header map of a response. */
function headersOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {}
  res.headers.forEach((v, k) => {
    out[k.toLowerCase()] = v
  })
  return out
}

/** @internal */
export function parseJsonBody<T>(text: string, label: string, endpoint: string): T {
  try {
    return JSON.parse(text) as T
  } catch (cause) {
    throw new WorkerBindingsError('BAD_RESPONSE', `${label}: the answer is not JSON: ${text.slice(0, 200)}`, {
      value: text.slice(0, 2048),
      cause,
      endpoint,
    })
  }
}

function describeNetworkError(err: unknown): string {
  if (err instanceof Error) {
    const c = (err as { cause?: unknown }).cause
    if (c instanceof Error) {
      const code = (c as { code?: unknown }).code
      return `${err.message} (${typeof code === 'string' ? `${code}: ` : ''}${c.message})`
    }
    return err.message
  }
  return String(err)
}

function checkNonNegative(name: string, v: number): void {
  if (typeof v !== 'number' || Number.isNaN(v) || v < 0) {
    throw new WorkerBindingsError('INVALID_OPTION', `${name} must be a number >= 0, got ${v}`, { value: v })
  }
}
