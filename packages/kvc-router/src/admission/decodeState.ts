/**
 * What a D worker tells about itself, built in one place from its KV pool and session cache:
 * the {@link AdmitWorkerState} its admission (`admit`) decides on, and the {@link CapacityReport}
 * it sends the router. The simulator and the SGLang emulator both build them here, so the rules
 * (which sessions count as idle, what releasing one frees) have one owner.
 *
 * The inputs are structural: `@kvc/session-cache`'s `SessionCache` satisfies
 * {@link DecodeSessionsView} and `@kvc/radix-cache`'s `PagedAllocator` satisfies
 * {@link DecodePoolView}, without this package importing either.
 *
 * @module
 */
import type { CapacityReport } from '../cluster/clusterView.js'
import type { AdmitSession, AdmitWorkerState, Lease } from './admit.js'

/**
 * The part of a D's KV pool the builders read (`PagedAllocator` and every `KvPool` have it).
 *
 * @example
 * ```ts
 * import type { DecodePoolView } from '@kvc/kvc-router'
 * const pool: DecodePoolView = { size: 4096, availableSize: () => 1024 }
 * ```
 */
export interface DecodePoolView {
  /** KV slots in all. */
  readonly size: number
  /** Free KV slots. */
  availableSize(): number
}

/**
 * One session as the D's session cache lists it (`SessionStatus` of `@kvc/session-cache`).
 *
 * @example
 * ```ts
 * import type { DecodeSessionStatus } from '@kvc/kvc-router'
 * const s: DecodeSessionStatus = { sessionId: 'a', residentTokens: 3_000, lastAccessTime: 10, active: false }
 * ```
 */
export interface DecodeSessionStatus {
  readonly sessionId: string
  readonly residentTokens: number
  readonly lastAccessTime: number
  /** A request of the session is in flight. */
  readonly active: boolean
  /** Tokens it retains only on the host tier (a demoted session; default 0). */
  readonly hostResidentTokens?: number
}

/**
 * The part of a D's session cache the builders read; `@kvc/session-cache`'s `SessionCache`
 * satisfies it.
 *
 * @example
 * ```ts
 * import type { DecodeSessionsView } from '@kvc/kvc-router'
 * const none: DecodeSessionsView = {
 *   cache: { evictableSize: () => 0 },
 *   listSessionStatuses: () => [],
 *   releasableTokens: () => 0,
 * }
 * ```
 */
export interface DecodeSessionsView {
  /** The radix tree: its unlocked (evictable) tokens. */
  readonly cache: { evictableSize(): number }
  listSessionStatuses(): Iterable<DecodeSessionStatus>
  /**
   * Tokens releasing idle sessions would make obtainable: with `sessionId`, that session's alone
   * (its share of a prefix other sessions lock excluded); with `idleMs`, every session idle at
   * least that long; with neither, every idle session.
   */
  releasableTokens(options: { readonly idleMs?: number; readonly sessionId?: string }): number
}

/**
 * A D worker's KV state and queues, the input of {@link admitWorkerState} and
 * {@link decodeCapacityReport}.
 *
 * @example
 * ```ts
 * import type { DecodeStateSource } from '@kvc/kvc-router'
 * const src: DecodeStateSource = {
 *   pool: { size: 4096, availableSize: () => 4096 },
 *   transferQueueDepth: 0,
 *   retractedQueueDepth: 0,
 * }
 * ```
 */
export interface DecodeStateSource {
  readonly pool: DecodePoolView
  /** The D's session cache; omitted for a worker that keeps no sessions (nothing is idle or evictable). */
  readonly sessions?: DecodeSessionsView | undefined
  /**
   * A session is releasable once idle (no request in flight) for this long, ms of the session
   * cache's clock (a TTL reaper: the engine lets go of nothing younger); omitted: as soon as it is idle.
   */
  readonly idleTtlMs?: number | undefined
  /** KV transfers waiting for memory or on the wire. */
  readonly transferQueueDepth: number
  /** Requests retracted (paused for memory). */
  readonly retractedQueueDepth: number
  /** Tokens being copied from the host tier onto the device (queued load-backs; default 0). */
  readonly loadBackQueueTokens?: number
}

/**
 * The D's {@link AdmitWorkerState} at `now`: capacity and used slots from the pool, evictable
 * tokens from the tree (at most the used ones), every open session with whether it is idle
 * (no request in flight and, with `idleTtlMs`, idle that long) and, for an idle one, what
 * releasing it alone frees (`releasableTokens`: a prefix other sessions also lock is not its to
 * give), plus the live leases and the queues.
 *
 * @example
 * ```ts
 * import { LeaseBook, admit, admitWorkerState } from '@kvc/kvc-router'
 * const leases = new LeaseBook()
 * const state = admitWorkerState(
 *   { pool: { size: 4096, availableSize: () => 4096 }, transferQueueDepth: 0, retractedQueueDepth: 0 },
 *   { now: 0, leases: leases.live(0) },
 * )
 * const d = admit(state, { requestId: 'r1', sessionId: 's', path: 'seed', promptTokens: 1_000, appendTokens: 1_000 }, { now: 0 })
 * d.response.admitted // true
 * ```
 */
export function admitWorkerState(
  source: DecodeStateSource,
  at: { readonly now: number; readonly leases: readonly Lease[]; readonly draining?: boolean },
): AdmitWorkerState {
  const cap = source.pool.size
  const used = cap - source.pool.availableSize()
  const sessions = new Map<string, AdmitSession>()
  const sc = source.sessions
  let evictable = 0
  if (sc !== undefined) {
    evictable = Math.min(used, sc.cache.evictableSize())
    const ttl = source.idleTtlMs
    for (const s of sc.listSessionStatuses()) {
      const idle = !s.active && (ttl === undefined || at.now - s.lastAccessTime >= ttl)
      const { sessionId, residentTokens, lastAccessTime } = s
      // One literal per shape (a spread of the optional field cost microseconds per session).
      const view: { -readonly [K in keyof AdmitSession]: AdmitSession[K] } = idle
        ? {
            sessionId,
            residentTokens,
            lastAccessTime,
            idle,
            releasableTokens: sc.releasableTokens({ sessionId }),
          }
        : { sessionId, residentTokens, lastAccessTime, idle }
      if (s.hostResidentTokens) view.hostResidentTokens = s.hostResidentTokens
      sessions.set(sessionId, view)
    }
  }
  // Optional fields by assignment, in this order (the D's state is built once per admission).
  const state: { -readonly [K in keyof AdmitWorkerState]: AdmitWorkerState[K] } = {
    capacityTokens: cap,
    usedTokens: used,
    evictableTokens: evictable,
    sessions,
    leases: at.leases,
    transferQueueDepth: source.transferQueueDepth,
    retractedQueueDepth: source.retractedQueueDepth,
  }
  if (at.draining !== undefined) state.draining = at.draining
  if (source.loadBackQueueTokens) state.loadBackQueueTokens = source.loadBackQueueTokens
  return state
}

/** `releasableTokens` options for every idle session (shared: reports are built after most events). */
const ANY_IDLE: { readonly idleMs?: number } = Object.freeze({})

/**
 * The D's {@link CapacityReport} for the router: free and evictable tokens, `reservedTokens`
 * (leases plus whatever else the D has promised; capped at free + evictable), the tokens idle
 * sessions would release on demand (the same idle rule as {@link admitWorkerState}) and the
 * queues.
 *
 * @example
 * ```ts
 * import { Router, decodeCapacityReport } from '@kvc/kvc-router'
 * const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 4096 }] })
 * const pool = { size: 4096, availableSize: () => 3_000 }
 * router.cluster.reportCapacity('d0', decodeCapacityReport({ pool, transferQueueDepth: 0, retractedQueueDepth: 0 }, 500))
 * router.cluster.worker('d0').availableTokens // 2500
 * ```
 */
export function decodeCapacityReport(source: DecodeStateSource, reservedTokens: number): CapacityReport {
  const free = source.pool.availableSize()
  const sc = source.sessions
  const evictable = sc === undefined ? 0 : sc.cache.evictableSize()
  const ttl = source.idleTtlMs
  const releasable =
    sc === undefined ? 0 : sc.releasableTokens(ttl === undefined ? ANY_IDLE : { idleMs: ttl })
  return {
    freeTokens: free,
    evictableTokens: evictable,
    reservedTokens: Math.min(reservedTokens, free + evictable),
    releasableTokens: releasable,
    transferQueueDepth: source.transferQueueDepth,
    retractedQueueDepth: source.retractedQueueDepth,
  }
}
