/** The sends that hand a turn to workers: the fast path (or a local seed) on a D, and a seed through a P. */
import { RouterError } from '../errors/routerError.js'
import type { RouteCandidate } from '../route/types.js'
import type { Gen, TurnState } from './turnState.js'
import type { DoneAction } from './types.js'
import { migrationSource } from './claims.js'
import { reject } from './rejection.js'
import { succeedTurn } from './turnEnd.js'
import { addInflight, decodeBlocks, releaseCommitment, releaseSeedSlot, undoInflight } from './turnLoad.js'
import { bumpAttempts, count, step } from './turnRecord.js'
import { noteArrival } from './pathSignals.js'

export function* sendFast(
  st: TurnState,
  d: string,
  c: RouteCandidate,
  leaseId: string | undefined,
  path: 'fast' | 'local' | 'direct',
): Gen<DoneAction | undefined> {
  const { cluster } = st.ctx
  const migratedFrom = migrationSource(st, d)
  const attempt = bumpAttempts(st)
  const blocks = decodeBlocks(st)
  if (!st.policy.usesAdmission)
    cluster.consumeAvailable(d, Math.max(0, Math.min(c.needTokens, cluster.available(d))))
  addInflight(st, d, undefined, c.appendTokens, blocks)
  if (path !== 'direct') noteArrival(st, d)
  step(st, 'sendFast', d, undefined, `${path}: D prefills ${c.appendTokens} tokens`)
  const out = yield {
    type: 'sendFast',
    turnId: st.turnId,
    workerId: d,
    path,
    leaseId,
    appendTokens: c.appendTokens,
    migratedFrom,
    attempt,
  }
  undoInflight(st)
  releaseCommitment(st)
  if (out.type === 'completed') return succeedTurn(st, d, undefined, path, out, migratedFrom)
  if (out.type !== 'failed') throw new RouterError('UNEXPECTED_OUTCOME', 'unreachable', out)
  count(st, 'worker_failed')
  st.sendFailures++
  step(st, 'sendFast', d, undefined, `failed: ${out.cause}`)
  reject(st, d, out.cause)
  return undefined
}

export function* sendSeed(
  st: TurnState,
  p: string,
  d: string,
  c: RouteCandidate,
  leaseId: string | undefined,
): Gen<DoneAction | undefined> {
  const { cluster } = st.ctx
  const migratedFrom = migrationSource(st, d)
  const attempt = bumpAttempts(st)
  if (!st.policy.usesAdmission)
    cluster.consumeAvailable(d, Math.max(0, Math.min(c.needTokens, cluster.available(d))))
  addInflight(st, d, p, st.turn.promptTokens, decodeBlocks(st))
  step(st, 'seedViaP', d, p, `P ${p} prefills ${st.turn.promptTokens} tokens → D ${d}`)
  const out = yield {
    type: 'seedViaP',
    turnId: st.turnId,
    prefillId: p,
    decodeId: d,
    leaseId,
    migratedFrom,
    attempt,
  }
  undoInflight(st)
  releaseCommitment(st)
  releaseSeedSlot(st)
  // The seed ended: its slot is free to the turn first in line for `d` (the host may wake it).
  if (cluster.has(d)) cluster.seedWaiters.slotFreed(d)
  if (out.type === 'completed') {
    st.ctx.tuning?.tuner.transferEnded(false)
    if (cluster.has(p) && cluster.has(d)) cluster.recordTransfer(p, d, true)
    return succeedTurn(st, d, p, 'seed', out, migratedFrom)
  }
  if (out.type !== 'failed') throw new RouterError('UNEXPECTED_OUTCOME', 'unreachable', out)
  step(st, 'seedViaP', d, p, `failed: ${out.cause}`)
  st.sendFailures++
  if (out.cause === 'transfer_timeout') st.ctx.tuning?.tuner.transferEnded(true)
  if (out.cause === 'transfer_timeout' || out.cause === 'transfer_error') {
    if (cluster.has(p) && cluster.has(d)) cluster.recordTransfer(p, d, false)
    if (out.cause === 'transfer_error') st.seedFailedOnP = p
    count(st, 'transfer_failed')
  } else {
    count(st, 'worker_failed')
    reject(st, d, out.cause)
  }
  return undefined
}
