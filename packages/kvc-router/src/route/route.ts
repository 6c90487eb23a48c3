import { SLO_CLASSES } from '../admission/contract.js'
import { RouterError, checkLength } from '../errors/routerError.js'
import { DEFAULT_COST_MODEL } from '../cost/costModel.js'
import { BlockKeys } from '../residency/blockKeys.js'
import { chooseLoadBack } from '../tier/prefixCost.js'
import type {
  IneligibleWorker,
  PathMode,
  RankKey,
  RouteCandidate,
  RouteContext,
  RouteDecision,
  RoutingPolicy,
  TurnRequest,
} from './types.js'

const NO_KEYS = new BlockKeys(1)

/**
 * The session's own D holds its prefix's first `plainBlocks` blocks on the device and maybe more
 * below it: the tokens to load back when the device part plus the host (and disk) run reach the
 * `need` verified blocks and {@link chooseLoadBack} prefers loading them back over a reseed
 * (estimated at its best case: the P already holds everything but what the D would recompute);
 * else 0.
 */
function loadBackTokensFor(
  ctx: RouteContext,
  d: string,
  keys: BlockKeys,
  plainBlocks: number,
  need: number,
  prompt: number,
  queueS: number,
): number {
  const run = ctx.cluster.hostResidency.runFrom(d, keys, plainBlocks)
  if (plainBlocks + run.host + run.disk < need || run.host + run.disk === 0) return 0
  const ps = ctx.params.pageSize
  const device = Math.min(prompt, plainBlocks * ps)
  const host = Math.min(prompt - device, run.host * ps)
  const disk = Math.min(prompt - device - host, run.disk * ps)
  const hit = { promptTokens: prompt, deviceTokens: device, hostTokens: host, diskTokens: disk }
  const rest = prompt - device - host - disk
  const r = chooseLoadBack(ctx.cost ?? DEFAULT_COST_MODEL, hit, {
    prefillHeldTokens: prompt - rest,
    prefillQueueS: queueS,
  })
  // Loading back only part of what is below the device does not make the prefix resident.
  return r.choice === 'loadBack' && r.plan.loadBackTokens === host + disk ? r.plan.loadBackTokens : 0
}

/**
 * A candidate while it is being ranked (mutable; frozen into a {@link RouteCandidate}).
 *
 * @example
 * ```ts
 * import { Router, analyzeTurn } from '@kvc/kvc-router'
 * const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 10_000 }], now: () => 0 })
 * const a = analyzeTurn(router.context, { sessionId: 's', promptTokens: 100 })
 * a.candidates[0]?.capOk // true
 * ```
 */
export interface CandidateAnalysis {
  workerId: string
  rank: number
  fast: boolean
  capOk: boolean
  prefixResident: boolean
  overlapBlocks: number
  plainOverlapBlocks: number
  bonus: number
  score: number
  load: number
  tieBreak: number
  heldTokens: number
  loadBackTokens: number
  appendTokens: number
  needTokens: number
  availableTokens: number
  decidedBy: RankKey
  note: string | undefined
}

/**
 * Every quantity Route needs for one turn, before ordering (shared by Algorithm 1 and the
 * baselines).
 *
 * @example
 * ```ts
 * import { Router, analyzeTurn } from '@kvc/kvc-router'
 * const router = new Router({ now: () => 0 })
 * analyzeTurn(router.context, { sessionId: 's', promptTokens: 100 }).candidates // []: no D worker
 * ```
 */
export interface TurnAnalysis {
  readonly candidates: CandidateAnalysis[]
  readonly ineligible: IneligibleWorker[]
  readonly boundWorker: string | undefined
  readonly meanLoad: number
  readonly queryBlocks: number
  readonly exclusionsReleased: boolean
  readonly keys: BlockKeys
}

function fnv1a(s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/**
 * Validates a turn (before any state changes).
 *
 * @throws RouterError `INVALID_OPTION`, `INVALID_LENGTH`, `INVALID_MESSAGE`.
 *
 * @example
 * ```ts
 * import { validateTurn } from '@kvc/kvc-router'
 * validateTurn({ sessionId: 's', promptTokens: 10 }) // ok
 * ```
 */
export function validateTurn(turn: TurnRequest): void {
  if (typeof turn !== 'object' || turn === null)
    throw new RouterError('INVALID_OPTION', 'turn must be an object', turn)
  if (typeof turn.sessionId !== 'string' || turn.sessionId.length === 0) {
    throw new RouterError('INVALID_OPTION', 'sessionId must be a non-empty string', turn.sessionId)
  }
  checkLength('promptTokens', turn.promptTokens)
  if (turn.expectedOutputTokens !== undefined) checkLength('expectedOutputTokens', turn.expectedOutputTokens)
  if (turn.sloClass !== undefined && !(SLO_CLASSES as readonly string[]).includes(turn.sloClass)) {
    throw new RouterError('INVALID_OPTION', `unknown SLO class ${String(turn.sloClass)}`, turn.sloClass)
  }
  const b = turn.blocks
  if (b !== undefined && !(b instanceof BlockKeys)) {
    if (!Array.isArray(b)) throw new RouterError('INVALID_MESSAGE', 'blocks must be BlockKeys or bigint[]', b)
    for (let i = 0; i < b.length; i++) {
      if (typeof b[i] !== 'bigint')
        throw new RouterError('INVALID_MESSAGE', `blocks[${i}] must be a bigint`, b[i])
    }
  }
}

/**
 * The block keys of a turn (converting a bigint list once).
 *
 * @example
 * ```ts
 * import { turnKeys } from '@kvc/kvc-router'
 * turnKeys({ sessionId: 's', promptTokens: 32, blocks: [1n, 2n] }).length // 2
 * ```
 */
export function turnKeys(turn: TurnRequest): BlockKeys {
  const b = turn.blocks
  if (b === undefined) return NO_KEYS
  return b instanceof BlockKeys ? b : BlockKeys.fromHashes(b)
}

let plainScratch = new Int32Array(64)
let exclScratch = new Int32Array(64)

/**
 * Computes, for every D worker, eligibility and the quantities of Algorithm 1's key: overlap
 * (plain and exclusive), the tokens believed resident, append, need, capOk, fast, the load-floor
 * bonus, load and the tie-break. Cost: one residency query plus O(D workers); never a scan over
 * sessions. Releases the session's exclusions when every eligible D excludes it (and
 * `releaseWhenAllExcluded` is on).
 *
 * Residency of the session's committed prefix on `d`: on its bound worker it is trusted while the
 * index still shows the blocks of its last successful prompt there (`verifiedBlocks`); anywhere
 * else it needs the index to show the committed prefix (rounded down to whole pages).
 *
 * @throws RouterError on an invalid turn (nothing changes).
 *
 * @example
 * ```ts
 * import { Router, analyzeTurn } from '@kvc/kvc-router'
 * const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 10_000 }], now: () => 0 })
 * analyzeTurn(router.context, { sessionId: 's', promptTokens: 20_000 }).candidates[0]?.capOk // false
 * ```
 */
export function analyzeTurn(ctx: RouteContext, turn: TurnRequest): TurnAnalysis {
  validateTurn(turn)
  const { cluster, params } = ctx
  const store = cluster.store
  const residency = cluster.residency
  const now = cluster.now()
  const s = turn.sessionId
  const n = cluster.decodeIds().length
  const keys = turnKeys(turn)
  const slots = residency.slotCount
  if (plainScratch.length < slots) {
    plainScratch = new Int32Array(slots * 2)
    exclScratch = new Int32Array(slots * 2)
  }
  const plain = plainScratch
  const excl = exclScratch
  // `sole` counts the blocks a worker alone holds: a boilerplate threshold of two holders.
  residency.overlapInto(
    keys,
    plain,
    excl,
    params.overlapMode === 'sole' ? 2 : residency.boilerplateThreshold(),
  )

  const recs = cluster.decodeRecords()
  // One lookup for the session's exclusions (empty for almost every session), not one per worker.
  const excludedList = store.excludedWorkers(s)
  const anyExcluded = excludedList.length > 0
  // Eligibility, with the exclusion-saturation release.
  let eligibleCount = 0
  let excludedCount = 0
  for (let i = 0; i < n; i++) {
    const r = recs[i]!
    if (!r.healthy || r.draining || now < store.pauseUntil(r.id)) continue
    eligibleCount++
    if (anyExcluded && excludedList.includes(r.id)) excludedCount++
  }
  let released = false
  if (params.releaseWhenAllExcluded && eligibleCount > 0 && excludedCount === eligibleCount) {
    store.resetSession(s)
    released = true
  }

  const binding = store.getBinding(s)
  const committed = binding === undefined ? 0 : binding.committedTokens
  const ps = params.pageSize
  const prompt = turn.promptTokens
  const reserve = turn.expectedOutputTokens ?? params.defaultDecodeReserve
  const h = n > 0 ? fnv1a(s) % n : 0
  // Tiers below the device are read only when some D reported any (one check per turn).
  const hostTiers = cluster.hostResidency.blockCount > 0 && binding !== undefined

  const candidates: CandidateAnalysis[] = []
  const ineligible: IneligibleWorker[] = []
  let loadSum = 0
  for (let i = 0; i < n; i++) {
    const r = recs[i]!
    const d = r.id
    if (!r.healthy) {
      ineligible.push({ workerId: d, reason: 'unhealthy' })
      continue
    }
    if (r.draining) {
      ineligible.push({ workerId: d, reason: 'draining' })
      continue
    }
    const until = store.pauseUntil(d)
    if (now < until) {
      ineligible.push({ workerId: d, reason: 'paused', until })
      continue
    }
    if (!released && anyExcluded && excludedList.includes(d)) {
      ineligible.push({ workerId: d, reason: 'excluded' })
      continue
    }
    const slot = r.slot
    const plainBlocks = plain[slot]!
    const idxTokens = Math.min(prompt, plainBlocks * ps)
    let held: number
    let prefixResident: boolean
    const bound = binding !== undefined && binding.workerId === d
    let loadBack = 0
    if (binding !== undefined && binding.workerId === d) {
      const need = Math.min(binding.verifiedBlocks, keys.length)
      prefixResident = plainBlocks >= need
      held = prefixResident ? Math.max(idxTokens, Math.min(committed, prompt)) : idxTokens
      if (!prefixResident && hostTiers) {
        // Part of the prefix below the device: resident if loading it back beats a reseed.
        loadBack = loadBackTokensFor(ctx, d, keys, plainBlocks, need, prompt, 0)
        if (loadBack > 0) {
          prefixResident = true
          held = Math.max(idxTokens + loadBack, Math.min(committed, prompt))
        }
      }
    } else {
      held = idxTokens
      const committedPages = committed - (committed % ps)
      prefixResident = held >= Math.min(prompt, committedPages)
    }
    const append = prompt - held
    // Loaded-back tokens take device slots like the append.
    const needTokens = append + loadBack + reserve
    const avail = r.available
    const fastShape = (prefixResident || (bound && params.refillLostTail)) && append <= params.tauAppend
    // A fast-path turn on the session's own D may use what idle sessions hold there: the D's
    // admission releases them before it refuses (Algorithm 2), and the alternative, a reseed to this
    // or another D, needs more memory, not less.
    const capOk = avail + (bound && fastShape ? r.releasable : 0) >= needTokens
    const l = store.load(d)
    const load = l.turns + l.pendingSeeds
    loadSum += load
    const overlapBlocks = params.overlapMode === 'plain' ? plainBlocks : excl[slot]!
    candidates.push({
      workerId: d,
      rank: 0,
      // A bound D that lost part of the session's tail re-prefills it with the append (refillLostTail).
      fast: fastShape && capOk,
      capOk,
      prefixResident,
      overlapBlocks,
      plainOverlapBlocks: plainBlocks,
      bonus: 0,
      score: overlapBlocks,
      load,
      tieBreak: (i - h + n) % n,
      heldTokens: held,
      loadBackTokens: loadBack,
      appendTokens: append,
      needTokens,
      availableTokens: avail,
      decidedBy: 'last',
      note: undefined,
    })
  }
  const meanLoad = candidates.length > 0 ? loadSum / candidates.length : 0
  return {
    candidates,
    ineligible,
    boundWorker: binding?.workerId,
    meanLoad,
    queryBlocks: keys.length,
    exclusionsReleased: released,
    keys,
  }
}

/** Algorithm 1's comparator: negative when `a` ranks before `b`. */
function compareKvc(a: CandidateAnalysis, b: CandidateAnalysis): number {
  if (a.fast !== b.fast) return a.fast ? -1 : 1
  if (a.capOk !== b.capOk) return a.capOk ? -1 : 1
  if (a.score !== b.score) return b.score - a.score
  if (a.load !== b.load) return a.load - b.load
  return a.tieBreak - b.tieBreak
}

/**
 * Sorts `c` by `compareKvc`: an insertion sort for the few D workers of a cluster (no temporary
 * arrays, the comparator inlined), `Array.prototype.sort` beyond. Both are stable and the
 * comparator is a total order (the tie-break differs between workers), so the order is the same.
 */
function sortKvc(c: CandidateAnalysis[]): void {
  const n = c.length
  if (n > 16) {
    c.sort(compareKvc)
    return
  }
  for (let i = 1; i < n; i++) {
    const x = c[i]!
    let j = i - 1
    while (j >= 0 && compareKvc(c[j]!, x) > 0) {
      c[j + 1] = c[j]!
      j--
    }
    c[j + 1] = x
  }
}

function firstDifference(a: CandidateAnalysis, b: CandidateAnalysis): RankKey {
  if (a.fast !== b.fast) return 'fast'
  if (a.capOk !== b.capOk) return 'capOk'
  if (a.score !== b.score) return 'score'
  if (a.load !== b.load) return 'load'
  return 'tieBreak'
}

/**
 * Freezes ordered candidates into a {@link RouteDecision}, numbering ranks. With `explainKeys`,
 * each candidate's `decidedBy` is the first Algorithm-1 key on which it beats the next one;
 * otherwise `policy` (a baseline's own rule).
 *
 * @example
 * ```ts
 * import { Router, analyzeTurn, finishDecision } from '@kvc/kvc-router'
 * const router = new Router({ now: () => 0 })
 * const a = analyzeTurn(router.context, { sessionId: 's', promptTokens: 1 })
 * finishDecision(router.context, { sessionId: 's', promptTokens: 1 }, a, 'mine', 'seed', false).policy // 'mine'
 * ```
 */
export function finishDecision(
  ctx: RouteContext,
  turn: TurnRequest,
  a: TurnAnalysis,
  policy: string,
  pathMode: PathMode,
  explainKeys: boolean,
): RouteDecision {
  const c = a.candidates
  for (let i = 0; i < c.length; i++) {
    const x = c[i]!
    x.rank = i
    x.decidedBy = i === c.length - 1 ? 'last' : explainKeys ? firstDifference(x, c[i + 1]!) : 'policy'
  }
  // The analysis objects become the decision's candidates as they are (no per-call copy).
  const candidates: readonly RouteCandidate[] = c
  return {
    policy,
    pathMode,
    sessionId: turn.sessionId,
    at: ctx.cluster.now(),
    promptTokens: turn.promptTokens,
    queryBlocks: a.queryBlocks,
    boundWorker: a.boundWorker,
    meanLoad: a.meanLoad,
    candidates,
    ineligible: a.ineligible,
    exclusionsReleased: a.exclusionsReleased,
  }
}

/**
 * Algorithm 1 (Route), lexicographic, higher first:
 * 1. `fast(s,d)` = committed prefix resident ∧ append ≤ τ_append ∧ capOk;
 * 2. `capOk(d)` = available ≥ append (or uncached prompt) + decode reserve; on the session's own
 *    D, for a fast-path turn, the idle sessions' releasable tokens count as available (its
 *    admission releases them before refusing);
 * 3. `score = overlap + bonus`, overlap exclusive of boilerplate blocks (or plain), bonus
 *    `K · max(0, mean − load) / mean` for sessions with no binding yet;
 * 4. `−load` (in-flight turns, counted from a turn's first claim or admission request for the D,
 *    + pending seeds; so turns routed before any of them is sent see each other);
 * 5. a stable tie-break: the worker's position rotated by a hash of the session id.
 *
 * @example
 * ```ts
 * import { Router, kvcPolicy } from '@kvc/kvc-router'
 * const router = new Router({ policy: kvcPolicy(), now: () => 0,
 *   workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }, { id: 'd1', role: 'decode', capacityTokens: 1e6 }] })
 * router.route({ sessionId: 's', promptTokens: 20_000 }).candidates.map((c) => c.decidedBy) // ['tieBreak', 'last']
 * ```
 */
export function kvcPolicy(): RoutingPolicy {
  return {
    name: 'kvc',
    pathMode: 'kvc',
    usesAdmission: true,
    rank(ctx: RouteContext, turn: TurnRequest): RouteDecision {
      const a = analyzeTurn(ctx, turn)
      const { loadFloorK } = ctx.params
      if (a.boundWorker === undefined && a.meanLoad > 0 && loadFloorK > 0) {
        for (const c of a.candidates) {
          c.bonus = (loadFloorK * Math.max(0, a.meanLoad - c.load)) / a.meanLoad
          c.score = c.overlapBlocks + c.bonus
        }
      }
      sortKvc(a.candidates)
      return finishDecision(ctx, turn, a, 'kvc', 'kvc', true)
    },
  }
}
