/**
 * Admission on arrival: whether a fast-path turn may skip the admission round trip and carry its
 * admission request with the send, for the D to decide when the request arrives
 * (`docs/design/algorithms.md#admission-on-arrival`). The router skips the RPC only where its own
 * view of the D predicts the answer: an admission without a pause hint. The D still decides: a
 * refusal on arrival comes back as the admission answer the RPC would have given, and the turn
 * goes on as after a refused RPC. Pure: no I/O, no clock.
 *
 * @module
 */
import { RouterError, describeValue } from '../errors/routerError.js'
import { DEFAULT_PAUSE_HINT, type PauseHintParams } from './admit.js'

/**
 * The router's view of a D when a fast-path turn is about to be sent there (its last report or
 * admission answer, minus what was admitted since), and what the turn needs.
 *
 * @example
 * ```ts
 * import type { ArrivalView } from '@kvc/kvc-router'
 * const v: ArrivalView = { capacityTokens: 200_000, availableTokens: 90_000, releasableTokens: 0,
 *   transferQueueDepth: 0, retractedQueueDepth: 0, paused: false, needTokens: 2_512, loadBackTokens: 0 }
 * ```
 */
export interface ArrivalView {
  /** The D's KV pool, tokens. */
  readonly capacityTokens: number
  /** Free + evictable − reserved, minus what was admitted since (`WorkerInfo.availableTokens`). */
  readonly availableTokens: number
  /** Idle sessions' tokens the D would release on demand (`WorkerInfo.releasableTokens`). */
  readonly releasableTokens: number
  /** Transfers queued on the D at its last answer. */
  readonly transferQueueDepth: number
  /** Requests the D retracts at its last answer. */
  readonly retractedQueueDepth: number
  /** Whether the D is paused now (its last pause hint has not run out). */
  readonly paused: boolean
  /** The turn's admission need: the append plus the decode reserve. */
  readonly needTokens: number
  /** Host-tier tokens the D would load back for the turn (their queue can set a pause hint). */
  readonly loadBackTokens: number
}

/**
 * The decision: `onArrival` (send with the admission request; no RPC first) or not (ask first),
 * the usage the view predicts after the turn's need, and why, in words.
 *
 * @example
 * ```ts
 * import type { ArrivalDecision } from '@kvc/kvc-router'
 * const d: ArrivalDecision = { onArrival: false, usageAfter: 0.93, reason: 'usage after 0.930 ≥ 0.90: the answer may pause' }
 * ```
 */
export interface ArrivalDecision {
  readonly onArrival: boolean
  readonly usageAfter: number
  readonly reason: string
}

function checkCount(name: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new RouterError(
      'INVALID_OPTION',
      `${name} must be a finite number >= 0, got ${describeValue(v)}`,
      v,
    )
  }
}

/**
 * Whether a fast-path turn may be admitted on arrival: the view predicts that the D admits it and
 * that its answer carries no pause hint ({@link recommendedPauseMs}'s rules, read from the view):
 * the D is not paused, retracts nothing, has fewer than `transferQueueThreshold` transfers queued,
 * loads nothing back for the turn, and its usage after the need,
 * `(capacity − available − releasable + need) / capacity` (idle sessions' tokens count as
 * available, as in the D's answer), stays below `usageThreshold`. Otherwise the turn asks first:
 * near a threshold the answer's pause hint and retractions steer the next turns, and they come
 * only with an RPC's answer.
 *
 * Monotone: a larger need, less available memory, a deeper transfer queue, a pause or a retraction
 * never turns an "ask first" into "on arrival".
 *
 * @throws RouterError `INVALID_OPTION` for a negative or non-finite count, or a capacity of 0.
 *
 * @example
 * ```ts
 * import { admitOnArrival } from '@kvc/kvc-router'
 * const view = { capacityTokens: 200_000, availableTokens: 90_000, releasableTokens: 0,
 *   transferQueueDepth: 0, retractedQueueDepth: 0, paused: false, needTokens: 2_512, loadBackTokens: 0 }
 * admitOnArrival(view).onArrival // true: usage after 0.56
 * admitOnArrival({ ...view, availableTokens: 20_000 }).onArrival // false: usage after 0.91 ≥ 0.90
 * ```
 */
export function admitOnArrival(
  view: ArrivalView,
  pause: PauseHintParams = DEFAULT_PAUSE_HINT,
): ArrivalDecision {
  checkCount('capacityTokens', view.capacityTokens)
  if (view.capacityTokens === 0) {
    throw new RouterError('INVALID_OPTION', 'capacityTokens must be > 0, got 0', view.capacityTokens)
  }
  checkCount('releasableTokens', view.releasableTokens)
  checkCount('transferQueueDepth', view.transferQueueDepth)
  checkCount('retractedQueueDepth', view.retractedQueueDepth)
  checkCount('needTokens', view.needTokens)
  checkCount('loadBackTokens', view.loadBackTokens)
  if (typeof view.availableTokens !== 'number' || Number.isNaN(view.availableTokens)) {
    throw new RouterError(
      'INVALID_OPTION',
      `availableTokens must be a number, got ${describeValue(view.availableTokens)}`,
      view.availableTokens,
    )
  }
  const cap = view.capacityTokens
  const usageAfter = Math.max(0, (cap - view.availableTokens - view.releasableTokens + view.needTokens) / cap)
  const no = (reason: string): ArrivalDecision => ({ onArrival: false, usageAfter, reason })
  if (view.paused) return no('the D is paused')
  if (view.retractedQueueDepth > 0) return no(`the D retracts ${view.retractedQueueDepth} requests`)
  if (view.transferQueueDepth >= pause.transferQueueThreshold) {
    return no(
      `${view.transferQueueDepth} transfers queued ≥ ${pause.transferQueueThreshold}: the answer may pause`,
    )
  }
  if (view.loadBackTokens > 0) return no(`${view.loadBackTokens} tokens to load back: the answer may pause`)
  if (view.needTokens > view.availableTokens + view.releasableTokens) {
    return no(`need ${view.needTokens} > available ${view.availableTokens + view.releasableTokens}`)
  }
  if (usageAfter >= pause.usageThreshold) {
    return no(
      `usage after ${usageAfter.toFixed(3)} ≥ ${pause.usageThreshold.toFixed(2)}: the answer may pause`,
    )
  }
  return {
    onArrival: true,
    usageAfter,
    reason: `usage after ${usageAfter.toFixed(3)} < ${pause.usageThreshold.toFixed(2)}: admitted on arrival`,
  }
}
