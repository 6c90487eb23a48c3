/**
 * Claims for several router replicas (a store that confirms them): the session's binding and pending-seed
 * slots, and where a migration comes from.
 */
import type { Gen, TurnState } from './turnState.js'
import type { DispatchOutcome } from './types.js'
import { commit } from './turnLoad.js'
import { count, step } from './turnRecord.js'

/**
 * With a store that confirms claims: binds the session to `d` unless this turn already knows it
 * is bound there. `false` when another replica's binding won (the walk ends and re-routes).
 */
export function* claimBinding(st: TurnState, d: string): Gen<boolean> {
  if (!st.claims || st.known?.workerId === d) return true
  const cluster = st.ctx.cluster
  const s = st.turn.sessionId
  const expected = st.known
  commit(st, d)
  const out = yield {
    type: 'claim',
    turnId: st.turnId,
    claim: { kind: 'binding', sessionId: s, workerId: d, expected, at: cluster.now() },
  }
  const r = out as Extract<DispatchOutcome, { type: 'claimResult' }>
  const note = r.confirmed === false ? ' (unconfirmed: store degraded)' : ''
  if (r.granted) {
    if (st.origin === null) st.origin = expected?.workerId
    st.known = r.binding ?? {
      workerId: d,
      committedTokens: 0,
      verifiedBlocks: 0,
      updatedAt: cluster.now(),
    }
    step(st, 'claim', d, undefined, `bound ${s} to ${d}${note}`)
    return true
  }
  const winner = r.binding?.workerId ?? cluster.store.getBinding(s)?.workerId
  count(st, 'binding_conflict')
  step(
    st,
    'claim',
    d,
    undefined,
    `lost: ${s} is bound to ${winner ?? 'another D'} by another replica; re-routing${note}`,
  )
  st.follow = winner
  st.reroute = true
  return false
}

/** With a store that confirms claims: confirms the pending-seed slot this turn took on `d`. */
export function* claimSeedSlot(st: TurnState, d: string, budget: number): Gen<boolean> {
  const cluster = st.ctx.cluster
  commit(st, d)
  const out = yield {
    type: 'claim',
    turnId: st.turnId,
    claim: { kind: 'seedSlot', sessionId: st.turn.sessionId, workerId: d, budget, at: cluster.now() },
  }
  const r = out as Extract<DispatchOutcome, { type: 'claimResult' }>
  if (r.granted) return true
  count(st, 'seed_budget')
  st.ctx.tuning?.tuner.seedBudgetHit()
  st.budgetWaits.push(d)
  step(st, 'skip', d, undefined, `pending-seed budget full across replicas (${budget} for ${st.cls})`)
  return false
}

export function migrationSource(st: TurnState, d: string): string | undefined {
  // With claims, the store already binds the session to `d`: the source is the D it was bound
  // to before this turn's first granted claim.
  const from =
    st.claims && st.origin !== null ? st.origin : st.ctx.cluster.store.getBinding(st.turn.sessionId)?.workerId
  return from !== undefined && from !== d ? from : undefined
}
