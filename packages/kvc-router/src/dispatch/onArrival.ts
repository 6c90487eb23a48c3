/**
 * Admission on arrival (`admitOnArrival`) from the router's side: a fast-path turn whose D the
 * router's view shows well below its pause threshold is sent at once, carrying its admission
 * request; the D decides when it arrives. A refusal comes back as the admission answer an RPC
 * would have given and the walk goes on as after a refused RPC; an admission's answer comes back
 * with the response's headers, through `Router.observeAdmission`.
 */
import { type ArrivalDecision, admitOnArrival } from '../admission/onArrival.js'
import { RouterError } from '../errors/routerError.js'
import type { RouteCandidate } from '../route/types.js'
import { type AdmitResult, admitRequest, onAnswer, reusedRefusal } from './admission.js'
import { migrationSource } from './claims.js'
import { decodeObstacle } from './decodeObstacle.js'
import { noteArrival } from './pathSignals.js'
import { reject } from './rejection.js'
import { succeedTurn } from './turnEnd.js'
import { addInflight, decodeBlocks, releaseCommitment, undoInflight } from './turnLoad.js'
import { bumpAttempts, count, step } from './turnRecord.js'
import type { Gen, TurnState } from './turnState.js'
import type { DoneAction } from './types.js'

/** How a send with admission on arrival ended. */
export type ArrivalOutcome =
  | { readonly kind: 'done'; readonly done: DoneAction }
  /** Not served: refused on arrival (the D's answer), or not sent (a recent refusal, an obstacle). */
  | { readonly kind: 'answered'; readonly result: AdmitResult }
  /** The send failed (counted against the turn's retry budget, as any failed send). */
  | { readonly kind: 'failed' }

/**
 * Whether the fast-path turn on `c`'s D goes with admission on arrival (`admitOnArrival`, a
 * policy that asks the D): `undefined` when the option is off, else {@link admitOnArrival} on the
 * router's view of the D.
 */
export function arrivalDecision(st: TurnState, c: RouteCandidate): ArrivalDecision | undefined {
  const { cluster, params } = st.ctx
  if (!params.admitOnArrival || !st.policy.usesAdmission) return undefined
  const d = c.workerId
  // Removed while a claim was confirmed: the RPC path's own checks leave it.
  if (!cluster.has(d)) return undefined
  const w = cluster.worker(d)
  return admitOnArrival({
    capacityTokens: w.capacityTokens,
    availableTokens: w.availableTokens,
    releasableTokens: w.releasableTokens,
    transferQueueDepth: w.transferQueueDepth,
    retractedQueueDepth: w.retractedQueueDepth,
    paused: cluster.isPaused(d),
    needTokens: c.needTokens,
    loadBackTokens: c.loadBackTokens,
  })
}

/**
 * The fast path on `c`'s D with admission on arrival: the checks of an admission RPC's first try
 * (a recent refusal from `d` is reused, a D that can no longer take the turn is left), then
 * `sendFast` carrying the admission request; its lease id is the request id. The router counts
 * the need as taken on `d` at once; the D's admitting answer reaches the router's view through
 * `Router.observeAdmission` (the driver calls it when the response's headers arrive).
 */
export function* sendFastOnArrival(
  st: TurnState,
  d: string,
  c: RouteCandidate,
  why: string,
): Gen<ArrivalOutcome> {
  const { cluster, params } = st.ctx
  if (reusedRefusal(st, d, c)) return { kind: 'answered', result: { kind: 'skipped' } }
  if (st.attempts >= params.maxAttempts) return { kind: 'answered', result: { kind: 'exhausted' } }
  const obstacle = decodeObstacle(st, d, Number.NEGATIVE_INFINITY)
  if (obstacle !== undefined) {
    count(st, obstacle.cause)
    step(st, 'skip', d, undefined, `${d} ${obstacle.why}; moving on`)
    return { kind: 'answered', result: { kind: 'skipped' } }
  }
  const migratedFrom = migrationSource(st, d)
  const attempt = bumpAttempts(st)
  const requestId = `${st.turnId}/a${attempt}`
  cluster.consumeAvailable(d, Math.max(0, Math.min(c.needTokens, cluster.available(d))))
  addInflight(st, d, undefined, c.appendTokens, decodeBlocks(st))
  noteArrival(st, d)
  step(
    st,
    'sendFast',
    d,
    undefined,
    `fast, admission on arrival (${why}): D prefills ${c.appendTokens} tokens`,
  )
  const out = yield {
    type: 'sendFast',
    turnId: st.turnId,
    workerId: d,
    path: 'fast',
    leaseId: requestId,
    appendTokens: c.appendTokens,
    migratedFrom,
    attempt,
    admission: admitRequest(st, requestId, 'fast', c),
  }
  undoInflight(st)
  if (out.type === 'admitResult') {
    // Refused on arrival: the answer an admission RPC would have given (applied, counted).
    const r = onAnswer(st, d, 'fast', requestId, out)
    return { kind: 'answered', result: r ?? { kind: 'timeout' } }
  }
  releaseCommitment(st)
  if (out.type === 'completed')
    return { kind: 'done', done: succeedTurn(st, d, undefined, 'fast', out, migratedFrom) }
  if (out.type !== 'failed') throw new RouterError('UNEXPECTED_OUTCOME', 'unreachable', out)
  count(st, 'worker_failed')
  st.sendFailures++
  step(st, 'sendFast', d, undefined, `failed: ${out.cause}`)
  reject(st, d, out.cause)
  return { kind: 'failed' }
}
