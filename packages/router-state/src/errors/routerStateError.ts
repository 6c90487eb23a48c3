/**
 * Error codes raised by `@kvc/router-state`. A refused call changes nothing.
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | an option is out of range (a TTL that is not a positive number, an empty prefix, ...) |
 * | `CONNECT_FAILED` | the first connection to the NATS or Redis server failed |
 * | `CLOSED` | the store was used after `close()` |
 * | `TIMEOUT` | `flush()` could not write everything to the server in time |
 *
 * Lost connections, timeouts and conflicts after the first connection are not errors: the store
 * keeps routing on its last view, reports itself degraded and reconciles (see the README).
 *
 * @example
 * ```ts
 * import { RouterStateErrorCode } from '@kvc/router-state'
 * RouterStateErrorCode.ConnectFailed // 'CONNECT_FAILED'
 * ```
 */
export const RouterStateErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  ConnectFailed: 'CONNECT_FAILED',
  Closed: 'CLOSED',
  Timeout: 'TIMEOUT',
} as const

/**
 * One of the string codes of {@link RouterStateErrorCode}.
 *
 * @example
 * ```ts
 * import type { RouterStateErrorCode } from '@kvc/router-state'
 * const code: RouterStateErrorCode = 'CLOSED'
 * ```
 */
export type RouterStateErrorCode = (typeof RouterStateErrorCode)[keyof typeof RouterStateErrorCode]

/**
 * The only error type thrown by `@kvc/router-state`: `code` says what went wrong and `value`
 * carries the offending value (the bad option, the server address, ...).
 *
 * @example
 * ```ts
 * import { RouterStateError } from '@kvc/router-state'
 * const e = new RouterStateError('INVALID_OPTION', 'bindingTtlMs must be > 0', -1)
 * e.code // 'INVALID_OPTION'
 * ```
 */
export class RouterStateError extends Error {
  readonly code: RouterStateErrorCode
  readonly value: unknown
  constructor(code: RouterStateErrorCode, message: string, value: unknown) {
    super(message)
    this.name = 'RouterStateError'
    this.code = code
    this.value = value
  }
}

/**
 * @internal Throws `INVALID_OPTION` with `message` and `value` unless `ok`. `message` is the whole
 * message (the option, what it must be, the value given), like the `checkOption` of
 * `@kvc/kvc-router` and `@kvc/sim`.
 */
export function checkOption(ok: boolean, message: string, value: unknown): asserts ok {
  if (!ok) throw new RouterStateError('INVALID_OPTION', message, value)
}

/** @internal A short, safe rendering of a bad value for an error message. */
export function describeValue(value: unknown): string {
  let s: string
  try {
    s = typeof value === 'function' ? 'a function' : (JSON.stringify(value) ?? String(value))
  } catch {
    s = String(value)
  }
  return s.length > 60 ? `${s.slice(0, 57)}...` : s
}
