import type { AdmitResponse, DispatchAction, DispatchOutcome } from '../adapters/router.js'
import type { SimContext } from '../cluster/context.js'
import { EV_HEDGE } from '../cluster/events.js'
import type { Turn } from '../cluster/turn.js'
import type { SimWorker } from '../cluster/worker.js'

type AdmitAction = Extract<DispatchAction, { type: 'admit' }>
type Answer =
  | { readonly type: 'admitResult'; readonly response: AdmitResponse }
  | { readonly type: 'admitTimeout' }

/** What the hedged admissions need from the simulation that runs them. */
export interface HedgeHost {
  /** The D answers an admission request now (its admission, leases and releases). */
  answer(d: SimWorker, turn: Turn, a: AdmitAction): AdmitResponse
  /** One admission RPC's round trip, ms (the cost model's latency and jitter). */
  latencyMs(): number
  /** Whether an RPC to `d` sent now never gets an answer (an `admit-timeout` fault). */
  timesOut(d: SimWorker): boolean
  /** Hand the turn's dispatch its outcome now. */
  deliver(turn: Turn, outcome: DispatchOutcome): void
}

interface Leg {
  readonly action: AdmitAction
  readonly d: SimWorker
  latency: number
  /** The D's answer, computed when the request reached it, on its way back. */
  atD: AdmitResponse | undefined
  /** The answer as the router has it (back, or timed out). */
  answer: Answer | undefined
  sent: boolean
}

interface Hedged {
  readonly turn: Turn
  readonly seq: number
  readonly primary: Leg
  readonly hedge: Leg
  decided: boolean
}

const AT_D = 0
const BACK = 1
const TIMEOUT = 2
const HEDGE_TIMER = 3

/**
 * A hedged admission (`hedgeAdmissions`, the router's `AdmitAction.hedge`) in virtual time, as a
 * `TurnDriver` with a `sleep` effect runs it: the first RPC goes out; if it has no answer after
 * `hedge.afterMs`, the second goes to the other D; the first admitting answer goes to the turn's
 * dispatch (a `hedgedAdmitResult` naming both answers once the second was sent, a plain answer
 * before), or both answers when neither admits; a D that admits after the other won has its lease
 * released at once. Each leg can time out (`admit-timeout` faults) like a plain RPC.
 */
export class HedgedAdmissions {
  readonly #ctx: SimContext
  readonly #host: HedgeHost
  readonly #live: (Hedged | undefined)[] = []
  readonly #free: number[] = []
  /** Second RPCs sent, and late admissions whose lease was released. */
  sent = 0
  releasedLate = 0

  constructor(ctx: SimContext, host: HedgeHost) {
    this.#ctx = ctx
    this.#host = host
  }

  /** Start the hedged admission `a` of `turn` (its `seq` already bumped for this attempt). */
  start(turn: Turn, a: AdmitAction): void {
    const ctx = this.#ctx
    const h = a.hedge!
    const leg = (action: AdmitAction): Leg => ({
      action,
      d: ctx.byId.get(action.workerId)!,
      latency: 0,
      atD: undefined,
      answer: undefined,
      sent: false,
    })
    const second: AdmitAction = {
      type: 'admit',
      turnId: a.turnId,
      workerId: h.workerId,
      request: h.request,
      timeoutMs: a.timeoutMs,
      attempt: a.attempt,
    }
    const rec: Hedged = { turn, seq: turn.seq, primary: leg(a), hedge: leg(second), decided: false }
    const id = this.#free.pop() ?? this.#live.length
    this.#live[id] = rec
    this.#send(id, rec.primary, 0)
    ctx.q.push(ctx.now + h.afterMs, EV_HEDGE, id, HEDGE_TIMER * 2)
  }

  #send(id: number, leg: Leg, which: 0 | 1): void {
    const ctx = this.#ctx
    leg.sent = true
    ctx.counters.admissions++
    const d = leg.d
    if (d === undefined || !d.alive || this.#host.timesOut(d)) {
      ctx.counters.admissionTimeouts++
      ctx.q.push(ctx.now + leg.action.timeoutMs, EV_HEDGE, id, TIMEOUT * 2 + which)
      return
    }
    leg.latency = this.#host.latencyMs()
    ctx.q.push(ctx.now + leg.latency / 2, EV_HEDGE, id, AT_D * 2 + which)
  }

  /** `EV_HEDGE`: a leg reaches its D, its answer comes back, it times out, or the hedge timer fires. */
  event(id: number, code: number): void {
    const rec = this.#live[id]
    if (rec === undefined) return
    const which = code & 1
    const phase = code >> 1
    const leg = which === 0 ? rec.primary : rec.hedge
    const ctx = this.#ctx
    const stale = rec.turn.ended || rec.turn.seq !== rec.seq
    switch (phase) {
      case HEDGE_TIMER:
        if (!rec.decided && !stale && rec.primary.answer === undefined) {
          this.sent++
          this.#send(id, rec.hedge, 1)
        }
        break
      case AT_D: {
        if (!leg.d.alive) {
          ctx.counters.admissionTimeouts++
          ctx.q.push(ctx.now + leg.action.timeoutMs - leg.latency / 2, EV_HEDGE, id, TIMEOUT * 2 + which)
          break
        }
        leg.atD = this.#host.answer(leg.d, rec.turn, leg.action)
        ctx.q.push(ctx.now + leg.latency / 2, EV_HEDGE, id, BACK * 2 + which)
        break
      }
      case BACK:
        leg.answer = { type: 'admitResult', response: leg.atD! }
        this.#arrived(rec, leg)
        break
      case TIMEOUT:
        leg.answer = { type: 'admitTimeout' }
        this.#arrived(rec, leg)
        break
    }
    if (this.#finished(rec)) {
      this.#live[id] = undefined
      this.#free.push(id)
    }
  }

  /** Whether nothing of `rec` is still on its way. */
  #finished(rec: Hedged): boolean {
    const open = (l: Leg) => l.sent && l.answer === undefined
    return rec.decided && !open(rec.primary) && !open(rec.hedge)
  }

  #arrived(rec: Hedged, leg: Leg): void {
    const a = leg.answer
    const admitted = a?.type === 'admitResult' && a.response.admitted
    if (rec.decided || rec.turn.ended || rec.turn.seq !== rec.seq) {
      rec.decided = true
      // Too late: the turn took the other D's admission (or moved on). Give the lease back, unless
      // both legs carry the same request (a fast path's hedge to the same D: one lease).
      const other = leg === rec.primary ? rec.hedge : rec.primary
      const shared = other.action.request.requestId === leg.action.request.requestId
      if (admitted && !shared && leg.d.alive && leg.d.leases?.release(leg.action.request.requestId)) {
        this.releasedLate++
        this.#ctx.touch(leg.d)
      }
      return
    }
    const p = rec.primary.answer
    const h = rec.hedge.answer
    if (!rec.hedge.sent) {
      // Answered before the hedge went out: a plain answer.
      rec.decided = true
      this.#host.deliver(rec.turn, p!)
      return
    }
    const ok = (x: Answer | undefined) => x?.type === 'admitResult' && x.response.admitted
    const winner = ok(p) ? 'primary' : ok(h) ? 'hedge' : undefined
    if (winner === undefined && (p === undefined || h === undefined)) return
    rec.decided = true
    this.#host.deliver(rec.turn, { type: 'hedgedAdmitResult', winner, primary: p, hedge: h })
  }
}
