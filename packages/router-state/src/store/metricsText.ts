import type { ReplicatedStoreMetrics } from './storeOptions.js'

/**
 * A replicated store's metrics in the Prometheus text format: gauges and counters named
 * `<prefix>_...`, labelled with the replica id and backend.
 * @internal
 */
export function formatStoreMetrics(m: ReplicatedStoreMetrics, prefix: string): string {
  const labels = `{replica="${m.replicaId.replace(/["\\\n]/g, '_')}",backend="${m.backend}"}`
  const rows: [string, 'gauge' | 'counter', number, string][] = [
    ['connected', 'gauge', m.connected ? 1 : 0, 'connected to the state server'],
    ['degraded', 'gauge', m.degraded ? 1 : 0, 'routing on the last view'],
    ['degraded_episodes_total', 'counter', m.degradedEpisodes, 'times the replica went degraded'],
    ['degraded_seconds_total', 'counter', m.degradedMs / 1000, 'time spent degraded'],
    ['live_replicas', 'gauge', m.liveReplicas, 'other replicas heard from within the replica TTL'],
    ['bindings', 'gauge', m.bindings, 'live bindings in the local view'],
    ['binding_claims_granted_total', 'counter', m.bindingClaimsGranted, 'binding claims granted'],
    ['binding_claims_lost_total', 'counter', m.bindingClaimsLost, 'binding claims lost to another replica'],
    ['seed_claims_granted_total', 'counter', m.seedClaimsGranted, 'pending-seed slots granted'],
    ['seed_claims_denied_total', 'counter', m.seedClaimsDenied, 'pending-seed slots denied (budget)'],
    ['claims_unconfirmed_total', 'counter', m.claimsUnconfirmed, 'claims decided on the last view'],
    ['binding_conflicts_total', 'counter', m.bindingConflicts, 'binding writes that lost'],
    ['reconciles_total', 'counter', m.reconciles, 'reconciliations with the server'],
    ['server_state_lost_total', 'counter', m.serverStateLost, 'times the server came back empty'],
    ['pending_writes', 'gauge', m.pendingWrites, 'writes waiting for the server'],
    ['write_errors_total', 'counter', m.writeErrors, 'failed server operations (retried)'],
    ['expired_replicas_total', 'counter', m.expiredReplicas, 'dead replicas whose load expired'],
  ]
  return rows
    .map(
      ([n, t, v, h]) =>
        `# HELP ${prefix}_${n} ${h}\n# TYPE ${prefix}_${n} ${t}\n${prefix}_${n}${labels} ${v}`,
    )
    .join('\n')
    .concat('\n')
}
