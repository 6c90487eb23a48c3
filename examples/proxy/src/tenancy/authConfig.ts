import { ProxyError } from '../errors.js'
import { keyFingerprint } from './keys.js'
import type { CacheSaltField } from './requestScope.js'
import { type Tenant, type TenantDefaults, type TenantInput, resolveTenants } from './tenants.js'

/** Who may read `/metrics` and the details of `/ready` when authentication is on. */
export type EndpointAccess = 'admin' | 'public'

/** The resolved `auth` section. */
export interface AuthConfig {
  /** Tenants of the configuration file itself (keys hashed). */
  readonly tenants: readonly Tenant[]
  /** A JSON file `{"tenants": [...]}` read at start, on `SIGHUP` and when it changes. */
  readonly tenantsFile: string | undefined
  /** How often `tenantsFile` is checked for changes, ms (0: on `SIGHUP` only). */
  readonly reloadIntervalMs: number
  /** `/metrics`: an admin tenant's key (`admin`, default) or none (`public`). */
  readonly metrics: EndpointAccess
  /** `/ready`'s workers and state store: an admin key (`admin`, default) or none; its status is always public. */
  readonly ready: EndpointAccess
  /** Listen on a non-loopback address without any tenant (refused unless `true`). */
  readonly allowUnauthenticated: boolean
}

/** `auth` as written. */
export interface AuthConfigInput {
  readonly tenants?: readonly TenantInput[]
  readonly tenantsFile?: string
  readonly reloadIntervalMs?: number
  readonly metrics?: EndpointAccess
  readonly ready?: EndpointAccess
  readonly allowUnauthenticated?: boolean
}

/** Defaults of `auth`. */
export const DEFAULT_AUTH: AuthConfig = Object.freeze({
  tenants: [],
  tenantsFile: undefined,
  reloadIntervalMs: 2_000,
  metrics: 'admin',
  ready: 'admin',
  allowUnauthenticated: false,
})

function fail(key: string, message: string, value: unknown): never {
  throw new ProxyError('INVALID_CONFIG', `config ${key}: ${message}`, value)
}

/** Resolves `auth` (tenants' keys hashed, `keysEnv` read from `env`). */
export function resolveAuth(
  v: unknown,
  defaults: TenantDefaults,
  env: Readonly<Record<string, string | undefined>> = process.env,
): AuthConfig {
  if (v === undefined) return DEFAULT_AUTH
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail('auth', 'must be an object', v)
  const o = v as Record<string, unknown>
  const allowed = ['tenants', 'tenantsFile', 'reloadIntervalMs', 'metrics', 'ready', 'allowUnauthenticated']
  for (const k of Object.keys(o))
    if (!allowed.includes(k)) fail(`auth.${k}`, `unknown key (expected one of ${allowed.join(', ')})`, k)
  const d = DEFAULT_AUTH
  if (o.tenantsFile !== undefined && (typeof o.tenantsFile !== 'string' || o.tenantsFile === ''))
    fail('auth.tenantsFile', 'must be a file path', o.tenantsFile)
  const ri = o.reloadIntervalMs ?? d.reloadIntervalMs
  if (typeof ri !== 'number' || !Number.isInteger(ri) || ri < 0)
    fail('auth.reloadIntervalMs', 'must be an integer >= 0', ri)
  const access = (k: 'metrics' | 'ready'): EndpointAccess => {
    const x = o[k] ?? d[k]
    if (x !== 'admin' && x !== 'public') fail(`auth.${k}`, "must be 'admin' or 'public'", x)
    return x
  }
  const allow = o.allowUnauthenticated ?? d.allowUnauthenticated
  if (typeof allow !== 'boolean') fail('auth.allowUnauthenticated', 'must be true or false', allow)
  return {
    tenants: resolveTenants('auth.tenants', o.tenants, defaults, env),
    tenantsFile: o.tenantsFile as string | undefined,
    reloadIntervalMs: ri,
    metrics: access('metrics'),
    ready: access('ready'),
    allowUnauthenticated: allow,
  }
}

/** Whether a configuration turns authentication on (a tenant, or a tenants file). */
export function authEnabled(auth: AuthConfig): boolean {
  return auth.tenants.length > 0 || auth.tenantsFile !== undefined
}

/** The `cacheSaltField` key, checked. */
export function resolveCacheSaltField(v: unknown): CacheSaltField {
  if (v === undefined) return 'cache_salt'
  if (v !== 'cache_salt' && v !== 'extra_key')
    fail('cacheSaltField', "must be 'cache_salt' or 'extra_key'", v)
  return v
}

/** Whether a listen address is a loopback one (`127.0.0.0/8`, `::1`, `localhost`). */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase()
  return (
    h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) || h === '::ffff:127.0.0.1'
  )
}

/**
 * Refuses a proxy that would listen beyond loopback with no key required, unless
 * `auth.allowUnauthenticated` says so.
 *
 * @throws ProxyError `INVALID_CONFIG`.
 */
export function checkExposure(listenHost: string, auth: AuthConfig): void {
  if (isLoopback(listenHost) || authEnabled(auth) || auth.allowUnauthenticated) return
  throw new ProxyError(
    'INVALID_CONFIG',
    `config listen.host: ${listenHost} is not a loopback address and no API key is configured: give tenants (auth.tenants or auth.tenantsFile), listen on 127.0.0.1, or set auth.allowUnauthenticated: true`,
    listenHost,
  )
}

/** A state-store URL with its password (or whole user info) masked. */
export function maskUrl(url: string): string {
  return url.replace(/\/\/[^@/\s]*@/g, '//***@')
}

/**
 * A resolved configuration with every secret masked, for `--print-config` and logs: key digests
 * shown as fingerprints, passwords in the state store URL replaced by `***`.
 */
export function maskSecrets<
  C extends { readonly auth: AuthConfig; readonly stateStore: { readonly url: string } },
>(config: C): C {
  return {
    ...config,
    auth: {
      ...config.auth,
      tenants: config.auth.tenants.map((t) => ({ ...t, keyHashes: t.keyHashes.map(keyFingerprint) })),
    },
    stateStore: { ...config.stateStore, url: maskUrl(config.stateStore.url) },
  }
}
