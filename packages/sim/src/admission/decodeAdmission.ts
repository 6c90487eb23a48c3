import {
  type AdmitResponse,
  type AdmitWorkerState,
  DEFAULT_RETRACTION_PARAMS,
  type DispatchAction,
  type RetractionSession,
  admit,
  planRetraction,
} from '../adapters/router.js'
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
  /** `retract=room`: each session's latest admitted turn (its `turnIndex`). */
  readonly #lastTurn = new Map<string, number>()
  /** `retract=room`: the session's latest turn when a D last retracted it. */
  readonly #retractedAt = new Map<string, number>()

  constructor(ctx: SimContext, host: SimHost) {
    this.#ctx = ctx
    this.#host = host
  }

  /** The live D `d` answers the turn's admission request `a` now (leases taken, sessions released). */
  answer(d: SimWorker, turn: Turn, a: Extract<DispatchAction, { type: 'admit' }>): AdmitResponse {
    const ctx = this.#ctx
    const spec = ctx.config.spec
    if (spec.slotAdmission === true && a.request.path === 'fast') return this.#slotAnswer(d, turn, a)
    // The D's ground truth for the prompt: its session's resident tokens (in the state), or,
    // for a session it holds no slot for, the prompt's prefix match on its tree.
    // With a host tier, also what of the prompt the tree holds on the host after that match.
    let matched: number | undefined
    let hostMatched = 0
    const c = d.cache
    if (c !== undefined && turn.prompt !== undefined && !(turn.spec.session >= 0 && c.hasSession(turn.key))) {
      // `seedSlot=off` (v5): the fast path's admission counts only the session's slot as held.
      if (spec.seedSlot === false && a.request.path === 'fast') matched = 0
      else {
        const m = c.cache.matchPrefix(turn.prompt, { readOnly: true })
        matched = ctx.config.geometry.tokens(m.length)
        if (ctx.config.hostTier !== undefined) hostMatched = ctx.config.geometry.tokens(m.hostLength)
      }
    }
    const loadBackQueue = this.#loadBackQueueTokens(d)
    const state = buildAdmitWorkerState(
      d,
      ctx.now,
      ctx.config.reaper?.idleMs,
      ctx.config.geometry,
      loadBackQueue,
    )
    let decision = admit(
      state,
      a.request,
      matched === undefined
        ? { now: ctx.now }
        : hostMatched > 0
          ? { now: ctx.now, matchedTokens: matched, hostMatchedTokens: hostMatched }
          : { now: ctx.now, matchedTokens: matched },
      ctx.config.admitOptions,
    )
    // The fast path's load-back, queued on the D until its prefill has copied it.
    if (decision.response.admitted && decision.loadBackTokens > 0 && a.request.path === 'fast') {
      turn.plannedLoadBack = decision.loadBackTokens
    }
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
    if (spec.retract === 'room') this.#lastTurn.set(turn.key, turn.spec.turnIndex)
    if ((spec.retract === true || spec.retract === 'room') && d.cache !== undefined)
      return this.#retract(d, state, decision.response, a.request.sessionId, spec.retract === 'room')
    return decision.response
  }

  /**
   * Tokens the D `d` has yet to load back from its host tier (admission's `loadBackQueueTokens`):
   * the planned load-backs of the fast-path turns queued for its prefill server, and the rest of
   * the running prefill's own copy. 0 without a host tier.
   */
  #loadBackQueueTokens(d: SimWorker): number {
    const ctx = this.#ctx
    if (ctx.config.hostTier === undefined) return 0
    let sum = 0
    for (let i = d.qHead; i < d.queue.length; i++) {
      const job = d.queue[i]!
      const turn = ctx.turns[job.turn.id]!
      if (job.seq !== turn.seq || turn.ended || turn.stage !== 'queued') continue
      sum += turn.plannedLoadBack
    }
    const run = d.running
    if (run !== undefined && d.loadBackEndsMs > ctx.now && d.loadBackEndsMs > d.loadBackStartsMs) {
      const left = (d.loadBackEndsMs - ctx.now) / (d.loadBackEndsMs - d.loadBackStartsMs)
      sum += Math.round(d.loadBackTokens * Math.min(1, left))
    }
    return sum
  }

  /**
   * `retract=on`: a D at or above the retraction threshold after this answer retracts its coldest
   * hot sessions (`planRetraction`), leaving out those it already retracts (their KV goes when
   * their turns end, so their tokens no longer count). Each is released when its running turn
   * ends (`DecodeBatches`); the answer names them so that the router moves their next turns.
   */
  #retract(
    d: SimWorker,
    state: AdmitWorkerState,
    res: AdmitResponse,
    requester: string,
    room: boolean,
  ): AdmitResponse {
    if (res.tokenUsageAfter < DEFAULT_RETRACTION_PARAMS.retractAbove) return res
    const going = d.retracting
    let usage = res.tokenUsageAfter
    const sessions: RetractionSession[] = []
    for (const s of state.sessions.values()) {
      if (going.has(s.sessionId)) usage -= s.residentTokens / state.capacityTokens
      else if (!room) sessions.push(s)
      else {
        const at = this.#retractedAt.get(s.sessionId)
        const moved = at !== undefined && (this.#lastTurn.get(s.sessionId) ?? at) <= at + 1
        sessions.push(moved ? { ...s, recentlyMoved: true } : s)
      }
    }
    const plan = planRetraction(
      {
        capacityTokens: state.capacityTokens,
        tokenUsageAfter: Math.max(0, usage),
        sessions,
        requester,
        ...(room ? { placeableTokens: this.#placeable(d) } : {}),
      },
      DEFAULT_RETRACTION_PARAMS,
    )
    if (plan.sessions.length === 0) return res
    for (const s of plan.sessions) {
      going.add(s)
      if (room) this.#retractedAt.set(s, this.#lastTurn.get(s) ?? 0)
    }
    this.#ctx.counters.retractions += plan.sessions.length
    return { ...res, retractedSessions: plan.sessions }
  }

  /**
   * `retract=room`: the room each other live D has below its pause threshold, as the router sees it
   * (`ClusterView`: available tokens at its last report or admission answer, less what it admitted
   * since), where a retracted session's next turn could re-prefill without pausing that D.
   */
  #placeable(d: SimWorker): number[] {
    const ctx = this.#ctx
    const cluster = ctx.router.cluster
    const keep = 1 - ctx.config.admitOptions.pause.usageThreshold
    const out: number[] = []
    for (const w of ctx.decodeWorkers) {
      if (w === d || !w.alive || w.role !== 'decode' || !cluster.has(w.id)) continue
      const v = cluster.worker(w.id)
      if (!v.healthy || v.draining || v.role !== 'decode') continue
      out.push(v.availableTokens - keep * v.capacityTokens)
    }
    return out
  }

  /**
   * `admission=slot`, the research prototype's v5 `admit_direct_append`
   * (`docs/design/prototype.md#the-v5-paths`): the session's slot says how much of the prompt the
   * D holds (its committed length; nothing without a slot); the rest, plus the output, must fit in
   * the D's free and evictable memory now. It releases no idle session, takes no lease and sends
   * no pause hint: memory comes back only when the engine's own LRU releases idle sessions under
   * pressure.
   */
  #slotAnswer(d: SimWorker, turn: Turn, a: Extract<DispatchAction, { type: 'admit' }>): AdmitResponse {
    const ctx = this.#ctx
    const req = a.request
    const c = d.cache
    const st = c === undefined || turn.spec.session < 0 ? undefined : c.getSessionStatus(turn.key)
    const held = Math.min(req.promptTokens, st?.committedTokens ?? 0)
    const append = req.promptTokens - held
    const need = append + (req.expectedOutputTokens ?? ctx.config.admitOptions.defaultDecodeReserve)
    const free = d.pool.availableSize() + (c?.cache.evictableSize() ?? 0) - d.reservedOutputs
    const cap = d.pool.size
    const reason =
      append > ctx.config.admitOptions.maxAppendTokens ? 'append_too_large' : need <= free ? 'ok' : 'capacity'
    const admitted = reason === 'ok'
    if (!admitted) ctx.counters.admissionRejects++
    return {
      requestId: req.requestId,
      admitted,
      reason,
      residentTokens: held,
      needTokens: need,
      tokenUsageAfter: Math.min(1, Math.max(0, (cap - free + (admitted ? need : 0)) / cap)),
      transferQueueDepth: d.transferWait.length + d.transfersOnWire,
      retractedQueueDepth: 0,
      recommendedPauseMs: 0,
    }
  }
}
