/**
 * The proxy's one error class: a string `code`, the offending `value`, and for answers to
 * clients the HTTP status it maps to.
 */
export type ProxyErrorCode =
  /** A configuration file or flag is invalid (the message names the key). */
  | 'INVALID_CONFIG'
  /** A worker could not be reached at startup and its capacity is not configured. */
  | 'WORKER_UNREACHABLE'
  /** A client request is malformed (400), too large (413), of the wrong type (415)... */
  | 'BAD_REQUEST'
  /** The turn failed: every D was paused, rejecting, down... (`value.cause` names why). */
  | 'TURN_FAILED'
  /** Too many turns of one session are queued (429). */
  | 'SESSION_BUSY'
  /** The proxy is shutting down (503). */
  | 'SHUTTING_DOWN'
  /** The shared state store (`stateStore.url`: NATS or Redis) could not be reached at startup. */
  | 'STATE_STORE_UNREACHABLE'
  /** The request carries no API key, or one no tenant has (401). */
  | 'INVALID_API_KEY'
  /** The key is valid but its tenant may not use this route (403: `/metrics`, `/ready` details). */
  | 'FORBIDDEN'
  /** A tenant's rate limit or a concurrency cap is reached (429 with `retry-after`; `value.cause` names it). */
  | 'RATE_LIMITED'
  /** The client did not send its request body within `deadlines.bodyReadMs` (408). */
  | 'REQUEST_TIMEOUT'
  /** The turn did not end within its deadline (`deadlines.turnMs`; 504). */
  | 'DEADLINE_EXCEEDED'
  /** A programming error: a bad argument to one of the proxy's own classes (nothing changed). */
  | 'INVALID_ARGUMENT'

/** An error of the proxy, with a string code and the value that caused it. */
export class ProxyError extends Error {
  override readonly name = 'ProxyError'
  readonly code: ProxyErrorCode
  readonly value: unknown
  /** HTTP status for client-facing errors. */
  readonly status: number

  constructor(code: ProxyErrorCode, message: string, value?: unknown, status = 500) {
    super(message)
    this.code = code
    this.value = value
    this.status = status
  }
}

/** A 4xx answer to a client request (nothing changed in the router). */
export function badRequest(message: string, status = 400, param: string | null = null): ProxyError {
  return new ProxyError('BAD_REQUEST', message, { param }, status)
}
