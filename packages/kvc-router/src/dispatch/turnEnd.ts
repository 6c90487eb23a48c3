/**
 * How a turn ends: success (binding, reset-on-success, retraction) or failure with a `RouterError` naming
 * its cause.
 */
import { RouterError } from '../errors/routerError.js'
import type { TurnState } from './turnState.js'
import type { DoneAction, FailAction, TurnFailureCause } from './types.js'
import { step } from './turnRecord.js'

export function succeedTurn(
  st: TurnState,
  d: string,
  p: string | undefined,
  path: 'fast' | 'local' | 'seed' | 'direct',
  out: { readonly committedTokens?: number; readonly outputTokens?: number },
  migratedFrom: string | undefined,
): DoneAction {
  const { cluster, params } = st.ctx
  const store = cluster.store
  const s = st.turn.sessionId
  const now = cluster.now()
  const committed = out.committedTokens ?? st.turn.promptTokens + (out.outputTokens ?? 0)
  let verified = 0
  if (cluster.has(d)) {
    if (params.predictOnSuccess && st.keys.length > 0) cluster.residency.recordStored(d, st.keys)
    if (params.predictOnSuccess || cluster.publishesEvents(d)) verified = st.keys.length
    store.setBinding(s, {
      workerId: d,
      committedTokens: committed,
      verifiedBlocks: verified,
      updatedAt: now,
    })
  }
  const tuning = st.ctx.tuning
  if (tuning !== undefined) {
    const k = store.rejects(s, d)
    if (k > 0) tuning.tuner.recovered(k)
  }
  if (params.resetOnSuccess) store.resetSession(s)
  const retractedBy = cluster.retractions.get(s)
  if (retractedBy !== undefined) {
    // The session's D retracted it while this turn ran: its next turn moves (unless this one
    // already did).
    cluster.retractions.delete(s)
    if (retractedBy === d) store.exclude(s, d)
  }
  st.policy.onSuccess?.(st.ctx, st.turn, d, p)
  step(
    st,
    'done',
    d,
    p,
    `${path} on ${d}${migratedFrom === undefined ? '' : ` (migrated from ${migratedFrom})`}`,
  )
  cluster.seedWaiters.leave(st.turnId)
  turnEnded(st)
  const r = st.record
  r.outcome = 'done'
  r.path = path
  r.workerId = d
  r.endedAt = now
  return { type: 'done', turnId: st.turnId, path, workerId: d, prefillId: p, migratedFrom, record: r }
}

export function failTurn(
  st: TurnState,
  cause: TurnFailureCause,
  code: 'WAIT_EXHAUSTED' | 'ATTEMPTS_EXHAUSTED' | 'TURN_FINISHED' | 'TOO_LARGE',
  largestD = 0,
): FailAction {
  const now = st.ctx.cluster.now()
  const waited = now - st.record.startedAt
  const params = st.ctx.params
  const what =
    code === 'WAIT_EXHAUSTED'
      ? `waited ${Math.round(waited)} ms (budget ${params.slo[st.cls].maxWaitMs} ms for ${st.cls})`
      : code === 'ATTEMPTS_EXHAUSTED'
        ? st.sendFailures >= params.maxSendFailures
          ? `${st.sendFailures} sends failed (retry budget maxSendFailures ${params.maxSendFailures}) in ${st.attempts} attempts`
          : `used ${st.attempts} attempts in ${st.walks} walks`
        : code === 'TOO_LARGE'
          ? `it needs ${st.turn.promptTokens + st.reserve} tokens of KV (prompt ${st.turn.promptTokens} + decode reserve ${st.reserve}), more than the largest D worker holds (${largestD})`
          : 'aborted by the driver'
  const error = new RouterError(
    code,
    `turn ${st.turnId} of session ${st.turn.sessionId} failed: ${cause}; ${what}`,
    {
      cause,
      turnId: st.turnId,
      sessionId: st.turn.sessionId,
      waitedMs: waited,
      attempts: st.attempts,
      walks: st.walks,
    },
  )
  step(st, 'fail', undefined, undefined, `${cause} (${code})`)
  st.ctx.cluster.seedWaiters.leave(st.turnId)
  turnEnded(st)
  const r = st.record
  r.outcome = 'fail'
  r.cause = cause
  r.endedAt = now
  return { type: 'fail', turnId: st.turnId, cause, error, record: r }
}

/** The self-tuner (`selfTune`) hears that a turn ended; at a window's end its changes apply. */
export function turnEnded(st: TurnState): void {
  const tuning = st.ctx.tuning
  if (tuning === undefined) return
  const change = tuning.tuner.turnEnded(st.ctx.cluster.admissionLatency)
  if (change !== undefined) tuning.apply(change)
}
