/** Checks that an outcome the driver returns answers the pending action (type, request ids, fields). */
import { parseAdmitResponse } from '../admission/contract.js'
import { checkLength, RouterError } from '../errors/routerError.js'
import type { AdmitAnswerOutcome, DispatchAction, DispatchOutcome } from './types.js'

export function checkHedged(
  turnId: string,
  primaryId: string,
  hedgeId: string,
  o: Extract<DispatchOutcome, { type: 'hedgedAdmitResult' }>,
): void {
  const part = (x: unknown, want: string, which: string): AdmitAnswerOutcome | undefined => {
    if (x === undefined) return undefined
    const t = (x as { type?: unknown }).type
    if (t !== 'admitResult' && t !== 'admitTimeout' && t !== 'admitError') {
      throw new RouterError('INVALID_MESSAGE', `hedgedAdmitResult.${which} must be an admission answer`, o)
    }
    const a = x as AdmitAnswerOutcome
    if (a.type === 'admitResult') {
      const res = parseAdmitResponse(a.response)
      if (res.requestId !== want) {
        throw new RouterError(
          'UNEXPECTED_OUTCOME',
          `turn ${turnId}: ${which} answer for ${res.requestId}, expected ${want}`,
          o,
        )
      }
    }
    return a
  }
  const p = part(o.primary, primaryId, 'primary')
  const h = part(o.hedge, hedgeId, 'hedge')
  const w = o.winner
  if (w !== undefined && w !== 'primary' && w !== 'hedge') {
    throw new RouterError(
      'INVALID_MESSAGE',
      `hedgedAdmitResult.winner must be primary, hedge or undefined`,
      o,
    )
  }
  const won = w === 'primary' ? p : w === 'hedge' ? h : undefined
  if (w !== undefined && !(won?.type === 'admitResult' && won.response.admitted)) {
    throw new RouterError('INVALID_MESSAGE', `hedgedAdmitResult.winner ${w} did not admit`, o)
  }
}

export function checkOutcome(
  turnId: string,
  action: DispatchAction,
  outcome: DispatchOutcome | undefined,
): void {
  if (typeof outcome !== 'object' || outcome === null) {
    throw new RouterError(
      'UNEXPECTED_OUTCOME',
      `turn ${turnId}: an outcome is required for ${action.type}`,
      outcome,
    )
  }
  const t = outcome.type
  const ok =
    action.type === 'admit'
      ? t === 'admitResult' ||
        t === 'admitTimeout' ||
        t === 'admitError' ||
        (t === 'hedgedAdmitResult' && action.hedge !== undefined)
      : action.type === 'sendFast' || action.type === 'seedViaP'
        ? t === 'completed' ||
          t === 'failed' ||
          (t === 'admitResult' && action.type === 'sendFast' && action.admission !== undefined)
        : action.type === 'wait'
          ? t === 'waited'
          : action.type === 'claim'
            ? t === 'claimResult'
            : false
  if (!ok) {
    throw new RouterError(
      'UNEXPECTED_OUTCOME',
      `turn ${turnId}: outcome ${String(t)} does not answer ${action.type}`,
      outcome,
    )
  }
  if (outcome.type === 'hedgedAdmitResult' && action.type === 'admit' && action.hedge !== undefined) {
    checkHedged(turnId, action.request.requestId, action.hedge.request.requestId, outcome)
  }
  if (outcome.type === 'admitResult' && action.type === 'admit') {
    const res = parseAdmitResponse(outcome.response)
    if (res.requestId !== action.request.requestId) {
      throw new RouterError(
        'UNEXPECTED_OUTCOME',
        `turn ${turnId}: answer for ${res.requestId}, expected ${action.request.requestId}`,
        outcome,
      )
    }
  }
  if (outcome.type === 'admitResult' && action.type === 'sendFast' && action.admission !== undefined) {
    // Admission on arrival: the D answers the send with its refusal (an admission is served).
    const res = parseAdmitResponse(outcome.response)
    if (res.requestId !== action.admission.requestId) {
      throw new RouterError(
        'UNEXPECTED_OUTCOME',
        `turn ${turnId}: answer for ${res.requestId}, expected ${action.admission.requestId}`,
        outcome,
      )
    }
    if (res.admitted) {
      throw new RouterError(
        'INVALID_MESSAGE',
        `turn ${turnId}: an admission on arrival that admits is answered by completed or failed`,
        outcome,
      )
    }
  }
  if (outcome.type === 'claimResult') {
    if (typeof outcome.granted !== 'boolean') {
      throw new RouterError('INVALID_MESSAGE', 'claimResult.granted must be a boolean', outcome)
    }
    if (
      outcome.binding !== undefined &&
      (typeof outcome.binding !== 'object' ||
        outcome.binding === null ||
        typeof outcome.binding.workerId !== 'string')
    ) {
      throw new RouterError('INVALID_MESSAGE', 'claimResult.binding must be a session binding', outcome)
    }
  }
  if (outcome.type === 'completed') {
    if (outcome.committedTokens !== undefined) checkLength('committedTokens', outcome.committedTokens)
    if (outcome.outputTokens !== undefined) checkLength('outputTokens', outcome.outputTokens)
  }
  if (outcome.type === 'failed') {
    const causes = ['transfer_timeout', 'transfer_error', 'worker_error', 'worker_unreachable']
    if (!causes.includes(outcome.cause)) {
      throw new RouterError('INVALID_MESSAGE', `unknown failure cause ${String(outcome.cause)}`, outcome)
    }
  }
}
