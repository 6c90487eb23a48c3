import { LeaseBook } from '../adapters/router.js'
import { type KvEvent, type WorkerKv, createWorkerKv, createWorkerPool } from '../adapters/sessionCache.js'
import type { WorkerPlan } from '../config/runConfig.js'
import type { ActiveFaults } from '../faults/activeFaults.js'
import { hostTierOptions } from '../hostTier/hostTier.js'
import type { SimContext } from './context.js'
import { type Retention, SimWorker } from './worker.js'

/**
 * Creates the run's workers (their KV state from the real packages, registered with the router)
 * and gives a restarted worker fresh, empty KV state. KV events of D workers that keep sessions
 * go to the router (unless a fault loses them); a P's go to the D→P sync when it runs.
 */
export class WorkerFactory {
  readonly #ctx: SimContext
  readonly #faults: ActiveFaults

  constructor(ctx: SimContext, faults: ActiveFaults) {
    this.#ctx = ctx
    this.#faults = faults
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
      capacityTokens: w.pool.size,
      publishesEvents: plan.retention === 'sessions',
    })
  }

  #makeWorker(idx: number, plan: WorkerPlan): SimWorker {
    const { id, role, retention } = plan
    if (retention === 'none') {
      const pool = createWorkerPool(this.#ctx.config.capacity, this.#ctx.config.pageSize)
      return new SimWorker(idx, id, role, retention, undefined, pool, undefined)
    }
    const holder: { w?: SimWorker } = {}
    const kv = this.#makeKv(retention, holder, role)
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
      w.pool = createWorkerPool(this.#ctx.config.capacity, this.#ctx.config.pageSize)
    } else {
      const holder: { w?: SimWorker } = { w }
      const kv = this.#makeKv(w.retention, holder, w.role)
      w.cache = kv.cache
      w.pool = kv.pool
      if (w.leases !== undefined) w.leases = new LeaseBook()
    }
  }

  #makeKv(retention: Retention, holder: { w?: SimWorker }, role: SimWorker['role']): WorkerKv {
    const ctx = this.#ctx
    const config = ctx.config
    const opts = config.options
    const onEvent =
      retention === 'sessions'
        ? (e: KvEvent) => {
            const w = holder.w
            if (w !== undefined) this.#onKvEvent(w, e)
          }
        : role === 'prefill' && config.spec.sync !== undefined
          ? (e: KvEvent) => {
              const w = holder.w
              if (w !== undefined) ctx.sync?.observePrefill(w.id, e)
            }
          : undefined
    return createWorkerKv({
      capacityTokens: config.capacity,
      pageSize: config.pageSize,
      granularity: config.spec.granularity,
      now: () => ctx.now,
      ...(opts.evictionPolicy === undefined ? {} : { evictionPolicy: opts.evictionPolicy }),
      ...(opts.evictGranularity === undefined ? {} : { evictGranularity: opts.evictGranularity }),
      ...(onEvent === undefined ? {} : { onEvent }),
      ...(config.hostTier === undefined ? {} : { hostTier: hostTierOptions(config.hostTier) }),
      onEviction: (freed) => {
        const w = holder.w
        if (w === undefined) return
        w.evictions++
        w.evictedTokens += freed
        if (freed > w.maxEviction) w.maxEviction = freed
      },
    })
  }

  #onKvEvent(w: SimWorker, e: KvEvent): void {
    const c = this.#ctx.counters
    c.kvEvents++
    w.lastEventId = e.eventId
    if (this.#faults.lostEvent(w)) {
      c.kvEventsLost++
      return
    }
    this.#ctx.router.ingest(w.id, e)
  }
}
