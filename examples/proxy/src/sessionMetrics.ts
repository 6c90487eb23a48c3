import { Counter, Gauge, type Registry } from 'prom-client'
import type { SessionTable } from './sessions.js'

/**
 * The session table's bounds as metrics, read at scrape time: `kvc_proxy_session_table_bytes`
 * (what `session.maxTableBytes` bounds) and `kvc_proxy_session_evictions_total` (sessions
 * forgotten because a cap was reached: their next turn starts over, like a new session's).
 */
export function registerSessionTableMetrics(registry: Registry, table: SessionTable): void {
  new Gauge({
    name: 'kvc_proxy_session_table_bytes',
    help: 'Bytes of per-session state the proxy holds (block hashes of each session’s last prompt).',
    registers: [registry],
    collect() {
      this.set(table.bytes)
    },
  })
  let reported = 0
  new Counter({
    name: 'kvc_proxy_session_evictions_total',
    help: 'Sessions forgotten because session.maxSessions or session.maxTableBytes was reached.',
    registers: [registry],
    collect() {
      const now = table.evictions
      if (now > reported) this.inc(now - reported)
      reported = now
    },
  })
}
