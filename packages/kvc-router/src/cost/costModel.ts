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
 * | `hostLoadGBps` | 50 GB/s | host → device copies (a host-tier load-back): PCIe 5.0 x16 is ≈ 63 GB/s per direction, pinned-memory copies reach ≈ 50 |
 * | `diskLoadGBps` | 6 GB/s | disk → device (a load-back from a disk tier): one PCIe 4.0 NVMe SSD reads ≈ 7 GB/s sequentially |
 * | `loadBackSetupS` | 0.001 s | per load-back setup (copy descriptors, stream synchronisation) (choice) |
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
  /** Host → device bandwidth of a load-back from the host tier, GB/s (bytes; PCIe). */
  readonly hostLoadGBps: number
  /** Disk → device bandwidth of a load-back from a disk tier, GB/s (bytes). */
  readonly diskLoadGBps: number
  /** Setup latency of one load-back, seconds. */
  readonly loadBackSetupS: number
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
  hostLoadGBps: 50,
  diskLoadGBps: 6,
  loadBackSetupS: 0.001,
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
  check(cm.hostLoadGBps > 0, 'cost model: hostLoadGBps must be > 0', cm.hostLoadGBps)
  check(cm.diskLoadGBps > 0, 'cost model: diskLoadGBps must be > 0', cm.diskLoadGBps)
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

/**
 * Where KV below the device lives: the host tier (host memory, over PCIe) or a disk tier.
 *
 * @example
 * ```ts
 * import type { LoadBackSource } from '@kvc/kvc-router'
 * const from: LoadBackSource = 'host'
 * ```
 */
export type LoadBackSource = 'host' | 'disk'

/**
 * Time of a load-back of `tokens` tokens onto the device, seconds: setup + bytes / bandwidth of
 * the source tier (`hostLoadGBps` or `diskLoadGBps`; 0 when there is nothing to load). A load-back
 * copies KV, it computes nothing: at the defaults 50K tokens come back from the host in ≈ 0.1 s,
 * where recomputing them takes ≈ 3 s.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, loadBackSeconds } from '@kvc/kvc-router'
 * loadBackSeconds(DEFAULT_COST_MODEL, 50_000)         // ≈ 0.099 (4.9 GB at 50 GB/s + 1 ms)
 * loadBackSeconds(DEFAULT_COST_MODEL, 50_000, 'disk') // ≈ 0.82
 * ```
 */
export function loadBackSeconds(cm: CostModel, tokens: number, from: LoadBackSource = 'host'): number {
  if (tokens <= 0) return 0
  const gbps = from === 'disk' ? cm.diskLoadGBps : cm.hostLoadGBps
  return cm.loadBackSetupS + (tokens * cm.kvBytesPerToken) / (gbps * 1e9)
}
