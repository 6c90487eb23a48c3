import { SyncFabric } from '../adapters/dtoPSync.js'
import {
  type AdmitSession,
  type AdmitWorkerState,
  type BlockKeys,
  type DispatchAction,
  type DispatchOutcome,
  LeaseBook,
  type PolicySpec,
  Router,
  type RoutingPolicy,
  type TurnDispatch,
  admit,
  admitOptionsFor,
  createPolicy,
  extendBlockKeys,
  parsePolicySpec,
} from '../adapters/router.js'
import {
  type EvictGranularity,
  type EvictionPolicy,
  type KvEvent,
  SessionCacheError,
  type SessionRequest,
  type WorkerKv,
  createWorkerKv,
  createWorkerPool,
} from '../adapters/sessionCache.js'
import {
  type CostModel,
  decodeStepSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
} from '../cost/costModel.js'
import { EventQueue } from '../engine/eventQueue.js'
import { Prng } from '../engine/prng.js'
import { SimError, SimErrorCode, checkOption } from '../errors/simError.js'
import { type FaultSpec, defaultFaultDuration } from '../faults/faults.js'
import { simBlockHasher } from '../hashing/simBlockHasher.js'
import type { RunAccounting, RunResult } from '../metrics/runResult.js'
import type { ServePath, TurnRecord } from '../metrics/types.js'
import { uniqueTokens } from '../workload/tokens.js'
import type { TurnSpec, Workload } from '../workload/types.js'
import { type Topology, formatTopology, topologyWorkers } from './topology.js'
import { type DecodeSeq, type Job, type Retention, SimWorker, type Transfer } from './worker.js'

/**
 * Options of one simulated run: one workload, one policy, one seed.
 *
 * @example
 * ```ts
 * import type { RunOptions } from '@kvc/sim'
 * import { generateAgenticWorkload } from '@kvc/sim'
 * const o: RunOptions = {
 *   workload: generateAgenticWorkload({ seed: 1, sessions: 4 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 2 },
 *   policy: 'kvc',
 *   seed: 1,
 * }
 * ```
 */
export interface RunOptions {
  readonly workload: Workload
  /** As given on the command line; a `direct` policy (DP cache-aware) runs on `N×DP` with N = P + D. */
  readonly topology: Topology
  /** A policy spec (`kvc`, `round-robin`, `kvc:granularity=session`...). */
  readonly policy: PolicySpec | string
  /** The trial seed: router randomness, RPC jitter and faults derive from it. */
  readonly seed: number
  /** Divides think times and arrival offsets (default 1; 10 compresses time 10×). */
  readonly timeScale?: number
  /** Cost-model overrides (capacity included; `capacityTokens: Infinity` is unlimited). */
  readonly costModel?: Partial<CostModel>
  /** Tokens per KV page (default: the workload's suggestion, else 16). */
  readonly pageSize?: number
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  readonly faults?: readonly FaultSpec[]
  /** Interval of the per-worker KV usage samples, simulated seconds (default 5). */
  readonly sampleIntervalS?: number
  /**
   * Tokens allocated per prefill chunk (SGLang's `--chunked-prefill-size`, default 8,192); also
   * the chunk of KV a transfer lands in. Evictions happen per chunk and, while decoding, per page.
   */
  readonly prefillChunkTokens?: number
  /** A prefill that cannot get KV memory for this long fails with `kv_capacity` (default 30 s). */
  readonly memoryWaitTimeoutS?: number
  /** Turns still running at this simulated time fail with cause `horizon` (default 48 h). */
  readonly horizonS?: number
  /**
   * The replayer's session concurrency: at most this many sessions run at once; a session whose
   * start time comes while that many run waits, first come first served, until one ends (its last
   * turn completed or failed), then starts at once. Unset: every session starts at its time. The
   * seeds' replayer ran 32 (seed 001 §3: "concurrency stays at 32").
   */
  readonly maxConcurrentSessions?: number
  /** Called as turns end: (ended, total). */
  readonly onProgress?: (ended: number, total: number) => void
}

const EV_ARRIVAL = 1
const EV_STEP = 2
const EV_ADMIT_AT_D = 3
const EV_PREFILL_DONE = 4
const EV_DECODE_TICK = 5
const EV_TRANSFER_DONE = 6
const EV_TRANSFER_DEADLINE = 7
const EV_MEMORY_TIMEOUT = 8
const EV_SAMPLE = 9
const EV_FAULT = 10
const EV_SYNC = 11
const EV_REAP = 12
const SYNC_ROUND_MS = 1000

type Stage = 'idle' | 'queued' | 'prefill' | 'transferWait' | 'wire' | 'decode'

interface Turn {
  readonly id: number
  readonly spec: TurnSpec
  readonly key: string
  seq: number
  stepSeq: number
  pending: DispatchOutcome | undefined
  dispatch: TurnDispatch | undefined
  prompt: Uint32Array | undefined
  keys: BlockKeys | undefined
  arrivalMs: number
  firstTokenMs: number
  endMs: number
  ended: boolean
  stage: Stage
  w1: SimWorker | undefined
  w2: SimWorker | undefined
  req1: SessionRequest | undefined
  req2: SessionRequest | undefined
  slots2: Int32Array | undefined
  transfer: Transfer | undefined
  kind: 'fast' | 'direct' | 'pfill' | undefined
  admitAction: Extract<DispatchAction, { type: 'admit' }> | undefined
  admitSentMs: number
  admitLatency: number
  cached: number
  matched: number
  computed: number
  transferred: number
  lastError: string | undefined
  migratedFrom: string | undefined
  /** Waiting out a backoff: a pending-seed slot it is first in line for wakes it early. */
  waiting: boolean
}

interface Link {
  busyUntil: number
  downUntil: number
}

interface FaultWindow {
  readonly kind: FaultSpec['kind']
  readonly target: string | undefined
  readonly fromMs: number
  readonly toMs: number
}

function bytesOf(a: Uint32Array, from: number, to: number): Buffer {
  return Buffer.from(a.buffer, a.byteOffset + from * 4, (to - from) * 4)
}

/** Length of the common prefix of two token arrays (memcmp on chunks, then a scan). */
function commonPrefixLength(a: Uint32Array, b: Uint32Array): number {
  const n = Math.min(a.length, b.length)
  let lo = 0
  let step = 4096
  while (lo < n) {
    const hi = Math.min(n, lo + step)
    if (bytesOf(a, lo, hi).equals(bytesOf(b, lo, hi))) {
      lo = hi
      step *= 2
    } else if (hi - lo > 64) {
      step = Math.max(64, (hi - lo) >> 2)
    } else {
      while (lo < hi && a[lo] === b[lo]) lo++
      return lo
    }
  }
  return n
}

function isOom(err: unknown): boolean {
  return err instanceof SessionCacheError && err.code === 'OUT_OF_MEMORY'
}

/**
 * One discrete-event run of a P/D (or DP) cluster in which the real packages decide: each
 * worker's KV is a `SessionCache` over a `RadixCache` over a `PagedAllocator`; the router's
 * `TurnDispatch` state machine drives every turn (admission on the D with the router's `admit`,
 * fast path, seed path through a P, waits, failures); only GPU time and link time come from the
 * cost model. Deterministic: the same options give the same records.
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
  readonly #workers: SimWorker[] = []
  readonly router: Router

  readonly #w: Workload
  readonly #opts: RunOptions
  readonly #q = new EventQueue(4096)
  readonly #rpcRng: Prng
  readonly #faultRng: Prng
  readonly #turns: Turn[]
  readonly #records: (TurnRecord | undefined)[]
  readonly #byId = new Map<string, SimWorker>()
  readonly #decodeWorkers: SimWorker[] = []
  readonly #prefillWorkers: SimWorker[] = []
  readonly #links = new Map<string, Link>()
  readonly #transfers = new Map<number, Transfer>()
  readonly #faults: readonly FaultSpec[]
  readonly #windows: FaultWindow[] = []
  readonly #sessionKeys = new Map<number, { prompt: Uint32Array; keys: BlockKeys; digests: Uint8Array[] }>()
  readonly #admitOptions
  readonly #memWaitMs: number
  readonly #horizonMs: number
  readonly #maxSessions: number
  /** Sessions started and not yet ended, and the first turns waiting for a free session slot. */
  #liveSessions = 0
  #waitingStarts: number[] = []
  #waitingHead = 0
  readonly #sampleMs: number
  readonly #capacity: number
  readonly #chunk: number
  #sync: SyncFabric | undefined
  /** `release=reaper`: the D workers' idle TTL and sweep period (ms); undefined: release under pressure. */
  readonly #reaper: { readonly idleMs: number; readonly intervalMs: number } | undefined
  #now = 0
  #ended = 0
  #transferSeq = 0
  #routerPausedUntil = 0
  #dirty: SimWorker[] = []
  #firstArrival = Number.POSITIVE_INFINITY
  #lastEnd = 0
  #ran = false
  // counters
  #admissions = 0
  #admissionRejects = 0
  #admissionTimeouts = 0
  #transfersStarted = 0
  #transferTimeouts = 0
  #seedWakes = 0
  #transferErrors = 0
  #kvEvents = 0
  #kvEventsLost = 0
  #deaths = 0
  #pauses = 0
  #memFailures = 0
  #reaped = 0
  #admitReleases = 0

  constructor(options: RunOptions) {
    this.#opts = options
    this.#w = options.workload
    checkOption(this.#w.turns.length > 0, 'the workload has no turns', this.#w.name)
    this.spec = typeof options.policy === 'string' ? parsePolicySpec(options.policy) : options.policy
    this.policy = createPolicy(this.spec)
    this.timeScale = options.timeScale ?? 1
    checkOption(
      Number.isFinite(this.timeScale) && this.timeScale > 0,
      `timeScale must be a positive number, got ${this.timeScale}`,
      this.timeScale,
    )
    this.pageSize = options.pageSize ?? this.#w.suggestedPageSize ?? 16
    checkOption(
      Number.isInteger(this.pageSize) && this.pageSize >= 1 && this.pageSize <= 4096,
      `pageSize must be an integer in [1, 4096], got ${this.pageSize}`,
      this.pageSize,
    )
    this.cost = makeCostModel(options.costModel)
    this.#memWaitMs = (options.memoryWaitTimeoutS ?? 30) * 1000
    this.#chunk = options.prefillChunkTokens ?? 8192
    checkOption(
      Number.isInteger(this.#chunk) && this.#chunk >= 1,
      `prefillChunkTokens must be a positive integer, got ${this.#chunk}`,
      this.#chunk,
    )
    this.#horizonMs = (options.horizonS ?? 48 * 3600) * 1000
    this.#maxSessions = options.maxConcurrentSessions ?? Number.POSITIVE_INFINITY
    checkOption(
      this.#maxSessions === Number.POSITIVE_INFINITY ||
        (Number.isInteger(this.#maxSessions) && this.#maxSessions >= 1),
      `maxConcurrentSessions must be a positive integer, got ${String(options.maxConcurrentSessions)}`,
      options.maxConcurrentSessions,
    )
    this.#sampleMs = (options.sampleIntervalS ?? 5) * 1000
    checkOption(this.#sampleMs > 0, 'sampleIntervalS must be > 0', options.sampleIntervalS)
    this.#faults = options.faults ?? []
    this.#admitOptions = admitOptionsFor(this.spec)
    this.#rpcRng = new Prng(options.seed, 'rpc')
    this.#faultRng = new Prng(options.seed, 'faults')
    const routerRng = new Prng(options.seed, 'router')

    // Topology for this policy.
    const direct = this.policy.pathMode === 'direct'
    let topo = options.topology
    if (direct && topo.kind === 'pd') topo = { kind: 'dp', workers: topologyWorkers(topo) }
    if (!direct && topo.kind === 'dp') {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${this.spec.label} routes through P workers: give an nPmD topology (e.g. 2P6D), not ${formatTopology(topo)}`,
        formatTopology(topo),
      )
    }
    if (!direct && topo.kind === 'pd' && topo.prefill === 0 && this.policy.pathMode === 'seed') {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${this.spec.label} needs at least one P worker`,
        topo,
      )
    }
    this.topology = topo
    this.#capacity = this.#resolveCapacity()

    this.router = new Router({
      now: () => this.#now,
      random: routerRng.asRandom(),
      // The simulated engines publish KV events synchronously, so the router's prediction of a
      // successful turn's blocks (which covers event lag) is off unless the spec turns it on;
      // except with legacy session retention (`granularity=session`), where a session's tail
      // lives outside the tree and no event ever tells the router it is there: the router then
      // learns where a session lives from its successful turns, as the seeds' v5 did from its
      // session binding (its default, `predictOnSuccess: true`).
      params: {
        pageSize: this.pageSize,
        predictOnSuccess: this.spec.granularity === 'session',
        ...this.spec.routerParams,
      },
      policy: this.policy,
      residency: { hasher: simBlockHasher, pageSize: this.pageSize },
    })
    this.router.cluster.seedWaiters.onSlotFreed((turnId) => this.#wakeSeedWaiter(turnId))

    const add = (id: string, role: SimWorker['role'], retention: Retention) => {
      const idx = this.#workers.length
      const w = this.#makeWorker(idx, id, role, retention)
      this.#workers.push(w)
      this.#byId.set(id, w)
      if (role !== 'prefill') this.#decodeWorkers.push(w)
      else this.#prefillWorkers.push(w)
      this.router.cluster.addWorker({
        id,
        role: role === 'prefill' ? 'prefill' : 'decode',
        capacityTokens: w.pool.size,
        publishesEvents: retention === 'sessions',
      })
    }
    if (topo.kind === 'dp') {
      for (let i = 0; i < topo.workers; i++) add(`w${i}`, 'colocated', 'prefix')
    } else {
      for (let i = 0; i < topo.prefill; i++) add(`p${i}`, 'prefill', 'prefix')
      const dRetention: Retention = this.policy.pathMode === 'kvc' ? 'sessions' : 'none'
      for (let i = 0; i < topo.decode; i++) add(`d${i}`, 'decode', dRetention)
    }
    for (const f of this.#faults) {
      if (f.target === undefined) continue
      if (f.kind === 'link-flap') {
        const [p, d] = f.target.split('-')
        if (!this.#byId.has(p!) || !this.#byId.has(d!)) {
          throw new SimError(
            SimErrorCode.InvalidFault,
            `fault target ${f.target}: no such link in ${formatTopology(topo)}`,
            f.target,
          )
        }
      } else if (f.kind === 'd-death' || f.kind === 'lost-kv-events') {
        const w = this.#byId.get(f.target)
        if (w === undefined || w.role === 'prefill') {
          throw new SimError(
            SimErrorCode.InvalidFault,
            `fault target ${f.target}: no such D worker in ${formatTopology(topo)} (workers: ${[...this.#byId.keys()].join(', ')})`,
            f.target,
          )
        }
      } else if (f.kind === 'p-death') {
        const w = this.#byId.get(f.target)
        if (w === undefined || w.role !== 'prefill') {
          throw new SimError(
            SimErrorCode.InvalidFault,
            `fault target ${f.target}: no such P worker in ${formatTopology(topo)} (workers: ${[...this.#byId.keys()].join(', ')})`,
            f.target,
          )
        }
      }
    }
    if (topo.kind === 'dp' && this.#faults.some((f) => f.kind === 'p-death')) {
      throw new SimError(
        SimErrorCode.InvalidFault,
        `p-death needs P workers; ${formatTopology(topo)} has none (colocated workers die with d-death)`,
        'p-death',
      )
    }

    if (this.spec.seedSlot === false && this.policy.pathMode !== 'kvc') {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `policy ${this.spec.label}: seedSlot=off needs the kvc fast path (D workers that keep sessions)`,
        this.spec.label,
      )
    }
    const release = this.spec.release
    if (release?.mode === 'reaper') {
      if (this.policy.pathMode !== 'kvc') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${this.spec.label}: release=reaper needs the kvc fast path (D workers that keep sessions)`,
          this.spec.label,
        )
      }
      this.#reaper = { idleMs: release.idleTtlS * 1000, intervalMs: release.intervalS * 1000 }
    }
    const sync = this.spec.sync
    if (sync !== undefined) {
      if (this.policy.pathMode !== 'kvc') {
        throw new SimError(
          SimErrorCode.InvalidOption,
          `policy ${this.spec.label}: sync=on needs the kvc fast path (D workers that keep sessions)`,
          this.spec.label,
        )
      }
      const ps = this.#workers.filter((w) => w.role === 'prefill')
      if (ps.length > 0) {
        this.#sync = new SyncFabric({
          prefill: ps.map((w) => ({ id: w.id, cache: w.cache!.cache, pool: w.pool })),
          decodeIds: this.#decodeWorkers.map((w) => w.id),
          pageSize: this.pageSize,
          betaTokens: sync.betaTokens,
          bytesPerSecondPerLink: (this.cost.linkGbps * 1e9 * sync.linkShare) / 8,
          kvBytesPerToken: this.cost.kvBytesPerToken,
          pinTtlMs: sync.pinS * 1000,
        })
      }
    }

    this.#turns = this.#w.turns.map((spec) => ({
      id: spec.id,
      spec,
      key: spec.session >= 0 ? `s${spec.session}` : `r${spec.id}`,
      seq: 0,
      stepSeq: 0,
      pending: undefined,
      dispatch: undefined,
      prompt: undefined,
      keys: undefined,
      arrivalMs: Number.NaN,
      firstTokenMs: Number.NaN,
      endMs: Number.NaN,
      ended: false,
      stage: 'idle',
      w1: undefined,
      w2: undefined,
      req1: undefined,
      req2: undefined,
      slots2: undefined,
      transfer: undefined,
      kind: undefined,
      admitAction: undefined,
      admitSentMs: 0,
      admitLatency: 0,
      cached: 0,
      matched: 0,
      computed: 0,
      transferred: 0,
      lastError: undefined,
      migratedFrom: undefined,
      waiting: false,
    }))
    this.#records = new Array(this.#turns.length)
  }

  #resolveCapacity(): number {
    const cap = this.cost.capacityTokens
    if (Number.isFinite(cap)) {
      const c = Math.floor(cap / this.pageSize) * this.pageSize
      checkOption(c >= this.pageSize, `capacity ${cap} is below one page of ${this.pageSize} tokens`, cap)
      checkOption(c <= 2 ** 31 - this.pageSize, `capacity ${cap} is above 2^31 tokens per worker`, cap)
      return c
    }
    // Unlimited: enough for every token of the workload, once.
    let total = 0
    const pad = (this.#w.suggestedPageSize ?? 0) + 2 * this.pageSize + 1
    for (const t of this.#w.turns) total += t.inputLength + t.outputLength + pad
    const c = Math.ceil(total / this.pageSize) * this.pageSize
    if (c > 2 ** 31 - this.pageSize) {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `unlimited capacity needs ${c} tokens per worker, above 2^31: give a finite --capacity`,
        c,
      )
    }
    return c
  }

  #makeWorker(idx: number, id: string, role: SimWorker['role'], retention: Retention): SimWorker {
    if (retention === 'none') {
      const pool = createWorkerPool(this.#capacity, this.pageSize)
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

  #makeKv(retention: Retention, holder: { w?: SimWorker }, role: SimWorker['role']): WorkerKv {
    const onEvent =
      retention === 'sessions'
        ? (e: KvEvent) => {
            const w = holder.w
            if (w !== undefined) this.#onKvEvent(w, e)
          }
        : role === 'prefill' && this.spec.sync !== undefined
          ? (e: KvEvent) => {
              const w = holder.w
              if (w !== undefined) this.#sync?.observePrefill(w.id, e)
            }
          : undefined
    return createWorkerKv({
      capacityTokens: this.#capacity,
      pageSize: this.pageSize,
      granularity: this.spec.granularity,
      now: () => this.#now,
      ...(this.#opts.evictionPolicy === undefined ? {} : { evictionPolicy: this.#opts.evictionPolicy }),
      ...(this.#opts.evictGranularity === undefined ? {} : { evictGranularity: this.#opts.evictGranularity }),
      ...(onEvent === undefined ? {} : { onEvent }),
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
    this.#kvEvents++
    w.lastEventId = e.eventId
    if (this.#lostEvent(w)) {
      this.#kvEventsLost++
      return
    }
    this.router.ingest(w.id, e)
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
    const wall0 = performance.now()
    const ts = this.timeScale
    for (const t of this.#turns) {
      if (this.#w.arrivalMode === 'open' || t.spec.turnIndex === 0) {
        if (t.spec.session >= 0 && t.spec.turnIndex > 0) continue
        this.#q.push(t.spec.arrivalMs / ts, EV_ARRIVAL, t.id, 0)
      }
    }
    for (let i = 0; i < this.#faults.length; i++) {
      const f = this.#faults[i]!
      if (f.atS !== undefined) this.#q.push(f.atS * 1000, EV_FAULT, i, 0)
    }
    this.#q.push(0, EV_SAMPLE, 0, 0)
    if (this.#sync !== undefined) this.#q.push(0, EV_SYNC, 0, 0)
    if (this.#reaper !== undefined) this.#q.push(this.#reaper.intervalMs, EV_REAP, 0, 0)
    const q = this.#q
    let events = 0
    while (this.#ended < this.#turns.length && q.pop()) {
      events++
      const t = q.time
      if (t > this.#horizonMs) break
      this.#now = t
      switch (q.kind) {
        case EV_ARRIVAL:
          this.#arrive(this.#turns[q.a]!)
          break
        case EV_STEP: {
          const turn = this.#turns[q.a]!
          if (q.b === turn.stepSeq && !turn.ended) {
            const o = turn.pending
            turn.pending = undefined
            this.#step(turn, o)
          }
          break
        }
        case EV_ADMIT_AT_D:
          this.#admitAtD(this.#turns[q.a]!, q.b)
          break
        case EV_PREFILL_DONE:
          this.#prefillDone(this.#workers[q.a]!, q.b)
          break
        case EV_DECODE_TICK:
          this.#decodeTick(this.#workers[q.a]!, q.b)
          break
        case EV_TRANSFER_DONE:
          this.#transferDone(q.a)
          break
        case EV_TRANSFER_DEADLINE:
          this.#transferDeadline(q.a)
          break
        case EV_MEMORY_TIMEOUT:
          this.#memoryTimeout(this.#workers[q.a]!, q.b)
          break
        case EV_SAMPLE:
          this.#sample()
          break
        case EV_FAULT:
          this.#fault(q.a, q.b)
          break
        case EV_SYNC:
          this.#sync!.round(this.#now, SYNC_ROUND_MS)
          if (this.#ended < this.#turns.length) this.#q.push(this.#now + SYNC_ROUND_MS, EV_SYNC, 0, 0)
          break
        case EV_REAP:
          this.#reap()
          break
      }
      this.#flush()
    }
    // Anything still running ran past the horizon (or the queue dried up: a simulator bug).
    for (const turn of this.#turns) {
      if (!turn.ended) {
        if (Number.isNaN(turn.arrivalMs)) turn.arrivalMs = this.#now
        this.#finalize(
          turn,
          'failed',
          Number.isFinite(this.#horizonMs) && this.#now >= this.#horizonMs ? 'horizon' : 'stalled',
        )
      }
    }
    this.#sample()
    const records = this.#records as TurnRecord[]
    const byCause: Record<string, number> = {}
    let completed = 0
    let failed = 0
    let named = true
    for (let i = 0; i < records.length; i++) {
      const r = records[i]
      if (r === undefined) {
        named = false
        continue
      }
      if (r.status === 'completed') completed++
      else {
        failed++
        const c = r.cause ?? 'unknown'
        byCause[c] = (byCause[c] ?? 0) + 1
      }
    }
    let poolsBalanced = true
    for (const w of this.#workers) {
      if (!w.alive || w.cache === undefined) continue
      const a = w.cache.poolAccounting()
      // The D→P sync's sink holds the slots of transfers in flight outside the session cache.
      const sink = this.#sync?.reservedTokens(w.id) ?? 0
      if (a.free + a.evictable + a.protected + a.requestOwned + a.sessionHeld + sink !== a.poolSize)
        poolsBalanced = false
    }
    const syncStats = this.#sync?.stats()
    const accounting: RunAccounting = {
      turns: records.length,
      completed,
      failed,
      failedByCause: Object.fromEntries(Object.entries(byCause).sort(([a], [b]) => (a < b ? -1 : 1))),
      balanced: named && completed + failed === this.#turns.length,
      poolsBalanced,
    }
    if (!accounting.balanced) {
      throw new SimError(
        SimErrorCode.Accounting,
        `run accounting failed: ${JSON.stringify(accounting)}`,
        accounting,
      )
    }
    this.#opts.onProgress?.(this.#ended, this.#turns.length)
    const first = Number.isFinite(this.#firstArrival) ? this.#firstArrival : 0
    return {
      policy: this.spec.label,
      policyName: this.policy.name,
      pathMode: this.policy.pathMode,
      seed: this.#opts.seed,
      topology: formatTopology(this.topology),
      timeScale: this.timeScale,
      pageSize: this.pageSize,
      capacityTokens: this.#capacity,
      records,
      makespanS: Math.max(0, this.#lastEnd - first) / 1000,
      usage: this.#workers.map((w) => ({
        workerId: w.id,
        role: w.role,
        timesS: w.usageTimes,
        usage: w.usage,
      })),
      evictions: this.#workers.map((w) => ({
        workerId: w.id,
        evictions: w.evictions,
        evictedTokens: w.evictedTokens,
        meanTokensPerEviction: w.evictions === 0 ? 0 : w.evictedTokens / w.evictions,
        maxTokensPerEviction: w.maxEviction,
      })),
      accounting,
      counters: {
        events,
        admissions: this.#admissions,
        admissionRejects: this.#admissionRejects,
        admissionTimeouts: this.#admissionTimeouts,
        transfers: this.#transfersStarted,
        transferTimeouts: this.#transferTimeouts,
        transferErrors: this.#transferErrors,
        kvEvents: this.#kvEvents,
        kvEventsLost: this.#kvEventsLost,
        workerDeaths: this.#deaths,
        routerPauses: this.#pauses,
        memoryWaitFailures: this.#memFailures,
        sessionsReaped: this.#reaped,
        admissionReleases: this.#admitReleases,
        seedWakes: this.#seedWakes,
        syncBytes: syncStats?.bytesSent ?? 0,
        syncIngestedTokens: syncStats?.ingestedTokens ?? 0,
      },
      wallMs: performance.now() - wall0,
    }
  }

  // ------------------------------------------------------------------------------------------
  // Turns and the router

  #arrive(turn: Turn): void {
    if (turn.ended || turn.dispatch !== undefined) return
    if (turn.spec.session >= 0 && turn.spec.turnIndex === 0) {
      // The replayer's session concurrency: a new session waits for a free slot.
      if (this.#liveSessions >= this.#maxSessions) {
        this.#waitingStarts.push(turn.id)
        return
      }
      this.#liveSessions++
    }
    turn.arrivalMs = this.#now
    if (this.#now < this.#firstArrival) this.#firstArrival = this.#now
    this.#probabilisticArrivalFaults()
    const prompt = this.#w.promptTokens(turn.id)
    turn.prompt = prompt
    turn.keys = this.#keysFor(turn, prompt)
    try {
      turn.dispatch = this.router.dispatch({
        sessionId: turn.key,
        turnId: `t${turn.id}`,
        promptTokens: prompt.length,
        blocks: turn.keys,
      })
    } catch (err) {
      turn.lastError = (err as Error).message
      this.#finalize(turn, 'failed', 'router_error')
      return
    }
    this.#step(turn, undefined)
  }

  #keysFor(turn: Turn, prompt: Uint32Array): BlockKeys {
    const ps = this.pageSize
    const s = turn.spec.session
    const prev = s >= 0 ? this.#sessionKeys.get(s) : undefined
    let shared = 0
    if (prev !== undefined) shared = Math.floor(commonPrefixLength(prev.prompt, prompt) / ps)
    const { keys, digests } = extendBlockKeys(prev?.keys, shared, prev?.digests, prompt, ps, simBlockHasher)
    if (s >= 0) this.#sessionKeys.set(s, { prompt, keys, digests })
    return keys
  }

  /** Hand the dispatch its outcome (or start it), unless the router is paused. */
  #step(turn: Turn, outcome: DispatchOutcome | undefined): void {
    if (turn.ended) return
    if (this.#now < this.#routerPausedUntil) {
      this.#schedule(turn, this.#routerPausedUntil, outcome)
      return
    }
    turn.waiting = false
    let action: DispatchAction
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
    const t = this.#turns[Number(turnId.slice(1))]
    if (t === undefined || t.ended || !t.waiting) return
    t.waiting = false
    this.#seedWakes++
    this.#schedule(t, this.#now, { type: 'waited' })
  }

  #schedule(turn: Turn, at: number, outcome: DispatchOutcome | undefined): void {
    turn.pending = outcome
    turn.stepSeq++
    this.#q.push(Math.max(at, this.#now), EV_STEP, turn.id, turn.stepSeq)
  }

  #handle(turn: Turn, a: DispatchAction): void {
    switch (a.type) {
      case 'admit': {
        turn.seq++
        this.#admissions++
        const d = this.#byId.get(a.workerId)
        if (d === undefined || !d.alive || this.#admitTimesOut(d)) {
          this.#admissionTimeouts++
          this.#schedule(turn, this.#now + a.timeoutMs, { type: 'admitTimeout' })
          return
        }
        const jitter = this.cost.admitRpcJitterS
        const latency =
          (this.cost.admitRpcS + (jitter === 0 ? 0 : this.#rpcRng.uniform(-jitter, jitter))) * 1000
        turn.admitAction = a
        turn.admitSentMs = this.#now
        turn.admitLatency = latency
        this.#q.push(this.#now + latency / 2, EV_ADMIT_AT_D, turn.id, turn.seq)
        return
      }
      case 'sendFast': {
        turn.seq++
        turn.migratedFrom = a.migratedFrom
        const w = this.#byId.get(a.workerId)
        if (w === undefined || !w.alive) {
          this.#schedule(turn, this.#now, { type: 'failed', cause: 'worker_unreachable' })
          return
        }
        this.#enqueue(w, turn, a.path === 'direct' ? 'direct' : 'fast', -1, a.leaseId)
        return
      }
      case 'seedViaP': {
        turn.seq++
        turn.migratedFrom = a.migratedFrom
        const p = this.#byId.get(a.prefillId)
        const d = this.#byId.get(a.decodeId)
        if (p === undefined || d === undefined || !p.alive || !d.alive) {
          this.#schedule(turn, this.#now, { type: 'failed', cause: 'worker_unreachable' })
          return
        }
        this.#enqueue(p, turn, 'pfill', d.idx, a.leaseId)
        return
      }
      case 'wait':
        turn.waiting = true
        this.#schedule(turn, a.untilMs, { type: 'waited' })
        return
      case 'done': {
        if (a.migratedFrom !== undefined) {
          this.#releaseSlot(a.migratedFrom, turn.key)
          this.#sync?.endSession(a.migratedFrom, turn.key)
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

  #releaseSlot(workerId: string, sessionKey: string): void {
    const w = this.#byId.get(workerId)
    const c = w?.cache
    if (w === undefined || !w.alive || c === undefined || !c.hasSession(sessionKey)) return
    const st = c.getSessionStatus(sessionKey)
    if (st === undefined || st.active) return
    c.releaseSession(sessionKey)
    this.#touch(w)
    this.#kick(w)
  }

  #finalize(
    turn: Turn,
    status: 'completed' | 'failed',
    cause: string | undefined,
    path?: ServePath,
    workerId?: string,
    prefillId?: string,
  ): void {
    if (turn.ended) return
    turn.ended = true
    if (status === 'failed' || Number.isNaN(turn.endMs)) turn.endMs = this.#now
    const s = turn.spec
    this.#records[turn.id] = {
      id: turn.id,
      session: s.session,
      turnIndex: s.turnIndex,
      inputLength: s.inputLength,
      outputLength: s.outputLength,
      appendTokens: s.appendTokens,
      reuseFraction: s.reuseFraction,
      arrivalMs: turn.arrivalMs,
      firstTokenMs: status === 'completed' ? turn.firstTokenMs : Number.NaN,
      endMs: turn.endMs,
      status,
      cause: status === 'failed' ? cause : undefined,
      lastError: turn.lastError,
      path: status === 'completed' ? path : undefined,
      workerId: status === 'completed' ? workerId : undefined,
      prefillId: status === 'completed' ? prefillId : undefined,
      migrated: status === 'completed' && turn.migratedFrom !== undefined,
      cachedTokens: turn.cached,
      matchedTokens: turn.matched,
      computedTokens: turn.computed,
      transferredTokens: turn.transferred,
      attempts: turn.dispatch?.record.attempts ?? 0,
    }
    if (turn.endMs > this.#lastEnd) this.#lastEnd = turn.endMs
    turn.prompt = undefined
    turn.keys = undefined
    turn.dispatch = undefined
    this.#ended++
    const p = this.#opts.onProgress
    if (p !== undefined && (this.#ended & 255) === 0) p(this.#ended, this.#turns.length)
    // The session goes on: its next turn arrives after the think time (closed loop), or at its
    // recorded time but never before this one ended (open loop).
    const next = this.#turns[turn.id + 1]
    if (next !== undefined && s.session >= 0 && next.spec.session === s.session) {
      const at =
        this.#w.arrivalMode === 'closed'
          ? this.#now + next.spec.thinkMs / this.timeScale
          : Math.max(this.#now, next.spec.arrivalMs / this.timeScale)
      this.#q.push(at, EV_ARRIVAL, next.id, 0)
    } else if (s.session >= 0) {
      // The session's last turn: its slot goes to the longest-waiting new session.
      this.#liveSessions--
      if (this.#waitingHead < this.#waitingStarts.length) {
        this.#q.push(this.#now, EV_ARRIVAL, this.#waitingStarts[this.#waitingHead++]!, 0)
      }
    }
  }

  // ------------------------------------------------------------------------------------------
  // Admission on the D (Algorithm 2 of the router package, on the D's ground truth)

  #admitAtD(turn: Turn, seq: number): void {
    if (turn.ended || turn.seq !== seq || turn.admitAction === undefined) return
    const a = turn.admitAction
    turn.admitAction = undefined
    const d = this.#byId.get(a.workerId)!
    if (!d.alive) {
      this.#admissionTimeouts++
      this.#schedule(turn, turn.admitSentMs + a.timeoutMs, { type: 'admitTimeout' })
      return
    }
    // The D's ground truth for the prompt: its session's resident tokens (in the state), or,
    // for a session it holds no slot for, the prompt's prefix match on its tree.
    let matched: number | undefined
    const c = d.cache
    if (c !== undefined && turn.prompt !== undefined && !(turn.spec.session >= 0 && c.hasSession(turn.key))) {
      // `seedSlot=off` (v5): the fast path's admission counts only the session's slot as held.
      matched =
        this.spec.seedSlot === false && a.request.path === 'fast'
          ? 0
          : c.cache.matchPrefix(turn.prompt, { readOnly: true }).length
    }
    let decision = admit(
      this.#admitState(d, this.#now),
      a.request,
      { now: this.#now, ...(matched === undefined ? {} : { matchedTokens: matched }) },
      this.#admitOptions,
    )
    if (this.spec.seedAdmission === false && a.request.path === 'seed') {
      // v5's fallback: the D takes every seed unchecked (no lease, no release, no pause hint);
      // the transfer waits for memory in its queue.
      const { leaseMs: _lease, releasedSessions: _released, ...rest } = decision.response
      decision = {
        response: { ...rest, admitted: true, reason: 'ok', recommendedPauseMs: 0 },
        lease: undefined,
        releaseSessions: [],
        expiredLeases: decision.expiredLeases,
      }
    }
    const leases = d.leases
    if (leases !== undefined) {
      for (const id of decision.expiredLeases) leases.release(id)
      if (decision.lease !== undefined) leases.take(decision.lease)
    }
    if (decision.releaseSessions.length > 0 && d.cache !== undefined) {
      for (const s of decision.releaseSessions) {
        const st = d.cache.getSessionStatus(s)
        if (st !== undefined && !st.active) {
          d.cache.releaseSession(s)
          this.#admitReleases++
        }
      }
      this.#kick(d)
    }
    if (!decision.response.admitted) this.#admissionRejects++
    this.#touch(d)
    this.#schedule(turn, this.#now + turn.admitLatency / 2, {
      type: 'admitResult',
      response: decision.response,
    })
  }

  #admitState(d: SimWorker, nowMs: number): AdmitWorkerState {
    const cap = d.pool.size
    const used = cap - d.pool.availableSize()
    const sessions = new Map<string, AdmitSession>()
    let evictable = 0
    if (d.cache !== undefined) {
      evictable = Math.min(used, d.cache.cache.evictableSize())
      // Releasable sessions: idle ones (`release=pressure`), or those idle for the reaper's TTL
      // (`release=reaper`: the engine lets go of nothing else).
      const ttl = this.#reaper?.idleMs ?? 0
      for (const s of d.cache.listSessionStatuses()) {
        const idle = !s.active && this.#now - s.lastAccessTime >= ttl
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

  // ------------------------------------------------------------------------------------------
  // Prefill servers

  #enqueue(
    w: SimWorker,
    turn: Turn,
    kind: Job['kind'],
    decodeIdx: number,
    leaseId: string | undefined,
  ): void {
    turn.stage = 'queued'
    turn.kind = kind
    turn.w1 = w
    turn.w2 = decodeIdx >= 0 ? this.#workers[decodeIdx] : undefined
    w.holders.add(turn)
    w.queue.push({ turn, seq: turn.seq, kind, decodeIdx, leaseId, enqueuedMs: this.#now })
    this.#tryStart(w)
  }

  #tryStart(w: SimWorker): void {
    while (w.alive && w.running === undefined && w.qHead < w.queue.length) {
      const job = w.queue[w.qHead]!
      const turn = this.#turns[job.turn.id]!
      if (job.seq !== turn.seq || turn.ended || turn.stage !== 'queued') {
        w.qHead++
        continue
      }
      if (!this.#startJob(w, job, turn)) {
        if (Number.isNaN(w.blockedSince)) {
          w.blockedSince = this.#now
          w.blockedGen++
          this.#q.push(this.#now + this.#memWaitMs, EV_MEMORY_TIMEOUT, w.idx, w.blockedGen)
          this.#touch(w)
        }
        break
      }
      if (!Number.isNaN(w.blockedSince)) {
        w.blockedSince = Number.NaN
        this.#touch(w)
      }
      w.qHead++
    }
    if (w.qHead > 1024 && w.qHead * 2 > w.queue.length) {
      w.queue = w.queue.slice(w.qHead)
      w.qHead = 0
    }
  }

  /** Create the request on `w`, match, make room and allocate; false (and no change) when short of memory. */
  #openRequest(
    w: SimWorker,
    turn: Turn,
    withSession: boolean,
    reserve: number,
  ): { req: SessionRequest; cached: number } | undefined {
    const cache = w.cache!
    const prompt = turn.prompt!
    const sid = withSession ? turn.key : undefined
    let req: SessionRequest
    let cached: number
    const rid = `${turn.id}.${turn.seq}`
    const make = () => {
      if (sid !== undefined && !cache.hasSession(sid)) cache.openSession(sid)
      req = cache.createRequest(
        sid === undefined ? { rid, inputIds: prompt } : { rid, inputIds: prompt, sessionId: sid },
      )
      cached = cache.matchPrefix(req).length
    }
    try {
      make()
    } catch (err) {
      // The session's slot on this worker diverged from the prompt (another D served it since,
      // or the trace's next prompt does not extend the last output): release it and start over.
      if (!(err instanceof SessionCacheError) || sid === undefined) throw err
      const st = cache.getSessionStatus(sid)
      if (st?.active) throw err
      if (st !== undefined) cache.releaseSession(sid)
      make()
    }
    const newTokens = prompt.length - cached!
    // Admission to the GPU (SGLang's scheduler): the prompt and the outputs of every admitted
    // request must fit in free + evictable memory; idle sessions give up their locks first, least
    // recently used first (`release=pressure`), or not at all (`release=reaper`: only the periodic
    // sweep releases them, so the request waits; two pages of slack per request keep the page
    // rounding of its decode from reaching the session cache's own release fallback). Nothing is
    // evicted yet.
    const lazy = this.#reaper !== undefined && w.retention === 'sessions'
    const need = newTokens + reserve + w.reservedOutputs + (lazy ? 2 * this.pageSize : 0)
    if (w.pool.availableSize() + cache.cache.evictableSize() < need) {
      if (!lazy) cache.evictIdleSessions({ needTokens: need })
      if (lazy || w.pool.availableSize() + cache.cache.evictableSize() < need) {
        cache.abortReq(req!)
        return undefined
      }
    }
    // Allocate chunk by chunk (chunked prefill / layer-wise transfer): each chunk evicts only
    // its own shortfall, as the engine does.
    try {
      for (let done = 0; done < newTokens; ) {
        const k = Math.min(this.#chunk, newTokens - done)
        cache.prefill(req!, k)
        done += k
      }
    } catch (err) {
      cache.abortReq(req!)
      if (isOom(err)) return undefined
      throw err
    }
    return { req: req!, cached: cached! }
  }

  #startJob(w: SimWorker, job: Job, turn: Turn): boolean {
    const out = turn.spec.outputLength
    const decodes = job.kind !== 'pfill'
    const opened = this.#openRequest(
      w,
      turn,
      decodes && w.retention === 'sessions' && turn.spec.session >= 0,
      decodes ? out : 0,
    )
    if (opened === undefined) return false
    if (job.leaseId !== undefined) w.leases?.release(job.leaseId)
    if (decodes) w.reservedOutputs += out
    const input = turn.spec.inputLength
    const cachedCost = Math.min(Math.round(opened.cached * this.#w.tokenScale), input)
    const newCost = Math.max(1, input - cachedCost)
    turn.cached = cachedCost
    turn.matched = opened.cached
    turn.computed = newCost
    turn.stage = 'prefill'
    turn.req1 = opened.req
    this.#advanceDecode(w)
    w.running = job
    w.runningReq = opened.req
    w.prefillGen++
    this.#q.push(
      this.#now + prefillSeconds(this.cost, newCost, cachedCost) * 1000,
      EV_PREFILL_DONE,
      w.idx,
      w.prefillGen,
    )
    this.#refreshDecode(w)
    this.#touch(w)
    return true
  }

  #prefillDone(w: SimWorker, gen: number): void {
    if (!w.alive || gen !== w.prefillGen || w.running === undefined) return
    const job = w.running
    const req = w.runningReq!
    const turn = this.#turns[job.turn.id]!
    this.#advanceDecode(w)
    w.running = undefined
    w.runningReq = undefined
    w.cache!.cacheUnfinishedReq(req)
    if (job.kind === 'pfill') {
      this.#startTransfer(turn, w, this.#workers[job.decodeIdx]!, job.leaseId)
    } else {
      turn.firstTokenMs = this.#now
      this.#startDecode(w, turn, req)
    }
    this.#refreshDecode(w)
    this.#touch(w)
    this.#tryStart(w)
  }

  /** `release=reaper`: every D releases the sessions idle for the TTL, then retries what waits. */
  #reap(): void {
    const r = this.#reaper!
    for (const w of this.#decodeWorkers) {
      if (!w.alive || w.retention !== 'sessions' || w.cache === undefined) continue
      const { released } = w.cache.evictIdleSessions({ idleMs: r.idleMs })
      if (released.length === 0) continue
      this.#reaped += released.length
      this.#touch(w)
      this.#kick(w)
    }
    if (this.#ended < this.#turns.length) this.#q.push(this.#now + r.intervalMs, EV_REAP, 0, 0)
  }

  #memoryTimeout(w: SimWorker, gen: number): void {
    if (!w.alive || gen !== w.blockedGen || Number.isNaN(w.blockedSince)) return
    // The head of the queue waited too long for KV memory: fail it, go on with the next.
    const job = w.queue[w.qHead]
    w.blockedSince = Number.NaN
    this.#touch(w)
    if (job !== undefined) {
      const turn = this.#turns[job.turn.id]!
      w.qHead++
      if (job.seq === turn.seq && !turn.ended) {
        this.#memFailures++
        this.#failPhysical(turn, 'worker_error', 'kv_capacity')
      }
    }
    this.#tryStart(w)
  }

  // ------------------------------------------------------------------------------------------
  // Decode batches (virtual steps; a running prefill stalls the batch)

  #advanceDecode(w: SimWorker): void {
    if (w.decode.length > 0 && Number.isFinite(w.stepMs))
      w.stepsDone += (this.#now - w.lastAdvance) / w.stepMs
    w.lastAdvance = this.#now
  }

  #refreshDecode(w: SimWorker): void {
    w.decodeGen++
    const n = w.decode.length
    if (n === 0 || w.running !== undefined || !w.alive) {
      w.stepMs = Number.POSITIVE_INFINITY
      return
    }
    const batchTokens = w.sumCtx0 + n * w.stepsDone - w.sumJoin
    w.stepMs = decodeStepSeconds(this.cost, batchTokens) * 1000
    const next = w.decode[n - 1]!.finishStep
    this.#q.push(this.#now + Math.max(0, next - w.stepsDone) * w.stepMs, EV_DECODE_TICK, w.idx, w.decodeGen)
  }

  #decodeTick(w: SimWorker, gen: number): void {
    if (!w.alive || gen !== w.decodeGen) return
    this.#advanceDecode(w)
    const done: DecodeSeq[] = []
    const d = w.decode
    while (d.length > 0 && d[d.length - 1]!.finishStep <= w.stepsDone + 1e-7) {
      const s = d.pop()!
      w.sumCtx0 -= s.ctx0
      w.sumJoin -= s.joinStep
      done.push(s)
    }
    this.#refreshDecode(w)
    for (const s of done) {
      const turn = this.#turns[s.turn.id]!
      if (s.seq === turn.seq && turn.stage === 'decode') this.#finishDecode(w, turn)
    }
  }

  #outputTokens(turn: Turn): Uint32Array {
    return this.#w.outputTokens(turn.id) ?? uniqueTokens(0x7fff0000 ^ turn.id, turn.spec.outputLength)
  }

  #startDecode(w: SimWorker, turn: Turn, req: SessionRequest | undefined): void {
    const out = turn.spec.outputLength
    w.reservedOutputs = Math.max(0, w.reservedOutputs - out)
    if (req !== undefined) {
      const toks = this.#outputTokens(turn)
      try {
        for (let i = 0; i < out; i++) w.cache!.decode(req, toks[i]!)
      } catch (err) {
        if (!isOom(err)) throw err
        w.cache!.abortReq(req)
        turn.stage = 'idle'
        w.holders.delete(turn)
        this.#memFailures++
        this.#failPhysical(turn, 'worker_error', 'kv_capacity')
        this.#kick(w)
        return
      }
    }
    turn.stage = 'decode'
    turn.w2 = w
    turn.req2 = req
    w.holders.add(turn)
    if (out <= 1) {
      this.#finishDecode(w, turn)
      return
    }
    this.#advanceDecode(w)
    w.addDecode({
      turn,
      seq: turn.seq,
      finishStep: w.stepsDone + out - 1,
      ctx0: turn.prompt!.length,
      joinStep: w.stepsDone,
    })
    this.#refreshDecode(w)
    this.#touch(w)
  }

  #finishDecode(w: SimWorker, turn: Turn): void {
    if (turn.req2 !== undefined) w.cache!.cacheFinishedReq(turn.req2)
    if (
      this.#sync !== undefined &&
      w.retention === 'sessions' &&
      turn.spec.session >= 0 &&
      turn.prompt !== undefined
    ) {
      // D committed the turn: offer its history (prompt + output) to the P workers.
      const out = this.#outputTokens(turn)
      const history = new Uint32Array(turn.prompt.length + out.length)
      history.set(turn.prompt)
      history.set(out, turn.prompt.length)
      this.#sync.commit(w.id, turn.key, history)
    }
    if (turn.slots2 !== undefined) w.pool.free(turn.slots2)
    const committed = (turn.prompt?.length ?? 0) + turn.spec.outputLength - 1
    turn.req2 = undefined
    turn.slots2 = undefined
    turn.req1 = undefined
    turn.stage = 'idle'
    w.holders.delete(turn)
    if (turn.w1 !== undefined) turn.w1.holders.delete(turn)
    turn.endMs = this.#now
    this.#touch(w)
    this.#kick(w)
    turn.seq++
    this.#step(turn, { type: 'completed', outputTokens: turn.spec.outputLength, committedTokens: committed })
  }

  // ------------------------------------------------------------------------------------------
  // KV transfers (seed path)

  #link(p: SimWorker, d: SimWorker): Link {
    const k = `${p.id}-${d.id}`
    let l = this.#links.get(k)
    if (l === undefined) {
      l = { busyUntil: 0, downUntil: 0 }
      this.#links.set(k, l)
    }
    return l
  }

  #startTransfer(turn: Turn, p: SimWorker, d: SimWorker, leaseId: string | undefined): void {
    turn.stage = 'transferWait'
    turn.w2 = d
    const id = ++this.#transferSeq
    const t: Transfer = {
      id,
      turn,
      seq: turn.seq,
      p: p.idx,
      d: d.idx,
      requestedMs: this.#now,
      deadlineMs: this.#now + this.cost.transferTimeoutS * 1000,
      leaseId,
      state: 'waiting',
      tokens: 0,
    }
    turn.transfer = t
    this.#transfers.set(id, t)
    this.#transfersStarted++
    if (!d.alive) {
      this.#failPhysical(turn, 'worker_unreachable', 'decode worker down')
      return
    }
    d.holders.add(turn)
    d.transferWait.push(t)
    this.#q.push(t.deadlineMs, EV_TRANSFER_DEADLINE, id, 0)
    this.#touch(d)
    this.#retryTransfers(d)
  }

  #retryTransfers(d: SimWorker): void {
    while (d.alive && d.transferWait.length > 0) {
      const t = d.transferWait[0]!
      const turn = this.#turns[t.turn.id]!
      if (t.state !== 'waiting' || t.seq !== turn.seq || turn.ended) {
        d.transferWait.shift()
        continue
      }
      if (!this.#allocTransfer(d, turn, t)) break
      d.transferWait.shift()
      this.#startWire(t, turn)
    }
  }

  #allocTransfer(d: SimWorker, turn: Turn, t: Transfer): boolean {
    const out = turn.spec.outputLength
    const prompt = turn.prompt!
    if (d.retention === 'none') {
      const need = prompt.length + out
      if (d.pool.availableSize() < need) return false
      turn.slots2 = d.pool.alloc(need)
      t.tokens = prompt.length
    } else {
      // `seedSlot=off` (v5): the seed lands as a plain request, outside the session's slot.
      const intoSlot = this.spec.seedSlot !== false && d.retention === 'sessions' && turn.spec.session >= 0
      const opened = this.#openRequest(d, turn, intoSlot, out)
      if (opened === undefined) return false
      d.reservedOutputs += out
      turn.req2 = opened.req
      t.tokens = prompt.length - opened.cached
    }
    if (t.leaseId !== undefined) d.leases?.release(t.leaseId)
    this.#touch(d)
    return true
  }

  #startWire(t: Transfer, turn: Turn): void {
    const p = this.#workers[t.p]!
    const d = this.#workers[t.d]!
    const link = this.#link(p, d)
    t.state = 'wire'
    turn.stage = 'wire'
    d.transfersOnWire++
    if (this.#flapsNow(p, d, link)) {
      this.#transferErrors++
      this.#failPhysical(turn, 'transfer_error', 'link down')
      return
    }
    const costTokens = Math.min(Math.round(t.tokens * this.#w.tokenScale), turn.spec.inputLength)
    const start = Math.max(this.#now, link.busyUntil)
    const end = start + transferSeconds(this.cost, costTokens) * 1000
    if (end > t.deadlineMs) return // the deadline fires first
    link.busyUntil = end
    turn.transferred = t.tokens
    this.#q.push(end, EV_TRANSFER_DONE, t.id, 0)
  }

  #transferDone(id: number): void {
    const t = this.#transfers.get(id)
    if (t === undefined) return
    this.#transfers.delete(id)
    const turn = this.#turns[t.turn.id]!
    if (t.state !== 'wire' || t.seq !== turn.seq || turn.ended) return
    t.state = 'done'
    const p = this.#workers[t.p]!
    const d = this.#workers[t.d]!
    d.transfersOnWire--
    turn.transfer = undefined
    this.#finishP(turn, p)
    if (d.cache !== undefined && turn.req2 !== undefined) d.cache.cacheUnfinishedReq(turn.req2)
    turn.firstTokenMs = this.#now
    this.#startDecode(d, turn, turn.req2)
  }

  #transferDeadline(id: number): void {
    const t = this.#transfers.get(id)
    if (t === undefined) return
    const turn = this.#turns[t.turn.id]!
    if (t.state === 'done' || t.seq !== turn.seq || turn.ended) {
      this.#transfers.delete(id)
      return
    }
    this.#transfers.delete(id)
    this.#transferTimeouts++
    this.#failPhysical(turn, 'transfer_timeout', 'kv transfer timed out')
  }

  /** P is done with a seed: its prompt stays cached in its tree, its slots and lock go. */
  #finishP(turn: Turn, p: SimWorker): void {
    if (turn.req1 !== undefined && p.alive && p.cache !== undefined) {
      p.cache.cacheFinishedReq(turn.req1)
      this.#touch(p)
      this.#kick(p)
    }
    turn.req1 = undefined
    p.holders.delete(turn)
  }

  // ------------------------------------------------------------------------------------------
  // Failure and cleanup

  /** A physical step failed: release what the turn holds, tell the dispatch. */
  #failPhysical(
    turn: Turn,
    cause: 'transfer_timeout' | 'transfer_error' | 'worker_error' | 'worker_unreachable',
    detail: string,
  ): void {
    turn.lastError = detail
    this.#abandon(turn)
    this.#schedule(turn, this.#now, { type: 'failed', cause, message: detail })
  }

  /** Release every resource a turn holds on live workers; the turn's pending events go stale. */
  #abandon(turn: Turn): void {
    const out = turn.spec.outputLength
    const w1 = turn.w1
    const w2 = turn.w2
    switch (turn.stage) {
      case 'prefill': {
        if (w1?.alive && w1.running?.turn === turn) {
          this.#advanceDecode(w1)
          if (w1.runningReq !== undefined) w1.cache!.abortReq(w1.runningReq)
          if (w1.running.kind !== 'pfill') w1.reservedOutputs = Math.max(0, w1.reservedOutputs - out)
          w1.running = undefined
          w1.runningReq = undefined
          w1.prefillGen++
          this.#refreshDecode(w1)
          this.#touch(w1)
          this.#kick(w1)
        }
        break
      }
      case 'transferWait':
      case 'wire': {
        const t = turn.transfer
        if (t !== undefined) {
          if (t.state === 'wire' && w2 !== undefined && w2.alive) w2.transfersOnWire--
          t.state = 'done'
        }
        if (w2?.alive) {
          if (turn.req2 !== undefined) {
            w2.cache!.abortReq(turn.req2)
            w2.reservedOutputs = Math.max(0, w2.reservedOutputs - out)
          }
          if (turn.slots2 !== undefined) w2.pool.free(turn.slots2)
          this.#touch(w2)
          this.#kick(w2)
        }
        if (w1 !== undefined) this.#finishP(turn, w1)
        break
      }
      case 'decode': {
        if (w2?.alive) {
          this.#advanceDecode(w2)
          w2.removeDecode(turn)
          if (turn.req2 !== undefined) w2.cache!.abortReq(turn.req2)
          if (turn.slots2 !== undefined) w2.pool.free(turn.slots2)
          this.#refreshDecode(w2)
          this.#touch(w2)
          this.#kick(w2)
        }
        break
      }
      default:
        break
    }
    if (w1 !== undefined) w1.holders.delete(turn)
    if (w2 !== undefined) w2.holders.delete(turn)
    turn.stage = 'idle'
    turn.req1 = undefined
    turn.req2 = undefined
    turn.slots2 = undefined
    turn.transfer = undefined
    turn.seq++
  }

  /** Memory was freed (or made evictable) on `w`: retry what waits for it. */
  #kick(w: SimWorker): void {
    if (!w.alive) return
    if (w.transferWait.length > 0) this.#retryTransfers(w)
    if (w.running === undefined && w.qHead < w.queue.length) this.#tryStart(w)
  }

  #touch(w: SimWorker): void {
    if (!w.dirty && w.role !== 'prefill') {
      w.dirty = true
      this.#dirty.push(w)
    }
  }

  /** Capacity reports to the router (as a worker's load endpoint would give them). */
  #flush(): void {
    if (this.#dirty.length === 0) return
    for (const w of this.#dirty) {
      w.dirty = false
      if (!w.alive) continue
      const free = w.pool.availableSize()
      const evictable = w.cache === undefined ? 0 : w.cache.cache.evictableSize()
      // Idle sessions' KV the D's admission may release (with the reaper, only those past its TTL).
      const ttl = this.#reaper?.idleMs
      const releasable =
        w.cache === undefined ? 0 : w.cache.releasableTokens(ttl === undefined ? {} : { idleMs: ttl })
      const reserved = (w.leases?.reservedTokens(this.#now) ?? 0) + w.reservedOutputs
      this.router.cluster.reportCapacity(w.id, {
        freeTokens: free,
        evictableTokens: evictable,
        reservedTokens: Math.min(reserved, free + evictable),
        releasableTokens: releasable,
        transferQueueDepth: w.transferWait.length + w.transfersOnWire,
        retractedQueueDepth: Number.isNaN(w.blockedSince) ? 0 : 1,
      })
    }
    this.#dirty.length = 0
  }

  #sample(): void {
    const tS = this.#now / 1000
    for (const w of this.#workers) {
      const n = w.usageTimes.length
      if (n > 0 && w.usageTimes[n - 1] === tS) continue
      w.usageTimes.push(tS)
      w.usage.push(w.alive ? Math.round(w.usageFraction() * 10_000) / 10_000 : 0)
    }
    if (this.#ended < this.#turns.length) this.#q.push(this.#now + this.#sampleMs, EV_SAMPLE, 0, 0)
  }

  // ------------------------------------------------------------------------------------------
  // Faults

  #inWindow(kind: FaultSpec['kind'], target: string | undefined): boolean {
    for (const w of this.#windows) {
      if (w.kind !== kind || this.#now < w.fromMs || this.#now >= w.toMs) continue
      if (w.target === undefined || target === undefined || w.target === target) return true
    }
    return false
  }

  #probability(kind: FaultSpec['kind']): number {
    let p = 0
    for (const f of this.#faults)
      if (f.kind === kind && f.probability !== undefined) p = Math.max(p, f.probability)
    return p
  }

  #durationOf(kind: FaultSpec['kind']): number {
    for (const f of this.#faults)
      if (f.kind === kind && f.probability !== undefined && f.forS !== undefined) return f.forS * 1000
    return (kind === 'router-pause' ? 0.2 : defaultFaultDuration(kind)) * 1000
  }

  #admitTimesOut(d: SimWorker): boolean {
    if (this.#inWindow('admit-timeout', d.id)) return true
    const p = this.#probability('admit-timeout')
    return p > 0 && this.#faultRng.next() < p
  }

  #lostEvent(w: SimWorker): boolean {
    if (this.#inWindow('lost-kv-events', w.id)) return true
    const p = this.#probability('lost-kv-events')
    return p > 0 && this.#faultRng.next() < p
  }

  #flapsNow(p: SimWorker, d: SimWorker, link: Link): boolean {
    if (this.#now < link.downUntil || this.#inWindow('link-flap', `${p.id}-${d.id}`)) return true
    const prob = this.#probability('link-flap')
    if (prob > 0 && this.#faultRng.next() < prob) {
      link.downUntil = this.#now + this.#durationOf('link-flap')
      return true
    }
    return false
  }

  #probabilisticArrivalFaults(): void {
    for (const kind of ['d-death', 'p-death'] as const) {
      const p = this.#probability(kind)
      if (p > 0 && this.#faultRng.next() < p) {
        const pool = kind === 'd-death' ? this.#decodeWorkers : this.#prefillWorkers
        const alive = pool.filter((w) => w.alive)
        if (alive.length > 0) {
          const w = alive[this.#faultRng.int(alive.length)]!
          this.#kill(w)
          const idx = this.#windows.length
          this.#windows.push({
            kind,
            target: w.id,
            fromMs: this.#now,
            toMs: this.#now + this.#durationOf(kind),
          })
          this.#q.push(this.#now + this.#durationOf(kind), EV_FAULT, -1 - idx, 1)
        }
      }
    }
    const pp = this.#probability('router-pause')
    if (pp > 0 && this.#faultRng.next() < pp) {
      this.#pauses++
      this.#routerPausedUntil = Math.max(
        this.#routerPausedUntil,
        this.#now + this.#durationOf('router-pause'),
      )
    }
  }

  #fault(index: number, phase: number): void {
    if (index < 0) {
      // End of a probabilistic D death: restart.
      const win = this.#windows[-1 - index]!
      const w = this.#byId.get(win.target!)!
      if (!w.alive) this.#restart(w)
      return
    }
    const f = this.#faults[index]!
    const from = f.atS! * 1000
    const death = f.kind === 'd-death' || f.kind === 'p-death'
    const forMs = (f.forS ?? (death ? Number.POSITIVE_INFINITY : defaultFaultDuration(f.kind))) * 1000
    switch (f.kind) {
      case 'd-death':
      case 'p-death': {
        if (phase === 0) {
          const pool = f.kind === 'd-death' ? this.#decodeWorkers : this.#prefillWorkers
          const target = f.target ?? pool[this.#faultRng.int(pool.length)]!.id
          const w = this.#byId.get(target)!
          if (w.alive) this.#kill(w)
          if (Number.isFinite(forMs)) {
            this.#windows.push({ kind: f.kind, target, fromMs: from, toMs: from + forMs })
            this.#q.push(from + forMs, EV_FAULT, -this.#windows.length, 1)
          }
        }
        return
      }
      case 'router-pause':
        this.#pauses++
        this.#routerPausedUntil = Math.max(this.#routerPausedUntil, from + forMs)
        return
      case 'link-flap': {
        const [pid, did] = f.target!.split('-')
        const link = this.#link(this.#byId.get(pid!)!, this.#byId.get(did!)!)
        link.downUntil = Math.max(link.downUntil, from + forMs)
        // Transfers on the wire over this link fail now.
        for (const t of [...this.#transfers.values()]) {
          const turn = this.#turns[t.turn.id]!
          if (
            t.state === 'wire' &&
            this.#workers[t.p]!.id === pid &&
            this.#workers[t.d]!.id === did &&
            t.seq === turn.seq
          ) {
            this.#transferErrors++
            this.#failPhysical(turn, 'transfer_error', 'link flap')
          }
        }
        return
      }
      case 'admit-timeout':
      case 'lost-kv-events':
        this.#windows.push({ kind: f.kind, target: f.target, fromMs: from, toMs: from + forMs })
        return
    }
  }

  #kill(w: SimWorker): void {
    this.#deaths++
    w.alive = false
    w.life++
    this.router.cluster.setHealth(w.id, false)
    if (w.role !== 'prefill') this.router.cluster.residency.clearWorker(w.id)
    // A P's death fails its seeds on the P side, which the router counts against the P→D link
    // (as a proxy reports a seed's P-side failure), not against the D; a D's is the D's failure.
    const cause = w.role === 'prefill' ? 'transfer_error' : 'worker_error'
    for (const t of [...w.holders]) {
      const turn = this.#turns[t.id]!
      if (!turn.ended && turn.stage !== 'idle') this.#failPhysical(turn, cause, `${w.role} worker died`)
    }
    w.holders.clear()
    w.queue = []
    w.qHead = 0
    w.running = undefined
    w.runningReq = undefined
    w.prefillGen++
    w.decode = []
    w.sumCtx0 = 0
    w.sumJoin = 0
    w.decodeGen++
    w.transferWait = []
    w.transfersOnWire = 0
    w.reservedOutputs = 0
    w.blockedSince = Number.NaN
    w.stepMs = Number.POSITIVE_INFINITY
  }

  #restart(w: SimWorker): void {
    if (w.retention === 'none') {
      w.pool = createWorkerPool(this.#capacity, this.pageSize)
    } else {
      const holder: { w?: SimWorker } = { w }
      const kv = this.#makeKv(w.retention, holder, w.role)
      w.cache = kv.cache
      w.pool = kv.pool
      if (w.leases !== undefined) w.leases = new LeaseBook()
    }
    w.alive = true
    w.lastEventId = -1
    if (w.role !== 'prefill') {
      this.router.cluster.residency.resync(w.id, [], -1)
      this.#touch(w)
    }
    this.router.cluster.setHealth(w.id, true)
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
