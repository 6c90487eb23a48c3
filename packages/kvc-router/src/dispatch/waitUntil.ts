/** The turn waits (between walks, for a pause, before an admission retry). */
import type { Gen, TurnState } from './turnState.js'
import type { WaitReason } from './types.js'
import { step } from './turnRecord.js'

export function* waitUntil(st: TurnState, untilMs: number, reason: WaitReason): Gen<void> {
  step(st, 'wait', undefined, undefined, `until ${untilMs.toFixed(1)} (${reason})`)
  yield { type: 'wait', turnId: st.turnId, untilMs, reason }
}
