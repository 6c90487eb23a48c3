/**
 * Wait for the session's own D, or migrate: when the D that holds a session's history (on its
 * device, or demoted to its host tier) is paused, the turn either waits for it and loads the
 * history back, or moves to another D and re-prefills the whole history there through a P. The
 * cheaper by the cost model wins (`docs/design/host-tier.md#9-wait-for-the-own-d-or-migrate`).
 * Pure functions: no I/O, no clock.
 *
 * @module
 */
import { type CostModel, prefillSeconds, transferSeconds } from '../cost/costModel.js'
import { RouterError, describeValue } from '../errors/routerError.js'
import { type PrefixPlan, type TieredHit, planPrefix } from './prefixCost.js'

/**
 * The session's own D, paused: how long until it takes work again and what it holds of the
 * prompt.
 *
 * @example
 * ```ts
 * import type { OwnDecodeWait } from '@kvc/kvc-router'
 * const own: OwnDecodeWait = {
 *   waitS: 1.2, // the rest of the D's pause hint
 *   queueS: 0.05,
 *   hit: { promptTokens: 42_000, deviceTokens: 6_000, hostTokens: 35_000 },
 * }
 * ```
 */
export interface OwnDecodeWait {
  /** Seconds until the D takes work again: the rest of its pause (the D's own hint). */
  readonly waitS: number
  /** Seconds of prefill work queued on the D ahead of the turn (default 0). */
  readonly queueS?: number
  /** Where the prompt's prefix lives on the D: device, then host tier, then disk tier. */
  readonly hit: TieredHit
}

/**
 * A move to another D: a P prefills what it does not hold and sends the KV that D lacks.
 *
 * @example
 * ```ts
 * import type { MigrationEstimate } from '@kvc/kvc-router'
 * const move: MigrationEstimate = { decodeHeldTokens: 6_000, prefillHeldTokens: 6_000, prefillQueueS: 0.4 }
 * ```
 */
export interface MigrationEstimate {
  /** Prompt tokens the D the turn would move to holds on its device. */
  readonly decodeHeldTokens: number
  /** Prompt tokens the P of the reseed already caches. */
  readonly prefillHeldTokens: number
  /** Seconds of prefill work queued on that P (default 0). */
  readonly prefillQueueS?: number
}

/**
 * The answer of {@link chooseWaitOrMigrate}, with both estimates and a one-line reason (what a
 * dispatch record shows).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, chooseWaitOrMigrate } from '@kvc/kvc-router'
 * const c = chooseWaitOrMigrate(DEFAULT_COST_MODEL,
 *   { waitS: 1.2, hit: { promptTokens: 42_000, deviceTokens: 6_000, hostTokens: 35_000 } },
 *   { decodeHeldTokens: 6_000, prefillHeldTokens: 6_000 })
 * c.choice // 'wait'
 * ```
 */
export interface WaitOrMigrate {
  readonly choice: 'wait' | 'migrate'
  /** How the own D gets the prefix back after the wait ({@link planPrefix}). */
  readonly plan: PrefixPlan
  /** `waitS + queueS + plan.seconds`: the turn's estimated time to its prefill's end on the own D. */
  readonly waitCostS: number
  /**
   * `prefillQueueS + prefillSeconds(prompt − prefillHeld, prefillHeld) + transferSeconds(prompt −
   * decodeHeld)`: the same on the other D.
   */
  readonly migrateCostS: number
  readonly reason: string
}

const fmt = (x: number): string => x.toFixed(2)

function checkSeconds(what: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new RouterError(
      'INVALID_OPTION',
      `${what} must be a finite number >= 0, got ${describeValue(v)}`,
      v,
    )
  }
  return v
}

function checkHeld(what: string, v: unknown, prompt: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > prompt) {
    throw new RouterError(
      'INVALID_OPTION',
      `${what} must be an integer in [0, promptTokens = ${prompt}], got ${describeValue(v)}`,
      v,
    )
  }
  return v
}

/**
 * The estimated cost of moving a turn to another D through a P ({@link MigrationEstimate}):
 * the P's queue, its prefill of what it does not hold, and the transfer of what the D lacks.
 *
 * @throws RouterError `INVALID_OPTION` on a malformed estimate.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, migrationSeconds } from '@kvc/kvc-router'
 * migrationSeconds(DEFAULT_COST_MODEL, 42_000, { decodeHeldTokens: 6_000, prefillHeldTokens: 6_000 }).toFixed(2) // '2.20'
 * ```
 */
export function migrationSeconds(cm: CostModel, promptTokens: number, move: MigrationEstimate): number {
  if (typeof move !== 'object' || move === null) {
    throw new RouterError(
      'INVALID_OPTION',
      `migration estimate must be an object, got ${describeValue(move)}`,
      move,
    )
  }
  const dHeld = checkHeld('migration: decodeHeldTokens', move.decodeHeldTokens, promptTokens)
  const pHeld = checkHeld('migration: prefillHeldTokens', move.prefillHeldTokens, promptTokens)
  const q = checkSeconds('migration: prefillQueueS', move.prefillQueueS ?? 0)
  return q + prefillSeconds(cm, promptTokens - pHeld, pHeld) + transferSeconds(cm, promptTokens - dHeld)
}

/**
 * Wait for the session's own (paused) D or migrate to another D, whichever the cost model
 * estimates to finish the turn's prefill sooner:
 *
 * - **wait**: `waitS` (the rest of the D's pause) + the D's prefill queue + the cheapest way to
 *   get the prefix onto its device ({@link planPrefix}: load the host-resident part back over
 *   PCIe, recompute the rest);
 * - **migrate**: {@link migrationSeconds} (a P re-prefills the history the other D lacks and
 *   ships it).
 *
 * It waits iff the wait's estimate is at most the migration's (a tie keeps the session where its
 * KV is). Two monotonicity properties follow, and are tested: a longer wait never turns a
 * migration into a wait; and more host-resident tokens (device and disk parts unchanged) never
 * turn a wait into a migration, for any cost model whose host tier loads a token no slower than
 * the prefill computes one (`kvBytesPerToken / hostLoadGBps ≤ 1 / prefillTokensPerS`; PCIe at the
 * defaults is ≈ 17× faster).
 *
 * @throws RouterError `INVALID_OPTION` on a malformed hit, wait or estimate (nothing is decided).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, chooseWaitOrMigrate } from '@kvc/kvc-router'
 * const hit = { promptTokens: 42_000, deviceTokens: 6_000, hostTokens: 35_000 }
 * const move = { decodeHeldTokens: 6_000, prefillHeldTokens: 6_000 }
 * chooseWaitOrMigrate(DEFAULT_COST_MODEL, { waitS: 1.2, hit }, move).choice // 'wait': 1.2 + 0.17 s < 2.20 s
 * chooseWaitOrMigrate(DEFAULT_COST_MODEL, { waitS: 2.5, hit }, move).choice // 'migrate'
 * ```
 */
export function chooseWaitOrMigrate(
  cm: CostModel,
  own: OwnDecodeWait,
  move: MigrationEstimate,
): WaitOrMigrate {
  if (typeof own !== 'object' || own === null) {
    throw new RouterError('INVALID_OPTION', `own D must be an object, got ${describeValue(own)}`, own)
  }
  const waitS = checkSeconds('own D: waitS', own.waitS)
  const queueS = checkSeconds('own D: queueS', own.queueS ?? 0)
  const plan = planPrefix(cm, own.hit)
  const n = own.hit.promptTokens
  const migrateCostS = migrationSeconds(cm, n, move)
  const waitCostS = waitS + queueS + plan.seconds
  const lb = plan.loadBack ? ` + load back ${plan.loadBackTokens} tokens ${fmt(plan.loadBackS)} s` : ''
  const stay = `wait ${fmt(waitS)} s${queueS > 0 ? ` + queue ${fmt(queueS)} s` : ''}${lb} + prefill ${plan.recomputeTokens} tokens ${fmt(plan.prefillS)} s = ${fmt(waitCostS)} s`
  const go = `migrate: prefill ${n - move.prefillHeldTokens} tokens on a P and transfer ${fmt(migrateCostS)} s`
  const choice = waitCostS <= migrateCostS ? 'wait' : 'migrate'
  const reason = choice === 'wait' ? `${stay} ≤ ${go}` : `${go} < ${stay}`
  return { choice, plan, waitCostS, migrateCostS, reason }
}
