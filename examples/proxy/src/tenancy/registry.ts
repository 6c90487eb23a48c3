import { type StatWatcher, readFileSync, unwatchFile, watchFile } from 'node:fs'
import type { IncomingHttpHeaders } from 'node:http'
import { ProxyError } from '../errors.js'
import { KeyTable, presentedKey } from './keys.js'
import {
  type Tenant,
  type TenantDefaults,
  type TenantInput,
  checkUnique,
  implicitTenant,
  resolveTenants,
} from './tenants.js'

/** What {@link TenantRegistry} is built from (the `auth` and `tenantDefaults` of a configuration). */
export interface TenantRegistryOptions {
  /** Tenants given in the configuration itself (keys already hashed). */
  readonly tenants: readonly Tenant[]
  /** A JSON file `{"tenants": [...]}` read at start and on every reload. */
  readonly tenantsFile: string | undefined
  /** Polling interval of `tenantsFile` for changes (0: reload on {@link TenantRegistry.reload} only). */
  readonly reloadIntervalMs: number
  readonly defaults: TenantDefaults
  /** Read for `keysEnv` (default `process.env`). */
  readonly env?: Readonly<Record<string, string | undefined>>
  /** A reload's outcome (applied, or refused and the previous tenants kept). Default: nothing. */
  readonly onReload?: (event: TenantReloadEvent) => void
}

/** The outcome of a reload. */
export type TenantReloadEvent =
  | { readonly type: 'reloaded'; readonly tenants: number; readonly keys: number }
  | { readonly type: 'refused'; readonly error: string }

function unauthorized(message: string): ProxyError {
  return new ProxyError(
    'INVALID_API_KEY',
    message,
    { param: null, headers: { 'www-authenticate': 'Bearer realm="kvc-proxy"' } },
    401,
  )
}

/**
 * The tenants and their keys, looked up by the request's `Authorization: Bearer` key. Without
 * any tenant configured (no `auth.tenants`, no `auth.tenantsFile`) authentication is off and every
 * request is the implicit tenant `default`. Once on, it stays on: a reload that leaves no tenant
 * makes every request 401, never open.
 *
 * Keys rotate without a restart: {@link TenantRegistry.reload} (the CLI calls it on `SIGHUP`)
 * re-reads the tenants file and takes the configuration's new tenants, and the file is polled
 * every `reloadIntervalMs`. A reload that does not resolve is refused whole (the previous keys
 * stay valid) and reported.
 *
 * @example
 * ```ts
 * import { TenantRegistry, DEFAULT_TENANT_DEFAULTS, hashApiKey } from '@kvc/example-proxy'
 * const tenant = { id: 'a', keyHashes: [hashApiKey('sk-tenant-a-0123456789')], cache: { kind: 'isolated' },
 *   exposeCacheInfo: false, admin: false, limits: DEFAULT_TENANT_DEFAULTS.limits, turnDeadlineMs: undefined } as const
 * const reg = new TenantRegistry({ tenants: [tenant], tenantsFile: undefined, reloadIntervalMs: 0, defaults: DEFAULT_TENANT_DEFAULTS })
 * reg.authenticate({ authorization: 'Bearer sk-tenant-a-0123456789' }).id // 'a'
 * ```
 */
export class TenantRegistry {
  /** Whether requests must present a key. */
  readonly enabled: boolean
  readonly #options: TenantRegistryOptions
  readonly #implicit: Tenant
  #inline: readonly Tenant[]
  #tenants: readonly Tenant[] = []
  #table: KeyTable<Tenant> = new KeyTable([])
  #watching = false
  #listeners: ((tenants: readonly Tenant[]) => void)[] = []

  /** @throws ProxyError `INVALID_CONFIG` when the tenants file does not resolve. */
  constructor(options: TenantRegistryOptions) {
    this.#options = options
    this.#inline = options.tenants
    this.#implicit = implicitTenant(options.defaults)
    this.enabled = options.tenants.length > 0 || options.tenantsFile !== undefined
    this.#apply(this.#resolve())
  }

  /** The configured tenants (the implicit one when authentication is off). */
  tenants(): readonly Tenant[] {
    return this.enabled ? this.#tenants : [this.#implicit]
  }

  /** The tenant of an id, if configured. */
  get(id: string): Tenant | undefined {
    return this.tenants().find((t) => t.id === id)
  }

  /**
   * The tenant whose key the request presents.
   *
   * @throws ProxyError `INVALID_API_KEY` (401, OpenAI's `invalid_api_key`) when it presents none
   *   or an unknown one.
   */
  authenticate(headers: IncomingHttpHeaders): Tenant {
    if (!this.enabled) return this.#implicit
    const key = presentedKey(headers)
    if (key === undefined)
      throw unauthorized('missing API key: send it as the header Authorization: Bearer <key>')
    if (key === null) throw unauthorized('malformed Authorization header: expected Bearer <key>')
    const t = this.#table.lookup(key)
    if (t === undefined) throw unauthorized('invalid API key')
    return t
  }

  /**
   * Re-reads the tenants file and, when given, replaces the configuration's own tenants
   * (`inline`, already resolved). All or nothing: on an error the previous tenants stay and the
   * error is thrown (and reported through `onReload`).
   */
  reload(inline?: readonly Tenant[]): void {
    const before = this.#inline
    if (inline !== undefined) this.#inline = inline
    try {
      this.#apply(this.#resolve())
    } catch (err) {
      this.#inline = before
      this.#options.onReload?.({ type: 'refused', error: (err as Error).message })
      throw err
    }
    this.#options.onReload?.({
      type: 'reloaded',
      tenants: this.#tenants.length,
      keys: this.#table.size,
    })
  }

  /** Calls `listener` with the tenants after every applied reload. */
  onChange(listener: (tenants: readonly Tenant[]) => void): void {
    this.#listeners.push(listener)
  }

  /** Starts polling the tenants file (every `reloadIntervalMs`); a no-op without one. */
  watch(): void {
    const file = this.#options.tenantsFile
    if (file === undefined || this.#options.reloadIntervalMs <= 0 || this.#watching) return
    this.#watching = true
    const w: StatWatcher = watchFile(
      file,
      { interval: this.#options.reloadIntervalMs, persistent: false },
      () => {
        try {
          this.reload()
        } catch {
          // reported through onReload; the previous keys stay valid
        }
      },
    )
    w.unref?.()
  }

  close(): void {
    const file = this.#options.tenantsFile
    if (this.#watching && file !== undefined) unwatchFile(file)
    this.#watching = false
    this.#listeners = []
  }

  #resolve(): Tenant[] {
    const file = this.#options.tenantsFile
    const fromFile: Tenant[] = []
    if (file !== undefined) {
      let text: string
      try {
        text = readFileSync(file, 'utf8')
      } catch (err) {
        throw new ProxyError(
          'INVALID_CONFIG',
          `cannot read tenants file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
          file,
        )
      }
      let json: unknown
      try {
        json = JSON.parse(text)
      } catch {
        // The parser's message may quote the file: keep it out (the file holds keys).
        throw new ProxyError('INVALID_CONFIG', `tenants file ${file} is not valid JSON`, file)
      }
      if (typeof json !== 'object' || json === null || Array.isArray(json))
        throw new ProxyError(
          'INVALID_CONFIG',
          `tenants file ${file}: must be an object {"tenants": [...]}`,
          file,
        )
      const extra = Object.keys(json).filter((k) => k !== 'tenants')
      if (extra.length > 0)
        throw new ProxyError('INVALID_CONFIG', `tenants file ${file}: unknown key ${extra[0]}`, extra[0])
      const list = (json as { tenants?: TenantInput[] }).tenants
      fromFile.push(
        ...resolveTenants(
          `${file}: tenants`,
          list ?? [],
          this.#options.defaults,
          this.#options.env ?? process.env,
        ),
      )
    }
    const all = [...this.#inline, ...fromFile]
    checkUnique('auth.tenants and the tenants file', all)
    return all
  }

  #apply(tenants: Tenant[]): void {
    this.#tenants = tenants
    this.#table = new KeyTable(tenants.flatMap((t) => t.keyHashes.map((h) => [h, t] as const)))
    for (const l of this.#listeners) l(tenants)
  }
}
