import {
  type AdmitWorkerState,
  type CapacityReport,
  type DecodePoolView,
  type DecodeSessionsView,
  type DecodeStateSource,
  admitWorkerState,
  decodeCapacityReport,
} from '../adapters/router.js'
import type { SimWorker } from '../cluster/worker.js'
import type { KvGeometry } from '../granularity/kvGeometry.js'

/**
 * A D's KV state and queues, as the router's one builder of a D's admission state reads them.
 * Releasable sessions: idle ones (`release=pressure`), or those idle for the reaper's TTL
 * (`release=reaper`: the engine lets go of nothing else). At block granularity the pool and the
 * session cache count units: the views give the router tokens.
 */
function decodeStateOf(
  w: SimWorker,
  reaperIdleMs: number | undefined,
  g: KvGeometry,
  loadBackQueueTokens = 0,
): DecodeStateSource {
  return {
    loadBackQueueTokens,
    pool: g.tokenLevel ? w.pool : tokenView(w, g).pool,
    sessions: g.tokenLevel || w.cache === undefined ? w.cache : tokenView(w, g).sessions,
    idleTtlMs: reaperIdleMs,
    transferQueueDepth: w.transferWait.length + w.transfersOnWire,
    retractedQueueDepth: Number.isNaN(w.blockedSince) ? 0 : 1,
  }
}

/** A worker's pool and session cache, which count units, seen in tokens (one per pool and cache). */
class TokenView {
  readonly pool: DecodePoolView
  readonly sessions: DecodeSessionsView | undefined
  constructor(
    readonly of: SimWorker['pool'],
    readonly cache: SimWorker['cache'],
    g: KvGeometry,
  ) {
    const pool = of
    this.pool = {
      size: g.tokens(pool.size),
      availableSize: () => g.tokens(pool.availableSize()),
    }
    const sc = cache
    this.sessions =
      sc === undefined
        ? undefined
        : {
            cache: { evictableSize: () => g.tokens(sc.cache.evictableSize()) },
            // At token level a unit is a token: the statuses as they are, without a copy each.
            listSessionStatuses: g.tokenLevel
              ? () => sc.listSessionStatuses()
              : () => {
                  // A plain loop (Array.from over an iterable costs more than the copies when
                  // the D holds no session, as a request-level trace's D at every admission).
                  const list = sc.listSessionStatuses()
                  const out: (typeof list)[number][] = new Array(list.length)
                  for (let i = 0; i < list.length; i++) {
                    const s = list[i]!
                    out[i] = {
                      ...s,
                      residentTokens: g.tokens(s.residentTokens),
                      hostResidentTokens: g.tokens(s.hostResidentTokens),
                    }
                  }
                  return out
                },
            releasableTokens: (options) => g.tokens(sc.releasableTokens(options)),
          }
  }
}

const views = new WeakMap<SimWorker, TokenView>()

/** The worker's token view, renewed when a restart gave it a new pool and cache. */
function tokenView(w: SimWorker, g: KvGeometry): TokenView {
  let v = views.get(w)
  if (v === undefined || v.of !== w.pool || v.cache !== w.cache) {
    v = new TokenView(w.pool, w.cache, g)
    views.set(w, v)
  }
  return v
}

/**
 * The D's ground truth its admission (Algorithm 2) decides on: capacity, use, evictable KV, its
 * sessions (idle ones with what releasing each alone frees), live leases and queue depths.
 * `reaperIdleMs`: with `release=reaper`, only sessions idle that long count as idle;
 * `loadBackQueueTokens`: what the D has yet to load back from its host tier.
 */
export function buildAdmitWorkerState(
  d: SimWorker,
  nowMs: number,
  reaperIdleMs: number | undefined,
  g: KvGeometry,
  loadBackQueueTokens = 0,
): AdmitWorkerState {
  return admitWorkerState(decodeStateOf(d, reaperIdleMs, g, loadBackQueueTokens), {
    now: nowMs,
    leases: d.leases?.live(nowMs) ?? [],
  })
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
  g: KvGeometry,
): CapacityReport {
  const reserved = (w.leases?.reservedTokens(nowMs) ?? 0) + w.reservedOutputs
  return decodeCapacityReport(decodeStateOf(w, reaperIdleMs, g), reserved)
}
