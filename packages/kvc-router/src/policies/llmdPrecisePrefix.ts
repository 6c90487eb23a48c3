import { checkOption, describeValue } from '../errors/routerError.js'
import type { ResidencyIndex } from '../residency/residencyIndex.js'
import { type CandidateAnalysis, analyzeTurn, finishDecision, turnKeys } from '../route/route.js'
import type { RouteContext, RoutingPolicy, TurnRequest } from '../route/types.js'

/**
 * Options of {@link llmdPrecisePrefixPolicy}: the scorer weights of the llm-d inference
 * scheduler's precise prefix-cache profile and the P/D decider's threshold.
 *
 * @example
 * ```ts
 * import type { LlmdPrecisePrefixOptions } from '@kvc/kvc-router'
 * const o: LlmdPrecisePrefixOptions = { prefixWeight: 2, kvUtilizationWeight: 1, queueWeight: 1 }
 * ```
 */
export interface LlmdPrecisePrefixOptions {
  /** `seed` (default): P/D, decode profile then prefill profile; `direct`: one profile over colocated workers. */
  readonly pathMode?: 'seed' | 'direct'
  /** Weight of `precise-prefix-cache-scorer` (default 3, llm-d's precise-routing guide). */
  readonly prefixWeight?: number
  /** Weight of `kv-cache-utilization-scorer` (default 2). */
  readonly kvUtilizationWeight?: number
  /** Weight of `queue-scorer` (default 2). */
  readonly queueWeight?: number
}

/** Default weights: llm-d's precise prefix-cache-aware routing guide (prefix 3, KV use 2, queue 2). */
const DEFAULTS = { prefixWeight: 3, kvUtilizationWeight: 2, queueWeight: 2 }

/** One endpoint's inputs: its longest cached prefix (blocks), queue and KV use. */
interface Endpoint {
  readonly id: string
  readonly prefixBlocks: number
  readonly queue: number
  /** `1 − kvCacheUsage`, in [0, 1]. */
  readonly kvFree: number
}

/**
 * The three scorers and the weighted sum, as llm-d's scheduler computes them (each scorer in
 * [0, 1]):
 * - precise prefix: the endpoints that hold the prompt's first block get their longest cached
 *   prefix, min-max normalised among themselves (all equal: 1 each); the others 0;
 * - queue: `(maxQ − q) / (maxQ − minQ)`, 1 for all when equal;
 * - KV-cache utilisation: `1 − usage`.
 */
function scoreEndpoints(
  eps: readonly Endpoint[],
  w: typeof DEFAULTS,
): { score: number; prefix: number; queue: number; kv: number }[] {
  let pMin = Number.POSITIVE_INFINITY
  let pMax = Number.NEGATIVE_INFINITY
  let qMin = Number.POSITIVE_INFINITY
  let qMax = Number.NEGATIVE_INFINITY
  for (const e of eps) {
    if (e.prefixBlocks > 0) {
      pMin = Math.min(pMin, e.prefixBlocks)
      pMax = Math.max(pMax, e.prefixBlocks)
    }
    qMin = Math.min(qMin, e.queue)
    qMax = Math.max(qMax, e.queue)
  }
  return eps.map((e) => {
    const prefix = e.prefixBlocks === 0 ? 0 : pMax === pMin ? 1 : (e.prefixBlocks - pMin) / (pMax - pMin)
    const queue = qMax === qMin ? 1 : (qMax - e.queue) / (qMax - qMin)
    const kv = e.kvFree
    return {
      score: w.prefixWeight * prefix + w.kvUtilizationWeight * kv + w.queueWeight * queue,
      prefix,
      queue,
      kv,
    }
  })
}

/** `max-score-picker`: the highest score; ties broken at random (upstream shuffles first). */
function pickMax(scores: readonly number[], random: () => number): number {
  let best = -1
  let ties = 0
  for (let i = 0; i < scores.length; i++) {
    const s = scores[i]!
    if (best < 0 || s > scores[best]!) {
      best = i
      ties = 1
    } else if (s === scores[best]) {
      // Reservoir sampling among the tied: each of them wins with probability 1/ties.
      ties++
      if (random() * ties < 1) best = i
    }
  }
  return best
}

function leadingBlocks(index: ResidencyIndex, turn: TurnRequest, scratch: { a: Int32Array }): Int32Array {
  if (scratch.a.length < index.slotCount) scratch.a = new Int32Array(index.slotCount * 2)
  index.overlapInto(turnKeys(turn), scratch.a)
  return scratch.a
}

/**
 * llm-d's precise prefix-cache-aware scheduling (the inference scheduler's
 * `precise-prefix-cache-scorer`, fed by the engines' KV events, with `queue-scorer`,
 * `kv-cache-utilization-scorer` and `max-score-picker`; `docs/design/peers.md#llm-d-scheduler`):
 * every eligible endpoint gets `3 · prefix + 2 · (1 − KV use) + 2 · queue` and the highest wins,
 * ties at random. The prefix score is the endpoint's longest run of the prompt's leading blocks in
 * its KV events (the residency index's plain overlap), min-max normalised over the endpoints that
 * hold the first block; the queue is the router's count of requests in flight on the endpoint (the
 * scheduler scrapes the engine's waiting queue; this package has no such metric); KV use is
 * `1 − available / capacity` from the workers' capacity reports (1 − 0 for a worker that never
 * reported, a P in particular).
 *
 * `pathMode: 'seed'` (default) is llm-d's P/D disaggregation: the decode profile picks the D, then
 * the prefill profile the P, with the same scorers over the P workers and their KV events
 * (`ClusterView.prefillResidency`). Its decider disaggregates when the D's cached prefix leaves at
 * least `nonCachedTokens` (16 in llm-d's P/D sample) to compute, which is every turn on a D
 * without a prefix cache; a decode-only turn is not modelled. `pathMode: 'direct'` is one profile
 * over colocated workers.
 *
 * @example
 * ```ts
 * import { Router, llmdPrecisePrefixPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: llmdPrecisePrefixPolicy({ pathMode: 'direct' }), now: () => 0, params: { pageSize: 16 },
 *   workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.cluster.residency.recordStored('d1', [1n, 2n])
 * router.route({ sessionId: 'a', promptTokens: 64, blocks: [1n, 2n, 3n, 4n] }).candidates[0]?.workerId // 'd1'
 * ```
 */
export function llmdPrecisePrefixPolicy(options?: LlmdPrecisePrefixOptions): RoutingPolicy {
  const pathMode = options?.pathMode ?? 'seed'
  checkOption(
    pathMode === 'seed' || pathMode === 'direct',
    `pathMode must be 'seed' or 'direct', got ${describeValue(pathMode)}`,
    pathMode,
  )
  const w = {
    prefixWeight: options?.prefixWeight ?? DEFAULTS.prefixWeight,
    kvUtilizationWeight: options?.kvUtilizationWeight ?? DEFAULTS.kvUtilizationWeight,
    queueWeight: options?.queueWeight ?? DEFAULTS.queueWeight,
  }
  for (const [n, v] of Object.entries(w)) {
    checkOption(
      typeof v === 'number' && Number.isFinite(v) && v >= 0,
      `${n} must be a finite number >= 0, got ${describeValue(v)}`,
      v,
    )
  }
  const name = 'llm-d-precise-prefix'
  const prefillScratch = { a: new Int32Array(8) }
  const kvFreeOf = (ctx: RouteContext, id: string): number => {
    const info = ctx.cluster.worker(id)
    if (info.capacityTokens <= 0) return 0
    return Math.min(1, Math.max(0, info.availableTokens / info.capacityTokens))
  }
  return {
    name,
    pathMode,
    usesAdmission: false,
    rank(ctx, turn) {
      const a = analyzeTurn(ctx, turn)
      const c = a.candidates
      const eps: Endpoint[] = c.map((x) => ({
        id: x.workerId,
        prefixBlocks: x.plainOverlapBlocks,
        queue: ctx.cluster.store.load(x.workerId).turns,
        kvFree: kvFreeOf(ctx, x.workerId),
      }))
      const scored = scoreEndpoints(eps, w)
      const win = pickMax(
        scored.map((s) => s.score),
        ctx.random,
      )
      const byScore = new Map<CandidateAnalysis, number>()
      c.forEach((x, i) => {
        const s = scored[i]!
        byScore.set(x, s.score)
        x.note = `score ${s.score.toFixed(2)} = ${w.prefixWeight}·prefix ${s.prefix.toFixed(2)} + ${w.kvUtilizationWeight}·kv ${s.kv.toFixed(2)} + ${w.queueWeight}·queue ${s.queue.toFixed(2)}`
      })
      const first = win >= 0 ? c[win] : undefined
      c.sort((x, y) => (x === first ? -1 : y === first ? 1 : byScore.get(y)! - byScore.get(x)!))
      return finishDecision(ctx, turn, a, name, pathMode, false)
    },
    pickPrefill(ctx, turn) {
      const pool = ctx.cluster.prefillIds().filter((p) => ctx.cluster.isEligible(p))
      if (pool.length === 0) return undefined
      const index = ctx.cluster.prefillResidency
      const lead = leadingBlocks(index, turn, prefillScratch)
      const eps: Endpoint[] = pool.map((p) => ({
        id: p,
        prefixBlocks: lead[index.slotOf(p)]!,
        queue: ctx.cluster.store.load(p).turns,
        kvFree: kvFreeOf(ctx, p),
      }))
      const scored = scoreEndpoints(eps, w)
      const i = pickMax(
        scored.map((s) => s.score),
        ctx.random,
      )
      return i < 0 ? undefined : pool[i]
    },
  }
}
