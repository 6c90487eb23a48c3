import type { LeaseBook } from '../adapters/router.js'
import type { PagedAllocator, SessionCache, SessionRequest } from '../adapters/sessionCache.js'

/**
 * What a simulated worker keeps between turns:
 * - `sessions`: a session cache with sessions (D workers under a policy with a fast path);
 * - `prefix`: a prefix cache without sessions (P workers, colocated DP workers: SGLang's radix cache);
 * - `none`: no reuse; the KV of a request lives only while it runs (D workers of classic P/D).
 */
export type Retention = 'sessions' | 'prefix' | 'none'

/** Role of a simulated worker. */
export type SimRole = 'prefill' | 'decode' | 'colocated'

/** A unit of prefill work queued on a worker's GPU. */
export interface Job {
  readonly turn: SimTurnRef
  readonly seq: number
  /** `fast` / `direct`: the worker prefills and then decodes; `pfill`: a P prefills for `decodeId`. */
  readonly kind: 'fast' | 'direct' | 'pfill'
  readonly decodeIdx: number
  readonly leaseId: string | undefined
  readonly enqueuedMs: number
}

/** A request decoding in a worker's batch. */
export interface DecodeSeq {
  readonly turn: SimTurnRef
  readonly seq: number
  /** Batch step at which it ends. */
  readonly finishStep: number
  readonly ctx0: number
  readonly joinStep: number
}

/** A KV transfer from a P to a D (waiting for D memory, then on the wire). */
export interface Transfer {
  readonly id: number
  readonly turn: SimTurnRef
  readonly seq: number
  readonly p: number
  readonly d: number
  readonly requestedMs: number
  readonly deadlineMs: number
  readonly leaseId: string | undefined
  state: 'waiting' | 'wire' | 'done'
  tokens: number
  /** When the D's load-back of the rest of the prompt from its host tier ends (PCIe, beside the wire). */
  loadEndsMs: number
}

/** The part of a turn the worker model refers to (the simulation owns the rest). */
export interface SimTurnRef {
  readonly id: number
  seq: number
}

/** One simulated GPU worker: its KV state (real packages) and its queues (the cost model). */
export class SimWorker {
  readonly idx: number
  readonly id: string
  /** Changes only when an elastic run switches the worker's role (`elastic=on`). */
  role: SimRole
  retention: Retention
  alive = true
  /** Incremented at each death: events of an older life are ignored. */
  life = 0
  cache: SessionCache | undefined
  pool: PagedAllocator
  leases: LeaseBook | undefined
  /** Last KV event id published by the current cache (for resync after a restart). */
  lastEventId = -1

  // prefill server
  queue: Job[] = []
  qHead = 0
  running: Job | undefined = undefined
  runningReq: SessionRequest | undefined = undefined
  prefillGen = 0
  /** When the running prefill ends (simulated ms; NaN when none runs). */
  prefillEndsMs = Number.NaN
  /** The running prefill's load-back from the host tier: tokens (cost-model), start and end (ms). */
  loadBackTokens = 0
  loadBackStartsMs = 0
  loadBackEndsMs = 0
  blockedSince = Number.NaN
  blockedGen = 0
  reservedOutputs = 0
  /** `retract=on`: hot sessions this D retracted; each lets go of its lock when its turn ends. */
  retracting = new Set<string>()

  // decode batch (virtual steps)
  decode: DecodeSeq[] = []
  stepsDone = 0
  lastAdvance = 0
  stepMs = Number.POSITIVE_INFINITY
  sumCtx0 = 0
  sumJoin = 0
  decodeGen = 0

  // classic P/D: requests waiting for this D to preallocate their KV (FIFO)
  preallocWait: { readonly turn: SimTurnRef; readonly seq: number }[] = []

  // transfers into this D
  transferWait: Transfer[] = []
  transfersOnWire = 0

  // counters
  evictions = 0
  evictedTokens = 0
  maxEviction = 0
  usageTimes: number[] = []
  usage: number[] = []
  dirty = false

  /** Turns holding something on this worker (failed when it dies). */
  readonly holders = new Set<SimTurnRef>()

  constructor(
    idx: number,
    id: string,
    role: SimRole,
    retention: Retention,
    cache: SessionCache | undefined,
    pool: PagedAllocator,
    leases: LeaseBook | undefined,
  ) {
    this.idx = idx
    this.id = id
    this.role = role
    this.retention = retention
    this.cache = cache
    this.pool = pool
    this.leases = leases
  }

  /** The worker died: it forgets its holders, its prefill queue, its decode batch and its transfers. */
  clearOnDeath(): void {
    this.holders.clear()
    this.queue = []
    this.qHead = 0
    this.running = undefined
    this.runningReq = undefined
    this.prefillGen++
    this.decode = []
    this.sumCtx0 = 0
    this.sumJoin = 0
    this.decodeGen++
    this.transferWait = []
    this.preallocWait = []
    this.transfersOnWire = 0
    this.reservedOutputs = 0
    this.retracting.clear()
    this.blockedSince = Number.NaN
    this.stepMs = Number.POSITIVE_INFINITY
  }

  /** Queued prefill jobs (not counting the running one). */
  queued(): number {
    return this.queue.length - this.qHead
  }

  /** Occupied fraction of the pool. */
  usageFraction(): number {
    return this.pool.size === 0 ? 0 : (this.pool.size - this.pool.availableSize()) / this.pool.size
  }

  /** Insert into the decode batch (kept sorted by finishStep, descending: the next to end is last). */
  addDecode(s: DecodeSeq): void {
    const d = this.decode
    let i = d.length
    d.push(s)
    while (i > 0 && d[i - 1]!.finishStep < s.finishStep) {
      d[i] = d[i - 1]!
      i--
    }
    d[i] = s
    this.sumCtx0 += s.ctx0
    this.sumJoin += s.joinStep
  }

  /** Remove a sequence of `turn` from the batch; false if absent. */
  removeDecode(turn: SimTurnRef): boolean {
    const d = this.decode
    for (let i = 0; i < d.length; i++) {
      if (d[i]!.turn === turn) {
        const s = d[i]!
        d.splice(i, 1)
        this.sumCtx0 -= s.ctx0
        this.sumJoin -= s.joinStep
        return true
      }
    }
    return false
  }
}
