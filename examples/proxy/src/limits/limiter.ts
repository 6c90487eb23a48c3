import { ProxyError } from '../errors.js'
import type { Tenant, TenantLimits } from '../tenancy/tenants.js'
import { TokenBucket } from './tokenBucket.js'

/** Why a request was refused with 429. */
export type LimitCause =
  | 'rate_limit_requests'
  | 'rate_limit_tokens'
  | 'tenant_concurrency'
  | 'global_concurrency'
  | 'session_queue'

/** Options of {@link RequestLimiter}. */
export interface RequestLimiterOptions {
  /** Turns in progress at once over every tenant (`limits.maxConcurrentTurns`); `null`: no cap. */
  readonly maxConcurrentTurns: number | null
  /** Clock of the token buckets, ms (default `performance.now`; tests inject one). */
  readonly now?: () => number
  /** Called for every refusal (metrics). */
  readonly onLimited?: (tenant: string, cause: LimitCause) => void
}

interface TenantState {
  limits: TenantLimits
  requests: TokenBucket | undefined
  tokens: TokenBucket | undefined
  running: number
}

/** A 429 answer: OpenAI's `rate_limit_error` with `retry-after` in whole seconds (at least 1). */
export function rateLimited(
  message: string,
  cause: LimitCause,
  tenant: string,
  retryAfterMs: number,
): ProxyError {
  return new ProxyError(
    'RATE_LIMITED',
    message,
    { cause, tenant, retryAfterS: Math.max(1, Math.ceil(retryAfterMs / 1000)) },
    429,
  )
}

/**
 * Per-tenant rate limits and the concurrency caps, in front of the router: a requests-per-second
 * and a tokens-per-second token bucket per tenant, a cap on each tenant's turns in progress, and a
 * global cap. Every refusal is a `RATE_LIMITED` `ProxyError` (429) whose `retryAfterS` says when to
 * come back; nothing is taken from a bucket that refused.
 *
 * @example
 * ```ts
 * import { RequestLimiter, DEFAULT_TENANT_DEFAULTS } from '@kvc/example-proxy'
 * let t = 0
 * const limiter = new RequestLimiter({ maxConcurrentTurns: 100, now: () => t })
 * const tenant = { id: 'a', limits: { ...DEFAULT_TENANT_DEFAULTS.limits, requestsPerSecond: 1 } }
 * limiter.admitRequest(tenant) // granted
 * try { limiter.admitRequest(tenant) } catch (e) { (e as { status: number }).status } // 429
 * ```
 */
export class RequestLimiter {
  readonly #now: () => number
  readonly #max: number | null
  readonly #onLimited: ((tenant: string, cause: LimitCause) => void) | undefined
  readonly #tenants = new Map<string, TenantState>()
  #running = 0

  constructor(options: RequestLimiterOptions) {
    this.#now = options.now ?? (() => performance.now())
    this.#max = options.maxConcurrentTurns
    this.#onLimited = options.onLimited
  }

  /** Turns in progress over every tenant. */
  get running(): number {
    return this.#running
  }

  /** Turns of a tenant in progress. */
  runningOf(tenantId: string): number {
    return this.#tenants.get(tenantId)?.running ?? 0
  }

  /** Turns in progress of every tenant seen. */
  runningByTenant(): Map<string, number> {
    return new Map([...this.#tenants].map(([id, s]) => [id, s.running]))
  }

  /**
   * Counts one request against the tenant's requests-per-second bucket.
   *
   * @throws ProxyError `RATE_LIMITED` (`rate_limit_requests`).
   */
  admitRequest(tenant: Pick<Tenant, 'id' | 'limits'>): void {
    const s = this.#state(tenant)
    const wait = s.requests?.take(1) ?? 0
    if (wait > 0) {
      this.#onLimited?.(tenant.id, 'rate_limit_requests')
      throw rateLimited(
        `tenant ${tenant.id} is over its rate limit of ${s.limits.requestsPerSecond} requests/s`,
        'rate_limit_requests',
        tenant.id,
        wait,
      )
    }
  }

  /**
   * Takes a turn slot (the tenant's and the global one) until `release` is called (once).
   *
   * @throws ProxyError `RATE_LIMITED` (`tenant_concurrency` or `global_concurrency`, retry after 1 s).
   */
  acquireTurn(tenant: Pick<Tenant, 'id' | 'limits'>): () => void {
    const s = this.#state(tenant)
    const cap = s.limits.maxConcurrentTurns
    if (cap !== null && s.running >= cap) {
      this.#onLimited?.(tenant.id, 'tenant_concurrency')
      throw rateLimited(
        `tenant ${tenant.id} already has ${s.running} turn(s) in progress, its limit`,
        'tenant_concurrency',
        tenant.id,
        1_000,
      )
    }
    if (this.#max !== null && this.#running >= this.#max) {
      this.#onLimited?.(tenant.id, 'global_concurrency')
      throw rateLimited(
        `the proxy already has ${this.#running} turn(s) in progress, its limit (limits.maxConcurrentTurns)`,
        'global_concurrency',
        tenant.id,
        1_000,
      )
    }
    s.running++
    this.#running++
    let released = false
    return () => {
      if (released) return
      released = true
      s.running--
      this.#running--
    }
  }

  /**
   * Takes `tokens` (prompt plus `max_tokens`) from the tenant's tokens-per-second bucket.
   *
   * @throws ProxyError `RATE_LIMITED` (`rate_limit_tokens`).
   */
  chargeTokens(tenant: Pick<Tenant, 'id' | 'limits'>, tokens: number): void {
    const s = this.#state(tenant)
    const wait = s.tokens?.take(tokens) ?? 0
    if (wait > 0) {
      this.#onLimited?.(tenant.id, 'rate_limit_tokens')
      throw rateLimited(
        `tenant ${tenant.id} is over its rate limit of ${s.limits.tokensPerSecond} tokens/s (this request counts ${tokens})`,
        'rate_limit_tokens',
        tenant.id,
        wait,
      )
    }
  }

  /** Gives back tokens charged and not used (output tokens below `max_tokens`). */
  refundTokens(tenant: Pick<Tenant, 'id' | 'limits'>, tokens: number): void {
    if (tokens > 0) this.#state(tenant).tokens?.refund(tokens)
  }

  /** A 429 counted for a tenant elsewhere (a session's queue): for the metric. */
  count(tenantId: string, cause: LimitCause): void {
    this.#onLimited?.(tenantId, cause)
  }

  /**
   * The tenants after a reload: new limits apply at once (buckets keep their tokens, up to a new
   * capacity); removed tenants are dropped once their turns ended.
   */
  update(tenants: readonly Pick<Tenant, 'id' | 'limits'>[]): void {
    const ids = new Set(tenants.map((t) => t.id))
    for (const t of tenants) if (this.#tenants.has(t.id)) this.#state(t)
    for (const [id, s] of this.#tenants) if (!ids.has(id) && s.running === 0) this.#tenants.delete(id)
  }

  #state(tenant: Pick<Tenant, 'id' | 'limits'>): TenantState {
    let s = this.#tenants.get(tenant.id)
    if (s === undefined) {
      s = { limits: tenant.limits, requests: undefined, tokens: undefined, running: 0 }
      this.#tenants.set(tenant.id, s)
      this.#configure(s, tenant.limits, true)
    } else if (s.limits !== tenant.limits) {
      this.#configure(s, tenant.limits, false)
    }
    return s
  }

  #configure(s: TenantState, l: TenantLimits, fresh: boolean): void {
    s.limits = l
    s.requests = this.#bucket(fresh ? undefined : s.requests, l.requestsPerSecond, l.requestBurst)
    s.tokens = this.#bucket(fresh ? undefined : s.tokens, l.tokensPerSecond, l.tokenBurst)
  }

  #bucket(b: TokenBucket | undefined, rate: number | null, burst: number | null): TokenBucket | undefined {
    if (rate === null) return undefined
    const capacity = burst ?? Math.max(1, Math.ceil(rate))
    if (b === undefined) return new TokenBucket({ ratePerSecond: rate, capacity, now: this.#now })
    if (b.ratePerSecond !== rate || b.capacity !== capacity) b.reconfigure(rate, capacity)
    return b
  }
}
