/** Hedged admission (`hedgeAdmissions`): when a second admission RPC goes out, and to which D. */
import type { RouteCandidate } from '../route/types.js'
import { SLO_TIER, type TurnState } from './turnState.js'
import { pickPrefill } from './prefillPick.js'

/**
 * Hedged admission's second D for a seed on `d` (`hedgeAdmissions`, without claims): the next
 * candidate of the walk that is not a fast path, has room (`capOk`), is eligible and not
 * excluded for the session, has a free pending-seed slot for this turn and a P that can seed it.
 */
export function hedgeCandidate(
  st: TurnState,
  d: string,
): { readonly c: RouteCandidate; readonly p: string } | undefined {
  const { cluster, params } = st.ctx
  if (!params.hedgeAdmissions || st.claims || st.attempts + 2 > params.maxAttempts) return undefined
  if (Number.isNaN(hedgeDelay(st))) return undefined
  const budget = Math.max(1, Math.floor(params.pendingSeedsPerD * params.slo[st.cls].seedShare))
  const list = st.walkList
  for (let k = st.walkPos + 1; k < list.length; k++) {
    const x = list[k]!
    const c2 = x.c
    const d2 = c2.workerId
    if (d2 === d || c2.fast || !c2.capOk || x.ownPause !== undefined) continue
    if (!cluster.has(d2) || cluster.role(d2) !== 'decode' || !cluster.isEligible(d2)) continue
    if (cluster.store.isExcluded(st.turn.sessionId, d2)) continue
    const older = cluster.seedWaiters.olderThan(d2, st.record.startedAt, SLO_TIER[st.cls])
    if (cluster.store.load(d2).pendingSeeds + older >= budget) continue
    const p2 = pickPrefill(st, d2)
    if (p2 === undefined) continue
    return { c: c2, p: p2 }
  }
  return undefined
}

/** `'same'` when a fast-path admission may be hedged (the same request to the same D again). */
export function sameDecodeHedge(st: TurnState): 'same' | undefined {
  const params = st.ctx.params
  if (!params.hedgeAdmissions || st.attempts + 2 > params.maxAttempts) return undefined
  return Number.isNaN(hedgeDelay(st)) ? undefined : 'same'
}

/**
 * How long an admission RPC may go unanswered before the hedge goes out: the
 * `hedgeQuantile` of the router's recent admission latencies, at least `hedgeMinDelayMs`;
 * `NaN` (no hedging) until 16 latencies were observed.
 */
export function hedgeDelay(st: TurnState): number {
  const w = st.ctx.cluster.admissionLatency
  if (w.size < 16) return Number.NaN
  return Math.max(st.ctx.params.hedgeMinDelayMs, w.quantile(st.ctx.params.hedgeQuantile))
}
