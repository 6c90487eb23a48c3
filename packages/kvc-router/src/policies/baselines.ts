import { checkOption, describeValue } from '../errors/routerError.js'
import {
  type CandidateAnalysis,
  type TurnAnalysis,
  analyzeTurn,
  finishDecision,
  turnKeys,
} from '../route/route.js'
import type { RouteContext, RouteDecision, RoutingPolicy, TurnRequest } from '../route/types.js'
import { ApproxPrefixTree } from './approxTree.js'

/**
 * Options shared by the baselines: how Dispatch uses their ranking (`seed`: every turn through a
 * P, classic P/D; `direct`: colocated workers prefill themselves).
 *
 * @example
 * ```ts
 * import { roundRobinPolicy, type BaselineOptions } from '@kvc/kvc-router'
 * const o: BaselineOptions = { pathMode: 'direct' }
 * roundRobinPolicy(o).pathMode // 'direct'
 * ```
 */
export interface BaselineOptions {
  readonly pathMode?: 'seed' | 'direct'
}

function mode(o: BaselineOptions | undefined): 'seed' | 'direct' {
  const m = o?.pathMode ?? 'seed'
  checkOption(
    m === 'seed' || m === 'direct',
    `pathMode must be 'seed' or 'direct', got ${describeValue(m)}`,
    m,
  )
  return m
}

const turnsOf = (ctx: RouteContext, id: string): number => ctx.cluster.store.load(id).turns

/**
 * The P workers a classic P/D router may pick: registered, healthy, not draining or paused. The
 * routers the baselines mirror know nothing of P→D links (their health is kvc's own signal), so a
 * P whose link to the D is down is still picked; the transfer then fails and the router retries.
 */
function prefillPool(ctx: RouteContext): string[] {
  const out: string[] = []
  for (const p of ctx.cluster.prefillIds()) if (ctx.cluster.isEligible(p)) out.push(p)
  return out
}

/**
 * The shape every baseline shares: analyse the turn, let `order` reorder (and annotate) the
 * eligible candidates in place, finish the decision under `name`. No admission RPC.
 */
function baselinePolicy(
  name: string,
  pathMode: 'seed' | 'direct',
  order: (c: CandidateAnalysis[], ctx: RouteContext, turn: TurnRequest, a: TurnAnalysis) => void,
): RoutingPolicy {
  return {
    name,
    pathMode,
    usesAdmission: false,
    rank(ctx, turn) {
      const a = analyzeTurn(ctx, turn)
      order(a.candidates, ctx, turn, a)
      return finishDecision(ctx, turn, a, name, pathMode, false)
    },
  }
}

/**
 * Round-robin over the eligible D workers (an atomic counter in SGLang's router): the ranking
 * starts at `counter mod n` and the counter advances once per routed turn.
 *
 * @example
 * ```ts
 * import { Router, roundRobinPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: roundRobinPolicy(), now: () => 0, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.route({ sessionId: 'a', promptTokens: 1 }).candidates[0]?.workerId // 'd0'
 * router.route({ sessionId: 'b', promptTokens: 1 }).candidates[0]?.workerId // 'd1'
 * ```
 */
export function roundRobinPolicy(options?: BaselineOptions): RoutingPolicy {
  let counter = 0
  let prefillCounter = 0
  const p = baselinePolicy('round-robin', mode(options), (c) => {
    const n = c.length
    if (n > 0) {
      const start = counter % n
      counter++
      const rotated = [...c.slice(start), ...c.slice(0, start)]
      c.splice(0, n, ...rotated)
    }
  })
  return {
    ...p,
    // SGLang's PD router applies the policy to the prefill pool too (a counter of its own).
    pickPrefill(ctx) {
      const pool = prefillPool(ctx)
      if (pool.length === 0) return undefined
      return pool[prefillCounter++ % pool.length]
    },
  }
}

/**
 * Uniformly random order (Fisher–Yates with the router's injected randomness).
 *
 * @example
 * ```ts
 * import { Router, randomPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: randomPolicy(), now: () => 0, random: () => 0.99, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.route({ sessionId: 'a', promptTokens: 1 }).candidates.length // 2
 * ```
 */
export function randomPolicy(options?: BaselineOptions): RoutingPolicy {
  const p = baselinePolicy('random', mode(options), (c, ctx) => {
    for (let i = c.length - 1; i > 0; i--) {
      const j = Math.min(i, Math.floor(ctx.random() * (i + 1)))
      const t = c[i]!
      c[i] = c[j]!
      c[j] = t
    }
  })
  return {
    ...p,
    pickPrefill(ctx) {
      const pool = prefillPool(ctx)
      if (pool.length === 0) return undefined
      return pool[Math.min(pool.length - 1, Math.floor(ctx.random() * pool.length))]
    },
  }
}

/**
 * SGLang's `power_of_two`: sample two distinct eligible workers at random and take the one with
 * the lower load (in-flight turns; `<=` keeps the first sampled). The loser comes second, the
 * rest follow by load.
 *
 * @example
 * ```ts
 * import { Router, powerOfTwoPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: powerOfTwoPolicy(), now: () => 0, random: () => 0, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.cluster.store.addLoad('d0', { turns: 5 })
 * router.route({ sessionId: 'a', promptTokens: 1 }).candidates[0]?.workerId // 'd1'
 * ```
 */
export function powerOfTwoPolicy(options?: BaselineOptions): RoutingPolicy {
  const p = baselinePolicy('power-of-two', mode(options), (c, ctx) => {
    const n = c.length
    if (n >= 2) {
      const i = Math.min(n - 1, Math.floor(ctx.random() * n))
      let j = Math.min(n - 2, Math.floor(ctx.random() * (n - 1)))
      if (j >= i) j++
      const li = turnsOf(ctx, c[i]!.workerId)
      const lj = turnsOf(ctx, c[j]!.workerId)
      const [win, lose] = li <= lj ? [c[i]!, c[j]!] : [c[j]!, c[i]!]
      win.note = `sampled ${c[i]!.workerId}(${li}) vs ${c[j]!.workerId}(${lj})`
      const rest = c.filter((x) => x !== win && x !== lose).sort((x, y) => x.load - y.load)
      c.splice(0, n, win, lose, ...rest)
    }
  })
  return {
    ...p,
    pickPrefill(ctx) {
      const pool = prefillPool(ctx)
      const n = pool.length
      if (n < 2) return pool[0]
      const i = Math.min(n - 1, Math.floor(ctx.random() * n))
      let j = Math.min(n - 2, Math.floor(ctx.random() * (n - 1)))
      if (j >= i) j++
      return turnsOf(ctx, pool[i]!) <= turnsOf(ctx, pool[j]!) ? pool[i] : pool[j]
    },
  }
}

/**
 * Sticky session: a bound session goes to its worker while that worker is eligible; an unbound
 * one (or one whose worker is out) to the least loaded worker. No capacity or overlap awareness
 * (Dynamo's "plain sticky session" of its session-replay benchmark).
 *
 * @example
 * ```ts
 * import { Router, stickySessionPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: stickySessionPolicy(), now: () => 0, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.cluster.store.setBinding('s', { workerId: 'd1', committedTokens: 10, verifiedBlocks: 0, updatedAt: 0 })
 * router.route({ sessionId: 's', promptTokens: 20 }).candidates[0]?.workerId // 'd1'
 * ```
 */
export function stickySessionPolicy(options?: BaselineOptions): RoutingPolicy {
  // In P/D mode the session also sticks to its P (whose radix cache holds its history).
  const boundPrefill = new Map<string, string>()
  const p = baselinePolicy('sticky-session', mode(options), (c, _ctx, _turn, a) => {
    const bound = a.boundWorker
    c.sort((x, y) => {
      if ((x.workerId === bound) !== (y.workerId === bound)) return x.workerId === bound ? -1 : 1
      return x.load - y.load
    })
    const top = c[0]
    if (top !== undefined) top.note = top.workerId === bound ? 'bound' : 'least loaded'
  })
  return {
    ...p,
    pickPrefill(ctx, turn) {
      const pool = prefillPool(ctx)
      const b = boundPrefill.get(turn.sessionId)
      if (b !== undefined && pool.includes(b)) return b
      let best: string | undefined
      let bl = Number.POSITIVE_INFINITY
      for (const x of pool) {
        const l = turnsOf(ctx, x)
        if (l < bl) {
          best = x
          bl = l
        }
      }
      if (best !== undefined) boundPrefill.set(turn.sessionId, best)
      return best
    },
  }
}

/**
 * Options of {@link sglangCacheAwarePolicy}. Defaults are the Python `RouterArgs` values users
 * get (`defaults: 'python'`); `defaults: 'rust'` selects `CacheAwareConfig::default()`.
 *
 * | field | python | rust |
 * |---|---|---|
 * | cacheThreshold | 0.3 | 0.5 |
 * | balanceAbsThreshold | 64 | 32 |
 * | balanceRelThreshold | 1.5 | 1.1 |
 * | evictionIntervalSecs | 120 | 30 |
 * | maxTreeSize | 2^26 | 10,000 |
 *
 * @example
 * ```ts
 * import type { SglangCacheAwareOptions } from '@kvc/kvc-router'
 * const o: SglangCacheAwareOptions = { defaults: 'rust', fallback: 'leastLoaded' }
 * ```
 */
export interface SglangCacheAwareOptions extends BaselineOptions {
  readonly defaults?: 'python' | 'rust'
  readonly cacheThreshold?: number
  readonly balanceAbsThreshold?: number
  readonly balanceRelThreshold?: number
  readonly evictionIntervalSecs?: number
  readonly maxTreeSize?: number
  /** Below the threshold: the tenant with the smallest tree (older sgl-router, default) or the least-loaded worker (newer gateway). */
  readonly fallback?: 'smallestTenant' | 'leastLoaded'
}

const PY = {
  cacheThreshold: 0.3,
  balanceAbsThreshold: 64,
  balanceRelThreshold: 1.5,
  evictionIntervalSecs: 120,
  maxTreeSize: 2 ** 26,
}
const RS = {
  cacheThreshold: 0.5,
  balanceAbsThreshold: 32,
  balanceRelThreshold: 1.1,
  evictionIntervalSecs: 30,
  maxTreeSize: 10_000,
}

/**
 * Words of the block keys of the turn being routed, reused from turn to turn: the approximate
 * tree only reads a key during one `prefixMatch` or `insert` (an insert copies what it keeps), so
 * one buffer per module serves every policy instance (routing is synchronous).
 */
let keyWords = new Uint32Array(256)

/**
 * Match key of a turn: its `matchKey`, else the words of its block keys (`hi`, `lo` of each
 * block, in order) as a view of a shared buffer valid until the next call.
 */
function matchKeyOf(turn: TurnRequest): ArrayLike<number> {
  if (turn.matchKey !== undefined) return turn.matchKey
  const k = turnKeys(turn)
  const n = k.length * 2
  if (keyWords.length < n) keyWords = new Uint32Array(Math.max(n, keyWords.length * 2))
  const out = keyWords
  const hi = k.hi
  const lo = k.lo
  for (let i = 0; i < k.length; i++) {
    out[2 * i] = hi[i]!
    out[2 * i + 1] = lo[i]!
  }
  return out.subarray(0, n)
}

/** SGLang's cache_aware selection over one pool of workers. */
function cacheAwareSelect(
  ctx: RouteContext,
  tree: ApproxPrefixTree,
  cfg: typeof PY & { fallback: 'smallestTenant' | 'leastLoaded' },
  pool: readonly string[],
  healthy: (id: string) => boolean,
  key: ArrayLike<number>,
): { id: string | undefined; why: string } {
  const now = ctx.cluster.now()
  if (pool.length === 0) return { id: undefined, why: 'empty pool' }
  let maxLoad = Number.NEGATIVE_INFINITY
  let minLoad = Number.POSITIVE_INFINITY
  for (const w of pool) {
    const l = turnsOf(ctx, w)
    if (l > maxLoad) maxLoad = l
    if (l < minLoad) minLoad = l
  }
  const imbalanced =
    maxLoad - minLoad > cfg.balanceAbsThreshold && maxLoad > minLoad * cfg.balanceRelThreshold
  const leastLoadedHealthy = (): string | undefined => {
    let best: string | undefined
    let bl = Number.POSITIVE_INFINITY
    for (const w of pool) {
      if (!healthy(w)) continue
      const l = turnsOf(ctx, w)
      if (l < bl) {
        best = w
        bl = l
      }
    }
    return best
  }
  if (imbalanced) {
    const id = leastLoadedHealthy()
    if (id !== undefined) tree.insert(key, id, now)
    return { id, why: `imbalanced (max ${maxLoad}, min ${minLoad}): shortest queue` }
  }
  const m = tree.prefixMatch(key)
  const rate = key.length === 0 ? 0 : m.matched / key.length
  let selected: string | undefined
  let why: string
  if (rate > cfg.cacheThreshold && m.tenant !== undefined) {
    selected = m.tenant
    why = `match rate ${rate.toFixed(2)} > ${cfg.cacheThreshold}`
  } else {
    selected = cfg.fallback === 'smallestTenant' ? tree.smallestTenant(pool) : leastLoadedHealthy()
    why = `match rate ${rate.toFixed(2)} <= ${cfg.cacheThreshold}: ${cfg.fallback}`
  }
  if (selected !== undefined && pool.includes(selected) && healthy(selected)) {
    tree.insert(key, selected, now)
    return { id: selected, why }
  }
  if (selected !== undefined && !pool.includes(selected)) tree.removeTenant(selected)
  const first = pool.find((w) => healthy(w))
  return { id: first, why: `${why}; ${selected ?? 'none'} unavailable: first healthy` }
}

function resolveSglang(o: SglangCacheAwareOptions | undefined) {
  const base = o?.defaults === 'rust' ? RS : PY
  const cfg = {
    cacheThreshold: o?.cacheThreshold ?? base.cacheThreshold,
    balanceAbsThreshold: o?.balanceAbsThreshold ?? base.balanceAbsThreshold,
    balanceRelThreshold: o?.balanceRelThreshold ?? base.balanceRelThreshold,
    evictionIntervalSecs: o?.evictionIntervalSecs ?? base.evictionIntervalSecs,
    maxTreeSize: o?.maxTreeSize ?? base.maxTreeSize,
    fallback: o?.fallback ?? ('smallestTenant' as const),
  }
  const v = describeValue
  checkOption(
    cfg.cacheThreshold >= 0 && cfg.cacheThreshold <= 1,
    `cacheThreshold must be in [0, 1], got ${v(cfg.cacheThreshold)}`,
    cfg.cacheThreshold,
  )
  checkOption(
    cfg.balanceAbsThreshold >= 0,
    `balanceAbsThreshold must be >= 0, got ${v(cfg.balanceAbsThreshold)}`,
    cfg.balanceAbsThreshold,
  )
  checkOption(
    cfg.balanceRelThreshold >= 0,
    `balanceRelThreshold must be >= 0, got ${v(cfg.balanceRelThreshold)}`,
    cfg.balanceRelThreshold,
  )
  checkOption(
    cfg.evictionIntervalSecs > 0,
    `evictionIntervalSecs must be > 0, got ${v(cfg.evictionIntervalSecs)}`,
    cfg.evictionIntervalSecs,
  )
  checkOption(cfg.maxTreeSize >= 0, `maxTreeSize must be >= 0, got ${v(cfg.maxTreeSize)}`, cfg.maxTreeSize)
  checkOption(
    cfg.fallback === 'smallestTenant' || cfg.fallback === 'leastLoaded',
    `fallback must be 'smallestTenant' or 'leastLoaded', got ${v(cfg.fallback)}`,
    cfg.fallback,
  )
  return cfg
}

function putFirst(c: CandidateAnalysis[], id: string | undefined, note: string): void {
  const i = id === undefined ? -1 : c.findIndex((x) => x.workerId === id)
  if (i > 0) c.unshift(c.splice(i, 1)[0]!)
  if (i >= 0) c[0]!.note = note
}

/**
 * SGLang's `cache_aware` router with its exact rule and defaults
 * (`docs/design/peers.md#sglang-cache-aware-router`, `docs/design/peers.md#sglang-router-defaults`):
 * if loads are imbalanced (`max − min > balance_abs` and `max > min × balance_rel`) take the
 * shortest queue; otherwise match the request against the shared approximate tree and take the
 * matched worker when `match_rate > cache_threshold`, else the tenant with the smallest tree;
 * record the choice in the tree; evict every `eviction_interval_secs` down to `max_tree_size`
 * per tenant. Loads are router-side in-flight counts. The tree holds `turn.matchKey` (token
 * ids or character codes) or, without it, the prompt's block keys.
 *
 * With `pathMode: 'seed'` (default) it reproduces upstream's single-policy P/D mode: the rule
 * picks the **prefill** worker and decode workers are ranked by least load. With
 * `pathMode: 'direct'` the rule picks among the (colocated) D workers: see
 * {@link dataParallelCacheAwarePolicy}.
 *
 * @example
 * ```ts
 * import { Router, sglangCacheAwarePolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: sglangCacheAwarePolicy({ pathMode: 'direct' }), now: () => 0, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.route({ sessionId: 'a', promptTokens: 4, matchKey: [1, 2, 3, 4] }).candidates[0]?.workerId // 'd0' (smallest tree)
 * router.route({ sessionId: 'b', promptTokens: 4, matchKey: [1, 2, 3, 9] }).candidates[0]?.workerId // 'd0' (match rate 0.75)
 * ```
 */
export function sglangCacheAwarePolicy(options?: SglangCacheAwareOptions): RoutingPolicy {
  const pathMode = mode(options)
  const cfg = resolveSglang(options)
  const tree = new ApproxPrefixTree()
  let lastEviction: number | undefined
  const prefillChoice = new WeakMap<TurnRequest, string | undefined>()
  const maybeEvict = (ctx: RouteContext): void => {
    const now = ctx.cluster.now()
    if (lastEviction === undefined) lastEviction = now
    else if (now - lastEviction >= cfg.evictionIntervalSecs * 1000) {
      tree.evictBySize(cfg.maxTreeSize)
      lastEviction = now
    }
  }
  const name = pathMode === 'direct' ? 'sglang-cache-aware-dp' : 'sglang-cache-aware'
  const ranking = baselinePolicy(name, pathMode, (c, ctx, turn) => {
    if (pathMode === 'direct') {
      const all = ctx.cluster.decodeIds()
      const eligible = new Set(c.map((x) => x.workerId))
      const pick = cacheAwareSelect(ctx, tree, cfg, all, (w) => eligible.has(w), matchKeyOf(turn))
      c.sort((x, y) => x.load - y.load)
      putFirst(c, pick.id, pick.why)
    } else {
      c.sort((x, y) => x.load - y.load)
      if (c[0] !== undefined) c[0].note = 'decode: least load'
    }
  })
  return {
    ...ranking,
    rank(ctx, turn): RouteDecision {
      maybeEvict(ctx)
      return ranking.rank(ctx, turn)
    },
    // The same rule over the prefill pool (SGLang's PD router). It knows nothing of P→D links:
    // a transfer over a broken one fails and the request is retried.
    pickPrefill(ctx, turn) {
      const p = prefillChoice.get(turn)
      if (p !== undefined && ctx.cluster.has(p) && ctx.cluster.isEligible(p)) return p
      const pool = ctx.cluster.prefillIds()
      const pick = cacheAwareSelect(ctx, tree, cfg, pool, (x) => ctx.cluster.isEligible(x), matchKeyOf(turn))
      prefillChoice.set(turn, pick.id)
      return pick.id
    },
  }
}

/**
 * The research prototype's strongest baseline, "8-way DP cache-aware"
 * (`docs/design/prototype.md#headline-comparison`): SGLang's cache-aware rule over
 * colocated data-parallel workers (registered as D workers), every turn sent straight to the
 * chosen worker, no P/D split and no admission.
 *
 * @example
 * ```ts
 * import { Router, dataParallelCacheAwarePolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: dataParallelCacheAwarePolicy(), now: () => 0 })
 * router.policy.pathMode // 'direct'
 * ```
 */
export function dataParallelCacheAwarePolicy(
  options?: Omit<SglangCacheAwareOptions, 'pathMode'>,
): RoutingPolicy {
  const p = sglangCacheAwarePolicy({ ...options, pathMode: 'direct' })
  return { ...p, name: 'dp-cache-aware' }
}

/**
 * Options of {@link dynamoKvCostPolicy} (Dynamo's current defaults; `docs/design/peers.md#dynamo-kv-cost`).
 *
 * @example
 * ```ts
 * import type { DynamoKvCostOptions } from '@kvc/kvc-router'
 * const o: DynamoKvCostOptions = { temperature: 0.5 }
 * ```
 */
export interface DynamoKvCostOptions extends BaselineOptions {
  /** `overlap_score_credit` (1.0). */
  readonly overlapScoreCredit?: number
  /** `prefill_load_scale` (1.0). */
  readonly prefillLoadScale?: number
  /** `overlap_score_credit_decay` k (0 = off). */
  readonly overlapScoreCreditDecay?: number
  /** `decode_active_request_weight` (0: no default found upstream). */
  readonly decodeActiveRequestWeight?: number
  /** `router_temperature` (0 = argmin). */
  readonly temperature?: number
  /** `track_prefill_tokens` (true): count the worker's active prefill tokens in the prefill cost. */
  readonly trackPrefillTokens?: boolean
}

/**
 * Dynamo's KV router cost, lowest wins:
 * `logit = prefill_load_scale · max(0, raw_prefill_blocks − credit · decay · device_overlap) +
 * potential_decode_blocks + w_req · active_requests`, with
 * `raw_prefill_blocks = (active_prefill_tokens + ISL) / block`,
 * `decay = 1 / (1 + k · ((active_prefill − min_active_prefill) / block) / request_blocks)` and
 * `potential_decode_blocks = active_decode_blocks + ⌈ISL / block⌉`. Temperature 0 takes the
 * argmin (ties by registration order); T > 0 samples from `exp(−(c − c_min) / ((c_max − c_min) · T))`
 * (uniform when all costs are equal). Device overlap is the residency index's plain overlap (the
 * workers' KV events); active loads are the router's in-flight counts.
 *
 * `pathMode: 'direct'` is Dynamo's aggregated serving: the whole cost over the (colocated) D
 * workers. `pathMode: 'seed'` (the default) is its disaggregated serving
 * (`docs/design/peers.md#dynamo-kv-cost`): the decode stage picks the D first with
 * `overlap_score_credit = 0` and no prefill tracking (cost = potential decode blocks + w_req ·
 * requests), then the prefill router picks the P by the prefill term alone, its overlap read from
 * the P workers' KV events (`ClusterView.prefillResidency`; `track_active_blocks` is off for
 * prefill workers, so no decode term).
 *
 * @example
 * ```ts
 * import { Router, dynamoKvCostPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: dynamoKvCostPolicy({ pathMode: 'direct' }), now: () => 0, params: { pageSize: 16 }, workers: [
 *   { id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.cluster.residency.recordStored('d1', [1n, 2n])
 * router.route({ sessionId: 'a', promptTokens: 64, blocks: [1n, 2n, 3n, 4n] }).candidates[0]?.workerId // 'd1'
 * ```
 */
export function dynamoKvCostPolicy(options?: DynamoKvCostOptions): RoutingPolicy {
  const pathMode = mode(options)
  const credit = options?.overlapScoreCredit ?? 1
  const scale = options?.prefillLoadScale ?? 1
  const k = options?.overlapScoreCreditDecay ?? 0
  const wReq = options?.decodeActiveRequestWeight ?? 0
  const temperature = options?.temperature ?? 0
  const track = options?.trackPrefillTokens ?? true
  for (const [n, v] of [
    ['overlapScoreCredit', credit],
    ['prefillLoadScale', scale],
    ['overlapScoreCreditDecay', k],
    ['decodeActiveRequestWeight', wReq],
    ['temperature', temperature],
  ] as const) {
    checkOption(
      typeof v === 'number' && Number.isFinite(v) && v >= 0,
      `${n} must be a finite number >= 0, got ${describeValue(v)}`,
      v,
    )
  }
  /** The prefill term: `prefill_load_scale · max(0, raw_prefill_blocks − credit · decay · overlap)`. */
  const prefillCost = (active: number, minActive: number, isl: number, block: number, overlap: number) => {
    const requestBlocks = Math.max(1, Math.ceil(isl / block))
    const raw = ((track ? active : 0) + isl) / block
    const decay = 1 / (1 + (k * ((active - minActive) / block)) / requestBlocks)
    return scale * Math.max(0, raw - credit * decay * overlap)
  }
  /** Temperature 0: the argmin (first in order); T > 0: a softmax sample over the costs. */
  const sample = (costs: readonly number[], random: () => number): number => {
    const n = costs.length
    let lo = Number.POSITIVE_INFINITY
    let hi = Number.NEGATIVE_INFINITY
    let best = 0
    for (let i = 0; i < n; i++) {
      const c = costs[i]!
      if (c < lo) {
        lo = c
        best = i
      }
      if (c > hi) hi = c
    }
    if (temperature === 0 || n < 2) return best
    const w = costs.map((c) => (hi === lo ? 1 : Math.exp(-(c - lo) / ((hi - lo) * temperature))))
    const total = w.reduce((s, v) => s + v, 0)
    let r = random() * total
    for (let i = 0; i < n; i++) {
      r -= w[i]!
      if (r < 0) return i
    }
    return n - 1
  }
  const disagg = pathMode === 'seed'
  const ranking = baselinePolicy('dynamo-kv-cost', pathMode, (c, ctx, turn) => {
    const block = ctx.params.pageSize
    const isl = turn.promptTokens
    const requestBlocks = Math.max(1, Math.ceil(isl / block))
    let minActive = Number.POSITIVE_INFINITY
    for (const x of c) minActive = Math.min(minActive, ctx.cluster.store.load(x.workerId).prefillTokens)
    const cost = new Map<CandidateAnalysis, number>()
    for (const x of c) {
      const l = ctx.cluster.store.load(x.workerId)
      const decode = l.decodeBlocks + requestBlocks
      if (disagg) {
        // The decode stage of disaggregated serving: no overlap credit, no prefill tracking.
        const logit = decode + wReq * l.turns
        cost.set(x, logit)
        x.note = `decode stage: cost ${logit.toFixed(1)} = decode ${decode}`
        continue
      }
      const prefill = prefillCost(l.prefillTokens, minActive, isl, block, x.plainOverlapBlocks)
      const logit = prefill + decode + wReq * l.turns
      cost.set(x, logit)
      x.note = `cost ${logit.toFixed(1)} = prefill ${prefill.toFixed(1)} + decode ${decode}`
    }
    c.sort((x, y) => cost.get(x)! - cost.get(y)!)
    if (temperature > 0 && c.length > 1) {
      const pick = sample(
        c.map((x) => cost.get(x)!),
        ctx.random,
      )
      if (pick > 0) c.unshift(c.splice(pick, 1)[0]!)
    }
  })
  if (!disagg) return ranking
  let scratch = new Int32Array(8)
  return {
    ...ranking,
    // The prefill router: KV overlap on the P workers (their KV events), no decode term
    // (`track_active_blocks` is off for prefill workers).
    pickPrefill(ctx, turn) {
      const pool = prefillPool(ctx)
      if (pool.length === 0) return undefined
      const index = ctx.cluster.prefillResidency
      if (scratch.length < index.slotCount) scratch = new Int32Array(index.slotCount * 2)
      index.overlapInto(turnKeys(turn), scratch)
      const block = ctx.params.pageSize
      let minActive = Number.POSITIVE_INFINITY
      for (const p of pool) minActive = Math.min(minActive, ctx.cluster.store.load(p).prefillTokens)
      const costs = pool.map((p) =>
        prefillCost(
          ctx.cluster.store.load(p).prefillTokens,
          minActive,
          turn.promptTokens,
          block,
          scratch[index.slotOf(p)]!,
        ),
      )
      return pool[sample(costs, ctx.random)]
    },
  }
}
