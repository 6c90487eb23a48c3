/** The seed path's P: picked by the policy or the cluster, and checked again before the seed is sent. */
import type { TurnState } from './turnState.js'
import { count, step } from './turnRecord.js'

/** The seed path's P for `d`: the policy's choice, else the cluster's; never `#avoidP`. */
export function pickPrefill(st: TurnState, d: string): string | undefined {
  const avoid = st.avoidP
  const p = st.policy.pickPrefill?.(st.ctx, st.turn, d)
  if (p !== undefined && p !== avoid) return p
  return st.ctx.cluster.pickPrefill(d, avoid)
}

/**
 * `p` if it can still seed `d` (registered, healthy, not draining, not paused, healthy link),
 * else another P picked the same way, else `undefined` (the D is skipped: `no_prefill`).
 */
export function recheckPrefill(st: TurnState, p: string, d: string): string | undefined {
  const why = prefillObstacle(st, p, d)
  if (why === undefined) return p
  const again = pickPrefill(st, d)
  if (again === undefined || prefillObstacle(st, again, d) !== undefined) {
    count(st, 'no_prefill')
    step(st, 'skip', d, p, `P ${p} ${why} since it was picked, and no other P can seed ${d}`)
    return undefined
  }
  step(st, 'skip', d, p, `P ${p} ${why} since it was picked; seeding through ${again} instead`)
  return again
}

export function prefillObstacle(st: TurnState, p: string, d: string): string | undefined {
  const cluster = st.ctx.cluster
  if (!cluster.has(p) || cluster.role(p) !== 'prefill') return 'was removed'
  if (!cluster.healthy(p)) return 'became unhealthy'
  if (cluster.draining(p)) return 'is draining'
  if (cluster.isPaused(p)) return 'is paused'
  if (!cluster.has(d) || !cluster.linkHealthy(p, d)) return `has no healthy link to ${d}`
  return undefined
}
