import { ElasticController } from '../adaptive/elastic.js'
import { HedgedAdmissions } from '../adaptive/hedgedAdmission.js'
import { SyncFabric } from '../adapters/dtoPSync.js'
import type { DispatchOutcome, PolicySpec, Router, RoutingPolicy } from '../adapters/router.js'
import { buildCapacityReport } from '../admission/decodeState.js'
import { DecodeAdmission } from '../admission/decodeAdmission.js'
import { resolveRunConfig } from '../config/runConfig.js'
import type { RunOptions } from '../config/runOptions.js'
import type { CostModel } from '../cost/costModel.js'
import { DecodeBatches } from '../decode/decodeBatches.js'
import { reapIdleSessions } from '../decode/sessionReaper.js'
import { PreallocQueues } from '../disagg/preallocQueues.js'
import { Prng } from '../engine/prng.js'
import { SimError, SimErrorCode } from '../errors/simError.js'
import { ActiveFaults } from '../faults/activeFaults.js'
import { FaultInjector } from '../faults/faultInjector.js'
import { GatewayTurn } from '../gateway/gatewayTurn.js'
import type { AdaptiveRunInfo, RunResult } from '../metrics/runResult.js'
import type { ServePath, TurnRecord } from '../metrics/types.js'
import { PrefillServers } from '../prefill/prefillServers.js'
import { KvTransfers } from '../transfer/kvTransfers.js'
import { accountRun, collectResult } from './collectResult.js'
import { type PhysicalFailure, SimContext, type SimHost } from './context.js'
import {
  EV_ADMIT_AT_D,
  EV_ARRIVAL_ANSWER,
  EV_ARRIVAL,
  EV_DECODE_TICK,
  EV_ELASTIC,
  EV_FAULT,
  EV_HEDGE,
  EV_MEMORY_TIMEOUT,
  EV_PREALLOC_TIMEOUT,
  EV_PREFILL_DONE,
  EV_REAP,
  EV_SAMPLE,
  EV_STEP,
  EV_SYNC,
  EV_TRANSFER_DEADLINE,
  EV_TRANSFER_DONE,
} from './events.js'
import { SessionBlockKeys } from './sessionBlockKeys.js'
import type { Topology } from './topology.js'
import { type SimAction, type Turn, turnRecord } from './turn.js'
import { WorkerFactory } from './workerFactory.js'
import type { SimWorker } from './worker.js'

/** The outcome of every wait (it carries nothing: one shared object, not one per wait). */
const WAITED: DispatchOutcome = Object.freeze({ type: 'waited' })

/** Period of the D→P sync's rounds, simulated ms. */
const SYNC_ROUND_MS = 1000

/**
 * One discrete-event run of a P/D (or DP) cluster in which the real packages decide: each
 * worker's KV is a `SessionCache` over a `RadixCache` over a `PagedAllocator`; the router's
 * `TurnDispatch` state machine drives every turn (admission on the D with the router's `admit`,
 * fast path, seed path through a P, waits, failures); only GPU time and link time come from the
 * cost model. Deterministic: the same options give the same records.
 *
 * This class runs the event loop and drives each turn's dispatch; the prefill servers, decode
 * batches, KV transfers, D-side admission and fault injection each live in their own module.
 *
 * @example
 * ```ts
 * import { ClusterSimulation, generateAgenticWorkload } from '@kvc/sim'
 * const sim = new ClusterSimulation({
 *   workload: generateAgenticWorkload({ seed: 1, sessions: 4, maxTurnsPerSession: 5 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 2 },
 *   policy: 'kvc',
 *   seed: 1,
 * })
 * const result = sim.run()
 * console.log(result.accounting.completed, result.accounting.failed)
 * ```
 */
export class ClusterSimulation {
  readonly spec: PolicySpec
  readonly policy: RoutingPolicy
  readonly topology: Topology
  readonly cost: CostModel
  readonly pageSize: number
  readonly timeScale: number
  readonly router: Router

  readonly #ctx: SimContext
  readonly #host: SimHost
  readonly #faults: ActiveFaults
  readonly #injector: FaultInjector
  readonly #prefill: PrefillServers
  readonly #decode: DecodeBatches
  readonly #transfers: KvTransfers
  readonly #prealloc: PreallocQueues
  readonly #admission: DecodeAdmission
  readonly #rpcRng: Prng
  readonly #keys: SessionBlockKeys
  readonly #records: (TurnRecord | undefined)[]
  /** `elastic=on`: the elastic topology controller. */
  readonly #elastic: ElasticController | undefined
  /** Hedged admission RPCs (`hedgeAdmissions`). */
  readonly #hedges: HedgedAdmissions
  /** Sessions started and not yet ended, and the first turns waiting for a free session slot. */
  #liveSessions = 0
  #waitingStarts: number[] = []
  #waitingHead = 0
  #firstArrival = Number.POSITIVE_INFINITY
  #lastEnd = 0
  #ran = false

  constructor(options: RunOptions) {
    const config = resolveRunConfig(options)
    this.spec = config.spec
    this.policy = config.policy
    this.topology = config.topology
    this.cost = config.cost
    this.pageSize = config.pageSize
    this.timeScale = config.timeScale
    this.#rpcRng = new Prng(options.seed, 'rpc')
    const ctx = new SimContext(config)
    this.#ctx = ctx
    this.router = ctx.router
    this.router.cluster.seedWaiters.onSlotFreed((turnId) => this.#wakeSeedWaiter(turnId))
    this.#host = {
      kick: (w) => this.#kick(w),
      failPhysical: (turn, cause, detail) => this.#failPhysical(turn, cause, detail),
      step: (turn, outcome) => this.#step(turn, outcome),
    }
    this.#faults = new ActiveFaults(config.faults, new Prng(options.seed, 'faults'), ctx)
    const factory = new WorkerFactory(ctx, this.#faults)
    factory.addAll()
    ctx.sync = this.#createSync()
    this.#decode = new DecodeBatches(ctx, this.#host)
    this.#transfers = new KvTransfers(ctx, this.#host, this.#faults, this.#decode)
    this.#prefill = new PrefillServers(ctx, this.#host, this.#decode, this.#transfers)
    this.#prealloc = new PreallocQueues(ctx, this.#host, this.#prefill)
    this.#admission = new DecodeAdmission(ctx, this.#host)
    this.#injector = new FaultInjector(ctx, this.#host, this.#faults, factory, this.#transfers)
    this.#keys = new SessionBlockKeys(config.geometry.pageUnits)
    this.#records = new Array(ctx.turns.length)
    this.#hedges = new HedgedAdmissions(ctx, {
      answer: (d, turn, a) => this.#admission.answer(d, turn, a),
      latencyMs: () => this.#rpcLatencyMs(),
      timesOut: (d) => this.#faults.admitTimesOut(d),
      deliver: (turn, outcome) => this.#schedule(turn, ctx.now, outcome),
    })
    const el = config.spec.elastic
    this.#elastic =
      el === undefined
        ? undefined
        : new ElasticController(ctx, factory, el.intervalS, { minPrefill: el.minPrefill })
  }

  /** `sync=on`: the D→P sync between every D and every P (none without P workers). */
  #createSync(): SyncFabric | undefined {
    const ctx = this.#ctx
    const sync = this.spec.sync
    if (sync === undefined) return undefined
    const ps = ctx.workers.filter((w) => w.role === 'prefill')
    if (ps.length === 0) return undefined
    return new SyncFabric({
      prefill: ps.map((w) => ({ id: w.id, cache: w.cache!.cache, pool: w.pool })),
      decodeIds: ctx.decodeWorkers.map((w) => w.id),
      pageSize: this.pageSize,
      betaTokens: sync.betaTokens,
      bytesPerSecondPerLink: (this.cost.linkGbps * 1e9 * sync.linkShare) / 8,
      kvBytesPerToken: this.cost.kvBytesPerToken,
      pinTtlMs: sync.pinS * 1000,
    })
  }

  // ------------------------------------------------------------------------------------------
  // Main loop

  /**
   * Run to the end (every turn completed or failed) and return the result. A simulation runs once.
   *
   * @example
   * ```ts
   * import { ClusterSimulation, generateAgenticWorkload } from '@kvc/sim'
   * const r = new ClusterSimulation({ workload: generateAgenticWorkload({ seed: 2, sessions: 2, maxTurnsPerSession: 3 }),
   *   topology: { kind: 'dp', workers: 2 }, policy: 'dp-cache-aware', seed: 2 }).run()
   * r.accounting.balanced // true
   * ```
   */
  run(): RunResult {
    if (this.#ran)
      throw new SimError(
        SimErrorCode.InvalidOption,
        'a ClusterSimulation runs once; create a new one',
        undefined,
      )
    this.#ran = true
    const wallStart = performance.now()
    const ctx = this.#ctx
    this.#scheduleStart()
    const events = this.#loop()
    this.#failUnfinished()
    this.#sample()
    const accounting = accountRun(ctx, this.#records)
    ctx.config.options.onProgress?.(ctx.ended, ctx.turns.length)
    const result = collectResult(ctx, {
      records: this.#records as TurnRecord[],
      accounting,
      events,
      firstArrivalMs: this.#firstArrival,
      lastEndMs: this.#lastEnd,
      decodeGaps: this.#decode.gaps.histograms((t) => this.#records[t]?.status === 'completed'),
      wallStart,
    })
    const adaptive = this.#adaptiveInfo()
    return adaptive === undefined ? result : { ...result, adaptive }
  }

  /** What the adaptive mechanisms did, when one of them was on. */
  #adaptiveInfo(): AdaptiveRunInfo | undefined {
    const ctx = this.#ctx
    const el = this.#elastic
    const params = this.router.context.params
    const tuner = this.router.tuner
    if (el === undefined && !params.hedgeAdmissions && tuner === undefined) return undefined
    const h = this.router.cluster.hedging
    return {
      ...(el === undefined
        ? {}
        : {
            elasticSwitches: el.switches,
            finalTopology: `${ctx.prefillWorkers.length}P${ctx.decodeWorkers.length}D`,
          }),
      ...(params.hedgeAdmissions
        ? { hedges: { sent: this.#hedges.sent, won: h.won, releasedLate: this.#hedges.releasedLate } }
        : {}),
      ...(tuner === undefined ? {} : { tuning: { ...tuner.values, updates: tuner.updates } }),
    }
  }

  /** The first events: arrivals, timed faults, the first usage sample, sync rounds and reaper sweeps. */
  #scheduleStart(): void {
    const ctx = this.#ctx
    const q = ctx.q
    const ts = this.timeScale
    const open = ctx.config.workload.arrivalMode === 'open'
    for (const t of ctx.turns) {
      if (open || t.spec.turnIndex === 0) {
        if (t.spec.session >= 0 && t.spec.turnIndex > 0) continue
        q.push(t.spec.arrivalMs / ts, EV_ARRIVAL, t.id, 0)
      }
    }
    this.#injector.scheduleTimed()
    q.push(0, EV_SAMPLE, 0, 0)
    if (ctx.sync !== undefined) q.push(0, EV_SYNC, 0, 0)
    const reaper = ctx.config.reaper
    if (reaper !== undefined) q.push(reaper.intervalMs, EV_REAP, 0, 0)
    this.#elastic?.start()
  }

  /** Handle events in time order until every turn ended, the queue dried up or the horizon passed. */
  #loop(): number {
    const ctx = this.#ctx
    const q = ctx.q
    const horizonMs = ctx.config.horizonMs
    let events = 0
    while (ctx.unfinished() && q.pop()) {
      events++
      const t = q.time
      if (t > horizonMs) break
      ctx.now = t
      this.#handleEvent(q.kind, q.a, q.b)
      this.#flush()
    }
    return events
  }

  #handleEvent(kind: number, a: number, b: number): void {
    const ctx = this.#ctx
    switch (kind) {
      case EV_ARRIVAL:
        this.#arrive(ctx.turns[a]!)
        break
      case EV_STEP: {
        const turn = ctx.turns[a]!
        if (b === turn.stepSeq && !turn.ended) {
          const o = turn.pending
          turn.pending = undefined
          this.#step(turn, o)
        }
        break
      }
      case EV_ARRIVAL_ANSWER:
        this.#arrivalAnswer(ctx.turns[a]!)
        break
      case EV_ADMIT_AT_D:
        this.#admitAtD(ctx.turns[a]!, b)
        break
      case EV_PREFILL_DONE:
        this.#prefill.done(ctx.workers[a]!, b)
        break
      case EV_DECODE_TICK:
        this.#decode.tick(ctx.workers[a]!, b)
        break
      case EV_TRANSFER_DONE:
        this.#transfers.done(a)
        break
      case EV_TRANSFER_DEADLINE:
        this.#transfers.deadline(a)
        break
      case EV_MEMORY_TIMEOUT:
        this.#prefill.memoryTimeout(ctx.workers[a]!, b)
        break
      case EV_SAMPLE:
        this.#sample()
        break
      case EV_FAULT:
        this.#injector.fire(a, b)
        break
      case EV_SYNC:
        ctx.sync!.round(ctx.now, SYNC_ROUND_MS)
        if (ctx.unfinished()) ctx.q.push(ctx.now + SYNC_ROUND_MS, EV_SYNC, 0, 0)
        break
      case EV_REAP:
        reapIdleSessions(ctx, this.#host, ctx.config.reaper!)
        break
      case EV_PREALLOC_TIMEOUT:
        this.#prealloc.timeout(ctx.turns[a]!, b)
        break
      case EV_ELASTIC:
        this.#elastic?.tick()
        break
      case EV_HEDGE:
        this.#hedges.event(a, b)
        break
    }
  }

  /** Anything still running ran past the horizon (or the queue dried up: a simulator bug). */
  #failUnfinished(): void {
    const ctx = this.#ctx
    const horizonMs = ctx.config.horizonMs
    for (const turn of ctx.turns) {
      if (!turn.ended) {
        if (Number.isNaN(turn.arrivalMs)) turn.arrivalMs = ctx.now
        this.#finalize(
          turn,
          'failed',
          Number.isFinite(horizonMs) && ctx.now >= horizonMs ? 'horizon' : 'stalled',
        )
      }
    }
  }

  /** Capacity reports to the router (as a worker's load endpoint would give them). */
  #flush(): void {
    const ctx = this.#ctx
    const dirty = ctx.dirty
    if (dirty.length === 0) return
    const reaperIdleMs = ctx.config.reaper?.idleMs
    for (const w of dirty) {
      w.dirty = false
      if (!w.alive) continue
      ctx.router.cluster.reportCapacity(
        w.id,
        buildCapacityReport(w, ctx.now, reaperIdleMs, ctx.config.geometry),
      )
    }
    dirty.length = 0
  }

  /** `EV_SAMPLE`: every worker's KV usage now; the next sample while turns remain. */
  #sample(): void {
    const ctx = this.#ctx
    const tS = ctx.now / 1000
    for (const w of ctx.workers) {
      const n = w.usageTimes.length
      if (n > 0 && w.usageTimes[n - 1] === tS) continue
      w.usageTimes.push(tS)
      w.usage.push(w.alive ? Math.round(w.usageFraction() * 10_000) / 10_000 : 0)
    }
    if (ctx.unfinished()) ctx.q.push(ctx.now + ctx.config.sampleMs, EV_SAMPLE, 0, 0)
  }

  // ------------------------------------------------------------------------------------------
  // Turns and the router

  #arrive(turn: Turn): void {
    if (turn.ended || turn.dispatch !== undefined) return
    const ctx = this.#ctx
    if (turn.spec.session >= 0 && turn.spec.turnIndex === 0) {
      // The replayer's session concurrency: a new session waits for a free slot.
      if (this.#liveSessions >= ctx.config.maxSessions) {
        this.#waitingStarts.push(turn.id)
        return
      }
      this.#liveSessions++
    }
    turn.arrivalMs = ctx.now
    if (ctx.now < this.#firstArrival) this.#firstArrival = ctx.now
    this.#injector.onArrival()
    const prompt = ctx.config.workload.promptTokens(turn.id)
    turn.prompt = prompt
    turn.keys = this.#keys.keysFor(turn.spec.session, prompt)
    const request = {
      sessionId: turn.key,
      turnId: `t${turn.id}`,
      promptTokens: ctx.config.geometry.promptTokens(prompt.length),
      blocks: turn.keys,
    }
    const gateway = ctx.config.gateway
    try {
      // A baseline's turn goes through its own router's handling (no kvc mechanism); kvc's
      // through the router's Dispatch.
      turn.dispatch =
        gateway === undefined
          ? this.router.dispatch(request)
          : new GatewayTurn(this.router.context, this.policy, request, gateway)
    } catch (err) {
      turn.lastError = (err as Error).message
      this.#finalize(turn, 'failed', 'router_error')
      return
    }
    this.#step(turn, undefined)
  }

  /** Hand the dispatch its outcome (or start it), unless the router is paused. */
  #step(turn: Turn, outcome: DispatchOutcome | undefined): void {
    if (turn.ended) return
    const ctx = this.#ctx
    if (ctx.now < ctx.routerPausedUntil) {
      this.#schedule(turn, ctx.routerPausedUntil, outcome)
      return
    }
    turn.waiting = false
    let action: SimAction
    try {
      action = turn.dispatch!.next(outcome)
    } catch (err) {
      turn.lastError = (err as Error).message
      this.#abandon(turn)
      this.#finalize(turn, 'failed', 'router_error')
      return
    }
    this.#handle(turn, action)
  }

  /**
   * A seed ended and its pending-seed slot is `turnId`'s (first in line for that D): if the turn
   * is waiting out a backoff, it walks now instead of leaving the slot idle until it polls again.
   */
  #wakeSeedWaiter(turnId: string): void {
    const ctx = this.#ctx
    const t = ctx.turns[Number(turnId.slice(1))]
    if (t === undefined || t.ended || !t.waiting) return
    t.waiting = false
    ctx.counters.seedWakes++
    this.#schedule(t, ctx.now, WAITED)
  }

  #schedule(turn: Turn, at: number, outcome: DispatchOutcome | undefined): void {
    const ctx = this.#ctx
    turn.pending = outcome
    turn.stepSeq++
    ctx.q.push(Math.max(at, ctx.now), EV_STEP, turn.id, turn.stepSeq)
  }

  #handle(turn: Turn, a: SimAction): void {
    const ctx = this.#ctx
    switch (a.type) {
      case 'pdPair': {
        turn.seq++
        const p = ctx.byId.get(a.prefillId)
        const d = ctx.byId.get(a.decodeId)
        if (p === undefined || d === undefined || !p.alive || !d.alive) {
          this.#schedule(turn, ctx.now, { type: 'failed', cause: 'worker_unreachable' })
          return
        }
        this.#prealloc.enqueue(p, d, turn)
        return
      }
      case 'admit':
        this.#sendAdmit(turn, a)
        return
      case 'sendFast': {
        turn.seq++
        turn.migratedFrom = a.migratedFrom
        const w = ctx.byId.get(a.workerId)
        if (w === undefined || !w.alive) {
          this.#schedule(turn, ctx.now, { type: 'failed', cause: 'worker_unreachable' })
          return
        }
        if (a.admission !== undefined) {
          // Admission on arrival (`admitOnArrival`): the D decides on the request the send
          // carries as on an RPC; a refusal travels back (one round trip), nothing is prefilled.
          const response = this.#admission.answer(w, turn, {
            type: 'admit',
            turnId: a.turnId,
            workerId: a.workerId,
            request: a.admission,
            timeoutMs: 0,
            attempt: a.attempt,
          })
          ctx.counters.admissions++
          if (!response.admitted) {
            this.#schedule(turn, ctx.now + this.#rpcLatencyMs(), { type: 'admitResult', response })
            return
          }
          // The admitting answer goes back with the response's headers (half a round trip; the
          // send's own way to the D is not modelled, as for every send).
          turn.arrivalAdmission = { workerId: a.workerId, response }
          ctx.q.push(ctx.now + this.#rpcLatencyMs() / 2, EV_ARRIVAL_ANSWER, turn.id, 0)
        }
        // `local` (a local seed) is a fast-path job that prefills what the D lacks of the prompt.
        this.#prefill.enqueue(w, turn, a.path === 'direct' ? 'direct' : 'fast', -1, a.leaseId)
        return
      }
      case 'seedViaP': {
        turn.seq++
        turn.migratedFrom = a.migratedFrom
        const p = ctx.byId.get(a.prefillId)
        const d = ctx.byId.get(a.decodeId)
        if (p === undefined || d === undefined || !p.alive || !d.alive) {
          this.#schedule(turn, ctx.now, { type: 'failed', cause: 'worker_unreachable' })
          return
        }
        // `seedPath=pd` (v5's fallback through the P/D router): the D preallocates first.
        if (ctx.config.spec.seedPath === 'pd') this.#prealloc.enqueue(p, d, turn)
        else this.#prefill.enqueue(p, turn, 'pfill', d.idx, a.leaseId)
        return
      }
      case 'wait':
        turn.waiting = true
        if (ctx.config.gateway !== undefined) ctx.counters.retries++
        this.#schedule(turn, a.untilMs, WAITED)
        return
      case 'done': {
        if (a.migratedFrom !== undefined) {
          this.#releaseSlot(a.migratedFrom, turn.key)
          ctx.sync?.endSession(a.migratedFrom, turn.key)
        }
        this.#finalize(turn, 'completed', undefined, a.path, a.workerId, a.prefillId)
        return
      }
      case 'fail':
        this.#abandon(turn)
        this.#finalize(turn, 'failed', a.cause)
        return
    }
  }

  /** Send the admission RPC: it reaches the D after half its latency, or times out. */
  #sendAdmit(turn: Turn, a: Extract<SimAction, { type: 'admit' }>): void {
    const ctx = this.#ctx
    turn.seq++
    if (a.hedge !== undefined) {
      this.#hedges.start(turn, a)
      return
    }
    ctx.counters.admissions++
    const d = ctx.byId.get(a.workerId)
    if (d === undefined || !d.alive || this.#faults.admitTimesOut(d)) {
      ctx.counters.admissionTimeouts++
      this.#schedule(turn, ctx.now + a.timeoutMs, { type: 'admitTimeout' })
      return
    }
    const latency = this.#rpcLatencyMs()
    turn.admitAction = a
    turn.admitSentMs = ctx.now
    turn.admitLatency = latency
    ctx.q.push(ctx.now + latency / 2, EV_ADMIT_AT_D, turn.id, turn.seq)
  }

  /** One admission RPC's round trip, ms: the cost model's latency and jitter. */
  #rpcLatencyMs(): number {
    const jitter = this.cost.admitRpcJitterS
    return (this.cost.admitRpcS + (jitter === 0 ? 0 : this.#rpcRng.uniform(-jitter, jitter))) * 1000
  }

  /** `EV_ADMIT_AT_D`: the D answers (a dead D never does: the RPC times out); the answer travels back. */
  #admitAtD(turn: Turn, seq: number): void {
    if (turn.ended || turn.seq !== seq || turn.admitAction === undefined) return
    const ctx = this.#ctx
    const a = turn.admitAction
    turn.admitAction = undefined
    const d = ctx.byId.get(a.workerId)!
    if (!d.alive) {
      ctx.counters.admissionTimeouts++
      this.#schedule(turn, turn.admitSentMs + a.timeoutMs, { type: 'admitTimeout' })
      return
    }
    const response = this.#admission.answer(d, turn, a)
    this.#schedule(turn, ctx.now + turn.admitLatency / 2, { type: 'admitResult', response })
  }

  /** `EV_ARRIVAL_ANSWER`: a D's admitting answer to an admission on arrival reaches the router. */
  #arrivalAnswer(turn: Turn): void {
    const answer = turn.arrivalAdmission
    turn.arrivalAdmission = undefined
    if (answer === undefined || !this.router.cluster.has(answer.workerId)) return
    this.router.observeAdmission(answer.workerId, answer.response)
  }

  /** A migrated session's old D lets go of its slot (when no request of it runs there). */
  #releaseSlot(workerId: string, sessionKey: string): void {
    const w = this.#ctx.byId.get(workerId)
    const c = w?.cache
    if (w === undefined || !w.alive || c === undefined || !c.hasSession(sessionKey)) return
    const st = c.getSessionStatus(sessionKey)
    if (st === undefined || st.active) return
    c.releaseSession(sessionKey)
    this.#ctx.touch(w)
    this.#kick(w)
  }

  /** Record the turn's end; its session's next turn (or a waiting session) arrives. */
  #finalize(
    turn: Turn,
    status: 'completed' | 'failed',
    cause: string | undefined,
    path?: ServePath,
    workerId?: string,
    prefillId?: string,
  ): void {
    if (turn.ended) return
    const ctx = this.#ctx
    turn.ended = true
    if (status === 'failed' || Number.isNaN(turn.endMs)) turn.endMs = ctx.now
    this.#records[turn.id] = turnRecord(turn, status, cause, path, workerId, prefillId)
    if (turn.endMs > this.#lastEnd) this.#lastEnd = turn.endMs
    turn.prompt = undefined
    turn.keys = undefined
    turn.dispatch = undefined
    ctx.ended++
    const p = ctx.config.options.onProgress
    if (p !== undefined && (ctx.ended & 255) === 0) p(ctx.ended, ctx.turns.length)
    this.#nextArrival(turn)
  }

  /**
   * The session goes on: its next turn arrives after the think time (closed loop), or at its
   * recorded time but never before this one ended (open loop). After its last turn, its slot
   * goes to the longest-waiting new session.
   */
  #nextArrival(turn: Turn): void {
    const ctx = this.#ctx
    const s = turn.spec
    const next = ctx.turns[turn.id + 1]
    if (next !== undefined && s.session >= 0 && next.spec.session === s.session) {
      const at =
        ctx.config.workload.arrivalMode === 'closed'
          ? ctx.now + next.spec.thinkMs / this.timeScale
          : Math.max(ctx.now, next.spec.arrivalMs / this.timeScale)
      ctx.q.push(at, EV_ARRIVAL, next.id, 0)
    } else if (s.session >= 0) {
      this.#liveSessions--
      if (this.#waitingHead < this.#waitingStarts.length) {
        ctx.q.push(ctx.now, EV_ARRIVAL, this.#waitingStarts[this.#waitingHead++]!, 0)
      }
    }
  }

  // ------------------------------------------------------------------------------------------
  // Failure and cleanup

  /** A physical step failed: release what the turn holds, tell the dispatch. */
  #failPhysical(turn: Turn, cause: PhysicalFailure, detail: string): void {
    turn.lastError = detail
    this.#abandon(turn)
    this.#schedule(turn, this.#ctx.now, { type: 'failed', cause, message: detail })
  }

  /** Release every resource a turn holds on live workers; the turn's pending events go stale. */
  #abandon(turn: Turn): void {
    const w1 = turn.w1
    const w2 = turn.w2
    switch (turn.stage) {
      case 'prealloc':
      case 'queued':
        this.#prealloc.release(turn)
        break
      case 'prefill':
        this.#prefill.abandon(turn, w1)
        this.#prealloc.release(turn)
        break
      case 'transferWait':
      case 'wire':
        this.#transfers.abandon(turn)
        break
      case 'decode':
        this.#decode.abandon(turn, w2)
        break
      default:
        break
    }
    if (w1 !== undefined) w1.holders.delete(turn)
    if (w2 !== undefined) w2.holders.delete(turn)
    turn.stage = 'idle'
    turn.req1 = undefined
    turn.req2 = undefined
    turn.pages2 = undefined
    turn.transfer = undefined
    turn.seq++
  }

  /** Memory was freed (or made evictable) on `w`: retry what waits for it. */
  #kick(w: SimWorker): void {
    if (!w.alive) return
    if (w.transferWait.length > 0) this.#transfers.retry(w)
    if (w.preallocWait.length > 0) this.#prealloc.retry(w)
    if (w.running === undefined && w.qHead < w.queue.length) this.#prefill.tryStart(w)
  }
}

/**
 * Run one simulation (see {@link ClusterSimulation}).
 *
 * @example
 * ```ts
 * import { generateAgenticWorkload, runSimulation } from '@kvc/sim'
 * const r = runSimulation({ workload: generateAgenticWorkload({ seed: 3, sessions: 3, maxTurnsPerSession: 4 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 2 }, policy: 'round-robin', seed: 3 })
 * r.records.length // every turn, completed or failed
 * ```
 */
export function runSimulation(options: RunOptions): RunResult {
  return new ClusterSimulation(options).run()
}
