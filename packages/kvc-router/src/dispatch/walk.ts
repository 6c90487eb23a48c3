/**
 * Algorithm 3's outer loop for one turn: walks over Route's ranking, then waits, until the turn is done or
 * fails.
 */
import { backoffDelayMs } from '../backoff/backoff.js'
import type { RouteCandidate } from '../route/types.js'
import { type Gen, SLO_TIER, type TurnState, type WalkEntry } from './turnState.js'
import type { DoneAction, FailAction } from './types.js'
import { evictRatherThanWait, fastDespitePause, waitForOwnDecode } from './ownDecodePaused.js'
import { seedBudget } from './seedPath.js'
import { seedWithRetry, seedsAtOnce, tryCandidate } from './tryCandidate.js'
import { failTurn } from './turnEnd.js'
import { releaseCommitment } from './turnLoad.js'
import { count, dominantCause, recordRoute, step } from './turnRecord.js'
import { waitUntil } from './waitUntil.js'

/** Whether a candidate after position `k` of the walk is fast and holds part of the prompt. */
function fastHolderAfter(walk: readonly WalkEntry[], k: number): boolean {
  for (let i = k + 1; i < walk.length; i++) {
    const c = walk[i]!.c
    if (c.fast && c.heldTokens > 0) return true
  }
  return false
}

export function* walkTurn(st: TurnState): Gen<DoneAction | FailAction> {
  const { cluster, params } = st.ctx
  const s = st.turn.sessionId
  const policy = st.policy
  // A turn no D can ever hold (its prompt and decode reserve above every D's KV pool) fails at
  // once: no walk, wait or retry can make it fit.
  const records = cluster.decodeRecords()
  if (records.length > 0) {
    let largest = 0
    for (const r of records) if (r.capacityTokens > largest) largest = r.capacityTokens
    if (st.turn.promptTokens + st.reserve > largest) return failTurn(st, 'too_large', 'TOO_LARGE', largest)
  }
  for (;;) {
    st.walks++
    st.record.walks = st.walks
    const decision = policy.rank(st.ctx, st.turn)
    if (st.claims) st.known = cluster.store.getBinding(s)
    recordRoute(st, decision)
    for (const w of decision.ineligible) {
      count(
        st,
        w.reason === 'paused'
          ? 'all_paused'
          : w.reason === 'excluded'
            ? 'all_excluded'
            : w.reason === 'draining'
              ? 'all_draining'
              : 'all_unhealthy',
      )
    }
    if (cluster.decodeIds().length === 0) count(st, 'no_decode_workers')
    const evict = evictRatherThanWait(st, decision)
    if (evict !== undefined) {
      const done = yield* fastDespitePause(st, evict)
      releaseCommitment(st)
      if (done !== undefined) return done
      if (st.sendFailures >= params.maxSendFailures)
        return failTurn(st, dominantCause(st), 'ATTEMPTS_EXHAUSTED')
    }
    const stayUntil = waitForOwnDecode(st, decision)
    if (stayUntil !== undefined) {
      if (st.walks >= params.maxWalks) return failTurn(st, dominantCause(st), 'ATTEMPTS_EXHAUSTED')
      yield waitUntil(st, stayUntil, 'own_decode_paused')
      continue
    }
    let candidates = decision.candidates
    const follow = st.follow
    st.follow = undefined
    if (follow !== undefined) {
      const i = candidates.findIndex((x) => x.workerId === follow)
      if (i > 0) {
        candidates = [candidates[i]!, ...candidates.slice(0, i), ...candidates.slice(i + 1)]
        step(st, 'route', follow, undefined, `following the binding to ${follow} won by another replica`)
      }
    }
    // Ds that refused the fast path as `append_too_large` (the router thought they held the
    // prompt, they do not) while a later candidate is fast and holds part of the prompt: their
    // seed-path fallback waits until those were tried (Theorem 2; a seed re-prefills it all).
    const deferred: { readonly c: RouteCandidate; readonly ownPause: number }[] = []
    const walk: WalkEntry[] = new Array(candidates.length)
    for (let i = 0; i < candidates.length; i++) walk[i] = { c: candidates[i]!, ownPause: undefined }
    for (let k = 0; k < walk.length; k++) {
      if (st.attempts >= params.maxAttempts) break
      const { c, ownPause } = walk[k]!
      const d = c.workerId
      st.walkList = walk
      st.walkPos = k
      if (!cluster.has(d) || cluster.role(d) !== 'decode') continue
      if (!cluster.isEligible(d) && (ownPause === undefined || !cluster.isPaused(d))) {
        count(st, cluster.isPaused(d) ? 'all_paused' : 'all_unhealthy')
        continue
      }
      if (cluster.store.isExcluded(s, d)) {
        count(st, 'all_excluded')
        continue
      }
      let done: DoneAction | undefined
      if (seedsAtOnce(st, c, ownPause)) {
        // Under load most candidates are turned away by their pending-seed budget: that check
        // is a plain call, and the seed path's generators start only when it has room.
        const budget = seedBudget(st, d)
        done =
          budget === undefined
            ? undefined
            : yield* seedWithRetry(st, c, ownPause ?? Number.NEGATIVE_INFINITY, budget)
      } else {
        const laterFast = ownPause === undefined && fastHolderAfter(walk, k)
        done = yield* tryCandidate(st, c, ownPause, laterFast ? deferred : undefined)
      }
      // Whatever happened on `d`, the turn no longer counts toward it (a success has already
      // given its load back; a rejection, a skip or a failure moves on).
      releaseCommitment(st)
      if (done !== undefined) return done
      if (st.sendFailures >= params.maxSendFailures)
        return failTurn(st, dominantCause(st), 'ATTEMPTS_EXHAUSTED')
      if (st.reroute) break
      if (k === walk.length - 1 && deferred.length > 0) walk.push(...deferred.splice(0))
    }
    // Wait in line for the D workers whose budget turned this turn away in this walk (and only
    // those: a D it no longer tries stops counting it).
    cluster.seedWaiters.wait(st.turnId, st.record.startedAt, st.budgetWaits, SLO_TIER[st.cls])
    st.budgetWaits = []
    const cause = dominantCause(st)
    const now = cluster.now()
    if (st.attempts >= params.maxAttempts || st.walks >= params.maxWalks) {
      return failTurn(st, cause, 'ATTEMPTS_EXHAUSTED')
    }
    if (now >= st.deadline) return failTurn(st, cause, 'WAIT_EXHAUSTED')
    if (st.reroute) {
      // A lost binding claim changed the session's binding: walk again now, no wait.
      st.reroute = false
      continue
    }
    let until = now + Math.max(1, backoffDelayMs(st.walks - 1, st.backoff, st.ctx.random))
    // If no healthy D is usable now only because of pauses (including hints received during this
    // walk), sleep until the first pause ends (jittered) instead of waking up for nothing.
    let earliest = Number.POSITIVE_INFINITY
    let usable = false
    for (const d of cluster.decodeIds()) {
      if (!cluster.healthy(d) || cluster.draining(d) || cluster.store.isExcluded(s, d)) continue
      const p = cluster.store.pauseUntil(d)
      if (p <= now) {
        usable = true
        break
      }
      if (p < earliest) earliest = p
    }
    if (!usable && earliest !== Number.POSITIVE_INFINITY) {
      until = earliest + st.ctx.random() * params.backoffBaseMs
    }
    until = Math.max(now + 1, Math.min(until, st.deadline))
    yield waitUntil(st, until, cause)
  }
}
