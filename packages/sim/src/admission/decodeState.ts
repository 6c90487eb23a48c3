import type { AdmitSession, AdmitWorkerState, CapacityReport } from '../adapters/router.js'
import type { SimWorker } from '../cluster/worker.js'

/**
 * The D's ground truth its admission (Algorithm 2) decides on: capacity, use, evictable KV, its
 * sessions (idle ones with what releasing each alone frees), live leases and queue depths.
 * `reaperIdleMs`: with `release=reaper`, only sessions idle that long count as idle.
 */
export function buildAdmitWorkerState(
  d: SimWorker,
  nowMs: number,
  reaperIdleMs: number | undefined,
): AdmitWorkerState {
  const cap = d.pool.size
  const used = cap - d.pool.availableSize()
  const sessions = new Map<string, AdmitSession>()
  let evictable = 0
  if (d.cache !== undefined) {
    evictable = Math.min(used, d.cache.cache.evictableSize())
    // Releasable sessions: idle ones (`release=pressure`), or those idle for the reaper's TTL
    // (`release=reaper`: the engine lets go of nothing else).
    const ttl = reaperIdleMs ?? 0
    for (const s of d.cache.listSessionStatuses()) {
      const idle = !s.active && nowMs - s.lastAccessTime >= ttl
      sessions.set(s.sessionId, {
        sessionId: s.sessionId,
        residentTokens: s.residentTokens,
        lastAccessTime: s.lastAccessTime,
        idle,
        // What releasing it alone frees: a prefix other sessions also lock is not its to give.
        ...(idle ? { releasableTokens: d.cache.releasableTokens({ sessionId: s.sessionId }) } : {}),
      })
    }
  }
  return {
    capacityTokens: cap,
    usedTokens: used,
    evictableTokens: evictable,
    sessions,
    leases: d.leases?.live(nowMs) ?? [],
    transferQueueDepth: d.transferWait.length + d.transfersOnWire,
    retractedQueueDepth: Number.isNaN(d.blockedSince) ? 0 : 1,
  }
}

/**
 * What a live worker reports to the router (as a worker's load endpoint would): free, evictable,
 * reserved (leases and the outputs of admitted requests) and releasable KV, and its queue depths.
 * `reaperIdleMs`: with `release=reaper`, only sessions idle that long are releasable.
 */
export function buildCapacityReport(
  w: SimWorker,
  nowMs: number,
  reaperIdleMs: number | undefined,
): CapacityReport {
  const free = w.pool.availableSize()
  const evictable = w.cache === undefined ? 0 : w.cache.cache.evictableSize()
  // Idle sessions' KV the D's admission may release (with the reaper, only those past its TTL).
  const ttl = reaperIdleMs
  const releasable =
    w.cache === undefined ? 0 : w.cache.releasableTokens(ttl === undefined ? {} : { idleMs: ttl })
  const reserved = (w.leases?.reservedTokens(nowMs) ?? 0) + w.reservedOutputs
  return {
    freeTokens: free,
    evictableTokens: evictable,
    reservedTokens: Math.min(reserved, free + evictable),
    releasableTokens: releasable,
    transferQueueDepth: w.transferWait.length + w.transfersOnWire,
    retractedQueueDepth: Number.isNaN(w.blockedSince) ? 0 : 1,
  }
}
