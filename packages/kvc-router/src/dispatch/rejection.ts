/**
 * A D's refusal of a session: counted toward `τ_reject` and exclusion, and retractions under memory
 * pressure.
 */
import type { TurnState } from './turnState.js'
import { step } from './turnRecord.js'

export function reject(st: TurnState, d: string, why: string): void {
  const { cluster, params } = st.ctx
  if (!cluster.has(d)) return
  const store = cluster.store
  const s = st.turn.sessionId
  const n = store.addReject(s, d)
  st.ctx.tuning?.tuner.rejected(n)
  step(st, 'reject', d, undefined, `${why}: rejects[${s}][${d}] = ${n}`)
  if (n >= params.tauReject && !store.isExcluded(s, d)) {
    store.exclude(s, d)
    const bound = store.getBinding(s)?.workerId === d
    step(
      st,
      'exclude',
      d,
      undefined,
      `excluded after ${n} rejections${bound ? '; the session migrates' : ''}`,
    )
  }
}

/**
 * `d` retracts these hot sessions (memory pressure, `planRetraction`): each is excluded from
 * `d`, so that its next turn is placed on another D (an exclusion ends with the session's next
 * success, `resetOnSuccess`), and stops waiting for `d`'s pauses.
 */
export function retracted(st: TurnState, d: string, sessions: readonly string[]): void {
  const cluster = st.ctx.cluster
  if (!cluster.has(d)) return
  for (const s of sessions) {
    cluster.retractions.record(s, d)
    if (cluster.store.isExcluded(s, d)) continue
    cluster.store.exclude(s, d)
    step(st, 'exclude', d, undefined, `${d} retracts session ${s} (memory pressure): its next turn moves`)
  }
}
