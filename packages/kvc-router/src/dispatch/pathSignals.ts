/** The adaptive path choice's inputs for a turn on a D: queued prefill work, running decodes, held tokens. */
import { DEFAULT_COST_MODEL } from '../cost/costModel.js'
import { type PathChoice, type PathParams, pathParams, type PathSignals } from '../path/pathChoice.js'
import type { RouteCandidate } from '../route/types.js'
import type { TurnState } from './turnState.js'
import { step } from './turnRecord.js'

export function pathParamsOf(st: TurnState): PathParams {
  if (st.pathParams === undefined) {
    st.pathParams = pathParams(st.ctx.cost ?? DEFAULT_COST_MODEL, {
      stallWeight: st.ctx.params.stallWeight,
    })
  }
  return st.pathParams
}

/**
 * Seconds of prefill work queued on worker `id`: its queue report (seconds, else tokens and
 * requests through the cost model), else the router's own count of the prefill tokens of the
 * turns in flight there (an upper bound: a turn counts until it ends).
 */
export function queueSeconds(st: TurnState, id: string): number {
  const cluster = st.ctx.cluster
  const cm = st.ctx.cost ?? DEFAULT_COST_MODEL
  const q = cluster.queue(id)
  if (q?.prefillQueueS !== undefined) return q.prefillQueueS
  if (q?.prefillQueueTokens !== undefined) {
    const reqs = q.prefillQueueRequests ?? (q.prefillQueueTokens > 0 ? 1 : 0)
    return q.prefillQueueTokens / cm.prefillTokensPerS + cm.prefillFixedS * reqs
  }
  const l = cluster.store.load(id)
  return l.prefillTokens / cm.prefillTokensPerS + (l.prefillTokens > 0 ? cm.prefillFixedS : 0)
}

/** Requests decoding on D `d`: its queue report, else the turns in flight there. */
export function runningDecodes(st: TurnState, d: string): number {
  return st.ctx.cluster.queue(d)?.runningRequests ?? st.ctx.cluster.store.load(d).turns
}

/**
 * Counts a send that `d` prefills (a fast-path append or a local seed) in the arrival rates the
 * path choice prices head-of-line delay with; only with the adaptive path choice (nothing else
 * reads them).
 */
export function noteArrival(st: TurnState, d: string): void {
  if (st.ctx.params.pathChoice === 'adaptive') st.ctx.cluster.arrivals.record(d, st.ctx.cluster.now())
}

/** The path choice's signals for this turn on `c`'s D, through P `p` (none: no remote seed). */
export function signals(st: TurnState, c: RouteCandidate, p: string | undefined): PathSignals {
  const d = c.workerId
  return {
    promptTokens: st.turn.promptTokens,
    // Route counts a load-back from the D's host tier as held; the path choice prices it.
    decodeHeldTokens: c.heldTokens - c.loadBackTokens,
    ...(c.loadBackTokens > 0 ? { decodeHostTokens: c.loadBackTokens } : {}),
    decodeQueueS: queueSeconds(st, d),
    runningDecodes: runningDecodes(st, d),
    decodeArrivalsPerS: st.ctx.cluster.arrivals.perSecond(d, st.ctx.cluster.now()),
    ...(p === undefined ? {} : { prefill: { queueS: queueSeconds(st, p), heldTokens: 0 } }),
  }
}

export function explainPath(st: TurnState, d: string, p: string | undefined, choice: PathChoice): void {
  step(st, 'path', d, choice.site === 'remote' ? p : undefined, `${choice.site} seed: ${choice.reason}`)
}
