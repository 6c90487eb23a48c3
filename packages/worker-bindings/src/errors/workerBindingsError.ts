/**
 * Error codes raised by `@kvc/worker-bindings`.
 *
 * | code | raised when | retried (idempotent calls) |
 * |---|---|---|
 * | `INVALID_OPTION` | a constructor or call option is out of range (bad base URL, negative timeout...) | no |
 * | `INVALID_ARGUMENT` | a request body is refused before anything is sent (for example neither `text` nor `input_ids`) | no |
 * | `HTTP_STATUS` | the server answered with a non-2xx status ({@link WorkerApiError}) | 408, 409, 429, 5xx |
 * | `CONNECTION` | the connection failed (refused, reset, DNS); `cause` is the network error | yes |
 * | `TIMEOUT` | the call (or, for a stream, the wait for the next chunk) took longer than its timeout | yes |
 * | `ENDPOINT_UNHEALTHY` | the client's `EndpointHealthTracker` refused the call without sending it: the endpoint is unhealthy and in its cool-down (or its one trial call is in flight); `value` is its `EndpointHealth` | no |
 * | `ABORTED` | the caller's `AbortSignal` fired | never |
 * | `BAD_RESPONSE` | a 2xx answer whose body is not what the endpoint documents (not JSON, wrong shape) | no |
 * | `SSE_PARSE` | a malformed event stream: invalid UTF-8, an over-long line, a `data:` payload that is not JSON | no |
 * | `SSE_TRUNCATED` | an event stream that ended mid-event or without its `[DONE]` terminator | no |
 * | `STREAM_ERROR` | the server reported an error inside a stream (`data: {"error": ...}`) | no |
 * | `PD_DISPATCH` | one side of a prefill/decode dual dispatch failed; `cause` is that side's error | no |
 * | `KV_EVENT_DECODE` | a KV-event message is not a valid event batch (bad frame count, bad msgpack, bad shape) | no |
 * | `REPLAY_FAILED` | a KV-event replay request timed out or returned an unusable answer | no |
 * | `BODY_TOO_LARGE` | a request body read by `readBody` (a server of yours, the admission handler) was above its limit ({@link BodyTooLargeError}) | no |
 * | `CLOSED` | a call on a subscriber or publisher that was closed | no |
 *
 * @example
 * ```ts
 * import { WorkerBindingsErrorCode } from '@kvc/worker-bindings'
 * const isTransient = (code: string) => code === WorkerBindingsErrorCode.Timeout || code === WorkerBindingsErrorCode.Connection
 * ```
 */
export const WorkerBindingsErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  InvalidArgument: 'INVALID_ARGUMENT',
  HttpStatus: 'HTTP_STATUS',
  Connection: 'CONNECTION',
  Timeout: 'TIMEOUT',
  EndpointUnhealthy: 'ENDPOINT_UNHEALTHY',
  Aborted: 'ABORTED',
  BadResponse: 'BAD_RESPONSE',
  SseParse: 'SSE_PARSE',
  SseTruncated: 'SSE_TRUNCATED',
  StreamError: 'STREAM_ERROR',
  PdDispatch: 'PD_DISPATCH',
  KvEventDecode: 'KV_EVENT_DECODE',
  ReplayFailed: 'REPLAY_FAILED',
  BodyTooLarge: 'BODY_TOO_LARGE',
  Closed: 'CLOSED',
} as const

/** One of the string codes of {@link WorkerBindingsErrorCode}. */
export type WorkerBindingsErrorCode = (typeof WorkerBindingsErrorCode)[keyof typeof WorkerBindingsErrorCode]

/**
 * The error type of `@kvc/worker-bindings`. `code` says what went wrong, `value` carries the
 * offending value (an option, a frame, an event...), `cause` the underlying error (a network
 * error, a JSON syntax error...), and `endpoint` the base URL or socket address involved.
 * HTTP status errors are the subclass {@link WorkerApiError}.
 *
 * @example
 * ```ts
 * import { SglangClient, WorkerBindingsError } from '@kvc/worker-bindings'
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:1', maxRetries: 0 })
 * try {
 *   await client.getLoad()
 * } catch (err) {
 *   if (err instanceof WorkerBindingsError && err.code === 'CONNECTION') console.log('worker is down', err.cause)
 * }
 * ```
 */
export class WorkerBindingsError extends Error {
  override readonly name: string = 'WorkerBindingsError'
  /** Machine-readable reason. */
  readonly code: WorkerBindingsErrorCode
  /** The offending value, if any. */
  readonly value: unknown
  /** Base URL or socket endpoint the failed call went to, if any. */
  readonly endpoint: string | undefined

  constructor(
    code: WorkerBindingsErrorCode,
    message: string,
    options: {
      readonly value?: unknown
      readonly cause?: unknown
      readonly endpoint?: string | undefined
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
    this.value = options.value
    this.endpoint = options.endpoint
  }
}

/**
 * Longest body excerpt kept on a {@link WorkerApiError} (characters).
 *
 * @example
 * ```ts
 * import { BODY_EXCERPT_CHARS } from '@kvc/worker-bindings'
 * BODY_EXCERPT_CHARS // 2048
 * ```
 */
export const BODY_EXCERPT_CHARS = 2048

/**
 * A non-2xx HTTP answer. Carries the `status`, the response `headers`, a `body` excerpt (at most
 * {@link BODY_EXCERPT_CHARS} characters), the decoded JSON `error` body when there was one, the
 * server's error message as SGLang spells it in any of its shapes (`{"error":{"message"}}`,
 * `{"object":"error","message"}`, FastAPI's `{"detail"}`), and `retryAfterMs` parsed from
 * `retry-after-ms` / `retry-after`.
 *
 * @example
 * ```ts
 * import { SglangClient, WorkerApiError } from '@kvc/worker-bindings'
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:30000' })
 * try {
 *   await client.generate({ text: 'hi', session_params: { id: 'nope' } })
 * } catch (err) {
 *   if (err instanceof WorkerApiError && err.status === 400) console.log(err.serverMessage)
 * }
 * ```
 */
export class WorkerApiError extends WorkerBindingsError {
  override readonly name: string = 'WorkerApiError'
  /** HTTP status code. */
  readonly status: number
  /** Response headers (lower-case names). */
  readonly headers: Readonly<Record<string, string>>
  /** The start of the response body (text). */
  readonly body: string
  /** The decoded JSON body, when the body was JSON. */
  readonly json: unknown
  /** The server's error message, when the body carried one in a known shape. */
  readonly serverMessage: string | undefined
  /** Server-requested delay before a retry (`retry-after-ms` or `retry-after`), in ms. */
  readonly retryAfterMs: number | undefined
  /** HTTP method and path of the failed call. */
  readonly request: string

  constructor(init: {
    readonly status: number
    readonly headers: Readonly<Record<string, string>>
    readonly body: string
    readonly request: string
    readonly endpoint?: string | undefined
    readonly retryAfterMs?: number | undefined
  }) {
    const json = tryParseJson(init.body)
    const serverMessage = extractServerMessage(json)
    const excerpt =
      init.body.length > BODY_EXCERPT_CHARS ? `${init.body.slice(0, BODY_EXCERPT_CHARS)}…` : init.body
    super(
      WorkerBindingsErrorCode.HttpStatus,
      `${init.request} → HTTP ${init.status}${serverMessage ? `: ${serverMessage}` : excerpt ? `: ${excerpt.slice(0, 200)}` : ''}`,
      { value: init.status, endpoint: init.endpoint },
    )
    this.status = init.status
    this.headers = init.headers
    this.body = excerpt
    this.json = json
    this.serverMessage = serverMessage
    this.retryAfterMs = init.retryAfterMs
    this.request = init.request
  }
}

function tryParseJson(text: string): unknown {
  if (text.length === 0) return undefined
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/**
 * The error message of a JSON error body in any of the shapes SGLang, its router and Mooncake
 * use: `{"error":{"message"}}` (SGLang generate / sessions, OpenAI), `{"object":"error","message"}`
 * (SGLang's request-validation handler), `{"detail": str | [{msg}]}` (FastAPI default),
 * `{"error_message"}` (Mooncake master), `{"error": str}`, `{"message"}`.
 *
 * @example
 * ```ts
 * import { extractServerMessage } from '@kvc/worker-bindings'
 * extractServerMessage({ error: { message: 'bad' } }) // 'bad'
 * extractServerMessage({ detail: 'Not Found' }) // 'Not Found'
 * ```
 */
export function extractServerMessage(json: unknown): string | undefined {
  if (typeof json !== 'object' || json === null) return typeof json === 'string' ? json : undefined
  const o = json as Record<string, unknown>
  const err = o.error
  if (
    typeof err === 'object' &&
    err !== null &&
    typeof (err as Record<string, unknown>).message === 'string'
  ) {
    return (err as Record<string, string>).message
  }
  if (typeof err === 'string') return err
  if (typeof o.message === 'string') return o.message
  if (typeof o.error_message === 'string') return o.error_message
  const detail = o.detail
  if (typeof detail === 'string') return detail
  if (Array.isArray(detail)) {
    const msgs = detail
      .map((d) => (typeof d === 'object' && d !== null ? (d as Record<string, unknown>).msg : undefined))
      .filter((m): m is string => typeof m === 'string')
    if (msgs.length > 0) return msgs.join('; ')
  }
  return undefined
}
