/**
 * The simulator's cost model is `@kvc/kvc-router`'s (one owner for the formulas and their
 * calibrated defaults); this module re-exports it under the names `@kvc/sim` has always had, and
 * reports bad overrides as the simulator's own {@link SimError}.
 *
 * @module
 */
import { type CostModel, RouterError, makeRouterCostModel } from '../adapters/router.js'
import { SimError, SimErrorCode } from '../errors/simError.js'

export {
  type CostModel,
  DEFAULT_COST_MODEL,
  decodeStepSeconds,
  prefillSeconds,
  transferSeconds,
} from '../adapters/router.js'

/**
 * A cost model with some defaults replaced; every value is validated (`@kvc/kvc-router`'s
 * `makeCostModel`, with its errors raised as `SimError` `INVALID_OPTION`).
 *
 * @throws SimError `INVALID_OPTION` naming the parameter, with the offending value.
 *
 * @example
 * ```ts
 * import { makeCostModel } from '@kvc/sim'
 * const cm = makeCostModel({ capacityTokens: 400_000, linkGbps: 200 })
 * cm.linkGbps // 200
 * ```
 */
export function makeCostModel(overrides: Partial<CostModel> = {}): CostModel {
  try {
    return makeRouterCostModel(overrides)
  } catch (err) {
    if (err instanceof RouterError) throw new SimError(SimErrorCode.InvalidOption, err.message, err.value)
    throw err
  }
}
