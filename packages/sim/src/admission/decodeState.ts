import {
  type AdmitWorkerState,
  type CapacityReport,
  type DecodeStateSource,
  admitWorkerState,
  decodeCapacityReport,
} from '../adapters/router.js'
import type { SimWorker } from '../cluster/worker.js'

/**
 * A D's KV state and queues, as the router's one builder of a D's admission state reads them.
 * Releasable sessions: idle ones (`release=pressure`), or those idle for the reaper's TTL
 * (`release=reaper`: the engine lets go of nothing else).
 */
function decodeStateOf(w: SimWorker, reaperIdleMs: number | undefined): DecodeStateSource {
  return {
    pool: w.pool,
    sessions: w.cache,
    idleTtlMs: reaperIdleMs,
    transferQueueDepth: w.transferWait.length + w.transfersOnWire,
    retractedQueueDepth: Number.isNaN(w.blockedSince) ? 0 : 1,
  }
}

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
  return admitWorkerState(decodeStateOf(d, reaperIdleMs), { now: nowMs, leases: d.leases?.live(nowMs) ?? [] })
}

/**
 * What a live worker reports to the router (as a worker's load endpoint would): free, evictable,
 * reserved (live leases plus the outputs admitted requests will still decode) and releasable KV,
 * and its queue depths. `reaperIdleMs`: with `release=reaper`, only sessions idle that long are
 * releasable.
 */
export function buildCapacityReport(
  w: SimWorker,
  nowMs: number,
  reaperIdleMs: number | undefined,
): CapacityReport {
  const reserved = (w.leases?.reservedTokens(nowMs) ?? 0) + w.reservedOutputs
  return decodeCapacityReport(decodeStateOf(w, reaperIdleMs), reserved)
}
