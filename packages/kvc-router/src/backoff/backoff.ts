/**
 * How a delay is randomized around its exponential ceiling `min(maxDelayMs, baseDelayMs × 2^n)`:
 * `full` draws it uniformly below the ceiling (AWS's "full jitter": Dispatch's waits, the admission
 * RPC), `subtractive` takes off up to a quarter of it (openai-node's HTTP retries), `none` keeps it.
 *
 * @example
 * ```ts
 * import type { BackoffJitter } from '@kvc/kvc-router'
 * const j: BackoffJitter = 'full'
 * ```
 */
export type BackoffJitter = 'full' | 'subtractive' | 'none'

/**
 * An exponential backoff: attempt `n` (from 0) waits up to `min(maxDelayMs, baseDelayMs × 2^n)`,
 * randomized by `jitter`. The router's parameters (`backoffBaseMs`, `backoffCapMs`, full jitter)
 * and `@kvc/worker-bindings`' `RetryPolicy` are both read as one.
 *
 * @example
 * ```ts
 * import type { BackoffPolicy } from '@kvc/kvc-router'
 * const dispatchWaits: BackoffPolicy = { baseDelayMs: 50, maxDelayMs: 2_000, jitter: 'full' }
 * ```
 */
export interface BackoffPolicy {
  readonly baseDelayMs: number
  readonly maxDelayMs: number
  readonly jitter: BackoffJitter
}

/**
 * The delay before attempt `attempt` (0 for the first retry) of an exponential backoff, in ms:
 * `min(maxDelayMs, baseDelayMs × 2^attempt)` (the exponent stops growing at 30), then `× U` for
 * `full` jitter, `× (1 − U/4)` for `subtractive`, unchanged for `none`, where `U = random()` is
 * drawn once. The one backoff formula of kvc: Dispatch's waits between walks and admission tries,
 * and `@kvc/worker-bindings`' HTTP retries.
 *
 * @example
 * ```ts
 * import { backoffDelayMs } from '@kvc/kvc-router'
 * backoffDelayMs(2, { baseDelayMs: 50, maxDelayMs: 2_000, jitter: 'full' }, () => 0.5) // 100
 * backoffDelayMs(10, { baseDelayMs: 500, maxDelayMs: 8_000, jitter: 'none' }, Math.random) // 8000
 * ```
 */
export function backoffDelayMs(attempt: number, policy: BackoffPolicy, random: () => number): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(attempt, 30))
  switch (policy.jitter) {
    case 'full':
      return ceiling * random()
    case 'none':
      return ceiling
    default:
      return ceiling * (1 - random() * 0.25)
  }
}
