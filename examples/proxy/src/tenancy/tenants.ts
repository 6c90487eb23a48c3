import { ProxyError } from '../errors.js'
import { hashApiKey, isKeyHash } from './keys.js'

/**
 * Whose prefix cache a tenant's requests may share (the namespace, or cache salt, the proxy sends
 * to the workers and mixes into its block hashes):
 *
 * - `isolated`: the tenant's own (default for configured tenants);
 * - `shared`: the common namespace, shared by every `shared` tenant (no salt);
 * - `group`: shared with the tenants of the same group only.
 */
export type CacheScope =
  | { readonly kind: 'isolated' }
  | { readonly kind: 'shared' }
  | { readonly kind: 'group'; readonly group: string }

/** A tenant's limits; `null` is no limit. */
export interface TenantLimits {
  /** Requests per second (a token bucket of `requestBurst`). */
  readonly requestsPerSecond: number | null
  /** Largest burst of requests (default: one second's worth, at least 1). */
  readonly requestBurst: number | null
  /** Prompt plus `max_tokens` tokens per second (unused output tokens are given back). */
  readonly tokensPerSecond: number | null
  /** Largest burst of tokens (default: one second's worth). */
  readonly tokenBurst: number | null
  /** Turns of the tenant in progress at once (reading, queued, routed or streaming). */
  readonly maxConcurrentTurns: number | null
}

/** A tenant as configured, keys hashed (the proxy never keeps a key in clear). */
export interface Tenant {
  /** 1-64 characters of `[A-Za-z0-9_.-]`: labels metrics, prefixes session ids (`<id>/<session>`). */
  readonly id: string
  /** SHA-256 digests (hex) of the tenant's API keys. */
  readonly keyHashes: readonly string[]
  readonly cache: CacheScope
  /**
   * Whether responses show where the turn ran and what was cached: the `x-kvc-path`,
   * `x-kvc-worker`, `x-kvc-prefill`, `x-kvc-migrated-from` headers, the `kvc` object's routing
   * and cache fields, and `usage.prompt_tokens_details`. Off by default for configured tenants.
   */
  readonly exposeCacheInfo: boolean
  /** May read `/metrics` and the details of `/ready` when those require a key. */
  readonly admin: boolean
  readonly limits: TenantLimits
  /** This tenant's turn deadline (default: `deadlines.turnMs`). */
  readonly turnDeadlineMs: number | undefined
}

/** The defaults of every configured tenant (`tenantDefaults`). */
export interface TenantDefaults {
  readonly cache: CacheScope
  readonly exposeCacheInfo: boolean
  readonly limits: TenantLimits
}

/** A tenant as written in a configuration or tenants file. */
export interface TenantInput {
  readonly id?: string
  /** API keys in clear (hashed when read; at least 16 printable characters without spaces). */
  readonly keys?: readonly string[]
  /** API keys given as their SHA-256 digests (64 hex digits), so the file holds no key. */
  readonly keySha256?: readonly string[]
  /** Name of an environment variable holding keys, separated by commas or white space. */
  readonly keysEnv?: string
  /** `isolated` (default), `shared`, or `{ "group": "<name>" }`. */
  readonly cache?: 'isolated' | 'shared' | { readonly group: string }
  readonly exposeCacheInfo?: boolean
  readonly admin?: boolean
  readonly limits?: Partial<TenantLimits>
  readonly turnDeadlineMs?: number
}

/** `tenantDefaults` as written. */
export interface TenantDefaultsInput {
  readonly cache?: TenantInput['cache']
  readonly exposeCacheInfo?: boolean
  readonly limits?: Partial<TenantLimits>
}

/** No limit at all. */
export const NO_LIMITS: TenantLimits = Object.freeze({
  requestsPerSecond: null,
  requestBurst: null,
  tokensPerSecond: null,
  tokenBurst: null,
  maxConcurrentTurns: null,
})

/** Defaults of `tenantDefaults`. */
export const DEFAULT_TENANT_DEFAULTS: TenantDefaults = Object.freeze({
  cache: { kind: 'isolated' } as CacheScope,
  exposeCacheInfo: false,
  limits: NO_LIMITS,
})

/** The one tenant of a proxy without keys: shared cache, sees everything, may read every route. */
export function implicitTenant(defaults: TenantDefaults): Tenant {
  return {
    id: 'default',
    keyHashes: [],
    cache: { kind: 'shared' },
    exposeCacheInfo: true,
    admin: true,
    limits: defaults.limits,
    turnDeadlineMs: undefined,
  }
}

const ID = /^[A-Za-z0-9_.-]{1,64}$/
const MIN_KEY = 16
const MAX_KEY = 512

function fail(key: string, message: string, value: unknown): never {
  throw new ProxyError('INVALID_CONFIG', `config ${key}: ${message}`, value)
}

function obj(key: string, v: unknown): Record<string, unknown> {
  if (v === undefined) return {}
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(key, 'must be an object', v)
  return v as Record<string, unknown>
}

function checkKeys(key: string, o: object, allowed: readonly string[]): void {
  for (const k of Object.keys(o))
    if (!allowed.includes(k)) fail(`${key}.${k}`, `unknown key (expected one of ${allowed.join(', ')})`, k)
}

function bool(key: string, v: unknown, dflt: boolean): boolean {
  if (v === undefined) return dflt
  if (typeof v !== 'boolean') fail(key, 'must be true or false', v)
  return v
}

function cacheOf(key: string, v: unknown, dflt: CacheScope): CacheScope {
  if (v === undefined) return dflt
  if (v === 'isolated' || v === 'shared') return { kind: v }
  const o = obj(key, v)
  checkKeys(key, o, ['group'])
  if (typeof o.group !== 'string' || !ID.test(o.group))
    fail(`${key}.group`, "must be 1-64 characters of [A-Za-z0-9_.-] (or use 'isolated' / 'shared')", o.group)
  return { kind: 'group', group: o.group }
}

function limitOf(key: string, v: unknown, dflt: number | null, integer: boolean): number | null {
  if (v === undefined) return dflt
  if (v === null) return null
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v)))
    fail(key, `must be ${integer ? 'an integer' : 'a number'} > 0, or null for no limit`, v)
  return v
}

function limitsOf(key: string, v: unknown, dflt: TenantLimits): TenantLimits {
  const o = obj(key, v)
  checkKeys(key, o, [
    'requestsPerSecond',
    'requestBurst',
    'tokensPerSecond',
    'tokenBurst',
    'maxConcurrentTurns',
  ])
  const limits = {
    requestsPerSecond: limitOf(
      `${key}.requestsPerSecond`,
      o.requestsPerSecond,
      dflt.requestsPerSecond,
      false,
    ),
    requestBurst: limitOf(`${key}.requestBurst`, o.requestBurst, dflt.requestBurst, true),
    tokensPerSecond: limitOf(`${key}.tokensPerSecond`, o.tokensPerSecond, dflt.tokensPerSecond, false),
    tokenBurst: limitOf(`${key}.tokenBurst`, o.tokenBurst, dflt.tokenBurst, true),
    maxConcurrentTurns: limitOf(
      `${key}.maxConcurrentTurns`,
      o.maxConcurrentTurns,
      dflt.maxConcurrentTurns,
      true,
    ),
  }
  return limits
}

/** Resolves `tenantDefaults`. */
export function resolveTenantDefaults(v: unknown): TenantDefaults {
  const o = obj('tenantDefaults', v)
  checkKeys('tenantDefaults', o, ['cache', 'exposeCacheInfo', 'limits'])
  const d = DEFAULT_TENANT_DEFAULTS
  return {
    cache: cacheOf('tenantDefaults.cache', o.cache, d.cache),
    exposeCacheInfo: bool('tenantDefaults.exposeCacheInfo', o.exposeCacheInfo, d.exposeCacheInfo),
    limits: limitsOf('tenantDefaults.limits', o.limits, d.limits),
  }
}

function keyList(key: string, v: unknown): unknown[] {
  if (v === undefined) return []
  if (!Array.isArray(v)) fail(key, 'must be a list', Array.isArray(v) ? '***' : typeof v)
  return v
}

/** Hashes a key in clear after checking it; the error never carries the key. */
function hashChecked(key: string, k: unknown): string {
  if (typeof k !== 'string' || k.length < MIN_KEY || k.length > MAX_KEY || !/^[\x21-\x7e]+$/.test(k))
    fail(key, `must be ${MIN_KEY}-${MAX_KEY} printable ASCII characters without spaces`, '***')
  return hashApiKey(k)
}

/**
 * Resolves a list of tenants (from the configuration's `auth.tenants` and the tenants file):
 * every key hashed, ids and keys unique. `where` prefixes the keys named in errors; `env` is read
 * for `keysEnv`. Errors never carry a key.
 *
 * @throws ProxyError `INVALID_CONFIG` naming the first bad key.
 */
export function resolveTenants(
  where: string,
  v: unknown,
  defaults: TenantDefaults,
  env: Readonly<Record<string, string | undefined>>,
): Tenant[] {
  if (v === undefined) return []
  if (!Array.isArray(v)) fail(where, 'must be a list of tenants', typeof v)
  const out: Tenant[] = []
  for (let i = 0; i < v.length; i++) {
    const key = `${where}[${i}]`
    const o = obj(key, v[i])
    checkKeys(key, o, [
      'id',
      'keys',
      'keySha256',
      'keysEnv',
      'cache',
      'exposeCacheInfo',
      'admin',
      'limits',
      'turnDeadlineMs',
    ])
    if (typeof o.id !== 'string' || !ID.test(o.id))
      fail(`${key}.id`, 'must be 1-64 characters of [A-Za-z0-9_.-]', o.id)
    const hashes: string[] = []
    keyList(`${key}.keys`, o.keys).forEach((k, j) => {
      hashes.push(hashChecked(`${key}.keys[${j}]`, k))
    })
    keyList(`${key}.keySha256`, o.keySha256).forEach((h, j) => {
      if (typeof h !== 'string' || !isKeyHash(h.toLowerCase()))
        fail(`${key}.keySha256[${j}]`, 'must be a SHA-256 digest: 64 hex digits', '***')
      hashes.push(h.toLowerCase())
    })
    if (o.keysEnv !== undefined) {
      if (typeof o.keysEnv !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(o.keysEnv))
        fail(`${key}.keysEnv`, 'must be an environment variable name', o.keysEnv)
      const raw = env[o.keysEnv]
      if (raw === undefined || raw.trim() === '')
        fail(`${key}.keysEnv`, `environment variable ${o.keysEnv} is not set or empty`, o.keysEnv)
      raw
        .split(/[\s,]+/)
        .filter((k) => k.length > 0)
        .forEach((k, j) => {
          hashes.push(hashChecked(`${key}.keysEnv (${o.keysEnv}, key ${j + 1})`, k))
        })
    }
    if (hashes.length === 0) fail(key, `tenant ${o.id} has no key (give keys, keySha256 or keysEnv)`, o.id)
    let deadline: number | undefined
    if (o.turnDeadlineMs !== undefined) {
      if (typeof o.turnDeadlineMs !== 'number' || !Number.isInteger(o.turnDeadlineMs) || o.turnDeadlineMs < 1)
        fail(`${key}.turnDeadlineMs`, 'must be an integer >= 1', o.turnDeadlineMs)
      deadline = o.turnDeadlineMs
    }
    out.push({
      id: o.id,
      keyHashes: [...new Set(hashes)],
      cache: cacheOf(`${key}.cache`, o.cache, defaults.cache),
      exposeCacheInfo: bool(`${key}.exposeCacheInfo`, o.exposeCacheInfo, defaults.exposeCacheInfo),
      admin: bool(`${key}.admin`, o.admin, false),
      limits: limitsOf(`${key}.limits`, o.limits, defaults.limits),
      turnDeadlineMs: deadline,
    })
  }
  checkUnique(where, out)
  return out
}

/** Refuses two tenants with one id, or one key given to two tenants (named by tenant, never by key). */
export function checkUnique(where: string, tenants: readonly Tenant[]): void {
  const ids = new Set<string>()
  const owner = new Map<string, string>()
  for (const t of tenants) {
    if (ids.has(t.id)) fail(where, `duplicate tenant id ${t.id}`, t.id)
    ids.add(t.id)
    for (const h of t.keyHashes) {
      const other = owner.get(h)
      if (other !== undefined)
        fail(where, `tenants ${other} and ${t.id} share a key (a key names one tenant)`, [other, t.id])
      owner.set(h, t.id)
    }
  }
}

const MAX_CLIENT_SALT = 256

/**
 * The cache salt of a request: the tenant's namespace (`tenant=<id>`, `group=<name>`, nothing for
 * `shared`) followed by the client's own `cache_salt` (vLLM's field), if it sent one (`c=<salt>`).
 * A client salt only narrows the tenant's namespace, never widens or leaves it: the tenant's part
 * always comes first. `undefined`: no salt (the shared namespace).
 *
 * @example
 * ```ts
 * import { cacheSaltOf } from '@kvc/example-proxy'
 * const t = { id: 'acme', cache: { kind: 'isolated' } } as const
 * cacheSaltOf(t, undefined) // 'tenant=acme'
 * cacheSaltOf(t, 'user-7') // 'tenant=acme|c=user-7'
 * ```
 */
export function cacheSaltOf(
  tenant: Pick<Tenant, 'id' | 'cache'>,
  clientSalt: string | undefined,
): string | undefined {
  const c = tenant.cache
  const own = c.kind === 'isolated' ? `tenant=${tenant.id}` : c.kind === 'group' ? `group=${c.group}` : ''
  const parts = clientSalt === undefined || clientSalt === '' ? [own] : [own, `c=${clientSalt}`]
  const salt = parts.filter((p) => p !== '').join('|')
  return salt === '' ? undefined : salt
}

/**
 * The client's own namespace of a body: its `cache_salt` (vLLM's and SGLang's field) and SGLang's
 * `extra_key`, checked (400 naming the field) and joined (`<cache_salt>|k=<extra_key>`), to be
 * placed after the tenant's part by {@link cacheSaltOf}. `undefined` when it sent neither.
 */
export function clientSaltOf(body: Record<string, unknown>): string | undefined {
  const parts: string[] = []
  for (const [field, prefix] of [
    ['cache_salt', ''],
    ['extra_key', 'k='],
  ] as const) {
    const v = body[field]
    if (v === undefined || v === null) continue
    if (typeof v !== 'string' || v.length > MAX_CLIENT_SALT)
      throw new ProxyError(
        'BAD_REQUEST',
        `${field} must be a string of at most ${MAX_CLIENT_SALT} characters`,
        { param: field },
        400,
      )
    if (v !== '') parts.push(`${prefix}${v}`)
  }
  return parts.length === 0 ? undefined : parts.join('|')
}
