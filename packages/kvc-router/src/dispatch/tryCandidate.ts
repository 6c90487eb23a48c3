/**
 * One candidate of a walk: the fast path, the adaptive path choice, or the seed path, with a retry through
 * another P.
 */
import { choosePath } from '../path/pathChoice.js'
import type { RouteCandidate } from '../route/types.js'
import type { Gen, TurnState } from './turnState.js'
import type { DoneAction } from './types.js'
import { type AdmitResult, admit } from './admission.js'
import { claimBinding } from './claims.js'
import { sameDecodeHedge } from './hedge.js'
import { explainPath, pathParamsOf, signals } from './pathSignals.js'
import { pickPrefill } from './prefillPick.js'
import { arrivalDecision, sendFastOnArrival } from './onArrival.js'
import { localSeed, seedPath } from './seedPath.js'
import { sendFast } from './sends.js'
import { step } from './turnRecord.js'

/**
 * One candidate of a walk. `seedAfterOwnPause`: go straight to the seed path on `d` (a deferred
 * `append_too_large` fallback; the pause `d` set in that answer does not stop it). `defer`: on
 * `append_too_large`, record the fallback there instead of seeding now.
 */
export function* tryCandidate(
  st: TurnState,
  c: RouteCandidate,
  seedAfterOwnPause?: number,
  defer?: { c: RouteCandidate; ownPause: number }[],
): Gen<DoneAction | undefined> {
  const { cluster, params } = st.ctx
  const policy = st.policy
  const d = c.workerId
  if (policy.pathMode === 'direct') {
    let leaseId: string | undefined
    if (!(yield* claimBinding(st, d))) return undefined
    if (policy.usesAdmission) {
      const r = yield* admit(st, d, 'fast', c)
      if (r.kind !== 'admitted') return undefined
      leaseId = r.leaseId
    }
    return yield* sendFast(st, d, c, leaseId, 'direct')
  }
  let seed = seedFirst(st, c, seedAfterOwnPause)
  // A pause `d` set in its own answer to this turn's fast-path request does not stop the
  // seed-path fallback on `d` (a later, longer pause set by another turn does).
  let ownPause = seedAfterOwnPause ?? Number.NEGATIVE_INFINITY
  if (!seed) {
    if (!(yield* claimBinding(st, d))) return undefined
    // Admission on arrival (`admitOnArrival`): where the router's view predicts an admission
    // without a pause hint, the send carries the admission request and no RPC goes first.
    const arrival = arrivalDecision(st, c)
    let r: AdmitResult
    if (arrival?.onArrival === true) {
      const o = yield* sendFastOnArrival(st, d, c, arrival.reason)
      if (o.kind === 'done') return o.done
      if (o.kind === 'failed') return undefined
      r = o.result
    } else {
      r = policy.usesAdmission
        ? yield* admit(st, d, 'fast', c, undefined, sameDecodeHedge(st))
        : ({ kind: 'admitted', leaseId: '', workerId: d } as const)
    }
    if (r.kind === 'admitted')
      return yield* sendFast(st, d, c, policy.usesAdmission ? r.leaseId : undefined, 'fast')
    if (r.kind === 'rejected' && r.response.reason === 'append_too_large') {
      seed = true
      ownPause = cluster.store.pauseUntil(d)
      if (defer !== undefined) {
        // A later candidate holding part of the prompt may take the fast path.
        defer.push({ c, ownPause })
        step(st, 'skip', d, undefined, 'seed-path fallback deferred: a fast candidate follows')
        return undefined
      }
    } else return undefined
  }
  // Not the fast path: with the adaptive path choice, the D may prefill the turn itself (a
  // local seed) when the estimated completion time says so; else the seed path through a P.
  if (params.pathChoice === 'adaptive' && policy.pathMode === 'kvc') {
    const p = pickPrefill(st, d)
    const choice = choosePath(signals(st, c, p), pathParamsOf(st))
    explainPath(st, d, p, choice)
    if (choice.site === 'local') return yield* localSeed(st, c, ownPause)
  }
  return yield* seedWithRetry(st, c, ownPause)
}

/** Whether {@link tryCandidate} on `c` goes to the seed path without trying the fast path first. */
function seedFirst(st: TurnState, c: RouteCandidate, seedAfterOwnPause: number | undefined): boolean {
  return st.policy.pathMode === 'seed' || !c.fast || seedAfterOwnPause !== undefined
}

/**
 * Whether {@link tryCandidate} on `c` starts with the seed path's budget check (no claim, fast
 * path or path choice before it): then a walk may make that check itself ({@link seedBudget})
 * and, when the budget has room, go on with {@link seedWithRetry}, the rest of `tryCandidate`.
 */
export function seedsAtOnce(
  st: TurnState,
  c: RouteCandidate,
  seedAfterOwnPause: number | undefined,
): boolean {
  const pathMode = st.policy.pathMode
  return (
    pathMode !== 'direct' &&
    seedFirst(st, c, seedAfterOwnPause) &&
    !(st.ctx.params.pathChoice === 'adaptive' && pathMode === 'kvc')
  )
}

/**
 * The seed path on `c`'s D and, when it failed on the P side, once more through another P.
 * `checkedBudget`: the D's pending-seed budget, when the caller checked it ({@link seedBudget}).
 */
export function* seedWithRetry(
  st: TurnState,
  c: RouteCandidate,
  ownPause: number,
  checkedBudget?: number,
): Gen<DoneAction | undefined> {
  const params = st.ctx.params
  const d = c.workerId
  const done = yield* seedPath(st, c, ownPause, checkedBudget)
  const failedP = st.seedFailedOnP
  if (done !== undefined || failedP === undefined || st.attempts >= params.maxAttempts) return done
  // It failed on the P side (the P died or its link broke): try the same D once more through
  // another P before moving on, so that a P's failure does not move the session off a D that
  // is fine.
  st.avoidP = failedP
  const other = pickPrefill(st, d)
  if (other === undefined) {
    st.avoidP = undefined
    return undefined
  }
  step(st, 'seedViaP', d, other, `failed on the P side: trying ${d} again through another P`)
  // A pause `d` set in its own answer to this turn covered the first seed-path request only.
  const again = yield* seedPath(st, c, Number.NEGATIVE_INFINITY)
  st.avoidP = undefined
  return again
}
