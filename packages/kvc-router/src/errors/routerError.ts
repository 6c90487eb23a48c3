/**
 * Error codes raised by `@kvc/kvc-router`. Every refused call leaves the router, the residency
 * index and the cluster view unchanged.
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | a constructor or call option is out of range (for example `tauReject < 1`) |
 * | `INVALID_LENGTH` | a token or block count is negative, fractional or not finite |
 * | `INVALID_MESSAGE` | a wire message (`AdmitRequest`, `AdmitResponse`, outcome, KV event) is malformed |
 * | `INVALID_STATE` | a D worker's reported state is inconsistent (for example `usedTokens > capacityTokens`) |
 * | `UNKNOWN_WORKER` | a worker id was never added (or was removed) |
 * | `DUPLICATE_WORKER` | `addWorker` with an id that already exists |
 * | `WRONG_ROLE` | a prefill worker used where a decode worker is needed, or the reverse |
 * | `EVENT_OUT_OF_ORDER` | a KV event id not greater than the worker's last applied id |
 * | `UNEXPECTED_OUTCOME` | a dispatch outcome that does not answer the pending action |
 * | `TURN_FINISHED` | `next()` on a turn that already ended (`done` or `fail`) |
 * | `WAIT_EXHAUSTED` | a turn waited its whole SLO-class wait budget without a D taking it (the cause is named) |
 * | `ATTEMPTS_EXHAUSTED` | a turn used its whole attempt budget (admission RPCs and seeds) or its retry budget for failed sends (`maxSendFailures`) without completing |
 * | `TOO_LARGE` | a turn whose prompt plus decode reserve is more KV than the largest D worker holds (failed at once, cause `too_large`) |
 *
 * @example
 * ```ts
 * import { RouterErrorCode } from '@kvc/kvc-router'
 * RouterErrorCode.EventOutOfOrder // 'EVENT_OUT_OF_ORDER'
 * ```
 */
export const RouterErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  InvalidLength: 'INVALID_LENGTH',
  InvalidMessage: 'INVALID_MESSAGE',
  InvalidState: 'INVALID_STATE',
  UnknownWorker: 'UNKNOWN_WORKER',
  DuplicateWorker: 'DUPLICATE_WORKER',
  WrongRole: 'WRONG_ROLE',
  EventOutOfOrder: 'EVENT_OUT_OF_ORDER',
  UnexpectedOutcome: 'UNEXPECTED_OUTCOME',
  TurnFinished: 'TURN_FINISHED',
  WaitExhausted: 'WAIT_EXHAUSTED',
  AttemptsExhausted: 'ATTEMPTS_EXHAUSTED',
  TooLarge: 'TOO_LARGE',
} as const

/**
 * One of the string codes of {@link RouterErrorCode}.
 *
 * @example
 * ```ts
 * import type { RouterErrorCode } from '@kvc/kvc-router'
 * const code: RouterErrorCode = 'UNKNOWN_WORKER'
 * ```
 */
export type RouterErrorCode = (typeof RouterErrorCode)[keyof typeof RouterErrorCode]

/**
 * The only error type thrown (or, for failed turns, returned in a `fail` action) by
 * `@kvc/kvc-router`. `code` says what went wrong and `value` carries the offending value: the
 * bad length, the unknown worker id, or for a failed turn an object
 * naming the cause.
 *
 * @example
 * ```ts
 * import { ResidencyIndex, RouterError } from '@kvc/kvc-router'
 * const index = new ResidencyIndex()
 * try {
 *   index.ingest('d9', { type: 'AllBlocksCleared', eventId: 0 })
 * } catch (err) {
 *   if (err instanceof RouterError && err.code === 'UNKNOWN_WORKER') console.log(err.value) // 'd9'
 * }
 * ```
 */
export class RouterError extends Error {
  override readonly name = 'RouterError'
  /** Machine-readable reason. */
  readonly code: RouterErrorCode
  /** The offending value (a length, a worker id, an event id, a failure detail...). */
  readonly value: unknown

  constructor(code: RouterErrorCode, message: string, value?: unknown) {
    super(message)
    this.code = code
    this.value = value
  }
}

/** @internal Throws `INVALID_LENGTH` unless `n` is a finite integer `>= 0`. */
export function checkLength(what: string, n: unknown): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) {
    throw new RouterError('INVALID_LENGTH', `${what} must be a non-negative integer, got ${String(n)}`, n)
  }
  return n
}

/**
 * @internal Throws `INVALID_OPTION` with `message` and `value` unless `ok`. `message` is the whole
 * message: it names the option, what it must be and the value given (`describeValue`), like the
 * `checkOption` of `@kvc/sim` and `@kvc/router-state`.
 */
export function checkOption(ok: boolean, message: string, value: unknown): asserts ok {
  if (!ok) throw new RouterError('INVALID_OPTION', message, value)
}

/** @internal A short, safe rendering of a bad value for an error message. */
export function describeValue(value: unknown): string {
  let s: string
  try {
    s =
      typeof value === 'function'
        ? 'a function'
        : typeof value === 'bigint'
          ? `${value}n`
          : (JSON.stringify(value) ?? String(value))
  } catch {
    s = String(value)
  }
  return s.length > 60 ? `${s.slice(0, 57)}...` : s
}
