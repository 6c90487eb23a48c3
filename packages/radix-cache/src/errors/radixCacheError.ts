/**
 * Error codes raised by `@kvc/radix-cache`. Every refused operation leaves the cache unchanged.
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | a constructor or call option is out of range (for example `pageSize <= 0`) |
 * | `INVALID_TOKEN` | a token id is not an integer in `[0, 2^32)` |
 * | `VALUES_LENGTH_MISMATCH` | `values.length` differs from `tokens.length` |
 * | `VALUES_REQUIRED` | a value-tracking cache got an insert without values |
 * | `VALUES_NOT_TRACKED` | a length-only cache (`trackValues: false`) got values |
 * | `UNKNOWN_NODE` | a node handle does not belong to this cache or was evicted |
 * | `LOCK_UNDERFLOW` | `decLockRef` on a node whose `lockRef` is already 0 |
 * | `IDLE_LOCK_MISMATCH` | `markLockIdle` on a node with no unmarked lock, `unmarkLockIdle` on one with no mark, or `decLockRef` on one whose locks are all marked idle |
 * | `RESET_WHILE_LOCKED` | `reset()` while some node is locked |
 * | `OUT_OF_MEMORY` | the page allocator cannot satisfy an allocation |
 * | `DOUBLE_FREE` | a page handed to `free` is already free |
 * | `INVALID_INDEX` | a KV slot index outside the allocator's pool |
 * | `NO_HOST_TIER` | a host-tier call (`loadBack`, `protectHost`, `releaseHost`, `evictHost`) on a cache without `hostTier` |
 * | `HOST_OUT_OF_MEMORY` | `protectHost` cannot fit the path on the host tier, even after evicting every unprotected host page |
 * | `HOST_REF_UNDERFLOW` | `releaseHost` on a node whose host reference count is already 0 |
 */
export const RadixCacheErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  InvalidToken: 'INVALID_TOKEN',
  ValuesLengthMismatch: 'VALUES_LENGTH_MISMATCH',
  ValuesRequired: 'VALUES_REQUIRED',
  ValuesNotTracked: 'VALUES_NOT_TRACKED',
  UnknownNode: 'UNKNOWN_NODE',
  LockUnderflow: 'LOCK_UNDERFLOW',
  IdleLockMismatch: 'IDLE_LOCK_MISMATCH',
  ResetWhileLocked: 'RESET_WHILE_LOCKED',
  OutOfMemory: 'OUT_OF_MEMORY',
  DoubleFree: 'DOUBLE_FREE',
  InvalidIndex: 'INVALID_INDEX',
  NoHostTier: 'NO_HOST_TIER',
  HostOutOfMemory: 'HOST_OUT_OF_MEMORY',
  HostRefUnderflow: 'HOST_REF_UNDERFLOW',
} as const

/** One of the string codes of {@link RadixCacheErrorCode}. */
export type RadixCacheErrorCode = (typeof RadixCacheErrorCode)[keyof typeof RadixCacheErrorCode]

/**
 * The only error type thrown by `@kvc/radix-cache` for misuse. `code` says what went wrong and
 * `value` carries the offending value (a token, a length, a node handle...).
 *
 * @example
 * ```ts
 * import { RadixCache, RadixCacheError } from '@kvc/radix-cache'
 * const cache = new RadixCache({ pageSize: 4, trackValues: false })
 * try {
 *   cache.decLockRef(cache.insert([1, 2, 3, 4]).lastNode)
 * } catch (err) {
 *   if (err instanceof RadixCacheError && err.code === 'LOCK_UNDERFLOW') console.log(err.message)
 * }
 * ```
 */
export class RadixCacheError extends Error {
  override readonly name = 'RadixCacheError'
  /** Machine-readable reason. */
  readonly code: RadixCacheErrorCode
  /** The offending value (token id, length, handle, option value...). */
  readonly value: unknown

  constructor(code: RadixCacheErrorCode, message: string, value?: unknown) {
    super(message)
    this.code = code
    this.value = value
  }
}
