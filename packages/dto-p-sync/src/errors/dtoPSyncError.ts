/**
 * Error codes raised by `@kvc/dto-p-sync`. Every refused call leaves all state unchanged.
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | a constructor or call option is out of range (`pageSize <= 0`, `beta < 0`, a bandwidth of 0...) |
 * | `INVALID_SESSION_ID` | a session id is not a non-empty string |
 * | `INVALID_TOKENS` | token ids are not integers in `[0, 2^32)`, or not an array |
 * | `INVALID_MESSAGE` | a malformed offer, transfer message or reply: bad version or sequence number, a block whose page has the wrong length, a broken parent-hash chain, an offer that does not continue the session's chain |
 * | `HASH_MISMATCH` | a block's hash is not the hash of its tokens chained onto its parent (different hashers on D and P, or corruption) |
 * | `UNKNOWN_SESSION` | a call names a session this side does not track |
 * | `UNKNOWN_RESERVATION` | `complete` / `abort` of a reservation that does not exist (finished, expired, never begun) |
 * | `TIME_WENT_BACKWARDS` | a clock or `advanceTo` moved backwards |
 *
 * @example
 * ```ts
 * import { DtoPSyncError, DtoPSyncErrorCode } from '@kvc/dto-p-sync'
 * const isHashMismatch = (e: unknown) => e instanceof DtoPSyncError && e.code === DtoPSyncErrorCode.HashMismatch
 * ```
 */
export const DtoPSyncErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  InvalidSessionId: 'INVALID_SESSION_ID',
  InvalidTokens: 'INVALID_TOKENS',
  InvalidMessage: 'INVALID_MESSAGE',
  HashMismatch: 'HASH_MISMATCH',
  UnknownSession: 'UNKNOWN_SESSION',
  UnknownReservation: 'UNKNOWN_RESERVATION',
  TimeWentBackwards: 'TIME_WENT_BACKWARDS',
} as const

/**
 * One of the string codes of {@link DtoPSyncErrorCode}.
 *
 * @example
 * ```ts
 * import type { DtoPSyncErrorCode } from '@kvc/dto-p-sync'
 * const code: DtoPSyncErrorCode = 'UNKNOWN_RESERVATION'
 * ```
 */
export type DtoPSyncErrorCode = (typeof DtoPSyncErrorCode)[keyof typeof DtoPSyncErrorCode]

/**
 * The only error type thrown by `@kvc/dto-p-sync` for misuse or bad input. `code` says what went
 * wrong and `value` carries the offending value. Network-level outcomes (a lost transfer, an
 * unknown parent on P, a stale version) are never thrown: they come back as replies and metrics.
 *
 * @example
 * ```ts
 * import { DtoPSyncError, OfferBuilder } from '@kvc/dto-p-sync'
 * const offers = new OfferBuilder({ pageSize: 4 })
 * try {
 *   offers.commitTurn('', [1, 2, 3])
 * } catch (err) {
 *   if (err instanceof DtoPSyncError && err.code === 'INVALID_SESSION_ID') console.log(err.message)
 * }
 * ```
 */
export class DtoPSyncError extends Error {
  override readonly name = 'DtoPSyncError'
  /** Machine-readable reason. */
  readonly code: DtoPSyncErrorCode
  /** The offending value (an option, a token, a session id, a message field...). */
  readonly value: unknown

  constructor(code: DtoPSyncErrorCode, message: string, value?: unknown) {
    super(message)
    this.code = code
    this.value = value
  }
}

/** @internal */
export function invalidOption(message: string, value: unknown): DtoPSyncError {
  return new DtoPSyncError(DtoPSyncErrorCode.InvalidOption, message, value)
}

/** @internal */
export function invalidMessage(message: string, value: unknown): DtoPSyncError {
  return new DtoPSyncError(DtoPSyncErrorCode.InvalidMessage, message, value)
}
