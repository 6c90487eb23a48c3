import {
  DEFAULT_TOPOLOGY_PARAMS,
  LeaseBook,
  type RoleSwitch,
  type TopologyAdvice,
  type TopologyParams,
  type WorkerTopologySignal,
  adviseTopology,
} from '../adapters/router.js'
import { buildCapacityReport } from '../admission/decodeState.js'
import type { SimContext } from '../cluster/context.js'
import { EV_ELASTIC } from '../cluster/events.js'
import type { SimWorker } from '../cluster/worker.js'
import type { WorkerFactory } from '../cluster/workerFactory.js'
import { simQueueReport } from './queueReport.js'

/** How often the controller looks at the workers, simulated ms. */
const SAMPLE_MS = 250

/**
 * One role switch of an elastic run, as the result reports it.
 *
 * @example
 * ```ts
 * import type { ElasticSwitch } from '@kvc/sim'
 * const s: ElasticSwitch = { workerId: 'p1', from: 'prefill', to: 'decode', adviseMs: 20_000, switchMs: 20_400 }
 * ```
 */
export interface ElasticSwitch extends RoleSwitch {
  /** When the advisor asked for it (the worker started draining), simulated ms. */
  readonly adviseMs: number
  /** When it restarted in its new role (NaN: still draining at the end). */
  switchMs: number
}

/**
 * `elastic=on` (`kvc` only): the elastic topology advisor of `@kvc/kvc-router` run live. Every
 * 250 simulated ms it samples which workers are prefilling; every `intervalS` it hands the
 * advisor each worker's prefill utilisation over the window, its prefill queue and (a D) its KV
 * pressure, the share of its KV its admission cannot free. A worker the advice switches is
 * drained (the router stops sending it work; its turns run to their end), then restarted empty
 * in its new role and registered with the router again. The switches are in the run's result.
 */
export class ElasticController {
  readonly #ctx: SimContext
  readonly #factory: WorkerFactory
  readonly #params: TopologyParams
  readonly #adviseEvery: number
  #samples = 0
  #busy: Float64Array
  #lastChangeAt: number | undefined
  #draining: { w: SimWorker; to: 'prefill' | 'decode'; record: ElasticSwitch } | undefined
  /** Every switch of the run, in order. */
  readonly switches: ElasticSwitch[] = []
  /** The last advice. */
  last: TopologyAdvice | undefined

  constructor(
    ctx: SimContext,
    factory: WorkerFactory,
    intervalS: number,
    params: Partial<TopologyParams> = {},
  ) {
    this.#ctx = ctx
    this.#factory = factory
    this.#params = { ...DEFAULT_TOPOLOGY_PARAMS, ...params }
    this.#adviseEvery = Math.max(1, Math.round((intervalS * 1000) / SAMPLE_MS))
    this.#busy = new Float64Array(ctx.workers.length)
  }

  /** Schedule the first sample. */
  start(): void {
    this.#ctx.q.push(SAMPLE_MS, EV_ELASTIC, 0, 0)
  }

  /** `EV_ELASTIC`: sample; every `intervalS`, advise; finish a drain that is done. */
  tick(): void {
    const ctx = this.#ctx
    for (const w of ctx.workers) if (w.alive && w.running !== undefined) this.#busy[w.idx]!++
    this.#samples++
    if (this.#draining !== undefined) this.#finishDrain()
    if (this.#samples >= this.#adviseEvery) {
      this.#advise()
      this.#samples = 0
      this.#busy.fill(0)
    }
    if (ctx.unfinished()) ctx.q.push(ctx.now + SAMPLE_MS, EV_ELASTIC, 0, 0)
  }

  #signal(w: SimWorker): WorkerTopologySignal {
    const ctx = this.#ctx
    const role = w.role === 'prefill' ? 'prefill' : 'decode'
    let pressure = 0
    if (role === 'decode' && w.alive) {
      const g = ctx.config.geometry
      const r = buildCapacityReport(w, ctx.now, ctx.config.reaper?.idleMs, g)
      const free = r.freeTokens + r.evictableTokens - (r.reservedTokens ?? 0) + (r.releasableTokens ?? 0)
      pressure = Math.min(1, Math.max(0, 1 - free / g.tokens(w.pool.size)))
    }
    const d = this.#draining
    return {
      id: w.id,
      role,
      ...(d !== undefined && d.w === w ? { switchingTo: d.to } : {}),
      prefillBusy: Math.min(1, this.#busy[w.idx]! / Math.max(1, this.#samples)),
      prefillQueueS: w.alive ? (simQueueReport(ctx, w.id)?.prefillQueueS ?? 0) : 0,
      kvPressure: pressure,
    }
  }

  #advise(): void {
    const ctx = this.#ctx
    const advice = adviseTopology(
      {
        now: ctx.now,
        workers: ctx.workers.map((w) => this.#signal(w)),
        ...(this.#lastChangeAt === undefined ? {} : { lastChangeAt: this.#lastChangeAt }),
      },
      this.#params,
    )
    this.last = advice
    const sw = advice.switches[0]
    if (sw === undefined) return
    const w = ctx.byId.get(sw.workerId)!
    if (!w.alive) return
    const record: ElasticSwitch = { ...sw, adviseMs: ctx.now, switchMs: Number.NaN }
    this.switches.push(record)
    this.#lastChangeAt = ctx.now
    this.#draining = { w, to: sw.to, record }
    ctx.router.cluster.setDraining(w.id, true)
    this.#finishDrain()
  }

  /** The draining worker holds nothing any more: restart it, empty, in its new role. */
  #finishDrain(): void {
    const d = this.#draining!
    const w = d.w
    if (!w.alive) {
      this.#draining = undefined
      return
    }
    const idle =
      w.holders.size === 0 &&
      w.running === undefined &&
      w.queued() === 0 &&
      w.transferWait.length === 0 &&
      w.transfersOnWire === 0 &&
      w.decode.length === 0
    if (!idle) return
    const ctx = this.#ctx
    ctx.router.cluster.removeWorker(w.id)
    const from = ctx.workers.find((x) => x !== w && (x.role === 'prefill') === (d.to === 'prefill'))
    w.role = d.to
    w.retention = d.to === 'prefill' ? 'prefix' : (from?.retention ?? 'sessions')
    w.leases = w.retention === 'sessions' ? new LeaseBook() : undefined
    this.#factory.renewKv(w)
    w.lastEventId = -1
    const out = d.to === 'prefill' ? ctx.decodeWorkers : ctx.prefillWorkers
    const into = d.to === 'prefill' ? ctx.prefillWorkers : ctx.decodeWorkers
    out.splice(out.indexOf(w), 1)
    into.push(w)
    ctx.router.cluster.addWorker({
      id: w.id,
      role: d.to,
      capacityTokens: ctx.config.geometry.tokens(w.pool.size),
      publishesEvents: w.retention !== 'none',
    })
    ctx.touch(w)
    d.record.switchMs = ctx.now
    this.#draining = undefined
  }
}
