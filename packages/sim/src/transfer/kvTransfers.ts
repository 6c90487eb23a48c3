import type { SimContext, SimHost } from '../cluster/context.js'
import { EV_TRANSFER_DEADLINE, EV_TRANSFER_DONE } from '../cluster/events.js'
import type { Turn } from '../cluster/turn.js'
import type { SimWorker, Transfer } from '../cluster/worker.js'
import { transferSeconds } from '../cost/costModel.js'
import type { DecodeBatches } from '../decode/decodeBatches.js'
import type { ActiveFaults } from '../faults/activeFaults.js'
import { tierLoadSeconds } from '../hostTier/hostTier.js'
import { openRequest } from '../prefill/openRequest.js'

/** A P→D link: one transfer on the wire at a time; down while it flaps. */
interface Link {
  /** `p.id-d.id`, the target a `link-flap` fault names. */
  readonly key: string
  busyUntil: number
  downUntil: number
}

/**
 * The seed path's KV transfers, P to D: a transfer waits in its D's queue until the D has memory
 * for the prompt (and the output), then goes on the wire of its P→D link, one transfer after
 * another, and fails if its deadline comes first or the link flaps; when it lands, the P lets go
 * of the seed and the turn decodes on the D.
 */
export class KvTransfers {
  readonly #ctx: SimContext
  readonly #host: SimHost
  readonly #faults: ActiveFaults
  readonly #decode: DecodeBatches
  /** The P→D links, by P's index then D's, each made on first use. */
  readonly #links: (Link | undefined)[][] = []
  /** Transfers not yet done or failed, by id. */
  readonly #inFlight = new Map<number, Transfer>()
  #seq = 0

  constructor(ctx: SimContext, host: SimHost, faults: ActiveFaults, decode: DecodeBatches) {
    this.#ctx = ctx
    this.#host = host
    this.#faults = faults
    this.#decode = decode
  }

  #link(p: SimWorker, d: SimWorker): Link {
    let row = this.#links[p.idx]
    if (row === undefined) {
      row = []
      this.#links[p.idx] = row
    }
    let l = row[d.idx]
    if (l === undefined) {
      l = { key: `${p.id}-${d.id}`, busyUntil: 0, downUntil: 0 }
      row[d.idx] = l
    }
    return l
  }

  /** P `p` prefilled the turn's seed for `d`: its KV transfer waits for room on `d`. */
  start(turn: Turn, p: SimWorker, d: SimWorker, leaseId: string | undefined): void {
    const ctx = this.#ctx
    turn.stage = 'transferWait'
    turn.w2 = d
    const id = ++this.#seq
    const t: Transfer = {
      id,
      turn,
      seq: turn.seq,
      p: p.idx,
      d: d.idx,
      requestedMs: ctx.now,
      deadlineMs: ctx.now + ctx.config.cost.transferTimeoutS * 1000,
      leaseId,
      state: 'waiting',
      tokens: 0,
      loadEndsMs: 0,
    }
    turn.transfer = t
    this.#inFlight.set(id, t)
    ctx.counters.transfers++
    if (!d.alive) {
      this.#host.failPhysical(turn, 'worker_unreachable', 'decode worker down')
      return
    }
    d.holders.add(turn)
    ctx.q.push(t.deadlineMs, EV_TRANSFER_DEADLINE, id, 0)
    if (turn.pages2 !== undefined || turn.req2 !== undefined) {
      // Classic P/D: the D preallocated this KV before the P started; it goes on the wire now.
      t.tokens = ctx.config.geometry.promptTokens(turn.prompt!.length) - turn.preallocCached
      this.#startWire(t, turn)
      return
    }
    d.transferWait.push(t)
    ctx.touch(d)
    this.retry(d)
  }

  /** Start the transfers waiting on `d`, in order, while `d` has room for them. */
  retry(d: SimWorker): void {
    const turns = this.#ctx.turns
    while (d.alive && d.transferWait.length > 0) {
      const t = d.transferWait[0]!
      const turn = turns[t.turn.id]!
      if (t.state !== 'waiting' || t.seq !== turn.seq || turn.ended) {
        d.transferWait.shift()
        continue
      }
      if (!this.#alloc(d, turn, t)) break
      d.transferWait.shift()
      this.#startWire(t, turn)
    }
  }

  #alloc(d: SimWorker, turn: Turn, t: Transfer): boolean {
    const config = this.#ctx.config
    const out = turn.spec.outputLength
    const g = config.geometry
    const promptTokens = g.promptTokens(turn.prompt!.length)
    if (d.retention === 'none') {
      const need = promptTokens + out
      if (g.tokens(d.pool.availableSize()) < need) return false
      turn.pages2 = d.pool.allocPages(Math.ceil(g.units(need) / d.pool.pageSize))
      t.tokens = promptTokens
    } else {
      // `seedSlot=off` (v5): the seed lands as a plain request, outside the session's slot.
      const intoSlot = config.spec.seedSlot !== false && d.retention === 'sessions' && turn.spec.session >= 0
      const opened = openRequest(config, d, turn, intoSlot, out)
      if (opened === undefined) return false
      d.reservedOutputs += out
      turn.req2 = opened.req
      t.tokens = promptTokens - opened.cached
      // A host-tier load-back on the D runs beside the transfer (PCIe, not the P→D link): the
      // turn's first token waits for whichever ends last.
      if (opened.loaded > 0) {
        const loaded = Math.round(opened.loaded * config.workload.tokenScale)
        this.#ctx.counters.loadBacks++
        this.#ctx.counters.loadedBackTokens += loaded
        t.loadEndsMs = this.#ctx.now + tierLoadSeconds(config.cost, config.hostTier, loaded) * 1000
      }
    }
    if (t.leaseId !== undefined) d.leases?.release(t.leaseId)
    this.#ctx.touch(d)
    return true
  }

  #startWire(t: Transfer, turn: Turn): void {
    const ctx = this.#ctx
    const p = ctx.workers[t.p]!
    const d = ctx.workers[t.d]!
    const link = this.#link(p, d)
    t.state = 'wire'
    turn.stage = 'wire'
    d.transfersOnWire++
    if (this.#flapsNow(link)) {
      ctx.counters.transferErrors++
      this.#host.failPhysical(turn, 'transfer_error', 'link down')
      return
    }
    const costTokens = Math.min(Math.round(t.tokens * ctx.config.workload.tokenScale), turn.spec.inputLength)
    const start = Math.max(ctx.now, link.busyUntil)
    const wireEnd = start + transferSeconds(ctx.config.cost, costTokens) * 1000
    const end = Math.max(wireEnd, t.loadEndsMs)
    if (end > t.deadlineMs) return // the deadline fires first
    link.busyUntil = wireEnd
    turn.transferred = t.tokens
    ctx.q.push(end, EV_TRANSFER_DONE, t.id, 0)
  }

  /** The link is down (a flap in force, a timed one, or one starting now by probability). */
  #flapsNow(link: Link): boolean {
    const now = this.#ctx.now
    if (now < link.downUntil || this.#faults.inWindow('link-flap', link.key)) return true
    if (this.#faults.strikes('link-flap')) {
      link.downUntil = now + this.#faults.durationOf('link-flap')
      return true
    }
    return false
  }

  /** `EV_TRANSFER_DONE`: the KV landed; the P lets go of the seed, the turn decodes on the D. */
  done(id: number): void {
    const t = this.#inFlight.get(id)
    if (t === undefined) return
    this.#inFlight.delete(id)
    const ctx = this.#ctx
    const turn = ctx.turns[t.turn.id]!
    if (t.state !== 'wire' || t.seq !== turn.seq || turn.ended) return
    const p = ctx.workers[t.p]!
    const d = ctx.workers[t.d]!
    if (this.#faults.partialTransfer(d)) {
      // The D checks what arrived against what it was promised and refuses a partial transfer.
      ctx.counters.transferErrors++
      this.#host.failPhysical(turn, 'transfer_error', 'partial KV transfer: pages missing')
      return
    }
    t.state = 'done'
    d.transfersOnWire--
    turn.transfer = undefined
    this.finishP(turn, p)
    if (d.cache !== undefined && turn.req2 !== undefined) d.cache.cacheUnfinishedReq(turn.req2)
    turn.firstTokenMs = ctx.now
    this.#decode.start(d, turn, turn.req2)
  }

  /** `EV_TRANSFER_DEADLINE`: a transfer not done by now fails with `transfer_timeout`. */
  deadline(id: number): void {
    const t = this.#inFlight.get(id)
    if (t === undefined) return
    const turn = this.#ctx.turns[t.turn.id]!
    if (t.state === 'done' || t.seq !== turn.seq || turn.ended) {
      this.#inFlight.delete(id)
      return
    }
    this.#inFlight.delete(id)
    this.#ctx.counters.transferTimeouts++
    this.#host.failPhysical(turn, 'transfer_timeout', 'kv transfer timed out')
  }

  /** P is done with a seed: its prompt stays cached in its tree, its slots and lock go. */
  finishP(turn: Turn, p: SimWorker): void {
    if (turn.req1 !== undefined && p.alive && p.cache !== undefined) {
      p.cache.cacheFinishedReq(turn.req1)
      this.#ctx.touch(p)
      this.#host.kick(p)
    }
    turn.req1 = undefined
    p.holders.delete(turn)
  }

  /** Release what a turn waiting for or on the wire holds on its D and its P (it was abandoned). */
  abandon(turn: Turn): void {
    const out = turn.spec.outputLength
    const w1 = turn.w1
    const w2 = turn.w2
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
      if (turn.pages2 !== undefined) w2.pool.freePages(turn.pages2)
      this.#ctx.touch(w2)
      this.#host.kick(w2)
    }
    if (w1 !== undefined) this.finishP(turn, w1)
  }

  /** A timed link flap: the link `p`→`d` is down until `untilMs`; its transfers on the wire fail now. */
  linkDown(p: SimWorker, d: SimWorker, untilMs: number): void {
    const link = this.#link(p, d)
    link.downUntil = Math.max(link.downUntil, untilMs)
    const ctx = this.#ctx
    for (const t of [...this.#inFlight.values()]) {
      const turn = ctx.turns[t.turn.id]!
      if (
        t.state === 'wire' &&
        ctx.workers[t.p]!.id === p.id &&
        ctx.workers[t.d]!.id === d.id &&
        t.seq === turn.seq
      ) {
        ctx.counters.transferErrors++
        this.#host.failPhysical(turn, 'transfer_error', 'link flap')
      }
    }
  }
}
