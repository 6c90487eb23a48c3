/**
 * The emulator's latency model (the simulator's cost model, scaled).
 *
 * @module
 */
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * Latency model of the emulator, in milliseconds before scaling. Defaults are calibrated like the
 * project's simulator (Qwen3-30B-A3B class on one H100/H200): a 5K-token append prefills in about
 * 0.22 s, a 50K-token cold prompt in about 3 s.
 *
 * - prefill of `n` new tokens after `c` cached: `prefillBaseMs + n / prefillTokensPerMs +
 *   prefillQuadraticMs · n · (c + n/2)`;
 * - one decode step: `decodeStepMs + decodeMsPerBatchToken · batchTokens` (the context tokens of
 *   every running request);
 * - a KV transfer of `t` tokens: `transferSetupMs + t · kvBytesPerToken · 8 / (linkGbps · 10^6)`.
 *
 * Every latency is multiplied by `scale` (default 1, real time; tests use 0 or 0.001). With
 * `scale: 0` the emulator still yields to the event loop between tokens.
 *
 * @example
 * ```ts
 * import type { EmulatorTiming } from '@kvc/worker-bindings'
 * const fast: EmulatorTiming = { scale: 0.001 } // 1000× faster than real time
 * ```
 */
export interface EmulatorTiming {
  readonly scale?: number
  readonly prefillBaseMs?: number
  readonly prefillTokensPerMs?: number
  readonly prefillQuadraticMs?: number
  readonly decodeStepMs?: number
  readonly decodeMsPerBatchToken?: number
  readonly transferSetupMs?: number
  readonly kvBytesPerToken?: number
  readonly linkGbps?: number
}

/**
 * {@link EmulatorTiming} with every field set.
 *
 * @example
 * ```ts
 * import { DEFAULT_EMULATOR_TIMING, type ResolvedTiming } from '@kvc/worker-bindings'
 * const slowLink: ResolvedTiming = { ...DEFAULT_EMULATOR_TIMING, linkGbps: 25 }
 * ```
 */
export type ResolvedTiming = Required<EmulatorTiming>

/**
 * The default timing model (real time).
 *
 * @example
 * ```ts
 * import { DEFAULT_EMULATOR_TIMING } from '@kvc/worker-bindings'
 * DEFAULT_EMULATOR_TIMING.decodeStepMs // 15
 * ```
 */
export const DEFAULT_EMULATOR_TIMING: ResolvedTiming = Object.freeze({
  scale: 1,
  prefillBaseMs: 10,
  prefillTokensPerMs: 25,
  prefillQuadraticMs: 8e-7,
  decodeStepMs: 15,
  decodeMsPerBatchToken: 2e-5,
  transferSetupMs: 1,
  kvBytesPerToken: 98_304,
  linkGbps: 400,
})

/** @internal */
export function resolveTiming(t: EmulatorTiming | undefined): ResolvedTiming {
  const r = { ...DEFAULT_EMULATOR_TIMING, ...t }
  for (const [k, v] of Object.entries(r)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new WorkerBindingsError('INVALID_OPTION', `timing.${k} must be a finite number >= 0`, {
        value: v,
      })
    }
  }
  if (r.prefillTokensPerMs === 0 || r.linkGbps === 0) {
    throw new WorkerBindingsError('INVALID_OPTION', 'timing rates must be > 0', { value: r })
  }
  return r
}

/** Unscaled prefill time (ms). @internal */
export function prefillMs(t: ResolvedTiming, newTokens: number, cachedTokens: number): number {
  return (
    t.prefillBaseMs +
    newTokens / t.prefillTokensPerMs +
    t.prefillQuadraticMs * newTokens * (cachedTokens + newTokens / 2)
  )
}

/** Unscaled decode step time (ms). @internal */
export function decodeStepMs(t: ResolvedTiming, batchTokens: number): number {
  return t.decodeStepMs + t.decodeMsPerBatchToken * batchTokens
}

/** Unscaled transfer time (ms). @internal */
export function transferMs(t: ResolvedTiming, tokens: number): number {
  return t.transferSetupMs + (tokens * t.kvBytesPerToken * 8) / (t.linkGbps * 1e6)
}
