/** The turn waits (between walks, for a pause, before an admission retry). */
import type { TurnState } from './turnState.js'
import type { WaitAction, WaitReason } from './types.js'
import { step } from './turnRecord.js'

/**
 * Records the wait and returns its action, for the caller to yield (`yield waitUntil(…)`; the
 * `waited` outcome carries nothing). A plain call rather than a generator: turns wait often.
 */
export function waitUntil(st: TurnState, untilMs: number, reason: WaitReason): WaitAction {
  step(st, 'wait', undefined, undefined, `until ${untilMs.toFixed(1)} (${reason})`)
  return { type: 'wait', turnId: st.turnId, untilMs, reason }
}
