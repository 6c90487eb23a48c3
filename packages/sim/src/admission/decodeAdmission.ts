import { type AdmitResponse, type DispatchAction, admit } from '../adapters/router.js'
import type { SimContext, SimHost } from '../cluster/context.js'
import type { Turn } from '../cluster/turn.js'
import type { SimWorker } from '../cluster/worker.js'
import { buildAdmitWorkerState } from './decodeState.js'

/**
 * Admission on the D: the router package's `admit` (Algorithm 2) on the D's ground truth, its
 * lease book, and the sessions it releases to make room. `seedAdmission=off` (v5's fallback) takes
 * every seed unchecked.
 */
export class DecodeAdmission {
  readonly #ctx: SimContext
  readonly #host: SimHost

  constructor(ctx: SimContext, host: SimHost) {
    this.#ctx = ctx
    this.#host = host
  }

  /** The live D `d` answers the turn's admission request `a` now (leases taken, sessions released). */
  answer(d: SimWorker, turn: Turn, a: Extract<DispatchAction, { type: 'admit' }>): AdmitResponse {
    const ctx = this.#ctx
    const spec = ctx.config.spec
    // The D's ground truth for the prompt: its session's resident tokens (in the state), or,
    // for a session it holds no slot for, the prompt's prefix match on its tree.
    let matched: number | undefined
    const c = d.cache
    if (c !== undefined && turn.prompt !== undefined && !(turn.spec.session >= 0 && c.hasSession(turn.key))) {
      // `seedSlot=off` (v5): the fast path's admission counts only the session's slot as held.
      matched =
        spec.seedSlot === false && a.request.path === 'fast'
          ? 0
          : c.cache.matchPrefix(turn.prompt, { readOnly: true }).length
    }
    let decision = admit(
      buildAdmitWorkerState(d, ctx.now, ctx.config.reaper?.idleMs),
      a.request,
      { now: ctx.now, ...(matched === undefined ? {} : { matchedTokens: matched }) },
      ctx.config.admitOptions,
    )
    if (spec.seedAdmission === false && a.request.path === 'seed') {
      // v5's fallback: the D takes every seed unchecked (no lease, no release, no pause hint);
      // the transfer waits for memory in its queue.
      const { leaseMs: _lease, releasedSessions: _released, ...rest } = decision.response
      decision = {
        response: { ...rest, admitted: true, reason: 'ok', recommendedPauseMs: 0 },
        lease: undefined,
        releaseSessions: [],
        expiredLeases: decision.expiredLeases,
        loadBackTokens: decision.loadBackTokens,
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
          ctx.counters.admissionReleases++
        }
      }
      this.#host.kick(d)
    }
    if (!decision.response.admitted) ctx.counters.admissionRejects++
    ctx.touch(d)
    return decision.response
  }
}
