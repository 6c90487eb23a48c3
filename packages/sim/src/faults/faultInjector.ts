import type { SimContext, SimHost } from '../cluster/context.js'
import { EV_FAULT } from '../cluster/events.js'
import type { WorkerFactory } from '../cluster/workerFactory.js'
import type { SimWorker } from '../cluster/worker.js'
import type { KvTransfers } from '../transfer/kvTransfers.js'
import type { ActiveFaults } from './activeFaults.js'
import { defaultFaultDuration } from './faults.js'

/**
 * Injects the run's faults: the timed ones at their time (`EV_FAULT`), the probabilistic deaths
 * and router pauses at each turn arrival. A worker that dies fails every turn holding something
 * on it and leaves the router's view; it restarts empty when its fault ends.
 */
export class FaultInjector {
  readonly #ctx: SimContext
  readonly #host: SimHost
  readonly #active: ActiveFaults
  readonly #factory: WorkerFactory
  readonly #transfers: KvTransfers

  constructor(
    ctx: SimContext,
    host: SimHost,
    active: ActiveFaults,
    factory: WorkerFactory,
    transfers: KvTransfers,
  ) {
    this.#ctx = ctx
    this.#host = host
    this.#active = active
    this.#factory = factory
    this.#transfers = transfers
  }

  /** Queue the start of every timed fault. */
  scheduleTimed(): void {
    const specs = this.#active.specs
    for (let i = 0; i < specs.length; i++) {
      const f = specs[i]!
      if (f.atS !== undefined) this.#ctx.q.push(f.atS * 1000, EV_FAULT, i, 0)
    }
  }

  /** A turn arrives: the probabilistic deaths (of a random live worker) and router pauses get their chance. */
  onArrival(): void {
    const ctx = this.#ctx
    const active = this.#active
    const rng = active.rng
    for (const kind of ['d-death', 'p-death'] as const) {
      if (active.strikes(kind)) {
        const pool = kind === 'd-death' ? ctx.decodeWorkers : ctx.prefillWorkers
        const alive = pool.filter((w) => w.alive)
        if (alive.length > 0) {
          const w = alive[rng.int(alive.length)]!
          this.#kill(w)
          const idx = active.windows.length
          active.windows.push({
            kind,
            target: w.id,
            fromMs: ctx.now,
            toMs: ctx.now + active.durationOf(kind),
          })
          ctx.q.push(ctx.now + active.durationOf(kind), EV_FAULT, -1 - idx, 1)
        }
      }
    }
    if (active.strikes('router-pause')) {
      ctx.counters.routerPauses++
      ctx.routerPausedUntil = Math.max(ctx.routerPausedUntil, ctx.now + active.durationOf('router-pause'))
    }
  }

  /** `EV_FAULT`: timed fault `index` starts (phase 0), or probabilistic death window `-1 - index` ends. */
  fire(index: number, phase: number): void {
    const ctx = this.#ctx
    const active = this.#active
    if (index < 0) {
      // End of a probabilistic D death: restart.
      const win = active.windows[-1 - index]!
      const w = ctx.byId.get(win.target!)!
      if (!w.alive) this.#restart(w)
      return
    }
    const f = active.specs[index]!
    const from = f.atS! * 1000
    const death = f.kind === 'd-death' || f.kind === 'p-death'
    const forMs = (f.forS ?? (death ? Number.POSITIVE_INFINITY : defaultFaultDuration(f.kind))) * 1000
    switch (f.kind) {
      case 'd-death':
      case 'p-death': {
        if (phase === 0) {
          const pool = f.kind === 'd-death' ? ctx.decodeWorkers : ctx.prefillWorkers
          const target = f.target ?? pool[active.rng.int(pool.length)]!.id
          const w = ctx.byId.get(target)!
          if (w.alive) this.#kill(w)
          if (Number.isFinite(forMs)) {
            active.windows.push({ kind: f.kind, target, fromMs: from, toMs: from + forMs })
            ctx.q.push(from + forMs, EV_FAULT, -active.windows.length, 1)
          }
        }
        return
      }
      case 'router-pause':
        ctx.counters.routerPauses++
        ctx.routerPausedUntil = Math.max(ctx.routerPausedUntil, from + forMs)
        return
      case 'link-flap': {
        const [pid, did] = f.target!.split('-')
        this.#transfers.linkDown(ctx.byId.get(pid!)!, ctx.byId.get(did!)!, from + forMs)
        return
      }
      case 'admit-timeout':
      case 'lost-kv-events':
        active.windows.push({ kind: f.kind, target: f.target, fromMs: from, toMs: from + forMs })
        return
    }
  }

  #kill(w: SimWorker): void {
    const ctx = this.#ctx
    ctx.counters.workerDeaths++
    w.alive = false
    w.life++
    ctx.router.cluster.setHealth(w.id, false)
    const cluster = ctx.router.cluster
    if (w.retention !== 'none') {
      ;(w.role === 'prefill' ? cluster.prefillResidency : cluster.residency).clearWorker(w.id)
    }
    // A P's death fails its seeds on the P side, which the router counts against the P→D link
    // (as a proxy reports a seed's P-side failure), not against the D; a D's is the D's failure.
    const cause = w.role === 'prefill' ? 'transfer_error' : 'worker_error'
    for (const t of [...w.holders]) {
      const turn = ctx.turns[t.id]!
      if (!turn.ended && turn.stage !== 'idle') this.#host.failPhysical(turn, cause, `${w.role} worker died`)
    }
    w.clearOnDeath()
  }

  #restart(w: SimWorker): void {
    this.#factory.renewKv(w)
    w.alive = true
    w.lastEventId = -1
    const cluster = this.#ctx.router.cluster
    if (w.retention !== 'none') {
      ;(w.role === 'prefill' ? cluster.prefillResidency : cluster.residency).resync(w.id, [], -1)
    }
    if (w.role !== 'prefill') this.#ctx.touch(w)
    this.#ctx.router.cluster.setHealth(w.id, true)
  }
}
