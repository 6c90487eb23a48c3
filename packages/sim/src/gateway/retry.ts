import type { PolicyName } from '../adapters/router.js'

/**
 * How a baseline's router retries a failed request: `maxRetries` more attempts, each routed
 * afresh after `min(initialBackoffMs · multiplier^k, maxBackoffMs) · (1 ± jitter)`.
 *
 * @example
 * ```ts
 * import { SGLANG_GATEWAY_RETRY, type GatewayRetry } from '@kvc/sim'
 * const r: GatewayRetry = { ...SGLANG_GATEWAY_RETRY, maxRetries: 2 }
 * ```
 */
export interface GatewayRetry {
  readonly maxRetries: number
  readonly initialBackoffMs: number
  readonly maxBackoffMs: number
  readonly multiplier: number
  readonly jitter: number
}

/**
 * The SGLang model gateway's retry defaults (`--retry-max-retries 5`, `--retry-initial-backoff-ms
 * 50`, `--retry-max-backoff-ms 30000`, `--retry-backoff-multiplier 1.5`, `--retry-jitter-factor
 * 0.2`; it retries 408, 429, 500, 502, 503 and 504): `docs/design/peers.md#sglang-gateway-retries`.
 *
 * @example
 * ```ts
 * import { SGLANG_GATEWAY_RETRY } from '@kvc/sim'
 * SGLANG_GATEWAY_RETRY.maxRetries // 5
 * ```
 */
export const SGLANG_GATEWAY_RETRY: GatewayRetry = Object.freeze({
  maxRetries: 5,
  initialBackoffMs: 50,
  maxBackoffMs: 30_000,
  multiplier: 1.5,
  jitter: 0.2,
})

/**
 * The retries of a baseline's router: the SGLang gateway's for the SGLang-style policies; none for
 * Dynamo (`--migration-limit` defaults to 0) and llm-d (its scheduler does not retry); `retries`
 * overrides the count.
 */
export function gatewayRetryFor(name: PolicyName, retries: number | undefined): GatewayRetry {
  const none = name === 'dynamo-kv-cost' || name === 'llm-d-precise-prefix'
  const maxRetries = retries ?? (none ? 0 : SGLANG_GATEWAY_RETRY.maxRetries)
  return { ...SGLANG_GATEWAY_RETRY, maxRetries }
}
