/**
 * The per-turn path decision: once Route has picked a D, does the D prefill what it lacks itself
 * (a local prefill: the fast path's append, or a **local seed** of the whole prompt) or does a P
 * prefill it and ship the KV (a **remote seed**)? And when the session's own D is paused, is it
 * cheaper to wait for it than to move? Both answers come from an estimated completion time built
 * from the cost model (`docs/design/algorithms.md#path-choice`). Pure: no I/O, no clock.
 *
 * @module
 */
import { type CostModel, DEFAULT_COST_MODEL, prefillSeconds } from '../cost/costModel.js'
import { RouterError, describeValue } from '../errors/routerError.js'
import { planPrefix } from '../tier/prefixCost.js'

/**
 * Where the turn's missing KV is computed: `local` (the D prefills it; no transfer) or `remote`
 * (a P prefills it and transfers it to the D).
 *
 * @example
 * ```ts
 * import type { PrefillSite } from '@kvc/kvc-router'
 * const site: PrefillSite = 'local'
 * ```
 */
export type PrefillSite = 'local' | 'remote'

/**
 * What the decision knows about the P a remote seed would go through.
 *
 * @example
 * ```ts
 * import type { PrefillSignals } from '@kvc/kvc-router'
 * const p0: PrefillSignals = { queueS: 1.2, heldTokens: 6_000 }
 * ```
 */
export interface PrefillSignals {
  /** Seconds of prefill work queued on the P ahead of this turn (its running prefill's rest included). */
  readonly queueS: number
  /** Prompt tokens the P already caches (0 when unknown). */
  readonly heldTokens: number
  /** Bandwidth of the P→D link, Gbit/s (default: the cost model's `linkGbps`). */
  readonly linkGbps?: number
}

/**
 * What the decision knows about one turn on the D Route picked.
 *
 * @example
 * ```ts
 * import type { PathSignals } from '@kvc/kvc-router'
 * const s: PathSignals = {
 *   promptTokens: 40_000,
 *   decodeHeldTokens: 6_000, // the shared system prompt
 *   decodeQueueS: 0.1,
 *   runningDecodes: 5,
 *   prefill: { queueS: 0.8, heldTokens: 6_000 },
 * }
 * ```
 */
export interface PathSignals {
  /** Length of the whole prompt. */
  readonly promptTokens: number
  /** Prompt tokens the D already holds (its cache hit). */
  readonly decodeHeldTokens: number
  /**
   * Prompt tokens right after `decodeHeldTokens` that the D holds only on its host tier (default
   * 0): a local prefill loads them back over PCIe instead of recomputing them when
   * `planPrefix` finds that cheaper.
   */
  readonly decodeHostTokens?: number
  /** Seconds of prefill work queued on the D ahead of this turn (its running prefill's rest included). */
  readonly decodeQueueS: number
  /** Requests in the D's running decode batch: each of them waits while the D prefills. */
  readonly runningDecodes: number
  /**
   * Turns per second arriving at the D for it to prefill (default 0: none priced): a local
   * prefill holds back the ones that arrive before it ends (head-of-line blocking in the D's
   * prefill queue). The router measures it from its own sends ({@link ArrivalRates}).
   */
  readonly decodeArrivalsPerS?: number
  /** The P of a remote seed; absent: no P can seed this D (the turn prefills locally). */
  readonly prefill?: PrefillSignals
}

/**
 * The decision's parameters.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, type PathParams } from '@kvc/kvc-router'
 * const p: PathParams = { cost: DEFAULT_COST_MODEL, stallWeight: 1, transferChunkTokens: 8_192, maxPromptTokens: 1_048_576 }
 * ```
 */
export interface PathParams {
  readonly cost: CostModel
  /**
   * What one second of delay to one running decode is worth, in seconds of this turn's time to
   * first token. `1` (the default): every second of any request's latency counts the same, so
   * the decision minimises the total latency it adds.
   */
  readonly stallWeight: number
  /**
   * The P ships KV chunk by chunk as its prefill proceeds (SGLang's per-chunk transfers over
   * Mooncake); only the last chunk's transfer, and whatever the link cannot keep up with, is
   * left after the prefill. Default 8,192 (SGLang's `--chunked-prefill-size`).
   */
  readonly transferChunkTokens: number
  /**
   * The longest prompt the decision considers when it keeps its choice monotone in the prompt's
   * length (a context window; default 1,048,576).
   */
  readonly maxPromptTokens: number
}

/**
 * One path's estimate: the turn's time to first token, how long the D's decode batch stops for
 * it, the delay that adds up over the running decodes, the delay of the turns that queue behind
 * it on the D, and the cost the decision compares (`ttftS + stallWeight × (impactS + headOfLineS)`).
 *
 * @example
 * ```ts
 * import type { PathEstimate } from '@kvc/kvc-router'
 * const e: PathEstimate = { site: 'local', newTokens: 34_000, ttftS: 2.2, stallS: 2.1, impactS: 10.5,
 *   headOfLineS: 2.2, costS: 14.9 }
 * ```
 */
export interface PathEstimate {
  readonly site: PrefillSite
  /** Tokens the path prefills. */
  readonly newTokens: number
  /** Tokens a local prefill loads back from the D's host tier first (absent: none). */
  readonly loadBackTokens?: number
  readonly ttftS: number
  /** Seconds the D's decode batch stops (a local prefill); 0 for a remote seed. */
  readonly stallS: number
  /** `stallS × runningDecodes`: the delay the running decodes take together. */
  readonly impactS: number
  /**
   * The delay the turns arriving at the D meanwhile take together, queued behind the local
   * prefill ({@link headOfLineSeconds}); 0 for a remote seed.
   */
  readonly headOfLineS: number
  /** `ttftS + stallWeight × (impactS + headOfLineS)`. */
  readonly costS: number
}

/**
 * The decision: the site with the lower cost (local on a tie: no transfer, no P), both
 * estimates, and the reason in words.
 *
 * @example
 * ```ts
 * import { DEFAULT_PATH_PARAMS, choosePath } from '@kvc/kvc-router'
 * const c = choosePath({ promptTokens: 3_000, decodeHeldTokens: 0, decodeQueueS: 0, runningDecodes: 0,
 *   prefill: { queueS: 4, heldTokens: 0 } }, DEFAULT_PATH_PARAMS)
 * c.site // 'local': the P is 4 s behind and nothing decodes on the D
 * ```
 */
export interface PathChoice {
  readonly site: PrefillSite
  readonly local: PathEstimate
  /** Undefined when no P can seed the D. */
  readonly remote: PathEstimate | undefined
  readonly reason: string
}

/**
 * The default parameters with a given cost model (`stallWeight` 1, `transferChunkTokens` 8,192,
 * `maxPromptTokens` 1,048,576).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, pathParams } from '@kvc/kvc-router'
 * pathParams(DEFAULT_COST_MODEL, { stallWeight: 0.5 }).stallWeight // 0.5
 * ```
 */
export function pathParams(cost: CostModel, overrides: Partial<Omit<PathParams, 'cost'>> = {}): PathParams {
  const p: PathParams = {
    cost,
    stallWeight: overrides.stallWeight ?? 1,
    transferChunkTokens: overrides.transferChunkTokens ?? 8192,
    maxPromptTokens: overrides.maxPromptTokens ?? 1_048_576,
  }
  checkNumber('stallWeight', p.stallWeight, 0)
  checkNumber('transferChunkTokens', p.transferChunkTokens, 1)
  checkNumber('maxPromptTokens', p.maxPromptTokens, 1)
  return Object.freeze(p)
}

/**
 * {@link pathParams} over the default cost model.
 *
 * @example
 * ```ts
 * import { DEFAULT_PATH_PARAMS } from '@kvc/kvc-router'
 * DEFAULT_PATH_PARAMS.stallWeight // 1
 * ```
 */
export const DEFAULT_PATH_PARAMS: PathParams = pathParams(DEFAULT_COST_MODEL)

function checkNumber(what: string, x: unknown, min: number): void {
  if (typeof x !== 'number' || !Number.isFinite(x) || x < min) {
    throw new RouterError(
      'INVALID_OPTION',
      `${what} must be a finite number >= ${min}, got ${describeValue(x)}`,
      x,
    )
  }
}

function checkSignals(s: PathSignals): void {
  if (typeof s !== 'object' || s === null) {
    throw new RouterError('INVALID_OPTION', 'path signals must be an object', s)
  }
  checkNumber('promptTokens', s.promptTokens, 0)
  checkNumber('decodeHeldTokens', s.decodeHeldTokens, 0)
  checkNumber('decodeQueueS', s.decodeQueueS, 0)
  checkNumber('runningDecodes', s.runningDecodes, 0)
  if (s.decodeHostTokens !== undefined) checkNumber('decodeHostTokens', s.decodeHostTokens, 0)
  if (s.decodeArrivalsPerS !== undefined) checkNumber('decodeArrivalsPerS', s.decodeArrivalsPerS, 0)
  const p = s.prefill
  if (p !== undefined) {
    checkNumber('prefill.queueS', p.queueS, 0)
    checkNumber('prefill.heldTokens', p.heldTokens, 0)
    if (p.linkGbps !== undefined) {
      checkNumber('prefill.linkGbps', p.linkGbps, Number.MIN_VALUE)
    }
  }
}

/**
 * Head-of-line delay: the seconds that turns arriving at a D at `arrivalsPerS` wait together
 * behind a prefill of `prefillS` seconds that starts after `queueS` seconds of queued work (the
 * D prefills one request at a time, first come first served). The turns arriving while the queue
 * drains wait the whole prefill, those arriving during it half of it on average:
 * `arrivalsPerS × prefillS × (queueS + prefillS / 2)`. What a D's queue already holds is ahead of
 * the prefill and is not delayed by it.
 *
 * Properties (fast-check tests): non-decreasing in each argument, 0 without arrivals or without
 * a prefill.
 *
 * @throws RouterError `INVALID_OPTION` on a negative or non-finite argument.
 *
 * @example
 * ```ts
 * import { headOfLineSeconds } from '@kvc/kvc-router'
 * // A 2 s local seed on an idle D that receives one turn a second: two turns wait 1 s each.
 * headOfLineSeconds(1, 0, 2) // 2
 * ```
 */
export function headOfLineSeconds(arrivalsPerS: number, queueS: number, prefillS: number): number {
  checkNumber('arrivalsPerS', arrivalsPerS, 0)
  checkNumber('queueS', queueS, 0)
  checkNumber('prefillS', prefillS, 0)
  return holOf(arrivalsPerS, queueS, prefillS)
}

function holOf(arrivalsPerS: number, queueS: number, prefillS: number): number {
  return arrivalsPerS === 0 ? 0 : arrivalsPerS * prefillS * (queueS + prefillS / 2)
}

/**
 * The local prefill's estimate: the D prefills `prompt − held` tokens after its `held` cached
 * ones, once its queue is through; its decode batch stops meanwhile, and the turns arriving
 * before it ends wait behind it ({@link headOfLineSeconds}). With `decodeHostTokens`,
 * the D first loads that host part back when `planPrefix` estimates it strictly cheaper than
 * recomputing it (`loadBackTokens`; never when recomputing is cheaper), and prefills the rest.
 *
 * @throws RouterError `INVALID_OPTION` on a negative or non-finite signal.
 *
 * @example
 * ```ts
 * import { DEFAULT_PATH_PARAMS, estimateLocal } from '@kvc/kvc-router'
 * const e = estimateLocal({ promptTokens: 5_000, decodeHeldTokens: 0, decodeQueueS: 0, runningDecodes: 4 }, DEFAULT_PATH_PARAMS)
 * e.stallS // ≈ 0.2: a 5K-token prefill
 * e.impactS // ≈ 0.8: four decodes wait that long
 * ```
 */
export function estimateLocal(s: PathSignals, p: PathParams): PathEstimate {
  checkSignals(s)
  const held = Math.min(s.decodeHeldTokens, s.promptTokens)
  const hostTokens = Math.floor(Math.min(s.decodeHostTokens ?? 0, s.promptTokens - held))
  if (hostTokens > 0) {
    // Load-back as an option: the cheaper of recomputing and loading the host part back first.
    const promptTokens = Math.floor(s.promptTokens)
    const deviceTokens = Math.min(Math.floor(held), promptTokens - hostTokens)
    const plan = planPrefix(p.cost, { promptTokens, deviceTokens, hostTokens })
    if (plan.loadBack) {
      const pf = plan.seconds
      const ttftS = s.decodeQueueS + pf
      const impactS = pf * s.runningDecodes
      const headOfLineS = holOf(s.decodeArrivalsPerS ?? 0, s.decodeQueueS, pf)
      const costS = ttftS + p.stallWeight * (impactS + headOfLineS)
      const newTokens = plan.recomputeTokens
      return {
        site: 'local',
        newTokens,
        loadBackTokens: plan.loadBackTokens,
        ttftS,
        stallS: pf,
        impactS,
        headOfLineS,
        costS,
      }
    }
  }
  const n = s.promptTokens - held
  const pf = prefillSeconds(p.cost, n, held)
  const ttftS = s.decodeQueueS + pf
  const impactS = pf * s.runningDecodes
  const headOfLineS = holOf(s.decodeArrivalsPerS ?? 0, s.decodeQueueS, pf)
  const costS = ttftS + p.stallWeight * (impactS + headOfLineS)
  return { site: 'local', newTokens: n, ttftS, stallS: pf, impactS, headOfLineS, costS }
}

/**
 * The remote seed's estimate (`undefined` without a P): the P prefills `prompt − held on P`
 * after its queue, streaming the KV the D lacks chunk by chunk; what is left after its prefill is
 * the last chunk's transfer, or the part of the transfer the link could not overlap, whichever
 * is longer. The D's batch does not stop (the KV joins it without a forward pass).
 *
 * @throws RouterError `INVALID_OPTION` on a negative or non-finite signal.
 *
 * @example
 * ```ts
 * import { DEFAULT_PATH_PARAMS, estimateRemote } from '@kvc/kvc-router'
 * const e = estimateRemote({ promptTokens: 5_000, decodeHeldTokens: 0, decodeQueueS: 0, runningDecodes: 4,
 *   prefill: { queueS: 0, heldTokens: 0 } }, DEFAULT_PATH_PARAMS)
 * e?.stallS // 0
 * ```
 */
export function estimateRemote(s: PathSignals, p: PathParams): PathEstimate | undefined {
  checkSignals(s)
  const pre = s.prefill
  if (pre === undefined) return undefined
  const cm = p.cost
  const heldP = Math.min(pre.heldTokens, s.promptTokens)
  const n = s.promptTokens - heldP
  const pf = prefillSeconds(cm, n, heldP)
  const xfer = s.promptTokens - Math.min(s.decodeHeldTokens, s.promptTokens)
  let tail = 0
  if (xfer > 0) {
    const perToken = (cm.kvBytesPerToken * 8) / ((pre.linkGbps ?? cm.linkGbps) * 1e9)
    const last = Math.min(xfer, p.transferChunkTokens) * perToken
    tail = cm.transferSetupS + Math.max(last, xfer * perToken - pf)
  }
  const ttftS = pre.queueS + pf + tail
  return { site: 'remote', newTokens: n, ttftS, stallS: 0, impactS: 0, headOfLineS: 0, costS: ttftS }
}

function fmt(x: number): string {
  return x >= 10 ? x.toFixed(1) : x.toFixed(2)
}

/**
 * `local cost − remote cost` of the same turn with its prompt `prompt` tokens long (the cached
 * parts unchanged): ≤ 0 where the plain comparison prefills locally.
 */
function margin(s: PathSignals, p: PathParams, prompt: number): number {
  const t = { ...s, promptTokens: prompt }
  return estimateLocal(t, p).costS - estimateRemote(t, p)!.costS
}

/**
 * The prompt length `L' > s.promptTokens` (up to `maxPromptTokens`) at which a local prefill is
 * cheapest against the remote seed, when the plain comparison at some longer prompt prefers
 * local; `undefined` when no longer prompt does. Exact for whole token counts: as a function of the prompt length, the
 * margin is convex on each piece between the breakpoints (the P's cached length, where its
 * prefill starts costing α; one transfer chunk past the D's cached length, where the transfer
 * starts to overlap the prefill), or beyond the last one the minimum of a non-decreasing and a
 * convex function; so its minimum over `[L, ∞)` lies at a breakpoint or a stationary point. The
 * head-of-line delay keeps that shape: it adds `(wλ/2)·u² + wλq·u` to the local cost, with `u`
 * the D's prefill time, convex and increasing in the prompt's length.
 */
function localAtLongerPrompt(s: PathSignals, p: PathParams): number | undefined {
  const cm = p.cost
  const L = s.promptTokens
  const pre = s.prefill!
  const wr = p.stallWeight * s.runningDecodes
  const wire = (cm.kvBytesPerToken * 8) / ((pre.linkGbps ?? cm.linkGbps) * 1e9)
  const perToken = 1 / cm.prefillTokensPerS
  const g = cm.prefillQuadraticS
  const hD = Math.min(s.decodeHeldTokens, L)
  const cands = [pre.heldTokens, pre.heldTokens + 1, hD + p.transferChunkTokens]
  const lambda = s.decodeArrivalsPerS ?? 0
  if (lambda === 0) {
    if (g > 0) {
      // Stationary points: within one chunk with the P prefilling (wr·(1/T + γL) = wire), and
      // with the P prefilling nothing or past one chunk ((1 + wr)·(1/T + γL) = wire).
      if (wr > 0) cands.push((wire / wr - perToken) / g)
      cands.push((wire / (1 + wr) - perToken) / g)
    }
  } else {
    // With arrivals the local cost is q + k·u + (wλ/2)·u² over the D's prefill time u(L), so
    // its slope is (1 + wr + wλ(q + u(L)))·(1/T + γL): the same two stationary points, where
    // that slope (less 1/T + γL within one chunk with the P prefilling) meets the wire time per
    // token. Both slopes increase with L past what the D holds: one root each, by bisection.
    const wl = p.stallWeight * lambda
    const q = s.decodeQueueS
    const slope = (x: number, own: number): number =>
      (own + wr + wl * (q + prefillSeconds(cm, x - hD, hD))) * (perToken + g * x)
    for (const own of [0, 1]) {
      const r = increasingRoot((x) => slope(x, own), wire, Math.max(L, hD), p.maxPromptTokens)
      if (r !== undefined) cands.push(r)
    }
  }
  cands.push(p.maxPromptTokens)
  let best: number | undefined
  let bestM = 0
  for (const raw of cands) {
    const c = Math.min(raw, p.maxPromptTokens)
    if (!(c > L) || !Number.isFinite(c)) continue
    const m = margin(s, p, c)
    if (m <= bestM) {
      bestM = m
      best = c
    }
  }
  return best
}

/**
 * The `x` in `(lo, hi)` where the non-decreasing `f` reaches `target` (to within a millionth of
 * a token), `undefined` when it does not cross `target` inside the interval.
 */
function increasingRoot(
  f: (x: number) => number,
  target: number,
  lo: number,
  hi: number,
): number | undefined {
  if (!(hi > lo) || f(lo) >= target || f(hi) < target) return undefined
  let a = lo
  let b = hi
  for (let i = 0; i < 64 && b - a > 1e-6; i++) {
    const m = (a + b) / 2
    if (f(m) < target) a = m
    else b = m
  }
  return b
}

/**
 * Chooses the prefill site for a turn on a D: local when its cost is not higher than the remote
 * seed's, remote otherwise; local when no P can seed the D or the D holds the whole prompt.
 *
 * One refinement keeps the choice monotone in the prompt's length, as conditional
 * disaggregation is (Dynamo prefills short prompts locally): when the remote seed is cheaper at
 * this length but a local prefill would win for a longer prompt with the same cached parts, the
 * turn prefills locally too. Only near ties differ from the plain comparison: a sub-chunk
 * transfer grows with the prompt while a local prefill beside no running decodes costs nobody
 * else (the gap is at most one chunk's wire time, ≈ 16 ms at 400 Gb/s), the P's fixed prefill
 * cost once the prompt outgrows what the P caches, and on links slower than the prefill (under
 * ≈ 24 Gb/s with the default cost model) the transfer that outgrows it.
 *
 * Properties (fast-check tests): a longer P queue, a slower link, a shorter D queue, fewer
 * running decodes, fewer arrivals at the D or a shorter prompt never turn a local choice into a
 * remote one
 * (`docs/design/algorithms.md#path-choice`).
 *
 * @throws RouterError `INVALID_OPTION` on a negative or non-finite signal.
 *
 * @example
 * ```ts
 * import { DEFAULT_PATH_PARAMS, choosePath } from '@kvc/kvc-router'
 * const busy = { promptTokens: 40_000, decodeHeldTokens: 6_000, decodeQueueS: 0, runningDecodes: 5,
 *   prefill: { queueS: 1, heldTokens: 6_000 } }
 * choosePath(busy, DEFAULT_PATH_PARAMS).site // 'remote': a local 34K prefill would stall 5 decodes ≈ 2 s each
 * choosePath({ ...busy, runningDecodes: 0 }, DEFAULT_PATH_PARAMS).site // 'local'
 * ```
 */
export function choosePath(s: PathSignals, p: PathParams): PathChoice {
  const local = estimateLocal(s, p)
  const remote = estimateRemote(s, p)
  if (local.newTokens === 0) {
    return { site: 'local', local, remote, reason: 'the D holds the whole prompt: nothing for a P to add' }
  }
  if (remote === undefined) {
    return {
      site: 'local',
      local,
      remote,
      reason: `no P can seed the D: local prefill ${fmt(local.ttftS)} s`,
    }
  }
  const lb = local.loadBackTokens === undefined ? '' : `, ${local.loadBackTokens} tokens loaded back`
  const stall = `${fmt(local.stallS)} s × ${s.runningDecodes} decodes`
  const others =
    local.headOfLineS > 0 ? `(${stall} + ${fmt(local.headOfLineS)} s of arrivals queued behind)` : stall
  const l = `local ${fmt(local.costS)} s${lb} (ttft ${fmt(local.ttftS)} + ${fmt(p.stallWeight)} × ${others})`
  const r = `remote ${fmt(remote.costS)} s (P queue ${fmt(s.prefill!.queueS)} + prefill and transfer ${fmt(remote.ttftS - s.prefill!.queueS)})`
  if (local.costS <= remote.costS) return { site: 'local', local, remote, reason: `${l} ≤ ${r}` }
  const longer = localAtLongerPrompt(s, p)
  if (longer !== undefined) {
    const at = `${Math.round(longer)} tokens`
    return {
      site: 'local',
      local,
      remote,
      reason: `${r} < ${l}, but a prompt of ${at} would prefill locally, so this shorter one does too (near tie)`,
    }
  }
  return { site: 'remote', local, remote, reason: `${r} < ${l}` }
}

/**
 * Whether a turn should wait `waitS` seconds for its session's own D (paused, for example) and
 * prefill there (`stay`), rather than take `move`, the best path on another D: it stays when
 * `waitS + stay.costS ≤ move's cost`. A longer wait never turns a move into a stay.
 *
 * @throws RouterError `INVALID_OPTION` on a negative or non-finite wait.
 *
 * @example
 * ```ts
 * import { DEFAULT_PATH_PARAMS, choosePath, estimateLocal, shouldWaitForOwnDecode } from '@kvc/kvc-router'
 * const own = estimateLocal({ promptTokens: 40_300, decodeHeldTokens: 40_000, decodeQueueS: 0, runningDecodes: 5 }, DEFAULT_PATH_PARAMS)
 * const move = choosePath({ promptTokens: 40_300, decodeHeldTokens: 6_000, decodeQueueS: 0, runningDecodes: 5,
 *   prefill: { queueS: 0.5, heldTokens: 6_000 } }, DEFAULT_PATH_PARAMS)
 * shouldWaitForOwnDecode(1.5, own, move) // true: 1.5 s of pause beats re-prefilling 34K tokens
 * ```
 */
export function shouldWaitForOwnDecode(waitS: number, stay: PathEstimate, move: PathChoice): boolean {
  checkNumber('waitS', waitS, 0)
  const moveCost = move.site === 'local' ? move.local.costS : move.remote!.costS
  return waitS + stay.costS <= moveCost
}
