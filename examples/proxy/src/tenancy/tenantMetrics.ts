import { Counter, Gauge, type Registry } from 'prom-client'

/**
 * The proxy's metrics of shared use, on the proxy's registry: refusals by tenant and cause
 * (`rate_limit_requests`, `rate_limit_tokens`, `tenant_concurrency`, `global_concurrency`,
 * `session_queue`, `deadline_exceeded`), rejected keys, and turns in progress per tenant.
 */
export class TenantMetrics {
  readonly limited: Counter<'tenant' | 'cause'>
  readonly authFailures: Counter<'reason'>
  readonly reloads: Counter<'result'>

  constructor(registry: Registry, running: () => ReadonlyMap<string, number>) {
    const registers = [registry]
    this.limited = new Counter({
      name: 'kvc_proxy_limited_total',
      help: 'Requests refused by a limit (429) or ended by their deadline (504), by tenant and cause.',
      labelNames: ['tenant', 'cause'],
      registers,
    })
    this.authFailures = new Counter({
      name: 'kvc_proxy_auth_failures_total',
      help: 'Requests refused with 401 (missing, malformed or unknown API key) or 403 (not an admin key).',
      labelNames: ['reason'],
      registers,
    })
    this.reloads = new Counter({
      name: 'kvc_proxy_tenant_reloads_total',
      help: 'Reloads of the tenants and their keys, by result (reloaded|refused).',
      labelNames: ['result'],
      registers,
    })
    new Gauge({
      name: 'kvc_proxy_tenant_turns_in_progress',
      help: 'Turns of a tenant in progress (reading, queued, routed or streaming).',
      labelNames: ['tenant'],
      registers,
      collect() {
        this.reset()
        for (const [tenant, n] of running()) this.set({ tenant }, n)
      },
    })
  }
}
