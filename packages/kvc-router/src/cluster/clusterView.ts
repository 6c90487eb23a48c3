import type { KvEvent } from '@kvc/radix-cache'
import type { AdmitResponse } from '../admission/contract.js'
import { RouterError, checkLength, checkOption, describeValue } from '../errors/routerError.js'
import { type IngestStatus, ResidencyIndex, type ResidencyIndexOptions } from '../residency/residencyIndex.js'
import { HostResidency } from '../tier/hostResidency.js'
import { DEFAULT_ROUTER_PARAMS, checkRouterParam } from '../route/params.js'
import { LatencyWindow } from '../hedging/latencyWindow.js'
import { SeedWaitQueue } from './seedWaitQueue.js'
import { type ClusterStateStore, InMemoryClusterStateStore, type WorkerLoad } from './stateStore.js'
import { PendingRetractions } from '../retraction/pendingRetractions.js'
import { ArrivalRates } from '../path/arrivalRates.js'

/**
 * `prefill` (P) or `decode` (D). A colocated data-parallel worker (prefill and decode on one
 * engine) is registered as a `decode` worker; policies that never seed (the DP baselines) send
 * every turn straight to it.
 *
 * @example
 * ```ts
 * import type { WorkerRole } from '@kvc/kvc-router'
 * const role: WorkerRole = 'decode'
 * ```
 */
export type WorkerRole = 'prefill' | 'decode'

/**
 * How a worker is registered.
 *
 * @example
 * ```ts
 * import type { WorkerSpec } from '@kvc/kvc-router'
 * const d0: WorkerSpec = { id: 'd0', role: 'decode', capacityTokens: 400_000 }
 * ```
 */
export interface WorkerSpec {
  readonly id: string
  readonly role: WorkerRole
  /** KV pool size in tokens. */
  readonly capacityTokens: number
  /** Default true. */
  readonly healthy?: boolean
  /** Whether the worker publishes KV events (default true). Without them the residency index relies on router-side updates. */
  readonly publishesEvents?: boolean
  /** Id of the last KV event already reflected (default -1). */
  readonly lastEventId?: number
}

/**
 * A capacity report from a D worker (for example from `/get_load`, `/v1/loads` or the
 * simulator): its free and evictable tokens and the tokens reserved by admission leases.
 *
 * @example
 * ```ts
 * import type { CapacityReport } from '@kvc/kvc-router'
 * const r: CapacityReport = { freeTokens: 120_000, evictableTokens: 60_000, reservedTokens: 4_096 }
 * ```
 */
export interface CapacityReport {
  readonly freeTokens: number
  readonly evictableTokens: number
  readonly reservedTokens?: number
  /**
   * Tokens idle sessions hold (locked, so not evictable) that the worker's admission would
   * release on demand: `SessionCache.releasableTokens()`. Route counts them only for a fast-path
   * turn on the session's own D; absent: 0.
   */
  readonly releasableTokens?: number
  readonly transferQueueDepth?: number
  readonly retractedQueueDepth?: number
}

/**
 * A worker's queues, as its load endpoint reports them (SGLang's `/v1/loads` gives the waiting
 * and running requests): what the adaptive path choice reads to estimate how long a prefill on
 * this worker waits and how many decodes a local prefill would stall. Every field is optional;
 * `prefillQueueS` is used when given, else `prefillQueueTokens` and `prefillQueueRequests` are
 * converted with the cost model.
 *
 * @example
 * ```ts
 * import type { QueueReport } from '@kvc/kvc-router'
 * const q: QueueReport = { prefillQueueS: 0.4, runningRequests: 6 }
 * ```
 */
export interface QueueReport {
  /** Seconds of prefill work queued, the running prefill's rest included. */
  readonly prefillQueueS?: number
  /** Tokens waiting for prefill (running prefill included). */
  readonly prefillQueueTokens?: number
  /** Requests waiting for prefill (running prefill included). */
  readonly prefillQueueRequests?: number
  /** Requests in the running decode batch. */
  readonly runningRequests?: number
}

/**
 * A read-only snapshot of one worker, as {@link ClusterView.worker} returns it.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 1000 }] })
 * router.cluster.worker('d0').availableTokens // 1000
 * ```
 */
export interface WorkerInfo {
  readonly id: string
  readonly role: WorkerRole
  readonly capacityTokens: number
  readonly healthy: boolean
  readonly draining: boolean
  readonly publishesEvents: boolean
  /** Free + evictable − reserved at the last report, minus what was admitted since. */
  readonly availableTokens: number
  /** Idle sessions' tokens the worker would release on demand (last report or admission answer). */
  readonly releasableTokens: number
  readonly transferQueueDepth: number
  readonly retractedQueueDepth: number
  readonly pauseUntil: number
  readonly load: WorkerLoad
}

/**
 * Health of the transfers from one P to one D (in the research prototype one P carried 99% of the
 * transfer errors towards a hot D: `docs/design/prototype.md#p-choice-blind-to-link-health`).
 *
 * @example
 * ```ts
 * import type { LinkHealth } from '@kvc/kvc-router'
 * const h: LinkHealth = { consecutiveFailures: 2, failures: 5, successes: 90, lastFailureAt: 12_000 }
 * ```
 */
export interface LinkHealth {
  readonly consecutiveFailures: number
  readonly failures: number
  readonly successes: number
  readonly lastFailureAt: number
}

/**
 * @internal The live record of a D worker that Route reads directly (one array, aligned with
 * `decodeIds()`, no map lookups on the hot path).
 */
export interface DecodeWorkerRecord {
  readonly id: string
  /** Its KV pool (tokens). */
  readonly capacityTokens: number
  readonly healthy: boolean
  readonly draining: boolean
  readonly available: number
  readonly releasable: number
  /** Its slot in the residency index. */
  readonly slot: number
}

interface WorkerState {
  readonly id: string
  readonly role: WorkerRole
  slot: number
  readonly capacityTokens: number
  healthy: boolean
  draining: boolean
  readonly publishesEvents: boolean
  available: number
  releasable: number
  transferQueueDepth: number
  retractedQueueDepth: number
}

interface MutableLink {
  consecutiveFailures: number
  failures: number
  successes: number
  lastFailureAt: number
}

/**
 * A negative admission answer kept for the staleness budget.
 *
 * @example
 * ```ts
 * import { ClusterView } from '@kvc/kvc-router'
 * const view = new ClusterView({ now: () => 0 })
 * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
 * view.cachedRejection('d0', 50)?.response.reason // undefined: nothing cached yet
 * ```
 */
export interface CachedAdmission {
  readonly at: number
  readonly needTokens: number
  readonly response: AdmitResponse
}

/**
 * Options of {@link ClusterView} (usually built by `Router`).
 *
 * @example
 * ```ts
 * import { ClusterView, InMemoryClusterStateStore } from '@kvc/kvc-router'
 * const view = new ClusterView({ now: () => 0, store: new InMemoryClusterStateStore() })
 * ```
 */
export interface ClusterViewOptions {
  readonly now: () => number
  readonly store?: ClusterStateStore
  readonly residency?: ResidencyIndexOptions
  readonly linkFailureThreshold?: number
  readonly linkCooldownMs?: number
  /**
   * Where {@link ClusterView.queue} reads a worker's queues on demand (a host that knows them at
   * once: the simulator, an in-process engine); else the last {@link ClusterView.reportQueue}.
   */
  readonly queueSource?: (workerId: string) => QueueReport | undefined
}

/**
 * The router's pure view of the cluster: P and D workers with capacity, load, health and pause
 * state; the residency index of the D workers and, apart, that of the P workers (a P's prefix
 * cache publishes KV events too: KV-aware P choices read it); P→D link health; and, through a
 * {@link ClusterStateStore}, the shared part (session bindings, in-flight load, pending seeds,
 * pause hints, rejects and exclusions). Updated only by explicit calls; never reads a clock or
 * a random source of its own.
 *
 * @example
 * ```ts
 * import { ClusterView } from '@kvc/kvc-router'
 * let t = 0
 * const view = new ClusterView({ now: () => t })
 * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 200_000 })
 * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 400_000 })
 * view.reportCapacity('d0', { freeTokens: 100_000, evictableTokens: 50_000 })
 * view.worker('d0').availableTokens // 150000
 * ```
 */
export class ClusterView {
  /** The residency index over the D workers. */
  readonly residency: ResidencyIndex
  /** What the D workers hold below the device (host and disk tiers), from tier KV events. */
  readonly hostResidency = new HostResidency()
  /**
   * The residency index over the P workers, fed by their KV events (the P's radix cache publishes
   * them as a D's does). Kept apart from {@link ClusterView.residency} so that P workers never
   * count as holders in the D workers' overlap (or its boilerplate threshold).
   */
  readonly prefillResidency: ResidencyIndex
  /** The shared state. */
  readonly store: ClusterStateStore
  /** Turns waiting for D workers' pending-seed slots, oldest first (this replica's). */
  readonly seedWaiters = new SeedWaitQueue()
  /** The last 256 admission RPC latencies Dispatch observed (hedged admission's delay). */
  readonly admissionLatency = new LatencyWindow(256)
  /** Hedged admissions: second RPCs sent, and those whose D admitted first. */
  readonly hedging = { sent: 0, won: 0 }
  /**
   * Sessions a D retracted (`AdmitResponse.retractedSessions`) while a turn of theirs ran here →
   * that D: the exclusion is applied again once that turn succeeds (its success would otherwise
   * lift it). An entry goes when the session's last running turn ends.
   */
  readonly retractions = new PendingRetractions()
  /**
   * Turns this replica sent each D to prefill (fast path, local seeds), per second over the
   * last minute (decayed): the head-of-line input of the adaptive path choice.
   */
  readonly arrivals = new ArrivalRates()
  readonly #now: () => number
  readonly #workers = new Map<string, WorkerState>()
  #decodeIds: string[] = []
  #decodeStates: WorkerState[] = []
  #prefillIds: string[] = []
  readonly #links = new Map<string, MutableLink>()
  readonly #admissionCache = new Map<string, CachedAdmission>()
  readonly #linkThreshold: number
  readonly #linkCooldown: number
  readonly #queues = new Map<string, QueueReport>()
  #queueSource: ((workerId: string) => QueueReport | undefined) | undefined

  constructor(options: ClusterViewOptions) {
    checkOption(
      typeof options?.now === 'function',
      `now must be a function, got ${describeValue(options?.now)}`,
      options?.now,
    )
    this.#now = options.now
    this.store = options.store ?? new InMemoryClusterStateStore()
    this.residency = new ResidencyIndex(options.residency)
    this.prefillResidency = new ResidencyIndex(options.residency)
    // The router's parameters, with its defaults and rules (a Router passes its own params).
    this.#linkThreshold = checkRouterParam(
      'linkFailureThreshold',
      options.linkFailureThreshold ?? DEFAULT_ROUTER_PARAMS.linkFailureThreshold,
    )
    this.#linkCooldown = checkRouterParam(
      'linkCooldownMs',
      options.linkCooldownMs ?? DEFAULT_ROUTER_PARAMS.linkCooldownMs,
    )
    this.setQueueSource(options.queueSource)
  }

  /**
   * Sets (or, with `undefined`, removes) the function {@link ClusterView.queue} asks first.
   *
   * @throws RouterError `INVALID_OPTION` when `source` is not a function.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.setQueueSource(() => ({ runningRequests: 3 }))
   * view.queue('d0')?.runningRequests // 3
   * ```
   */
  setQueueSource(source: ((workerId: string) => QueueReport | undefined) | undefined): void {
    checkOption(
      source === undefined || typeof source === 'function',
      `queueSource must be a function, got ${describeValue(source)}`,
      source,
    )
    this.#queueSource = source
  }

  /**
   * Records a worker's queues (P or D; see {@link QueueReport}), as its load endpoint gave them.
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_LENGTH` (a negative or non-finite field).
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 1_000 })
   * view.reportQueue('p0', { prefillQueueTokens: 12_000, prefillQueueRequests: 2 })
   * view.queue('p0')?.prefillQueueTokens // 12000
   * ```
   */
  reportQueue(id: string, report: QueueReport): void {
    this.#get(id)
    checkOption(
      typeof report === 'object' && report !== null,
      `a queue report must be an object, got ${describeValue(report)}`,
      report,
    )
    for (const k of [
      'prefillQueueS',
      'prefillQueueTokens',
      'prefillQueueRequests',
      'runningRequests',
    ] as const) {
      const v = report[k]
      if (v !== undefined && !(typeof v === 'number' && Number.isFinite(v) && v >= 0)) {
        throw new RouterError(
          'INVALID_LENGTH',
          `${k} must be a finite number >= 0, got ${describeValue(v)}`,
          v,
        )
      }
    }
    this.#queues.set(id, { ...report })
  }

  /**
   * A worker's queues: from the queue source when one is set and answers, else the last report,
   * else `undefined` (the caller falls back on the router's own load counters).
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.queue('d0') // undefined: nothing reported
   * ```
   */
  queue(id: string): QueueReport | undefined {
    const fromSource = this.#queueSource?.(id)
    return fromSource ?? this.#queues.get(id)
  }

  /**
   * Registers a worker. D workers also join the residency index, P workers the P residency index.
   *
   * @throws RouterError `DUPLICATE_WORKER`, `INVALID_OPTION`, `INVALID_LENGTH`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.decodeIds() // ['d0']
   * ```
   */
  addWorker(spec: WorkerSpec): void {
    checkOption(
      typeof spec === 'object' && spec !== null,
      `a worker spec must be an object, got ${describeValue(spec)}`,
      spec,
    )
    checkOption(
      typeof spec.id === 'string' && spec.id.length > 0,
      `a worker id must be a non-empty string, got ${describeValue(spec.id)}`,
      spec.id,
    )
    checkOption(
      spec.role === 'prefill' || spec.role === 'decode',
      `worker ${spec.id}: role must be 'prefill' or 'decode', got ${describeValue(spec.role)}`,
      spec.role,
    )
    checkLength('capacityTokens', spec.capacityTokens)
    if (this.#workers.has(spec.id)) {
      throw new RouterError('DUPLICATE_WORKER', `worker ${spec.id} already added`, spec.id)
    }
    const eventOpts = spec.lastEventId === undefined ? {} : { lastEventId: spec.lastEventId }
    const slot =
      spec.role === 'decode'
        ? this.residency.addWorker(spec.id, eventOpts)
        : this.prefillResidency.addWorker(spec.id, eventOpts)
    const state: WorkerState = {
      id: spec.id,
      role: spec.role,
      slot,
      capacityTokens: spec.capacityTokens,
      healthy: spec.healthy ?? true,
      draining: false,
      publishesEvents: spec.publishesEvents ?? true,
      available: spec.capacityTokens,
      releasable: 0,
      transferQueueDepth: 0,
      retractedQueueDepth: 0,
    }
    this.#workers.set(spec.id, state)
    if (spec.role === 'decode') {
      this.#decodeIds = [...this.#decodeIds, spec.id]
      this.#decodeStates = [...this.#decodeStates, state]
    } else this.#prefillIds = [...this.#prefillIds, spec.id]
  }

  /**
   * Removes a worker and everything known about it (residency, load, pauses, bindings to it).
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.removeWorker('d0')
   * view.has('d0') // false
   * ```
   */
  removeWorker(id: string): void {
    const w = this.#get(id)
    if (w.role === 'decode') {
      this.residency.removeWorker(id)
      this.hostResidency.clearWorker(id)
      this.#decodeIds = this.#decodeIds.filter((x) => x !== id)
      this.#decodeStates = this.#decodeStates.filter((x) => x.id !== id)
    } else {
      this.prefillResidency.removeWorker(id)
      this.#prefillIds = this.#prefillIds.filter((x) => x !== id)
    }
    this.#workers.delete(id)
    this.#queues.delete(id)
    this.store.dropWorker(id)
    this.seedWaiters.dropWorker(id)
    this.arrivals.forget(id)
    this.#admissionCache.delete(id)
    for (const k of [...this.#links.keys()]) {
      const [p, d] = k.split('\u0000')
      if (p === id || d === id) this.#links.delete(k)
    }
  }

  /**
   * Whether a worker is registered.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * new ClusterView({ now: () => 0 }).has('d0') // false
   * ```
   */
  has(id: string): boolean {
    return this.#workers.has(id)
  }

  /**
   * Ids of the D workers in registration order (the order of tie-breaks).
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * new ClusterView({ now: () => 0 }).decodeIds() // []
   * ```
   */
  decodeIds(): readonly string[] {
    return this.#decodeIds
  }

  /** @internal The D workers' live records, aligned with {@link ClusterView.decodeIds}. */
  decodeRecords(): readonly DecodeWorkerRecord[] {
    return this.#decodeStates
  }

  /**
   * Ids of the P workers in registration order.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * new ClusterView({ now: () => 0 }).prefillIds() // []
   * ```
   */
  prefillIds(): readonly string[] {
    return this.#prefillIds
  }

  /**
   * A snapshot of one worker.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 10 })
   * view.worker('p0').role // 'prefill'
   * ```
   */
  worker(id: string): WorkerInfo {
    const w = this.#get(id)
    return {
      id: w.id,
      role: w.role,
      capacityTokens: w.capacityTokens,
      healthy: w.healthy,
      draining: w.draining,
      publishesEvents: w.publishesEvents,
      availableTokens: w.available,
      releasableTokens: w.releasable,
      transferQueueDepth: w.transferQueueDepth,
      retractedQueueDepth: w.retractedQueueDepth,
      pauseUntil: this.store.pauseUntil(id),
      load: this.store.load(id),
    }
  }

  /**
   * Role of a worker.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.role('d0') // 'decode'
   * ```
   */
  role(id: string): WorkerRole {
    return this.#get(id).role
  }

  /**
   * Marks a worker healthy or not (from health checks, connection errors, the simulator).
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.setHealth('d0', false)
   * view.isEligible('d0') // false
   * ```
   */
  setHealth(id: string, healthy: boolean): void {
    const w = this.#get(id)
    if (typeof healthy !== 'boolean') {
      throw new RouterError(
        'INVALID_OPTION',
        `healthy must be a boolean, got ${describeValue(healthy)}`,
        healthy,
      )
    }
    w.healthy = healthy
    if (!healthy) this.#admissionCache.delete(id)
  }

  /**
   * Drains a worker (no new turns; in-flight ones finish) or undrains it.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.setDraining('d0', true)
   * view.worker('d0').draining // true
   * ```
   */
  setDraining(id: string, draining: boolean): void {
    const w = this.#get(id)
    if (typeof draining !== 'boolean') {
      throw new RouterError(
        'INVALID_OPTION',
        `draining must be a boolean, got ${describeValue(draining)}`,
        draining,
      )
    }
    w.draining = draining
  }

  /**
   * Pauses a worker until `untilMs` (keeps the later of two pauses).
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_OPTION`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.pause('d0', 1_500)
   * view.isPaused('d0') // true
   * ```
   */
  pause(id: string, untilMs: number): void {
    this.#get(id)
    if (typeof untilMs !== 'number' || Number.isNaN(untilMs)) {
      throw new RouterError(
        'INVALID_OPTION',
        `untilMs must be a number, got ${describeValue(untilMs)}`,
        untilMs,
      )
    }
    this.store.setPauseUntil(id, untilMs)
  }

  /**
   * Whether the worker is paused now.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.isPaused('d0') // false
   * ```
   */
  isPaused(id: string): boolean {
    this.#get(id)
    return this.#now() < this.store.pauseUntil(id)
  }

  /**
   * Healthy, not draining and not paused.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.isEligible('d0') // true
   * ```
   */
  isEligible(id: string): boolean {
    const w = this.#get(id)
    return w.healthy && !w.draining && this.#now() >= this.store.pauseUntil(id)
  }

  /** @internal Fast accessor for Route (no snapshot allocation). */
  healthy(id: string): boolean {
    return this.#get(id).healthy
  }
  /** @internal */
  draining(id: string): boolean {
    return this.#get(id).draining
  }
  /** @internal */
  available(id: string): number {
    return this.#get(id).available
  }
  /** @internal */
  publishesEvents(id: string): boolean {
    return this.#get(id).publishesEvents
  }

  /**
   * Records a capacity report from a D worker: `available = free + evictable − reserved`, and
   * the idle sessions' `releasableTokens` apart (see {@link CapacityReport}).
   *
   * @throws RouterError `UNKNOWN_WORKER`, `WRONG_ROLE`, `INVALID_LENGTH`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.reportCapacity('d0', { freeTokens: 300, evictableTokens: 200, reservedTokens: 100 })
   * view.worker('d0').availableTokens // 400
   * ```
   */
  reportCapacity(id: string, report: CapacityReport): void {
    const w = this.#decode(id)
    checkLength('freeTokens', report.freeTokens)
    checkLength('evictableTokens', report.evictableTokens)
    const reserved =
      report.reservedTokens === undefined ? 0 : checkLength('reservedTokens', report.reservedTokens)
    const tq =
      report.transferQueueDepth === undefined
        ? undefined
        : checkLength('transferQueueDepth', report.transferQueueDepth)
    const rq =
      report.retractedQueueDepth === undefined
        ? undefined
        : checkLength('retractedQueueDepth', report.retractedQueueDepth)
    const releasable =
      report.releasableTokens === undefined ? 0 : checkLength('releasableTokens', report.releasableTokens)
    w.available = report.freeTokens + report.evictableTokens - reserved
    w.releasable = releasable
    if (tq !== undefined) w.transferQueueDepth = tq
    if (rq !== undefined) w.retractedQueueDepth = rq
  }

  /**
   * Applies what an admission answer says about the D (`available ≈ capacity × (1 −
   * tokenUsageAfter)`, plus the need when it was not admitted), keeps negative answers for the
   * staleness budget and honours the pause hint.
   *
   * @throws RouterError `UNKNOWN_WORKER`, `WRONG_ROLE`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.applyAdmission('d0', { requestId: 'r', admitted: true, reason: 'ok', residentTokens: 0, needTokens: 100,
   *   tokenUsageAfter: 0.5, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 0 })
   * view.worker('d0').availableTokens // 500
   * ```
   */
  applyAdmission(id: string, response: AdmitResponse): void {
    const w = this.#decode(id)
    const now = this.#now()
    // tokenUsageAfter counts idle sessions' releasable tokens as available; keep them apart.
    const releasable = response.releasableTokens ?? 0
    const avail = Math.round(w.capacityTokens * (1 - response.tokenUsageAfter)) - releasable
    w.available = response.admitted ? avail : avail + response.needTokens
    w.releasable = releasable
    w.transferQueueDepth = response.transferQueueDepth
    w.retractedQueueDepth = response.retractedQueueDepth
    if (response.recommendedPauseMs > 0) this.store.setPauseUntil(id, now + response.recommendedPauseMs)
    if (response.admitted) this.#admissionCache.delete(id)
    else this.#admissionCache.set(id, { at: now, needTokens: response.needTokens, response })
  }

  /**
   * A negative admission answer for this D younger than `maxAgeMs`, if any.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.cachedRejection('d0', 50) // undefined
   * ```
   */
  cachedRejection(id: string, maxAgeMs: number): CachedAdmission | undefined {
    const c = this.#admissionCache.get(id)
    if (c === undefined) return undefined
    if (this.#now() - c.at >= maxAgeMs) return undefined
    return c
  }

  /**
   * Tokens admitted on a D since its last report (keeps `capOk` honest between reports).
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1_000 })
   * view.consumeAvailable('d0', 300)
   * view.worker('d0').availableTokens // 700
   * ```
   */
  consumeAvailable(id: string, tokens: number): void {
    const w = this.#decode(id)
    checkLength('tokens', tokens)
    w.available -= tokens
  }

  /**
   * Records the outcome of a KV transfer from P `p` to D `d`.
   *
   * @throws RouterError `UNKNOWN_WORKER`, `WRONG_ROLE`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 10 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.recordTransfer('p0', 'd0', false)
   * view.linkHealth('p0', 'd0').consecutiveFailures // 1
   * ```
   */
  recordTransfer(p: string, d: string, ok: boolean): void {
    this.#prefill(p)
    this.#decode(d)
    const key = `${p}\u0000${d}`
    let l = this.#links.get(key)
    if (l === undefined) {
      l = { consecutiveFailures: 0, failures: 0, successes: 0, lastFailureAt: Number.NEGATIVE_INFINITY }
      this.#links.set(key, l)
    }
    if (ok) {
      l.successes++
      l.consecutiveFailures = 0
    } else {
      l.failures++
      l.consecutiveFailures++
      l.lastFailureAt = this.#now()
    }
  }

  /**
   * Transfer statistics of the P→D link.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 10 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.linkHealth('p0', 'd0').failures // 0
   * ```
   */
  linkHealth(p: string, d: string): LinkHealth {
    this.#prefill(p)
    this.#decode(d)
    const l = this.#links.get(`${p}\u0000${d}`)
    return l === undefined
      ? { consecutiveFailures: 0, failures: 0, successes: 0, lastFailureAt: Number.NEGATIVE_INFINITY }
      : { ...l }
  }

  /**
   * A link is healthy unless its last `linkFailureThreshold` transfers failed and the last
   * failure is younger than `linkCooldownMs` (after the cooldown one probe is allowed).
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 10 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.linkHealthy('p0', 'd0') // true
   * ```
   */
  linkHealthy(p: string, d: string): boolean {
    const l = this.#links.get(`${p}\u0000${d}`)
    if (l === undefined || l.consecutiveFailures < this.#linkThreshold) return true
    return this.#now() - l.lastFailureAt >= this.#linkCooldown
  }

  /**
   * Seed-path P selection (Algorithm 3): the least loaded (in-flight turns, then prefill tokens,
   * then registration order) among healthy, undrained, unpaused P workers whose link to `d` is
   * healthy, other than `exclude` (Dispatch passes the P a seed just failed on). `undefined` if
   * there is none.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 10 })
   * view.addWorker({ id: 'p1', role: 'prefill', capacityTokens: 10 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.store.addLoad('p0', { turns: 3 })
   * view.pickPrefill('d0') // 'p1'
   * view.pickPrefill('d0', 'p1') // 'p0'
   * ```
   */
  pickPrefill(d: string, exclude?: string): string | undefined {
    let best: string | undefined
    let bestTurns = 0
    let bestTokens = 0
    for (const p of this.#prefillIds) {
      if (p === exclude || !this.isEligible(p) || !this.linkHealthy(p, d)) continue
      const l = this.store.load(p)
      if (
        best === undefined ||
        l.turns < bestTurns ||
        (l.turns === bestTurns && l.prefillTokens < bestTokens)
      ) {
        best = p
        bestTurns = l.turns
        bestTokens = l.prefillTokens
      }
    }
    return best
  }

  /**
   * Feeds one KV event of a worker to its residency index (see `ResidencyIndex.ingest`): a D's to
   * {@link ClusterView.residency}, a P's to {@link ClusterView.prefillResidency}; a D's event of a
   * host or disk tier (its `medium`) updates {@link ClusterView.hostResidency} instead.
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_MESSAGE`, `EVENT_OUT_OF_ORDER`.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * const view = new ClusterView({ now: () => 0 })
   * view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 10 })
   * view.ingest('d0', { type: 'AllBlocksCleared', eventId: 0 }) // 'applied'
   * ```
   */
  ingest(id: string, event: KvEvent): IngestStatus {
    const w = this.#get(id)
    if (w.role !== 'decode') return this.prefillResidency.ingest(id, event)
    const status = this.residency.ingest(id, event)
    // Host and disk tier events (and a reset) also go to the tiers below the device.
    if (status === 'applied' || status === 'gap-applied') this.hostResidency.ingest(id, event)
    return status
  }

  /**
   * The clock the view was built with.
   *
   * @example
   * ```ts
   * import { ClusterView } from '@kvc/kvc-router'
   * new ClusterView({ now: () => 42 }).now() // 42
   * ```
   */
  now(): number {
    return this.#now()
  }

  #get(id: string): WorkerState {
    const w = this.#workers.get(id)
    if (w === undefined) throw new RouterError('UNKNOWN_WORKER', `unknown worker ${String(id)}`, id)
    return w
  }

  #decode(id: string): WorkerState {
    const w = this.#get(id)
    if (w.role !== 'decode') throw new RouterError('WRONG_ROLE', `worker ${id} is not a decode worker`, id)
    return w
  }

  #prefill(id: string): WorkerState {
    const w = this.#get(id)
    if (w.role !== 'prefill') throw new RouterError('WRONG_ROLE', `worker ${id} is not a prefill worker`, id)
    return w
  }
}
