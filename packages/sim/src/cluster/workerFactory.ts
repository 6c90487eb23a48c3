import { LeaseBook, consumesKvEvents } from '../adapters/router.js'
import {
  type KvEvent,
  type PagedAllocator,
  type WorkerKv,
  createWorkerKv,
  createWorkerPool,
} from '../adapters/sessionCache.js'
import type { WorkerPlan } from '../config/runConfig.js'
import type { ActiveFaults } from '../faults/activeFaults.js'
import { hostTierOptions } from '../hostTier/hostTier.js'
import type { SimContext } from './context.js'
import { SimWorker } from './worker.js'

/**
 * Creates the run's workers (their KV state from the real packages, registered with the router)
 * and gives a restarted worker fresh, empty KV state. Every worker that keeps a prefix cache
 * publishes its KV events, one per page as SGLang's radix cache does, to the router's residency
 * index (a D's or a colocated worker's to the D workers' index, a P's to the P workers'), unless a
 * fault loses them or the policy reads none (`consumesKvEvents`); a P's also go to the D→P sync
 * when it runs. A worker without a cache (the D of classic P/D, SGLang's default `ChunkCache`)
 * publishes nothing.
 */
export class WorkerFactory {
  readonly #ctx: SimContext
  readonly #faults: ActiveFaults

  /** A `lost-kv-events` fault is configured: every page's event must be its own. */
  readonly #losesEvents: boolean
  /** No fault is configured: no window ever opens and nothing strikes, every event is delivered. */
  readonly #faultFree: boolean

  constructor(ctx: SimContext, faults: ActiveFaults) {
    this.#ctx = ctx
    this.#faults = faults
    this.#losesEvents = ctx.config.faults.some((f) => f.kind === 'lost-kv-events')
    this.#faultFree = faults.specs.length === 0
  }

  /** Create the configured workers, in order, and register each with the router. */
  addAll(): void {
    for (const plan of this.#ctx.config.workers) this.#add(plan)
  }

  #add(plan: WorkerPlan): void {
    const ctx = this.#ctx
    const w = this.#makeWorker(ctx.workers.length, plan)
    ctx.workers.push(w)
    ctx.byId.set(plan.id, w)
    if (plan.role !== 'prefill') ctx.decodeWorkers.push(w)
    else ctx.prefillWorkers.push(w)
    ctx.router.cluster.addWorker({
      id: plan.id,
      role: plan.role === 'prefill' ? 'prefill' : 'decode',
      capacityTokens: ctx.config.geometry.tokens(w.pool.size),
      publishesEvents: plan.retention !== 'none',
    })
  }

  #makeWorker(idx: number, plan: WorkerPlan): SimWorker {
    const { id, role, retention } = plan
    if (retention === 'none') {
      const pool = this.#pool()
      return new SimWorker(idx, id, role, retention, undefined, pool, undefined)
    }
    const holder: { w?: SimWorker } = {}
    const kv = this.#makeKv(holder, role)
    const w = new SimWorker(
      idx,
      id,
      role,
      retention,
      kv.cache,
      kv.pool,
      retention === 'sessions' ? new LeaseBook() : undefined,
    )
    holder.w = w
    return w
  }

  /** A restarted worker comes back empty: a new pool (and cache, and lease book). */
  renewKv(w: SimWorker): void {
    if (w.retention === 'none') {
      w.pool = this.#pool()
    } else {
      const holder: { w?: SimWorker } = { w }
      const kv = this.#makeKv(holder, w.role)
      w.cache = kv.cache
      w.pool = kv.pool
      if (w.leases !== undefined) w.leases = new LeaseBook()
    }
  }

  /** A bare pool of the configured capacity, in cache units. */
  #pool(): PagedAllocator {
    const g = this.#ctx.config.geometry
    return createWorkerPool(g.wholeUnits(this.#ctx.config.capacity), g.pageUnits)
  }

  #makeKv(holder: { w?: SimWorker }, role: SimWorker['role']): WorkerKv {
    const ctx = this.#ctx
    const config = ctx.config
    const opts = config.options
    const toSync = role === 'prefill' && config.spec.sync !== undefined
    const toRouter = consumesKvEvents(config.spec)
    const onEvent =
      toSync || toRouter
        ? (e: KvEvent) => {
            const w = holder.w
            if (w === undefined) return
            if (toSync) ctx.sync?.observePrefill(w.id, e)
            if (toRouter) this.#onKvEvent(w, e)
          }
        : undefined
    const g = config.geometry
    return createWorkerKv({
      capacityTokens: g.wholeUnits(config.capacity),
      pageSize: g.pageUnits,
      granularity: config.spec.granularity,
      now: () => ctx.now,
      ...(opts.evictionPolicy === undefined ? {} : { evictionPolicy: opts.evictionPolicy }),
      ...(opts.evictGranularity === undefined ? {} : { evictGranularity: opts.evictGranularity }),
      ...(onEvent === undefined ? {} : { onEvent }),
      ...(config.hostTier === undefined ? {} : { hostTier: hostTierOptions(config.hostTier, g) }),
      // Only the D→P sync rebuilds pages from a P's events; the router reads hashes, and takes
      // a node's pages in one event, unless events get lost (a fault loses one page's event).
      eventTokenIds: toSync,
      eventBatching: toSync || this.#losesEvents ? 'page' : 'node',
      onEviction: (freedUnits) => {
        const w = holder.w
        if (w === undefined) return
        const freed = g.tokens(freedUnits)
        w.evictions++
        w.evictedTokens += freed
        if (freed > w.maxEviction) w.maxEviction = freed
      },
    })
  }

  #onKvEvent(w: SimWorker, e: KvEvent): void {
    const c = this.#ctx.counters
    // Counted per page, as SGLang publishes them, however they are batched here.
    c.kvEvents += e.type === 'AllBlocksCleared' ? 1 : e.blockHashes.length
    w.lastEventId = e.eventId
    if (this.#faultFree) {
      this.#ctx.router.ingest(w.id, e)
      return
    }
    if (this.#faults.lostEvent(w)) {
      c.kvEventsLost++
      return
    }
    if (!this.#faults.deliverKvEvent(w, e, (x) => this.#ctx.router.ingest(w.id, x))) c.kvEventsLost++
  }
}
