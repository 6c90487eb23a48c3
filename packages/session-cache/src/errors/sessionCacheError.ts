/**
 * Error codes raised by `@kvc/session-cache`. Every refused call leaves the cache, the tree, the
 * KV pool and the request unchanged (the check runs before any state change), except
 * `OUT_OF_MEMORY`, which is raised after the cache evicted what it could (evicted KV was
 * evictable cache, so nothing owned by a request or a held session is lost).
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | a constructor or call option is out of range (pool size, page size, histogram buckets, `idleMs`...) |
 * | `INVALID_REQUEST` | a malformed request or step: bad `rid` or token ids, a prefill past the prompt, a decode before the prompt is prefilled |
 * | `UNKNOWN_REQUEST` | a request this cache did not create, or one that was never admitted by `matchPrefix` |
 * | `DUPLICATE_REQUEST` | `matchPrefix` admits a request whose `rid` is already in flight |
 * | `REQUEST_FINISHED` | any call on a request that already finished or was aborted (finishing twice) |
 * | `UNKNOWN_SESSION` | a session id that was never opened (request, release) |
 * | `SESSION_EXISTS` | `openSession` for a session that is open |
 * | `SESSION_RELEASED` | a request for, or a second release of, a session that was released or evicted (releasing twice) |
 * | `SESSION_BUSY` | a second in-flight request for one session, or releasing a session while its request runs |
 * | `PREFIX_MISMATCH` | a session request whose tokens do not strictly extend the session's committed tokens (sessions are append-only) |
 * | `NAMESPACE_MISMATCH` | a session request with an `extraKey` other than its session's |
 * | `OUT_OF_MEMORY` | the KV pool cannot hold a prefill or decode even after evicting the tree and idle sessions |
 *
 * @example
 * ```ts
 * import { SessionCacheErrorCode } from '@kvc/session-cache'
 * try {
 *   sc.matchPrefix(req)
 * } catch (err) {
 *   if (err instanceof SessionCacheError && err.code === SessionCacheErrorCode.SessionBusy) requeue(req)
 * }
 * ```
 */
export const SessionCacheErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  InvalidRequest: 'INVALID_REQUEST',
  UnknownRequest: 'UNKNOWN_REQUEST',
  DuplicateRequest: 'DUPLICATE_REQUEST',
  RequestFinished: 'REQUEST_FINISHED',
  UnknownSession: 'UNKNOWN_SESSION',
  SessionExists: 'SESSION_EXISTS',
  SessionReleased: 'SESSION_RELEASED',
  SessionBusy: 'SESSION_BUSY',
  PrefixMismatch: 'PREFIX_MISMATCH',
  NamespaceMismatch: 'NAMESPACE_MISMATCH',
  OutOfMemory: 'OUT_OF_MEMORY',
} as const

/**
 * One of the string codes of {@link SessionCacheErrorCode}.
 *
 * @example
 * ```ts
 * import { SessionCacheErrorCode } from '@kvc/session-cache'
 * try {
 *   sc.matchPrefix(req)
 * } catch (err) {
 *   if (err instanceof SessionCacheError && err.code === SessionCacheErrorCode.SessionBusy) requeue(req)
 * }
 * ```
 */
export type SessionCacheErrorCode = (typeof SessionCacheErrorCode)[keyof typeof SessionCacheErrorCode]

/**
 * The only error type thrown by `@kvc/session-cache` for misuse. `code` says what went wrong and
 * `value` carries the offending value (a session id, a request id, a length...).
 *
 * @example
 * ```ts
 * import { SessionCache, SessionCacheError } from '@kvc/session-cache'
 * const sc = new SessionCache({ poolSize: 1024 })
 * try {
 *   sc.releaseSession('never-opened')
 * } catch (err) {
 *   if (err instanceof SessionCacheError && err.code === 'UNKNOWN_SESSION') console.log(err.value)
 * }
 * ```
 */
export class SessionCacheError extends Error {
  override readonly name = 'SessionCacheError'
  /** Machine-readable reason. */
  readonly code: SessionCacheErrorCode
  /** The offending value (session id, request id, length, option value...). */
  readonly value: unknown

  constructor(code: SessionCacheErrorCode, message: string, value?: unknown) {
    super(message)
    this.code = code
    this.value = value
  }
}
