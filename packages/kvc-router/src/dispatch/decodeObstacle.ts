/** Whether a D can still take the turn when the turn comes to ask it. */
import type { TurnState } from './turnState.js'
import type { TurnFailureCause } from './types.js'

/**
 * Why D `d` can no longer take this turn (removed, unhealthy, draining, paused, excluded for the
 * session), or `undefined`. A pause ending no later than `tolerated` (one `d` set in its own
 * answer to this turn) does not count.
 */
export function decodeObstacle(
  st: TurnState,
  d: string,
  tolerated: number,
): { cause: TurnFailureCause; why: string } | undefined {
  const cluster = st.ctx.cluster
  if (!cluster.has(d) || cluster.role(d) !== 'decode') return { cause: 'all_unhealthy', why: 'was removed' }
  if (!cluster.healthy(d)) return { cause: 'all_unhealthy', why: 'became unhealthy' }
  if (cluster.draining(d)) return { cause: 'all_draining', why: 'is draining' }
  const until = cluster.store.pauseUntil(d)
  if (cluster.now() < until && until > tolerated) {
    return { cause: 'all_paused', why: `is paused until ${until.toFixed(1)}` }
  }
  if (cluster.store.isExcluded(st.turn.sessionId, d)) {
    return { cause: 'all_excluded', why: 'is excluded for the session' }
  }
  return undefined
}
