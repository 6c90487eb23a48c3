import type { SimContext } from '../cluster/context.js'
import type { Turn } from '../cluster/turn.js'

/**
 * Peer fetch (`--host-tier …:peer`): the cost-model tokens of a seed's prompt that its P reads from
 * the session's old D instead of recomputing them, beyond the `cachedCost` tokens the P holds
 * itself. Non-zero only for a seed of a session that moved (`migratedFrom`), with peer fetch on and
 * the old D alive: what that D's tree still holds of the prompt, on its device or its host tier
 * (read-only: the old D's recency and locks are untouched).
 */
export function peerFetchTokens(ctx: SimContext, turn: Turn, cachedCost: number): number {
  const tier = ctx.config.hostTier
  const from = turn.migratedFrom
  if (tier === undefined || !tier.peerFetch || from === undefined) return 0
  const old = ctx.byId.get(from)
  if (old === undefined || !old.alive || old.cache === undefined || old.role === 'prefill') return 0
  const m = old.cache.cache.matchPrefix(turn.prompt!, { readOnly: true })
  const held = Math.min(
    Math.round(ctx.config.geometry.tokens(m.length + m.hostLength) * ctx.config.workload.tokenScale),
    turn.spec.inputLength,
  )
  // At least one token is computed (the prefill's last position produces the first token).
  return Math.max(0, Math.min(held, turn.spec.inputLength - 1) - cachedCost)
}
