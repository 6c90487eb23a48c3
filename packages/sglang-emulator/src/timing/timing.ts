/**
 * The emulator's latency model: a view of `@kvc/kvc-router`'s cost model (the simulator's),
 * in milliseconds and multiplied by a `scale`. The formulas and their defaults live there only.
 *
 * @module
 */
import {
  type CostModel,
  DEFAULT_COST_MODEL,
  RouterError,
  decodeStepSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
} from '@kvc/kvc-router'
import { SglangEmulatorError, checkOption } from '../errors/emulatorError.js'

/**
 * The cost-model parameters that set the emulator's latencies (seconds, as in `CostModel`).
 *
 * @example
 * ```ts
 * import type { EmulatorCostParameter } from '@kvc/sglang-emulator'
 * const p: EmulatorCostParameter = 'decodeStepS'
 * ```
 */
export type EmulatorCostParameter =
  | 'prefillFixedS'
  | 'prefillTokensPerS'
  | 'prefillQuadraticS'
  | 'decodeStepS'
  | 'decodeStepPerTokenS'
  | 'kvBytesPerToken'
  | 'linkGbps'
  | 'transferSetupS'

const PARAMETERS: readonly EmulatorCostParameter[] = [
  'prefillFixedS',
  'prefillTokensPerS',
  'prefillQuadraticS',
  'decodeStepS',
  'decodeStepPerTokenS',
  'kvBytesPerToken',
  'linkGbps',
  'transferSetupS',
]

/**
 * Latency model of the emulator: `@kvc/kvc-router`'s cost model (the simulator's), whose
 * parameters you may override (seconds), times `scale`:
 *
 * - prefill of `n` new tokens after `c` cached: `prefillSeconds` = `α + n/τ + γ·n·(c + n/2)`
 *   (0 when nothing is computed);
 * - one decode step: `decodeStepSeconds` = `δ0 + δ1·batchTokens` (the context tokens of every
 *   running request);
 * - a KV transfer of `t` tokens: `transferSeconds` = `setup + t · kvBytesPerToken · 8 / link`
 *   (0 when nothing is sent).
 *
 * Defaults are `DEFAULT_COST_MODEL`'s (Qwen3-30B-A3B class on one H100/H200: a 5K-token append
 * prefills in about 0.2 s, a 50K-token cold prompt in about 3 s). Every latency is multiplied by
 * `scale` (default 1, real time; tests use 0 or a small scale). With `scale: 0` the emulator still
 * yields to the event loop between tokens. A whole `CostModel` may be spread in: the parameters
 * that are not latencies are ignored.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL } from '@kvc/kvc-router'
 * import type { EmulatorTiming } from '@kvc/sglang-emulator'
 * const fast: EmulatorTiming = { scale: 0.001 } // 1000× faster than real time
 * const slowLink: EmulatorTiming = { ...DEFAULT_COST_MODEL, linkGbps: 25, scale: 0.01 }
 * ```
 */
export interface EmulatorTiming extends Partial<Pick<CostModel, EmulatorCostParameter>> {
  /** Multiplies every latency (default 1: real time). */
  readonly scale?: number
}

/**
 * {@link EmulatorTiming} with every field set.
 *
 * @example
 * ```ts
 * import { DEFAULT_EMULATOR_TIMING, type ResolvedTiming } from '@kvc/sglang-emulator'
 * const slowLink: ResolvedTiming = { ...DEFAULT_EMULATOR_TIMING, linkGbps: 25 }
 * ```
 */
export type ResolvedTiming = Required<EmulatorTiming>

/**
 * The default timing: `DEFAULT_COST_MODEL`'s latencies, real time.
 *
 * @example
 * ```ts
 * import { DEFAULT_EMULATOR_TIMING } from '@kvc/sglang-emulator'
 * DEFAULT_EMULATOR_TIMING.decodeStepS // 0.012
 * ```
 */
export const DEFAULT_EMULATOR_TIMING: ResolvedTiming = Object.freeze({
  scale: 1,
  prefillFixedS: DEFAULT_COST_MODEL.prefillFixedS,
  prefillTokensPerS: DEFAULT_COST_MODEL.prefillTokensPerS,
  prefillQuadraticS: DEFAULT_COST_MODEL.prefillQuadraticS,
  decodeStepS: DEFAULT_COST_MODEL.decodeStepS,
  decodeStepPerTokenS: DEFAULT_COST_MODEL.decodeStepPerTokenS,
  kvBytesPerToken: DEFAULT_COST_MODEL.kvBytesPerToken,
  linkGbps: DEFAULT_COST_MODEL.linkGbps,
  transferSetupS: DEFAULT_COST_MODEL.transferSetupS,
})

/** The resolved latency model: the cost model and the scale. @internal */
export interface Timing {
  readonly scale: number
  readonly cost: CostModel
}

const COST_KEYS: ReadonlySet<string> = new Set(Object.keys(DEFAULT_COST_MODEL))

/** @internal Validates `t` (`INVALID_OPTION` naming the parameter) and resolves it. */
export function resolveTiming(t: EmulatorTiming | undefined): Timing {
  const given = t ?? {}
  checkOption(typeof given === 'object' && given !== null, 'timing must be an object', t)
  for (const k of Object.keys(given)) {
    checkOption(
      k === 'scale' || COST_KEYS.has(k),
      `timing.${k} is not a timing parameter (scale, or the cost model's ${PARAMETERS.join(', ')})`,
      given,
    )
  }
  const scale = given.scale ?? 1
  checkOption(
    typeof scale === 'number' && Number.isFinite(scale) && scale >= 0,
    'timing.scale must be a finite number >= 0',
    scale,
  )
  const overrides: Partial<Record<EmulatorCostParameter, number>> = {}
  for (const k of PARAMETERS) {
    const v = given[k]
    if (v !== undefined) overrides[k] = v
  }
  try {
    return { scale, cost: makeCostModel(overrides) }
  } catch (err) {
    if (err instanceof RouterError) {
      throw new SglangEmulatorError('INVALID_OPTION', `timing: ${err.message}`, err.value)
    }
    throw err
  }
}

/** Unscaled prefill time (ms). @internal */
export function prefillMs(t: Timing, newTokens: number, cachedTokens: number): number {
  return prefillSeconds(t.cost, newTokens, cachedTokens) * 1000
}

/** Unscaled decode step time (ms). @internal */
export function decodeStepMs(t: Timing, batchTokens: number): number {
  return decodeStepSeconds(t.cost, batchTokens) * 1000
}

/** Unscaled transfer time (ms). @internal */
export function transferMs(t: Timing, tokens: number): number {
  return transferSeconds(t.cost, tokens) * 1000
}
