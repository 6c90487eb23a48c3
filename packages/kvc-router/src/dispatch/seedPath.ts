/**
 * A turn that is not a fast path: the seed path through a P (pending-seed budget, P, admission), or a local
 * seed on the D.
 */
import type { RouteCandidate } from '../route/types.js'
import { type Gen, SLO_TIER, type TurnState } from './turnState.js'
import type { DoneAction } from './types.js'
import { admit } from './admission.js'
import { claimBinding, claimSeedSlot } from './claims.js'
import { hedgeCandidate } from './hedge.js'
import { pickPrefill, recheckPrefill } from './prefillPick.js'
import { sendFast, sendSeed } from './sends.js'
import { releaseHedgeSlot, releaseSeedSlot, takeHedgeSlot, takeSeedSlot } from './turnLoad.js'
import { count, step } from './turnRecord.js'

/**
 * The seed path's first check on `d`, a plain call: its pending-seed budget (the SLO class's
 * share), less the slots left to turns that have waited longer for `d`. Returns the budget, or
 * `undefined` when it is full: the skip is then recorded and `d` joins the D workers this turn
 * waits for. A walk makes this check before starting the seed path's generators, since under
 * load most candidates end here.
 */
export function seedBudget(st: TurnState, d: string): number | undefined {
  const { cluster, params } = st.ctx
  st.seedFailedOnP = undefined
  const budget = Math.max(1, Math.floor(params.pendingSeedsPerD * params.slo[st.cls].seedShare))
  const pending = cluster.store.load(d).pendingSeeds
  // Free slots go to the turns that have waited longest for this D (first come, first served),
  // among those of this turn's SLO class or a higher one (lower classes yield first).
  const older = cluster.seedWaiters.olderThan(d, st.record.startedAt, SLO_TIER[st.cls])
  if (pending + older < budget) return budget
  count(st, 'seed_budget')
  st.ctx.tuning?.tuner.seedBudgetHit()
  st.budgetWaits.push(d)
  step(
    st,
    'skip',
    d,
    undefined,
    pending >= budget
      ? budgetFullNote(budget, st.cls)
      : `pending-seed slots left to ${older} earlier turns waiting for ${d}`,
  )
  return undefined
}

/** The last full-budget note built: under load the same text is recorded ~100k times a run. */
let lastNote = { budget: 0, cls: '', text: '' }

function budgetFullNote(budget: number, cls: string): string {
  if (lastNote.budget !== budget || lastNote.cls !== cls)
    lastNote = { budget, cls, text: `pending-seed budget full (${budget} for ${cls})` }
  return lastNote.text
}

/**
 * The seed path on `c`'s D: its pending-seed budget, a P, claims, admission, then `seedViaP`.
 * `ownPause`: a pause the D set in its own answer to this turn, which does not stop it.
 * `checkedBudget`: the budget {@link seedBudget} just returned for `d`, when the caller checked it.
 */
export function* seedPath(
  st: TurnState,
  c: RouteCandidate,
  ownPause: number,
  checkedBudget?: number,
): Gen<DoneAction | undefined> {
  const { cluster } = st.ctx
  const policy = st.policy
  const d = c.workerId
  const budget = checkedBudget ?? seedBudget(st, d)
  if (budget === undefined) return undefined
  const p = pickPrefill(st, d)
  if (p === undefined) {
    count(st, 'no_prefill')
    step(st, 'skip', d, undefined, 'no healthy P with a healthy link')
    return undefined
  }
  // Take the pending-seed slot before the admission RPC, so that turns interleaved with this
  // one cannot overshoot the budget while it waits for the answer.
  takeSeedSlot(st, d)
  if (st.claims) {
    if (!(yield* claimSeedSlot(st, d, budget))) {
      releaseSeedSlot(st)
      return undefined
    }
    if (!(yield* claimBinding(st, d))) {
      releaseSeedSlot(st)
      return undefined
    }
  }
  let leaseId: string | undefined
  let on = c
  let via = p
  if (policy.usesAdmission) {
    // Hedged admission: a second D of the walk, its slot and its P, ready in case this one is slow.
    const h = ownPause === Number.NEGATIVE_INFINITY ? hedgeCandidate(st, d) : undefined
    if (h !== undefined) takeHedgeSlot(st, h.c.workerId)
    const r = yield* admit(st, d, 'seed', c, ownPause, h?.c)
    if (r.kind === 'admitted' && h !== undefined && r.workerId === h.c.workerId) {
      // The hedge won: the turn seeds that D, holding its slot; this one's slot is free again.
      releaseSeedSlot(st)
      st.seedSlot = st.hedgeSlot
      st.hedgeSlot = undefined
      if (cluster.has(d)) cluster.seedWaiters.slotFreed(d)
      on = h.c
      via = h.p
    } else releaseHedgeSlot(st)
    if (r.kind !== 'admitted') {
      releaseSeedSlot(st)
      return undefined
    }
    leaseId = r.leaseId
  }
  const target = on.workerId
  // Claims and admission RPCs take time: the P picked before them may have gone down, been
  // drained or paused, or lost its link to the D meanwhile. Pick again instead of seeding through it.
  const q = recheckPrefill(st, via, target)
  if (q === undefined) {
    releaseSeedSlot(st)
    return undefined
  }
  return yield* sendSeed(st, q, target, on, leaseId)
}

/**
 * A local seed on `c`'s D (the adaptive path choice): claims, admission by `seed` (the D must
 * hold the whole part of the prompt it lacks), then `sendFast` with path `local`: the D
 * prefills it. No pending-seed slot: nothing is transferred.
 */
export function* localSeed(st: TurnState, c: RouteCandidate, ownPause: number): Gen<DoneAction | undefined> {
  const d = c.workerId
  if (!(yield* claimBinding(st, d))) return undefined
  let leaseId: string | undefined
  if (st.policy.usesAdmission) {
    const r = yield* admit(st, d, 'seed', c, ownPause)
    if (r.kind !== 'admitted') return undefined
    leaseId = r.leaseId
  }
  return yield* sendFast(st, d, c, leaseId, 'local')
}
