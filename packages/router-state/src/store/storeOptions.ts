import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { checkOption, describeValue } from '../errors/routerStateError.js'

// The options of a replicated store, the events it reports and its metrics snapshot, with the
// defaults and the validation shared by the NATS and Redis stores.

/**
 * Options shared by the NATS and Redis stores.
 *
 * @example
 * ```ts
 * import type { ReplicatedStoreOptions } from '@kvc/router-state'
 * const o: ReplicatedStoreOptions = { replicaId: 'router-a', bindingTtlMs: 600_000, replicaTtlMs: 5_000 }
 * ```
 */
export interface ReplicatedStoreOptions {
  /** Unique per replica (default: host name, process id and random bytes). */
  readonly replicaId?: string
  /** Idle TTL of a session binding and of its flags: refreshed by every write (default 10 min). */
  readonly bindingTtlMs?: number
  /** A replica not heard from for this long is dead: its load and seed slots stop counting (default 5 s). */
  readonly replicaTtlMs?: number
  /** How often a replica publishes its whole load (its liveness signal; default 1 s). */
  readonly heartbeatMs?: number
  /** A server operation slower than this counts as failed: the store goes degraded (default 500 ms). */
  readonly opTimeoutMs?: number
  /** Wall clock for TTLs and liveness (default `Date.now`; not the router's injected clock). */
  readonly now?: () => number
  /** Called on degraded / recovered / conflict / serverStateLost / error (for logs). */
  readonly onEvent?: (event: StoreEvent) => void
}

/**
 * Something a log should say about a replicated store.
 *
 * | type | meaning |
 * |---|---|
 * | `degraded` | the server is unreachable or slow: the replica routes on its last view |
 * | `recovered` | reconnected and reconciled with the server |
 * | `conflict` | a binding this replica wrote lost to another replica's (the other one is kept) |
 * | `serverStateLost` | the server came back empty (no persistence): replicas republished their view |
 * | `error` | an operation failed (the detail says which); it is retried |
 *
 * @example
 * ```ts
 * import type { StoreEvent } from '@kvc/router-state'
 * const log = (e: StoreEvent) => console.log(`[router-state] ${e.type}: ${e.detail}`)
 * ```
 */
export interface StoreEvent {
  readonly type: 'degraded' | 'recovered' | 'conflict' | 'serverStateLost' | 'error'
  readonly detail: string
  /** For `conflict`: the session, the D its binding stays on, and the D this replica had written. */
  readonly conflict?: { readonly sessionId: string; readonly kept: string; readonly dropped: string }
}

/**
 * A snapshot of a replicated store's health, for metrics (see {@link ReplicatedStateStore.metricsText}).
 *
 * @example
 * ```ts
 * import type { ReplicatedStoreMetrics } from '@kvc/router-state'
 * const alert = (m: ReplicatedStoreMetrics) => m.degraded && m.degradedMs > 30_000
 * ```
 */
export interface ReplicatedStoreMetrics {
  readonly replicaId: string
  readonly backend: string
  readonly connected: boolean
  /** Routing on the last view (server unreachable, slow, or not yet reconciled). */
  readonly degraded: boolean
  readonly degradedEpisodes: number
  /** Total time spent degraded, the current episode included. */
  readonly degradedMs: number
  /** Other replicas heard from within the replica TTL. */
  readonly liveReplicas: number
  /** Live bindings in the local view. */
  readonly bindings: number
  readonly bindingClaimsGranted: number
  readonly bindingClaimsLost: number
  readonly seedClaimsGranted: number
  readonly seedClaimsDenied: number
  /** Claims decided on the last view while degraded (reconciled later). */
  readonly claimsUnconfirmed: number
  /** Binding writes of this replica that lost to another replica's binding. */
  readonly bindingConflicts: number
  readonly reconciles: number
  readonly serverStateLost: number
  /** Writes waiting for the server. */
  readonly pendingWrites: number
  readonly writeErrors: number
  /** Load contributions of dead replicas dropped after the replica TTL. */
  readonly expiredReplicas: number
}

/** @internal */
export const STORE_DEFAULTS = {
  bindingTtlMs: 600_000,
  replicaTtlMs: 5_000,
  heartbeatMs: 1_000,
  opTimeoutMs: 500,
} as const

/** @internal Refuses bad options (before any connection is opened). */
export function checkStoreOptions(o: ReplicatedStoreOptions): void {
  checkOption(typeof o === 'object' && o !== null, `options must be an object, got ${describeValue(o)}`, o)
  const pos = (name: string, v: unknown) =>
    checkOption(
      v === undefined || (typeof v === 'number' && Number.isFinite(v) && v > 0),
      `${name} must be a finite number > 0, got ${describeValue(v)}`,
      v,
    )
  pos('bindingTtlMs', o.bindingTtlMs)
  pos('replicaTtlMs', o.replicaTtlMs)
  pos('heartbeatMs', o.heartbeatMs)
  pos('opTimeoutMs', o.opTimeoutMs)
  const hb = o.heartbeatMs ?? STORE_DEFAULTS.heartbeatMs
  checkOption(
    hb < (o.replicaTtlMs ?? STORE_DEFAULTS.replicaTtlMs),
    `heartbeatMs must be < replicaTtlMs (${o.replicaTtlMs ?? STORE_DEFAULTS.replicaTtlMs}), got ${hb}`,
    hb,
  )
  const id = o.replicaId
  checkOption(
    id === undefined || (typeof id === 'string' && id.length > 0 && id.length <= 200),
    `replicaId must be a string of 1 to 200 characters, got ${describeValue(id)}`,
    id,
  )
  checkOption(
    o.now === undefined || typeof o.now === 'function',
    `now must be a function, got ${describeValue(o.now)}`,
    o.now,
  )
  checkOption(
    o.onEvent === undefined || typeof o.onEvent === 'function',
    `onEvent must be a function, got ${describeValue(o.onEvent)}`,
    o.onEvent,
  )
}

/** @internal A replica id unique enough for a cluster: host name, process id and random bytes. */
export function defaultReplicaId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`
}
