/**
 * Retry policy: which failures are retried, and how long to wait in between (the delay itself is
 * `@kvc/kvc-router`'s `backoffDelayMs`, the one backoff formula of kvc).
 *
 * @module
 */
import type { BackoffJitter, BackoffPolicy } from '@kvc/kvc-router'

/**
 * Settings of the exponential backoff between retries.
 *
 * @example
 * ```ts
 * import { SglangClient, type RetryPolicy } from '@kvc/worker-bindings'
 * const retry: RetryPolicy = { baseDelayMs: 100, maxDelayMs: 2_000, jitter: 'full' }
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:30000', retry })
 * ```
 */
export interface RetryPolicy extends Partial<BackoffPolicy> {
  /** First delay in ms (default 500). Attempt `n` (from 0) waits `min(base · 2^n, max)` before jitter. */
  readonly baseDelayMs?: number
  /** Largest delay in ms (default 8,000). */
  readonly maxDelayMs?: number
  /**
   * `'subtractive'` (default, openai-node): the delay times `1 − U·0.25`; `'full'`: `U ·` delay
   * (AWS "full jitter", what the kvc admission RPC uses); `'none'`. The delay is
   * `@kvc/kvc-router`'s `backoffDelayMs` over this policy.
   */
  readonly jitter?: BackoffJitter
  /**
   * A server's `retry-after` / `retry-after-ms` is honoured when it is at most this many ms
   * (default 60,000); a longer one is not waited for and the error is thrown instead.
   */
  readonly maxRetryAfterMs?: number
}

/**
 * {@link RetryPolicy} with every field set.
 *
 * @example
 * ```ts
 * import { DEFAULT_RETRY_POLICY, type ResolvedRetryPolicy } from '@kvc/worker-bindings'
 * const p: ResolvedRetryPolicy = { ...DEFAULT_RETRY_POLICY, maxDelayMs: 2_000 }
 * ```
 */
export type ResolvedRetryPolicy = Required<RetryPolicy>

/**
 * The default policy: `min(0.5 s · 2^n, 8 s) × (1 − U·0.25)`, `retry-after` honoured up to 60 s.
 *
 * @example
 * ```ts
 * import { DEFAULT_RETRY_POLICY } from '@kvc/worker-bindings'
 * DEFAULT_RETRY_POLICY.baseDelayMs // 500
 * ```
 */
export const DEFAULT_RETRY_POLICY: ResolvedRetryPolicy = Object.freeze({
  baseDelayMs: 500,
  maxDelayMs: 8_000,
  jitter: 'subtractive',
  maxRetryAfterMs: 60_000,
})

/**
 * Statuses retried on idempotent calls: 408, 409, 429 and every 5xx.
 *
 * @example
 * ```ts
 * import { isRetryableStatus } from '@kvc/worker-bindings'
 * isRetryableStatus(503) // true
 * isRetryableStatus(400) // false
 * ```
 */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500
}

/**
 * Server-requested delay from `retry-after-ms` (milliseconds), or `retry-after` (seconds or an
 * HTTP date), in ms; `undefined` when absent or unparseable.
 *
 * @example
 * ```ts
 * import { parseRetryAfter } from '@kvc/worker-bindings'
 * parseRetryAfter({ 'retry-after': '2' }) // 2000
 * parseRetryAfter({ 'retry-after-ms': '150' }) // 150
 * ```
 */
export function parseRetryAfter(
  headers: Readonly<Record<string, string>>,
  now: () => number = Date.now,
): number | undefined {
  const ms = headers['retry-after-ms']
  if (ms !== undefined) {
    const v = Number.parseFloat(ms)
    if (Number.isFinite(v) && v >= 0) return v
  }
  const ra = headers['retry-after']
  if (ra === undefined) return undefined
  const trimmed = ra.trim()
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Number.parseFloat(trimmed) * 1000
  const date = Date.parse(trimmed)
  if (Number.isNaN(date)) return undefined
  return Math.max(0, date - now())
}
