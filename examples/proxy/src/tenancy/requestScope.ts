/** The worker field that carries the cache salt: SGLang and vLLM take `cache_salt`; older SGLang `extra_key`. */
export type CacheSaltField = 'cache_salt' | 'extra_key'

/**
 * What a request may see and where its KV lives, as the transports need it: the namespace sent
 * to the workers, and whether the answer shows routing and cache details.
 */
export interface RequestScope {
  /**
   * Show where the turn ran and what was cached (`x-kvc-path`, `x-kvc-worker`, `x-kvc-prefill`,
   * `x-kvc-migrated-from`, the `kvc` object's routing and cache fields,
   * `usage.prompt_tokens_details`). Without it a client cannot tell a cached prefix from an
   * uncached one through the answer.
   */
  readonly exposeCacheInfo: boolean
  /** The cache salt sent to P and D (`undefined`: none, the shared namespace). */
  readonly cacheSalt: string | undefined
  readonly cacheSaltField: CacheSaltField
}

/** Everything shown, no salt: a proxy without tenants. */
export const OPEN_SCOPE: RequestScope = Object.freeze({
  exposeCacheInfo: true,
  cacheSalt: undefined,
  cacheSaltField: 'cache_salt',
})

/** The worker body fields of the scope's salt (`{}` without one). */
export function saltFields(scope: RequestScope): Record<string, string> {
  return scope.cacheSalt === undefined ? {} : { [scope.cacheSaltField]: scope.cacheSalt }
}

/** Headers a tenant without `exposeCacheInfo` still gets: its own session and turn ids. */
const ALWAYS_SHOWN = new Set(['x-kvc-session', 'x-kvc-turn'])

/** The `x-kvc-*` headers the scope may see. */
export function visibleHeaders(headers: Record<string, string>, scope: RequestScope): Record<string, string> {
  if (scope.exposeCacheInfo) return headers
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(headers)) if (ALWAYS_SHOWN.has(k)) out[k] = v
  return out
}

/** Fields of the `kvc` response object a tenant without `exposeCacheInfo` still gets. */
const KVC_ALWAYS_SHOWN = new Set(['session_id', 'turn_id', 'output_ids'])

/** The `kvc` object the scope may see: without `exposeCacheInfo`, its session, turn and output ids only. */
export function visibleKvc<T extends object>(kvc: T, scope: RequestScope): Partial<T> {
  if (scope.exposeCacheInfo) return kvc
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(kvc)) if (KVC_ALWAYS_SHOWN.has(k)) out[k] = v
  return out as Partial<T>
}

/**
 * A worker's `usage` as the scope may see it: without `exposeCacheInfo`, no
 * `prompt_tokens_details` (its `cached_tokens`, and even its presence, tell a cached prefix).
 */
export function visibleUsage<U>(usage: U, scope: RequestScope): U {
  if (scope.exposeCacheInfo || usage === null || typeof usage !== 'object') return usage
  if (!('prompt_tokens_details' in usage)) return usage
  const { prompt_tokens_details: _, ...rest } = usage as Record<string, unknown>
  return rest as U
}
