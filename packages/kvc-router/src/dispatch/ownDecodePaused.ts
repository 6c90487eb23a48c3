/**
 * A turn whose session's own D is paused: wait for it, move and re-prefill elsewhere
 * (`waitForOwnDecode`, the adaptive path choice), or go at once and let it make room (`pauseChoice: 'cost'`).
 */
import { DEFAULT_COST_MODEL } from '../cost/costModel.js'
import { chooseEvictOrWait } from '../path/evictOrWait.js'
import { choosePath, estimateLocal, shouldWaitForOwnDecode } from '../path/pathChoice.js'
import { turnKeys } from '../route/route.js'
import type { RouteCandidate, RouteDecision } from '../route/types.js'
import { waitOrMigrateFor } from '../tier/ownDecodeWait.js'
import type { Gen, TurnState } from './turnState.js'
import type { DoneAction } from './types.js'
import { admit } from './admission.js'
import { claimBinding } from './claims.js'
import { sameDecodeHedge } from './hedge.js'
import { pathParamsOf, queueSeconds, runningDecodes, signals } from './pathSignals.js'
import { pickPrefill } from './prefillPick.js'
import { sendFast } from './sends.js'
import { step } from './turnRecord.js'

/**
 * The adaptive path choice's other question: the session's own D is paused and the best
 * candidate is not a fast path (the turn would move and re-prefill): when waiting out the pause
 * and prefilling the append there costs less than moving, the time to wait until (jittered
 * like any wait for a pause). Only while the D has not refused the session since its last
 * success, and the pause ends before the turn's deadline.
 */
export function waitForOwnDecode(st: TurnState, decision: RouteDecision): number | undefined {
  const { cluster, params } = st.ctx
  const adaptive = params.pathChoice === 'adaptive'
  if ((!adaptive && !params.waitForOwnDecode) || st.policy.pathMode !== 'kvc') return undefined
  const b = decision.boundWorker
  if (b === undefined) return undefined
  const paused = decision.ineligible.find((w) => w.workerId === b)
  if (paused === undefined || paused.reason !== 'paused' || paused.until === undefined) return undefined
  const top = decision.candidates[0]
  if (top === undefined || top.fast) return undefined
  const s = st.turn.sessionId
  if (cluster.store.rejects(s, b) > 0 || cluster.store.isExcluded(s, b)) return undefined
  const now = cluster.now()
  const until = paused.until + st.ctx.random() * params.backoffBaseMs
  if (until >= st.deadline) return undefined
  if (!adaptive) return waitOrMigrate(st, b, top, until, now)
  const binding = cluster.store.getBinding(s)
  const prompt = st.turn.promptTokens
  const pp = pathParamsOf(st)
  // A D that refused this turn's append as too large said how little of the session it holds:
  // staying there re-prefills the rest, whatever the binding says.
  const held = Math.min(binding?.committedTokens ?? 0, st.appendRefused?.get(b) ?? prompt, prompt)
  const stay = estimateLocal(
    {
      promptTokens: prompt,
      decodeHeldTokens: held,
      decodeQueueS: queueSeconds(st, b),
      runningDecodes: runningDecodes(st, b),
    },
    pp,
  )
  const p = pickPrefill(st, top.workerId)
  const move = choosePath(signals(st, top, p), pp)
  const waitS = (until - now) / 1000
  if (!shouldWaitForOwnDecode(waitS, stay, move)) return undefined
  const moveCost = move.site === 'local' ? move.local.costS : move.remote!.costS
  step(
    st,
    'path',
    b,
    undefined,
    `wait ${waitS.toFixed(2)} s for ${b} (paused): ${(waitS + stay.costS).toFixed(2)} s ≤ ${move.site} seed on ${top.workerId} ${moveCost.toFixed(2)} s`,
  )
  return until
}

/**
 * `waitForOwnDecode` (remote path choice): wait until `until` for the session's paused own D
 * `b` when {@link waitOrMigrateFor} finds that no slower than migrating to `top`; the record
 * says why either way.
 */
export function waitOrMigrate(
  st: TurnState,
  b: string,
  top: RouteCandidate,
  until: number,
  now: number,
): number | undefined {
  const p = pickPrefill(st, top.workerId)
  const t = st.turn
  const r = waitOrMigrateFor(
    st.ctx,
    t.sessionId,
    turnKeys(t),
    t.promptTokens,
    b,
    (until - now) / 1000,
    queueSeconds(st, b),
    top,
    p,
    p === undefined ? 0 : queueSeconds(st, p),
  )
  step(st, 'path', r.choice === 'wait' ? b : top.workerId, undefined, `${b} paused: ${r.reason}`)
  return r.choice === 'wait' ? until : undefined
}

/**
 * Pause or evict (`pauseChoice: 'cost'`): the session's own D is paused, the turn would take the
 * fast path there and no other D offers one. A fast candidate on that D when going now and
 * letting it make room costs less than waiting the pause out (`chooseEvictOrWait`). Not for a
 * session the D refused or retracted since its last success.
 */
export function evictRatherThanWait(st: TurnState, decision: RouteDecision): RouteCandidate | undefined {
  const { cluster, params } = st.ctx
  if (params.pauseChoice !== 'cost' || st.policy.pathMode !== 'kvc' || !st.policy.usesAdmission)
    return undefined
  const b = decision.boundWorker
  if (b === undefined || decision.candidates[0]?.fast === true) return undefined
  const paused = decision.ineligible.find((w) => w.workerId === b)
  if (paused === undefined || paused.reason !== 'paused' || paused.until === undefined) return undefined
  const s = st.turn.sessionId
  if (cluster.store.rejects(s, b) > 0 || cluster.store.isExcluded(s, b)) return undefined
  const binding = cluster.store.getBinding(s)
  if (binding === undefined || binding.workerId !== b) return undefined
  // The D refused this turn's append as too large: it no longer holds the session, so going
  // now would be a seed, not an append (seeds respect the pause).
  if (st.appendRefused?.has(b) === true) return undefined
  const prompt = st.turn.promptTokens
  const held = Math.min(binding.committedTokens, prompt)
  const append = prompt - held
  if (append > params.tauAppend) return undefined
  const need = append + st.reserve
  const waitS = Math.max(0, paused.until - cluster.now()) / 1000
  const choice = chooseEvictOrWait(
    { waitS, needTokens: need, contextTokens: held },
    st.ctx.cost ?? DEFAULT_COST_MODEL,
  )
  if (choice.action !== 'evict') return undefined
  step(st, 'path', b, undefined, `${b} is paused; fast path now, the D makes room: ${choice.reason}`)
  const l = cluster.store.load(b)
  return {
    workerId: b,
    rank: 0,
    fast: true,
    capOk: true,
    prefixResident: true,
    overlapBlocks: 0,
    plainOverlapBlocks: 0,
    bonus: 0,
    score: 0,
    load: l.turns + l.pendingSeeds,
    tieBreak: 0,
    heldTokens: held,
    loadBackTokens: 0,
    appendTokens: append,
    needTokens: need,
    availableTokens: cluster.available(b),
    decidedBy: 'last',
    note: 'paused: evict rather than wait',
  }
}

/**
 * The fast path on `c`'s D despite its pause (`#evictRatherThanWait`): claims, admission (the
 * D still decides; the pause it set does not stop this request), then `sendFast`. `undefined`
 * when the D refused or the send failed: the walk goes on as if the pause had held.
 */
export function* fastDespitePause(st: TurnState, c: RouteCandidate): Gen<DoneAction | undefined> {
  const d = c.workerId
  if (!(yield* claimBinding(st, d))) return undefined
  const r = yield* admit(st, d, 'fast', c, Number.POSITIVE_INFINITY, sameDecodeHedge(st))
  if (r.kind !== 'admitted') return undefined
  return yield* sendFast(st, d, c, r.leaseId, 'fast')
}
