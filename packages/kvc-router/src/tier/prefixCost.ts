/**
 * What a turn's prefix costs when part of it is held below the device: load the host (or disk)
 * hit back over PCIe, or recompute it. And, for the session's own D, whether that beats a reseed
 * through a P. Pure functions of the cost model (`docs/design/host-tier.md#8-the-router-and-the-simulator-with-a-host-tier`).
 *
 * @module
 */
import { type CostModel, loadBackSeconds, prefillSeconds, transferSeconds } from '../cost/costModel.js'
import { RouterError, describeValue } from '../errors/routerError.js'

/**
 * Where a prompt's prefix lives on one worker: `deviceTokens` on the device, then `hostTokens`
 * only on the host tier, then `diskTokens` only on a disk tier (each part follows the previous
 * one, any may be empty: a cache's tiers hold a prefix of a path, the device part first).
 *
 * @example
 * ```ts
 * import type { TieredHit } from '@kvc/kvc-router'
 * const hit: TieredHit = { promptTokens: 42_000, deviceTokens: 6_000, hostTokens: 35_000 }
 * ```
 */
export interface TieredHit {
  /** Length of the whole prompt. */
  readonly promptTokens: number
  /** Leading prompt tokens resident on the device. */
  readonly deviceTokens: number
  /** Tokens right after them held only by the host tier. */
  readonly hostTokens: number
  /** Tokens right after those held only by a disk tier (default 0). */
  readonly diskTokens?: number
}

/**
 * The cheapest way to get a prompt's prefix onto the device ({@link planPrefix}).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, planPrefix } from '@kvc/kvc-router'
 * const p = planPrefix(DEFAULT_COST_MODEL, { promptTokens: 42_000, deviceTokens: 6_000, hostTokens: 35_000 })
 * p.loadBack // true: 35K tokens copied in ≈ 70 ms instead of recomputed in ≈ 2.1 s
 * ```
 */
export interface PrefixPlan {
  /** The plan loads something back (host part, and the disk part when it pays too). */
  readonly loadBack: boolean
  /** Tokens the plan loads back from the host tier. */
  readonly hostLoadTokens: number
  /** Tokens the plan loads back from the disk tier. */
  readonly diskLoadTokens: number
  /** `hostLoadTokens + diskLoadTokens`. */
  readonly loadBackTokens: number
  /** Tokens the plan prefills: `promptTokens − deviceTokens − loadBackTokens`. */
  readonly recomputeTokens: number
  /** Estimated seconds of the plan's copies. */
  readonly loadBackS: number
  /** Estimated seconds of the plan's prefill. */
  readonly prefillS: number
  /** `loadBackS + prefillS`: the plan's estimate. */
  readonly seconds: number
  /** The estimate of recomputing everything below the device (no load-back at all). */
  readonly recomputeS: number
}

const cnt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0

function checkHit(hit: TieredHit): void {
  const bad = (what: string, v: unknown): never => {
    throw new RouterError('INVALID_OPTION', `tiered hit: ${what}, got ${describeValue(v)}`, v)
  }
  if (typeof hit !== 'object' || hit === null) bad('must be an object', hit)
  if (!cnt(hit.promptTokens)) bad('promptTokens must be a non-negative integer', hit.promptTokens)
  if (!cnt(hit.deviceTokens)) bad('deviceTokens must be a non-negative integer', hit.deviceTokens)
  if (!cnt(hit.hostTokens)) bad('hostTokens must be a non-negative integer', hit.hostTokens)
  if (hit.diskTokens !== undefined && !cnt(hit.diskTokens))
    bad('diskTokens must be a non-negative integer', hit.diskTokens)
  if (hit.deviceTokens + hit.hostTokens + (hit.diskTokens ?? 0) > hit.promptTokens) {
    bad('deviceTokens + hostTokens + diskTokens must not exceed promptTokens', hit)
  }
}

/**
 * The cheapest of three plans for a prompt's prefix on one worker, by the cost model: recompute
 * everything below the device; load the host part back and recompute the rest; load the host and
 * disk parts back and recompute the rest (loads go in order: the disk part follows the host part). A load-back costs {@link loadBackSeconds} (it copies, computes nothing), the
 * prefill after it {@link prefillSeconds} with the loaded tokens as context. Ties go to the plan
 * that loads less. So a plan loads back exactly when that is estimated strictly cheaper, and the
 * estimate (`seconds`) is never above `recomputeS`.
 *
 * @throws RouterError `INVALID_OPTION` on a malformed hit (negative or non-integer counts, parts
 * longer than the prompt).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, planPrefix } from '@kvc/kvc-router'
 * planPrefix(DEFAULT_COST_MODEL, { promptTokens: 1_000, deviceTokens: 960, hostTokens: 16 }).loadBack // false: 1 ms of setup > 16 tokens of prefill
 * planPrefix(DEFAULT_COST_MODEL, { promptTokens: 40_000, deviceTokens: 0, hostTokens: 39_000 }).recomputeTokens // 1000
 * ```
 */
export function planPrefix(cm: CostModel, hit: TieredHit): PrefixPlan {
  checkHit(hit)
  const n = hit.promptTokens
  const d = hit.deviceTokens
  const h = hit.hostTokens
  const k = hit.diskTokens ?? 0
  const recomputeS = prefillSeconds(cm, n - d, d)
  let best: PrefixPlan = {
    loadBack: false,
    hostLoadTokens: 0,
    diskLoadTokens: 0,
    loadBackTokens: 0,
    recomputeTokens: n - d,
    loadBackS: 0,
    prefillS: recomputeS,
    seconds: recomputeS,
    recomputeS,
  }
  const consider = (hostLoad: number, diskLoad: number): void => {
    const lb = loadBackSeconds(cm, hostLoad, 'host') + loadBackSeconds(cm, diskLoad, 'disk')
    const loaded = hostLoad + diskLoad
    const pf = prefillSeconds(cm, n - d - loaded, d + loaded)
    if (lb + pf < best.seconds) {
      best = {
        loadBack: true,
        hostLoadTokens: hostLoad,
        diskLoadTokens: diskLoad,
        loadBackTokens: loaded,
        recomputeTokens: n - d - loaded,
        loadBackS: lb,
        prefillS: pf,
        seconds: lb + pf,
        recomputeS,
      }
    }
  }
  if (h > 0) consider(h, 0)
  if (k > 0) consider(h, k)
  return best
}

/**
 * What a reseed through a P would cost, for {@link chooseLoadBack}: the P prefills what it does
 * not hold and sends the KV the D lacks.
 *
 * @example
 * ```ts
 * import type { ReseedEstimate } from '@kvc/kvc-router'
 * const r: ReseedEstimate = { prefillHeldTokens: 6_000 } // the P holds the shared system prompt
 * ```
 */
export interface ReseedEstimate {
  /** Prompt tokens the P already caches (the best case for the reseed: all but the append). */
  readonly prefillHeldTokens: number
  /** Seconds of work queued ahead on the P (default 0). */
  readonly prefillQueueS?: number
}

/**
 * The path decision of a turn whose session's own D holds part of its prefix below the device:
 * `loadBack` (the fast path to that D, which copies the host part back and prefills the rest) or
 * `reseed` (a P prefills the prompt and transfers the KV the D lacks). Load-back is chosen iff
 * {@link planPrefix} loads back and its estimate is strictly below the reseed's:
 * `prefillSeconds(prompt − held, held) + queue + transferSeconds(prompt − deviceTokens)`.
 *
 * @throws RouterError `INVALID_OPTION` on a malformed hit or estimate.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, chooseLoadBack } from '@kvc/kvc-router'
 * const hit = { promptTokens: 42_000, deviceTokens: 6_000, hostTokens: 35_000 }
 * chooseLoadBack(DEFAULT_COST_MODEL, hit, { prefillHeldTokens: 6_000 }).choice // 'loadBack'
 * ```
 */
export function chooseLoadBack(
  cm: CostModel,
  hit: TieredHit,
  reseed: ReseedEstimate,
): { readonly choice: 'loadBack' | 'reseed'; readonly plan: PrefixPlan; readonly reseedS: number } {
  const plan = planPrefix(cm, hit)
  const held = reseed?.prefillHeldTokens
  if (!cnt(held) || held > hit.promptTokens) {
    throw new RouterError(
      'INVALID_OPTION',
      `reseed: prefillHeldTokens must be an integer in [0, promptTokens], got ${describeValue(held)}`,
      held,
    )
  }
  const q = reseed.prefillQueueS ?? 0
  if (typeof q !== 'number' || !(q >= 0) || !Number.isFinite(q)) {
    throw new RouterError('INVALID_OPTION', `reseed: prefillQueueS must be >= 0, got ${describeValue(q)}`, q)
  }
  const n = hit.promptTokens
  const reseedS = prefillSeconds(cm, n - held, held) + q + transferSeconds(cm, n - hit.deviceTokens)
  return { choice: plan.loadBack && plan.seconds < reseedS ? 'loadBack' : 'reseed', plan, reseedS }
}
