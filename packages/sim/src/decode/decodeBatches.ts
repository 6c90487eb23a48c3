import type { SessionRequest } from '../adapters/sessionCache.js'
import type { SimContext, SimHost } from '../cluster/context.js'
import { EV_DECODE_TICK } from '../cluster/events.js'
import type { Turn } from '../cluster/turn.js'
import type { DecodeSeq, SimWorker } from '../cluster/worker.js'
import { decodeStepSeconds } from '../cost/costModel.js'
import { DecodeGapRecorder } from '../metrics/decodeGaps.js'
import { isOom } from '../prefill/openRequest.js'
import { uniqueTokens } from '../workload/tokens.js'

/**
 * The decode batches of the D (and colocated) workers, in virtual steps: a batch advances one
 * step per `decodeStepSeconds` of its current tokens, a running prefill stalls it, and each
 * sequence ends after its output length. A finished turn's KV is committed to the worker's cache
 * (and, with the D→P sync, offered to the P workers), and its dispatch hears it completed.
 */
export class DecodeBatches {
  readonly #ctx: SimContext
  readonly #host: SimHost
  /** Every turn's inter-token gaps (ITL), without per-token work. */
  readonly gaps: DecodeGapRecorder
  /** `tick`'s ended sequences, reused from tick to tick (a tick never runs inside another). */
  readonly #ended: DecodeSeq[] = []

  constructor(ctx: SimContext, host: SimHost) {
    this.#ctx = ctx
    this.#host = host
    this.gaps = new DecodeGapRecorder(ctx.turns.length)
  }

  /** Count the steps `w`'s batch made since it last advanced. */
  advance(w: SimWorker): void {
    const now = this.#ctx.now
    this.gaps.advance(w.idx, now - w.lastAdvance, w.stepMs, w.decode.length)
    if (w.decode.length > 0 && Number.isFinite(w.stepMs)) w.stepsDone += (now - w.lastAdvance) / w.stepMs
    w.lastAdvance = now
  }

  /** Re-time `w`'s batch (its size or its prefill changed): the next sequence to end gets an event. */
  refresh(w: SimWorker): void {
    w.decodeGen++
    const n = w.decode.length
    if (n === 0 || w.running !== undefined || !w.alive) {
      w.stepMs = Number.POSITIVE_INFINITY
      return
    }
    const ctx = this.#ctx
    const batchTokens = w.sumCtx0 + n * w.stepsDone - w.sumJoin
    w.stepMs = decodeStepSeconds(ctx.config.cost, batchTokens) * 1000
    const next = w.decode[n - 1]!.finishStep
    ctx.q.push(ctx.now + Math.max(0, next - w.stepsDone) * w.stepMs, EV_DECODE_TICK, w.idx, w.decodeGen)
  }

  /** `EV_DECODE_TICK`: the sequences of `w`'s batch that reached their last step end. */
  tick(w: SimWorker, gen: number): void {
    if (!w.alive || gen !== w.decodeGen) return
    this.advance(w)
    const done = this.#ended
    done.length = 0
    const d = w.decode
    while (d.length > 0 && d[d.length - 1]!.finishStep <= w.stepsDone + 1e-7) {
      const s = d.pop()!
      w.sumCtx0 -= s.ctx0
      w.sumJoin -= s.joinStep
      done.push(s)
    }
    this.refresh(w)
    const turns = this.#ctx.turns
    const n = done.length
    for (let i = 0; i < n; i++) {
      const s = done[i]!
      const turn = turns[s.turn.id]!
      if (s.seq === turn.seq && turn.stage === 'decode') this.#finish(w, turn)
    }
    done.length = 0
  }

  /** The turn's output tokens (cache units at block granularity): the workload's, else unique ones. */
  outputTokens(turn: Turn): Uint32Array {
    const config = this.#ctx.config
    return (
      config.workload.outputTokens(turn.id) ??
      uniqueTokens(0x7fff0000 ^ turn.id, config.geometry.units(turn.spec.outputLength))
    )
  }

  /**
   * The turn's first token is out (its prefill ended on `w`, or its KV landed there): it joins
   * `w`'s batch, its output's KV allocated at once (a turn short of it fails with `kv_capacity`).
   */
  start(w: SimWorker, turn: Turn, req: SessionRequest | undefined): void {
    const out = turn.spec.outputLength
    w.reservedOutputs = Math.max(0, w.reservedOutputs - out)
    if (req !== undefined) {
      const toks = this.outputTokens(turn)
      const steps = this.#ctx.config.geometry.units(out)
      try {
        for (let i = 0; i < steps; i++) w.cache!.decode(req, toks[i]!)
      } catch (err) {
        if (!isOom(err)) throw err
        w.cache!.abortReq(req)
        turn.stage = 'idle'
        w.holders.delete(turn)
        this.#ctx.counters.memoryWaitFailures++
        this.#host.failPhysical(turn, 'worker_error', 'kv_capacity')
        this.#host.kick(w)
        return
      }
    }
    turn.stage = 'decode'
    turn.w2 = w
    turn.req2 = req
    w.holders.add(turn)
    if (out <= 1) {
      this.#finish(w, turn)
      return
    }
    this.advance(w)
    this.gaps.join(w.idx, turn.id)
    w.addDecode({
      turn,
      seq: turn.seq,
      finishStep: w.stepsDone + out - 1,
      ctx0: this.#ctx.config.geometry.promptTokens(turn.prompt!.length),
      joinStep: w.stepsDone,
    })
    this.refresh(w)
    this.#ctx.touch(w)
  }

  #finish(w: SimWorker, turn: Turn): void {
    const ctx = this.#ctx
    this.gaps.finish(w.idx, turn.id)
    if (turn.req2 !== undefined) w.cache!.cacheFinishedReq(turn.req2)
    // `retract=on`: a session this D retracted lets go of its lock now that its turn is done.
    if (w.retracting.size > 0 && w.retracting.delete(turn.key)) {
      const st = w.cache?.getSessionStatus(turn.key)
      if (st !== undefined && !st.active) w.cache!.releaseSession(turn.key)
    }
    const sync = ctx.sync
    if (
      sync !== undefined &&
      w.retention === 'sessions' &&
      turn.spec.session >= 0 &&
      turn.prompt !== undefined
    ) {
      // D committed the turn: offer its history (prompt + output) to the P workers.
      const out = this.outputTokens(turn)
      const history = new Uint32Array(turn.prompt.length + out.length)
      history.set(turn.prompt)
      history.set(out, turn.prompt.length)
      sync.commit(w.id, turn.key, history)
    }
    if (turn.pages2 !== undefined) w.pool.freePages(turn.pages2)
    const committed =
      (turn.prompt === undefined ? 0 : ctx.config.geometry.promptTokens(turn.prompt.length)) +
      turn.spec.outputLength -
      1
    turn.req2 = undefined
    turn.pages2 = undefined
    turn.req1 = undefined
    turn.stage = 'idle'
    w.holders.delete(turn)
    if (turn.w1 !== undefined) turn.w1.holders.delete(turn)
    turn.endMs = ctx.now
    ctx.touch(w)
    this.#host.kick(w)
    turn.seq++
    this.#host.step(turn, {
      type: 'completed',
      outputTokens: turn.spec.outputLength,
      committedTokens: committed,
    })
  }

  /** Release a decoding turn's place in `w2`'s batch and its KV there (the turn was abandoned). */
  abandon(turn: Turn, w2: SimWorker | undefined): void {
    this.gaps.drop(turn.id)
    if (w2?.alive) {
      this.advance(w2)
      w2.removeDecode(turn)
      if (turn.req2 !== undefined) w2.cache!.abortReq(turn.req2)
      if (turn.pages2 !== undefined) w2.pool.freePages(turn.pages2)
      this.refresh(w2)
      this.#ctx.touch(w2)
      this.#host.kick(w2)
    }
  }
}
