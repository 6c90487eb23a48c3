/** A turn's record: its steps and routes (bounded), attempts, and the obstacles that name a failure. */
import type { RouteDecision } from '../route/types.js'
import type { TurnState } from './turnState.js'
import type { DispatchStep, TurnFailureCause } from './types.js'

const CAUSE_PRIORITY: readonly TurnFailureCause[] = [
  'all_rejecting',
  'all_paused',
  'transfer_failed',
  'binding_conflict',
  'worker_failed',
  'admission_timeouts',
  'seed_budget',
  'no_prefill',
  'all_excluded',
  'all_draining',
  'all_unhealthy',
  'no_decode_workers',
]

const MAX_RECORDED_ROUTES = 4
const MAX_RECORDED_STEPS = 256

export function bumpAttempts(st: TurnState): number {
  st.attempts++
  st.record.attempts = st.attempts
  return st.attempts
}

export function count(st: TurnState, cause: TurnFailureCause): void {
  st.tally.set(cause, (st.tally.get(cause) ?? 0) + 1)
}

export function dominantCause(st: TurnState): TurnFailureCause {
  let best: TurnFailureCause = 'no_decode_workers'
  let bestN = 0
  for (const c of CAUSE_PRIORITY) {
    const n = st.tally.get(c) ?? 0
    if (n > bestN) {
      best = c
      bestN = n
    }
  }
  return best
}

export function step(
  st: TurnState,
  kind: DispatchStep['kind'],
  workerId: string | undefined,
  prefillId: string | undefined,
  detail: string,
): void {
  const steps = st.record.steps
  if (steps.length >= MAX_RECORDED_STEPS) steps.splice(MAX_RECORDED_STEPS / 2, 1)
  const at = st.ctx.cluster.now()
  // One literal per shape: spreading optional fields took microseconds per step.
  steps.push(
    workerId === undefined
      ? prefillId === undefined
        ? { at, kind, detail }
        : { at, kind, prefillId, detail }
      : prefillId === undefined
        ? { at, kind, workerId, detail }
        : { at, kind, workerId, prefillId, detail },
  )
}

export function recordRoute(st: TurnState, decision: RouteDecision): void {
  const routes = st.record.routes
  if (routes.length >= MAX_RECORDED_ROUTES) routes[MAX_RECORDED_ROUTES - 1] = decision
  else routes.push(decision)
  const top = decision.candidates[0]
  step(
    st,
    'route',
    top?.workerId,
    undefined,
    `walk ${st.walks}: ${decision.candidates.length} candidates, ${decision.ineligible.length} left out${
      decision.exclusionsReleased ? ', exclusions released' : ''
    }`,
  )
}
