import { checkFraction, checkNonNegative, checkPositive } from '../protocol/validate.js'

/**
 * What makes a session urgent to sync (`docs/design/algorithms.md#d-to-p-sync`: sessions on
 * pressured D workers, idle sessions, long histories). All optional; absent hints count as 0.
 *
 * @example
 * ```ts
 * import type { PriorityHints } from '@kvc/dto-p-sync'
 * const hints: PriorityHints = { dPressure: 0.93, idleMs: 12_000, reseedLikelihood: 0.4 }
 * ```
 */
export interface PriorityHints {
  /** KV usage of the session's D worker in `[0, 1]`: a full D evicts soon, and evicted sessions reseed. */
  readonly dPressure?: number
  /** Time since the session's last turn (ms): idle sessions are the next eviction victims. */
  readonly idleMs?: number
  /** An estimate in `[0, 1]` that the session's next turn goes through a P (reseed, migration). */
  readonly reseedLikelihood?: number
}

/**
 * Weights and scales of {@link priorityScore}. The defaults are a **choice** (the design gives no
 * numbers): reseed likelihood counts double, the other three once.
 *
 * @example
 * ```ts
 * import { DEFAULT_PRIORITY_WEIGHTS, type PriorityWeights } from '@kvc/dto-p-sync'
 * const pressureFirst: PriorityWeights = { ...DEFAULT_PRIORITY_WEIGHTS, dPressure: 10 }
 * ```
 */
export interface PriorityWeights {
  readonly dPressure: number
  readonly idle: number
  readonly history: number
  readonly reseed: number
  /** Idle time at which the idle term reaches `1 - 1/e` (default 30 s). */
  readonly idleScaleMs: number
  /** History length at which the history term reaches 1/2 (default 32K tokens). */
  readonly historyScaleTokens: number
}

/**
 * Default {@link PriorityWeights}: `{ dPressure: 1, idle: 1, history: 1, reseed: 2, idleScaleMs:
 * 30_000, historyScaleTokens: 32_768 }`.
 *
 * @example
 * ```ts
 * import { DEFAULT_PRIORITY_WEIGHTS } from '@kvc/dto-p-sync'
 * DEFAULT_PRIORITY_WEIGHTS.reseed // 2
 * ```
 */
export const DEFAULT_PRIORITY_WEIGHTS: PriorityWeights = Object.freeze({
  dPressure: 1,
  idle: 1,
  history: 1,
  reseed: 2,
  idleScaleMs: 30_000,
  historyScaleTokens: 32_768,
})

/**
 * A session's sync priority, higher first:
 * `w.dPressure·dPressure + w.idle·(1 − e^(−idleMs/idleScaleMs)) + w.history·H/(H + historyScaleTokens)
 * + w.reseed·reseedLikelihood`, where `H` is the history length in tokens. Each term lies in
 * `[0, 1]` before weighting, so the weights say directly how much each reason counts.
 *
 * @example
 * ```ts
 * import { priorityScore } from '@kvc/dto-p-sync'
 * priorityScore({ dPressure: 1 }, 0)                      // 1
 * priorityScore({ reseedLikelihood: 0.5 }, 32_768)        // 2 * 0.5 + 0.5 = 1.5
 * ```
 */
export function priorityScore(
  hints: PriorityHints | undefined,
  historyTokens: number,
  weights: PriorityWeights = DEFAULT_PRIORITY_WEIGHTS,
): number {
  const p = hints?.dPressure ?? 0
  const idle = hints?.idleMs ?? 0
  const r = hints?.reseedLikelihood ?? 0
  const h = historyTokens / (historyTokens + weights.historyScaleTokens)
  return (
    weights.dPressure * p +
    weights.idle * (idle > 0 ? 1 - Math.exp(-idle / weights.idleScaleMs) : 0) +
    weights.history * h +
    weights.reseed * r
  )
}

/** @internal */
export function checkHints(hints: PriorityHints | undefined): void {
  if (hints === undefined) return
  if (hints.dPressure !== undefined) checkFraction('dPressure', hints.dPressure)
  if (hints.reseedLikelihood !== undefined) checkFraction('reseedLikelihood', hints.reseedLikelihood)
  if (hints.idleMs !== undefined) checkNonNegative('idleMs', hints.idleMs)
}

/** @internal */
export function checkWeights(w: PriorityWeights): PriorityWeights {
  checkNonNegative('weights.dPressure', w.dPressure)
  checkNonNegative('weights.idle', w.idle)
  checkNonNegative('weights.history', w.history)
  checkNonNegative('weights.reseed', w.reseed)
  checkPositive('weights.idleScaleMs', w.idleScaleMs)
  checkPositive('weights.historyScaleTokens', w.historyScaleTokens)
  return w
}
