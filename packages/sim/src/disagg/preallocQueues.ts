import type { SimContext, SimHost } from '../cluster/context.js'
import { EV_PREALLOC_TIMEOUT } from '../cluster/events.js'
import type { Turn } from '../cluster/turn.js'
import type { SimWorker } from '../cluster/worker.js'
import { NOT_RETRYABLE } from '../gateway/gatewayTurn.js'
import { openRequest } from '../prefill/openRequest.js'
import type { PrefillServers } from '../prefill/prefillServers.js'

/**
 * How long a classic P/D request may wait for its D's preallocation before the P gives up on it
 * (`SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`, 300 s; the request is aborted and the router sees an
 * error it may retry).
 */
export const BOOTSTRAP_TIMEOUT_MS = 300_000

/**
 * The D side of SGLang's PD disaggregation (`disaggregation/decode.py`,
 * `docs/design/peers.md#sglang-pd-disaggregation`) for classic P/D baselines: the router has sent
 * the request to a P and a D at once; the D walks its prealloc queue in order and stops at the first
 * request that does not fit (nothing is rejected for lack of memory, the queue waits), then
 * preallocates the request's KV — its whole prompt and its output: the D keeps no prefix cache
 * (SGLang's default `ChunkCache`). Only then does the P, which waited in its bootstrap queue holding
 * nothing, queue the prefill; its KV then goes straight onto the wire. A request whose prompt and
 * output exceed the D's whole pool is refused at once (SGLang answers 400); one not preallocated
 * within the bootstrap timeout fails.
 */
export class PreallocQueues {
  readonly #ctx: SimContext
  readonly #host: SimHost
  readonly #prefill: PrefillServers

  constructor(ctx: SimContext, host: SimHost, prefill: PrefillServers) {
    this.#ctx = ctx
    this.#host = host
    this.#prefill = prefill
  }

  /** The router sent the turn to P `p` and D `d`: it waits in `d`'s prealloc queue. */
  enqueue(p: SimWorker, d: SimWorker, turn: Turn): void {
    const ctx = this.#ctx
    turn.stage = 'prealloc'
    turn.kind = 'pfill'
    turn.w1 = p
    turn.w2 = d
    p.holders.add(turn)
    d.holders.add(turn)
    const g = ctx.config.geometry
    if (g.promptTokens(turn.prompt!.length) + turn.spec.outputLength > g.tokens(d.pool.size)) {
      this.#host.failPhysical(turn, 'worker_error', NOT_RETRYABLE)
      return
    }
    d.preallocWait.push({ turn, seq: turn.seq })
    ctx.q.push(ctx.now + BOOTSTRAP_TIMEOUT_MS, EV_PREALLOC_TIMEOUT, turn.id, turn.seq)
    ctx.touch(d)
    this.retry(d)
  }

  /** Preallocate for the requests at the head of `d`'s queue while they fit; each goes on to its P. */
  retry(d: SimWorker): void {
    const ctx = this.#ctx
    const q = d.preallocWait
    while (d.alive && q.length > 0) {
      const e = q[0]!
      const turn = ctx.turns[e.turn.id]!
      if (e.seq !== turn.seq || turn.ended || turn.stage !== 'prealloc') {
        q.shift()
        continue
      }
      if (!this.#allocate(d, turn)) break
      q.shift()
      ctx.touch(d)
      const p = turn.w1!
      if (!p.alive) {
        this.#host.failPhysical(turn, 'transfer_error', 'prefill worker down')
        continue
      }
      this.#prefill.enqueue(p, turn, 'pfill', d.idx, undefined)
    }
  }

  /**
   * The D's KV for the request, now: a bare pool's prompt and output (no prefix cache); or, on a D
   * that keeps a cache (`seedPath=pd`), a request on it (its prefix matched, the rest allocated,
   * idle sessions released under pressure as the engine does; outside the session's slot with
   * `seedSlot=off`). False, and nothing changed, when it does not fit.
   */
  #allocate(d: SimWorker, turn: Turn): boolean {
    const out = turn.spec.outputLength
    if (d.cache === undefined) {
      const g = this.#ctx.config.geometry
      const need = g.promptTokens(turn.prompt!.length) + out
      if (g.tokens(d.pool.availableSize()) < need) return false
      turn.pages2 = d.pool.allocPages(Math.ceil(g.units(need) / d.pool.pageSize))
      turn.preallocCached = 0
      return true
    }
    const config = this.#ctx.config
    const intoSlot = config.spec.seedSlot !== false && d.retention === 'sessions' && turn.spec.session >= 0
    const opened = openRequest(config, d, turn, intoSlot, out)
    if (opened === undefined) return false
    d.reservedOutputs += out
    turn.req2 = opened.req
    turn.preallocCached = opened.cached
    return true
  }

  /** `EV_PREALLOC_TIMEOUT`: a request still waiting for its D's preallocation fails. */
  timeout(turn: Turn, seq: number): void {
    if (turn.ended || turn.seq !== seq || turn.stage !== 'prealloc') return
    this.#ctx.counters.preallocTimeouts++
    this.#host.failPhysical(turn, 'worker_error', 'bootstrap timeout: no KV preallocated on the D')
  }

  /**
   * The turn was abandoned before its KV reached the D (waiting for preallocation, queued or
   * prefilling on its P): the D frees what it preallocated.
   */
  release(turn: Turn): void {
    const d = turn.w2
    const pages = turn.pages2
    const req = turn.req2
    if ((pages === undefined && req === undefined) || d === undefined) return
    turn.pages2 = undefined
    turn.req2 = undefined
    if (!d.alive) return
    if (pages !== undefined) d.pool.freePages(pages)
    if (req !== undefined) {
      d.cache!.abortReq(req)
      d.reservedOutputs = Math.max(0, d.reservedOutputs - turn.spec.outputLength)
    }
    this.#ctx.touch(d)
    this.#host.kick(d)
  }
}
