/**
 * The cost model of a P/D cluster: what the GPUs and links take, in seconds. One owner for the
 * formulas and their calibrated defaults: the simulator (`@kvc/sim`) runs on it, the SGLang
 * emulator (`@kvc/sglang-emulator`) sleeps by it (scaled, in milliseconds), and a router can use
 * it to estimate a path's cost. Pure: no I/O, no clock.
 *
 * @module
 */
import { RouterError } from '../errors/routerError.js'

/**
 * The cost model: what the GPUs and links would take, in seconds. Only the GPU and link work is
 * modelled; every caching, routing and admission decision is made by the real packages.
 *
 * Defaults are calibrated for Qwen3-30B-A3B, TP1, on one H100/H200 (`docs/design/cost-model.md`
 * gives each value's source):
 *
 * | parameter | default | source |
 * |---|---|---|
 * | `prefillFixedS` (α) | 0.02 s | kernel launch + scheduling floor |
 * | `prefillTokensPerS` (τ) | 30,000 tokens/s | solved with γ so that a 5K-token append ≈ 0.2 s and a 50K-token cold prefill ≈ 3 s |
 * | `prefillQuadraticS` (γ) | 1.05e-9 s/token² | idem; a 90K cold prefill then takes ≈ 7.3 s (measured reseeds of 50–90K tokens: 3–7 s) |
 * | `decodeStepS` (δ0) | 0.012 s | one decode step of a small batch (weights read once per step) |
 * | `decodeStepPerTokenS` (δ1) | 2.93e-8 s/token | KV read per step: 98,304 B/token ÷ 3.35 TB/s HBM (H100) |
 * | `kvBytesPerToken` | 98,304 B | 48 layers × 4 KV heads × 128 dims × 2 (K,V) × 2 B (bf16) |
 * | `linkGbps` | 400 | one NDR 400 Gb/s RDMA NIC per P–D link |
 * | `transferSetupS` | 0.005 s | per-transfer setup (handshake, descriptors) |
 * | `transferTimeoutS` | 32 s | Mooncake's KV transfer timeout |
 * | `admitRpcS` ± `admitRpcJitterS` | 0.002 ± 0.001 s | one admission RPC to a D's sidecar (choice) |
 * | `capacityTokens` | 200,000 | KV slots per worker: ≈ 19.7 GB of an 80 GB H100 after 61 GB of bf16 weights |
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, prefillSeconds } from '@kvc/kvc-router'
 * prefillSeconds(DEFAULT_COST_MODEL, 5_000, 0)  // ≈ 0.2
 * prefillSeconds(DEFAULT_COST_MODEL, 50_000, 0) // ≈ 3.0
 * ```
 */
export interface CostModel {
  /** α: fixed cost of one prefill, seconds. */
  readonly prefillFixedS: number
  /** τ: linear prefill throughput, tokens per second. */
  readonly prefillTokensPerS: number
  /** γ: attention cost per new token per context token, seconds. */
  readonly prefillQuadraticS: number
  /** δ0: fixed time of one decode step, seconds. */
  readonly decodeStepS: number
  /** δ1: decode step time per token of context in the batch, seconds. */
  readonly decodeStepPerTokenS: number
  /** KV bytes per token (all layers, K and V). */
  readonly kvBytesPerToken: number
  /** P→D link bandwidth, Gbit/s. */
  readonly linkGbps: number
  /** Setup latency of one KV transfer, seconds. */
  readonly transferSetupS: number
  /** A KV transfer that waited longer than this fails (Mooncake: 32 s). */
  readonly transferTimeoutS: number
  /** Mean latency of one admission RPC, seconds. */
  readonly admitRpcS: number
  /** Uniform jitter (±) of the admission RPC latency, seconds. */
  readonly admitRpcJitterS: number
  /** KV capacity of one worker, tokens (`Infinity`: unlimited). */
  readonly capacityTokens: number
}

/**
 * The calibrated defaults (see {@link CostModel} for each value's source).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL } from '@kvc/kvc-router'
 * DEFAULT_COST_MODEL.transferTimeoutS // 32
 * ```
 */
export const DEFAULT_COST_MODEL: CostModel = Object.freeze({
  prefillFixedS: 0.02,
  prefillTokensPerS: 30_000,
  prefillQuadraticS: 1.05e-9,
  decodeStepS: 0.012,
  decodeStepPerTokenS: 2.93e-8,
  kvBytesPerToken: 98_304,
  linkGbps: 400,
  transferSetupS: 0.005,
  transferTimeoutS: 32,
  admitRpcS: 0.002,
  admitRpcJitterS: 0.001,
  capacityTokens: 200_000,
})

function check(ok: boolean, message: string, value: unknown): void {
  if (!ok) throw new RouterError('INVALID_OPTION', message, value)
}

/**
 * A cost model with some defaults replaced; every value is validated (non-negative numbers,
 * finite except `capacityTokens`, positive rates, jitter not above the mean).
 *
 * @throws RouterError `INVALID_OPTION` naming the parameter, with the offending value.
 *
 * @example
 * ```ts
 * import { makeCostModel } from '@kvc/kvc-router'
 * const cm = makeCostModel({ capacityTokens: 400_000, linkGbps: 200 })
 * cm.linkGbps // 200
 * ```
 */
export function makeCostModel(overrides: Partial<CostModel> = {}): CostModel {
  const cm: CostModel = { ...DEFAULT_COST_MODEL, ...overrides }
  for (const [k, v] of Object.entries(cm)) {
    const ok =
      typeof v === 'number' && !Number.isNaN(v) && v >= 0 && (Number.isFinite(v) || k === 'capacityTokens')
    check(ok, `cost model: ${k} must be a non-negative number, got ${String(v)}`, v)
  }
  check(cm.prefillTokensPerS > 0, 'cost model: prefillTokensPerS must be > 0', cm.prefillTokensPerS)
  check(cm.linkGbps > 0, 'cost model: linkGbps must be > 0', cm.linkGbps)
  check(cm.capacityTokens >= 1, 'cost model: capacityTokens must be >= 1', cm.capacityTokens)
  check(
    cm.admitRpcJitterS <= cm.admitRpcS,
    'cost model: admitRpcJitterS must not exceed admitRpcS',
    cm.admitRpcJitterS,
  )
  return Object.freeze(cm)
}

/**
 * Prefill time, seconds, for `newTokens` computed after `cachedTokens` reused ones:
 * `α + n/τ + γ·n·(c + n/2)` (0 when there is nothing to compute).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, prefillSeconds } from '@kvc/kvc-router'
 * prefillSeconds(DEFAULT_COST_MODEL, 0, 10_000) // 0: fully cached
 * ```
 */
export function prefillSeconds(cm: CostModel, newTokens: number, cachedTokens: number): number {
  if (newTokens <= 0) return 0
  return (
    cm.prefillFixedS +
    newTokens / cm.prefillTokensPerS +
    cm.prefillQuadraticS * newTokens * (cachedTokens + newTokens / 2)
  )
}

/**
 * Time of one decode step, seconds, for a batch holding `batchTokens` tokens of context:
 * `δ0 + δ1·batchTokens`.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, decodeStepSeconds } from '@kvc/kvc-router'
 * decodeStepSeconds(DEFAULT_COST_MODEL, 0) // 0.012
 * ```
 */
export function decodeStepSeconds(cm: CostModel, batchTokens: number): number {
  return cm.decodeStepS + cm.decodeStepPerTokenS * batchTokens
}

/**
 * Wire time of a KV transfer of `tokens` tokens, seconds: setup + bytes / bandwidth (0 when
 * there is nothing to send).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, transferSeconds } from '@kvc/kvc-router'
 * transferSeconds(DEFAULT_COST_MODEL, 50_000) // ≈ 0.103 (4.9 GB at 400 Gb/s + 5 ms)
 * ```
 */
export function transferSeconds(cm: CostModel, tokens: number): number {
  if (tokens <= 0) return 0
  return cm.transferSetupS + (tokens * cm.kvBytesPerToken * 8) / (cm.linkGbps * 1e9)
}
