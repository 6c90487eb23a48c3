/**
 * Admission (Algorithm 2) from the router's side: the RPC with its retries, reuse of recent refusals,
 * hedging, and the answer applied.
 */
import {
  ADMIT_PROTOCOL_VERSION,
  type AdmitPath,
  type AdmitRequest,
  type AdmitResponse,
} from '../admission/contract.js'
import { backoffDelayMs } from '../backoff/backoff.js'
import type { RouteCandidate } from '../route/types.js'
import type { Gen, TurnState } from './turnState.js'
import type { AdmitAnswerOutcome } from './types.js'
import { decodeObstacle } from './decodeObstacle.js'
import { hedgeDelay } from './hedge.js'
import { reject, retracted } from './rejection.js'
import { commit } from './turnLoad.js'
import { bumpAttempts, count, step } from './turnRecord.js'
import { waitUntil } from './waitUntil.js'

/**
 * Whether `d` refused a need at least as small as `c`'s within the staleness budget
 * (`admissionStalenessMs`), so asking again would be refused too: the turn skips `d` and the
 * reuse is counted and explained. An `append_too_large` refusal is never reused (it depends on
 * the turn, not the D's state).
 */
export function reusedRefusal(st: TurnState, d: string, c: RouteCandidate): boolean {
  const { cluster, params } = st.ctx
  const cached = cluster.cachedRejection(d, params.admissionStalenessMs)
  if (
    cached === undefined ||
    cached.response.reason === 'append_too_large' ||
    cached.needTokens > c.needTokens
  ) {
    return false
  }
  count(st, 'all_rejecting')
  step(
    st,
    'skip',
    d,
    undefined,
    `reused a ${cached.response.reason} answer from ${cached.at} (staleness budget)`,
  )
  return true
}

/** How one admission on a D ended for the turn. */
export type AdmitResult =
  | { readonly kind: 'admitted'; readonly leaseId: string; readonly workerId: string }
  | { readonly kind: 'rejected'; readonly response: AdmitResponse }
  | { readonly kind: 'skipped' }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'exhausted' }

export function* admit(
  st: TurnState,
  d: string,
  path: 'fast' | 'seed',
  c: RouteCandidate,
  ownPause = Number.NEGATIVE_INFINITY,
  hedge?: RouteCandidate | 'same',
): Gen<AdmitResult> {
  const { cluster, params } = st.ctx
  if (reusedRefusal(st, d, c)) return { kind: 'skipped' }
  const tries = params.admissionTries
  for (let t = 0; t < tries; t++) {
    if (st.attempts >= params.maxAttempts) return { kind: 'exhausted' }
    // Time has passed since `d` was found eligible (claims, an earlier admission RPC and its
    // backoff): ask it only if it can still take the turn, else move on to the next candidate.
    const obstacle = decodeObstacle(st, d, ownPause)
    if (obstacle !== undefined) {
      count(st, obstacle.cause)
      const after = t === 0 ? '' : ` after ${t} unanswered admission ${t === 1 ? 'try' : 'tries'}`
      step(st, 'skip', d, undefined, `${d} ${obstacle.why}${after}; moving on`)
      return { kind: 'skipped' }
    }
    const attempt = bumpAttempts(st)
    const requestId = `${st.turnId}/a${attempt}`
    commit(st, d)
    // Only the first try is hedged, and only toward a D that can still take the turn. A fast
    // path's hedge is the same request again to the same D (the only one holding the session;
    // admission is idempotent per request id): moving the session would cost a re-prefill.
    const same = hedge === 'same'
    const h =
      t !== 0 || hedge === undefined
        ? undefined
        : same
          ? c
          : decodeObstacle(st, hedge.workerId, Number.NEGATIVE_INFINITY) === undefined
            ? hedge
            : undefined
    const hedgeId = same ? requestId : `${st.turnId}/h${attempt}`
    const sentAt = cluster.now()
    const out = yield {
      type: 'admit',
      turnId: st.turnId,
      workerId: d,
      request: admitRequest(st, requestId, path, c),
      timeoutMs: params.admissionTimeoutMs,
      attempt,
      ...(h === undefined
        ? {}
        : {
            hedge: {
              workerId: h.workerId,
              request: admitRequest(st, hedgeId, path, h),
              afterMs: hedgeDelay(st),
            },
          }),
    }
    if (out.type === 'hedgedAdmitResult' && h !== undefined) {
      const hs = cluster.hedging
      hs.sent++
      bumpAttempts(st)
      if (out.winner === 'primary') cluster.admissionLatency.record(cluster.now() - sentAt)
      const pr = out.primary === undefined ? undefined : onAnswer(st, d, path, requestId, out.primary)
      const hr = out.hedge === undefined ? undefined : onAnswer(st, h.workerId, path, hedgeId, out.hedge)
      if (out.winner === 'hedge' && hr?.kind === 'admitted') {
        hs.won++
        commit(st, h.workerId)
        step(
          st,
          'admit',
          h.workerId,
          undefined,
          `hedge won: the first request to ${d} had no answer after ${(cluster.now() - sentAt).toFixed(1)} ms`,
        )
        return hr
      }
      if (out.winner === 'primary' && pr?.kind === 'admitted') return pr
      if (pr !== undefined) return pr
      // The first D never answered: a timed-out try.
      count(st, 'admission_timeouts')
      step(st, 'admit', d, undefined, 'no answer (hedged)')
    } else {
      cluster.admissionLatency.record(
        out.type === 'admitTimeout' ? params.admissionTimeoutMs : Math.max(0, cluster.now() - sentAt),
      )
      const r = onAnswer(st, d, path, requestId, out as AdmitAnswerOutcome)
      if (r !== undefined) return r
    }
    // A D that can no longer take the turn is left at once (the loop's check above says why).
    if (t < tries - 1 && decodeObstacle(st, d, ownPause) === undefined) {
      const now = cluster.now()
      const until = now + Math.max(1, backoffDelayMs(t, st.backoff, st.ctx.random))
      yield waitUntil(st, until, 'admission_retry')
    }
  }
  reject(st, d, 'admission timeouts')
  return { kind: 'timeout' }
}

export function admitRequest(
  st: TurnState,
  requestId: string,
  path: AdmitPath,
  c: RouteCandidate,
): AdmitRequest {
  return {
    v: ADMIT_PROTOCOL_VERSION,
    requestId,
    sessionId: st.turn.sessionId,
    path,
    promptTokens: st.turn.promptTokens,
    appendTokens: c.appendTokens,
    expectedOutputTokens: st.reserve,
    sloClass: st.cls,
    leaseMs: st.ctx.params.leaseMs,
  }
}

/**
 * One admission RPC's answer from `d`: applied to the cluster view, recorded, a rejection
 * counted; `undefined` for a timeout or an error (counted).
 */
export function onAnswer(
  st: TurnState,
  d: string,
  path: AdmitPath,
  requestId: string,
  out: AdmitAnswerOutcome,
): AdmitResult | undefined {
  const cluster = st.ctx.cluster
  if (out.type === 'admitResult') {
    const res = out.response
    if (cluster.has(d)) cluster.applyAdmission(d, res)
    if (res.retractedSessions !== undefined) retracted(st, d, res.retractedSessions)
    st.ctx.tuning?.tuner.transferQueue(res.transferQueueDepth)
    if (res.admitted) {
      step(st, 'admit', d, undefined, `admitted by ${path} (usage after ${res.tokenUsageAfter.toFixed(3)})`)
      return { kind: 'admitted', leaseId: requestId, workerId: d }
    }
    step(
      st,
      'admit',
      d,
      undefined,
      `rejected: ${res.reason}${res.recommendedPauseMs > 0 ? ` (pause ${res.recommendedPauseMs} ms)` : ''}`,
    )
    if (res.reason !== 'append_too_large') {
      count(st, 'all_rejecting')
      reject(st, d, res.reason)
    } else (st.appendRefused ??= new Map()).set(d, res.residentTokens)
    return { kind: 'rejected', response: res }
  }
  count(st, 'admission_timeouts')
  step(st, 'admit', d, undefined, out.type === 'admitTimeout' ? 'timed out' : 'error')
  return undefined
}
