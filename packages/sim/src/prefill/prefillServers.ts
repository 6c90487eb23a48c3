import type { SimContext, SimHost } from '../cluster/context.js'
import { EV_MEMORY_TIMEOUT, EV_PREFILL_DONE } from '../cluster/events.js'
import type { Turn } from '../cluster/turn.js'
import type { Job, SimWorker } from '../cluster/worker.js'
import { prefillSeconds } from '../cost/costModel.js'
import type { DecodeBatches } from '../decode/decodeBatches.js'
import type { KvTransfers } from '../transfer/kvTransfers.js'
import { peerFetchSeconds, tierLoadSeconds } from '../hostTier/hostTier.js'
import { peerFetchTokens } from '../hostTier/peerFetch.js'
import { openRequest } from './openRequest.js'

/**
 * Every worker's prefill server: a first-come-first-served queue of jobs, one prefill at a time
 * (stalling the worker's decode batch), each started once its KV fits; a queue head that waits
 * longer than `memoryWaitTimeoutS` for memory fails with `kv_capacity`. A P's finished seed goes
 * to its KV transfer; a fast-path or colocated prefill goes on to decode on the same worker.
 */
export class PrefillServers {
  readonly #ctx: SimContext
  readonly #host: SimHost
  readonly #decode: DecodeBatches
  readonly #transfers: KvTransfers

  constructor(ctx: SimContext, host: SimHost, decode: DecodeBatches, transfers: KvTransfers) {
    this.#ctx = ctx
    this.#host = host
    this.#decode = decode
    this.#transfers = transfers
  }

  /** Queue the turn's prefill on `w` (for the D `decodeIdx` when it is a seed, else -1). */
  enqueue(w: SimWorker, turn: Turn, kind: Job['kind'], decodeIdx: number, leaseId: string | undefined): void {
    const ctx = this.#ctx
    turn.stage = 'queued'
    turn.kind = kind
    turn.w1 = w
    turn.w2 = decodeIdx >= 0 ? ctx.workers[decodeIdx] : undefined
    w.holders.add(turn)
    w.queue.push({ turn, seq: turn.seq, kind, decodeIdx, leaseId, enqueuedMs: ctx.now })
    this.tryStart(w)
  }

  /** Start `w`'s next queued prefill if it is idle and the job's KV fits (else the head waits). */
  tryStart(w: SimWorker): void {
    const ctx = this.#ctx
    while (w.alive && w.running === undefined && w.qHead < w.queue.length) {
      const job = w.queue[w.qHead]!
      const turn = ctx.turns[job.turn.id]!
      if (job.seq !== turn.seq || turn.ended || turn.stage !== 'queued') {
        w.qHead++
        continue
      }
      if (!this.#startJob(w, job, turn)) {
        if (Number.isNaN(w.blockedSince)) {
          w.blockedSince = ctx.now
          w.blockedGen++
          ctx.q.push(ctx.now + ctx.config.memWaitMs, EV_MEMORY_TIMEOUT, w.idx, w.blockedGen)
          ctx.touch(w)
        }
        break
      }
      if (!Number.isNaN(w.blockedSince)) {
        w.blockedSince = Number.NaN
        ctx.touch(w)
      }
      w.qHead++
    }
    if (w.qHead > 1024 && w.qHead * 2 > w.queue.length) {
      w.queue = w.queue.slice(w.qHead)
      w.qHead = 0
    }
  }

  #startJob(w: SimWorker, job: Job, turn: Turn): boolean {
    const ctx = this.#ctx
    const out = turn.spec.outputLength
    const decodes = job.kind !== 'pfill'
    const opened = openRequest(
      ctx.config,
      w,
      turn,
      decodes && w.retention === 'sessions' && turn.spec.session >= 0,
      decodes ? out : 0,
    )
    if (opened === undefined) return false
    if (job.leaseId !== undefined) w.leases?.release(job.leaseId)
    if (decodes) w.reservedOutputs += out
    const input = turn.spec.inputLength
    const cachedCost = Math.min(Math.round(opened.cached * ctx.config.workload.tokenScale), input)
    // Peer fetch: a seed of a session that moved reads what its old D still holds over the link.
    const fetched = decodes ? 0 : peerFetchTokens(ctx, turn, cachedCost)
    if (fetched > 0) {
      ctx.counters.peerFetches++
      ctx.counters.peerFetchedTokens += fetched
    }
    const newCost = Math.max(1, input - cachedCost - fetched)
    turn.cached = cachedCost
    turn.matched = opened.cached
    turn.computed = newCost
    // Tokens loaded back from the host tier: copied over PCIe (or from disk) before the prefill.
    const loadCost = Math.min(Math.round(opened.loaded * ctx.config.workload.tokenScale), cachedCost)
    if (opened.loaded > 0) {
      ctx.counters.loadBacks++
      ctx.counters.loadedBackTokens += loadCost
    }
    turn.stage = 'prefill'
    turn.req1 = opened.req
    this.#decode.advance(w)
    w.running = job
    w.runningReq = opened.req
    w.prefillGen++
    // The copy comes first (PCIe, or disk), then the prefill of what is left.
    const loadS = tierLoadSeconds(ctx.config.cost, ctx.config.hostTier, loadCost)
    w.loadBackTokens = loadCost
    w.loadBackStartsMs = ctx.now
    w.loadBackEndsMs = ctx.now + loadS * 1000
    const fetchS = fetched > 0 ? peerFetchSeconds(ctx.config.cost, fetched) : 0
    w.prefillEndsMs =
      ctx.now + (prefillSeconds(ctx.config.cost, newCost, cachedCost + fetched) + loadS + fetchS) * 1000
    ctx.q.push(w.prefillEndsMs, EV_PREFILL_DONE, w.idx, w.prefillGen)
    this.#decode.refresh(w)
    ctx.touch(w)
    return true
  }

  /** `EV_PREFILL_DONE`: a seed goes to its transfer, any other prefill decodes here. */
  done(w: SimWorker, gen: number): void {
    if (!w.alive || gen !== w.prefillGen || w.running === undefined) return
    const ctx = this.#ctx
    const job = w.running
    const req = w.runningReq!
    const turn = ctx.turns[job.turn.id]!
    this.#decode.advance(w)
    w.running = undefined
    w.runningReq = undefined
    w.cache!.cacheUnfinishedReq(req)
    if (job.kind === 'pfill') {
      this.#transfers.start(turn, w, ctx.workers[job.decodeIdx]!, job.leaseId)
    } else {
      turn.firstTokenMs = ctx.now
      this.#decode.start(w, turn, req)
    }
    this.#decode.refresh(w)
    ctx.touch(w)
    this.tryStart(w)
  }

  /** `EV_MEMORY_TIMEOUT`: the head of the queue waited too long for KV memory: fail it, go on with the next. */
  memoryTimeout(w: SimWorker, gen: number): void {
    if (!w.alive || gen !== w.blockedGen || Number.isNaN(w.blockedSince)) return
    const ctx = this.#ctx
    const job = w.queue[w.qHead]
    w.blockedSince = Number.NaN
    ctx.touch(w)
    if (job !== undefined) {
      const turn = ctx.turns[job.turn.id]!
      w.qHead++
      if (job.seq === turn.seq && !turn.ended) {
        ctx.counters.memoryWaitFailures++
        this.#host.failPhysical(turn, 'worker_error', 'kv_capacity')
      }
    }
    this.tryStart(w)
  }

  /** Stop the turn's prefill running on `w1`, releasing its KV there (the turn was abandoned). */
  abandon(turn: Turn, w1: SimWorker | undefined): void {
    if (w1?.alive && w1.running?.turn === turn) {
      this.#decode.advance(w1)
      if (w1.runningReq !== undefined) w1.cache!.abortReq(w1.runningReq)
      if (w1.running.kind !== 'pfill')
        w1.reservedOutputs = Math.max(0, w1.reservedOutputs - turn.spec.outputLength)
      w1.running = undefined
      w1.runningReq = undefined
      w1.prefillGen++
      this.#decode.refresh(w1)
      this.#ctx.touch(w1)
      this.#host.kick(w1)
    }
  }
}
