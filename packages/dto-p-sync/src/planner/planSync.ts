import { invalidOption } from '../errors/dtoPSyncError.js'
import { blockBytes, MESSAGE_HEADER_BYTES } from '../protocol/bytes.js'
import type { HoldingsView, SyncBlock, TransferBlock } from '../protocol/types.js'
import {
  checkExtraKey,
  checkNonNegative,
  checkPageSize,
  checkPositive,
  checkSessionId,
  describe,
} from '../protocol/validate.js'
import {
  checkHints,
  checkWeights,
  DEFAULT_PRIORITY_WEIGHTS,
  type PriorityHints,
  type PriorityWeights,
  priorityScore,
} from './priority.js'

/**
 * A link's bandwidth budget for sync and the model's KV size.
 *
 * @example
 * ```ts
 * import type { Bandwidth } from '@kvc/dto-p-sync'
 * // 10% of a 400 Gb/s link, Qwen3-30B-A3B (48 layers x 4 KV heads x 128 dims x 2 x bf16)
 * const bw: Bandwidth = { bytesPerSecond: 5e9, kvBytesPerToken: 98_304 }
 * ```
 */
export interface Bandwidth {
  /** Bytes per second the sync may use. */
  readonly bytesPerSecond: number
  /** KV bytes per token (all layers, K and V). */
  readonly kvBytesPerToken: number
}

/**
 * One session as the planner sees it: D's chain of committed full pages and how much of it P is
 * known to hold.
 *
 * @example
 * ```ts
 * import type { PlanSession } from '@kvc/dto-p-sync'
 * const s: PlanSession = { sessionId: 's1', version: 3, committedTokens: 9, blocks: [], confirmedPages: 0 }
 * ```
 */
export interface PlanSession {
  readonly sessionId: string
  readonly extraKey?: string
  /** D's commit version (carried by the transfers). */
  readonly version: number
  /** Tokens of the session's history on D (what its next prompt starts with). */
  readonly committedTokens: number
  /** The session's committed full pages, from the root (every pending offer merged). */
  readonly blocks: readonly SyncBlock[]
  /** Leading pages of `blocks` P is known for sure to hold (pinned or confirmed by events). */
  readonly confirmedPages: number
  readonly hints?: PriorityHints
}

/**
 * Input of {@link planSync}.
 *
 * @example
 * ```ts
 * import type { PlanInput } from '@kvc/dto-p-sync'
 * const input: PlanInput = {
 *   sessions: [], pageSize: 64, beta: 1024, horizonMs: 100,
 *   bandwidth: { bytesPerSecond: 5e9, kvBytesPerToken: 98_304 },
 * }
 * ```
 */
export interface PlanInput {
  readonly sessions: readonly PlanSession[]
  readonly pageSize: number
  /** Staleness budget β in tokens: P may lag D's committed history by at most this much. */
  readonly beta: number
  readonly bandwidth: Bandwidth
  /** Planning period: the plan spends at most `bytesPerSecond · horizonMs / 1000 − backlogBytes`. */
  readonly horizonMs: number
  /** Bytes already queued on the link (still to be serialised). */
  readonly backlogBytes?: number
  /** Blocks P holds (its KV events or a query): sent without KV, as a check-and-pin. */
  readonly prefillHolds?: HoldingsView
  /** Blocks already in flight: not sent again, counted as arriving. */
  readonly inFlight?: HoldingsView
  /** Blocks whose KV D still has (default: all). An evicted block can only be synced if P has it. */
  readonly available?: HoldingsView
  readonly weights?: PriorityWeights
  /** Replace {@link priorityScore} (higher first). */
  readonly score?: (session: PlanSession) => number
  /** Largest transfer in blocks (default 64): a broken transfer loses less. */
  readonly maxBlocksPerTransfer?: number
  /** After every session is within β, spend what is left on the remaining pages (default `false`). */
  readonly eager?: boolean
  /**
   * Room on P for this D's sessions, in tokens (default: unlimited). In rank order, sessions are
   * planned while the pages that keep them within β (the pages of the whole chains, with `eager`)
   * add up to at most this much; the others get nothing and are reported with reason `capacity`.
   * Syncing more than P can keep only makes P evict synced pages to ingest others, which the next
   * round sends again.
   */
  readonly maxHeldTokens?: number
}

/**
 * Why a session is reported over budget: not enough bandwidth this round, a needed block no
 * longer on D (evicted before it was synced) and not on P, β smaller than the part of the
 * history that is never synced (the partial last page and the newest sampled token), or no room
 * left on P for it (`maxHeldTokens`, higher-ranked sessions first).
 *
 * @example
 * ```ts
 * import type { OverBudgetReason } from '@kvc/dto-p-sync'
 * const r: OverBudgetReason = 'bandwidth'
 * ```
 */
export type OverBudgetReason = 'bandwidth' | 'unavailable' | 'unreachable' | 'capacity'

/**
 * The planner's verdict on one session.
 *
 * @example
 * ```ts
 * import type { SessionPlan } from '@kvc/dto-p-sync'
 * const late = (p: SessionPlan) => !p.withinBudget && p.reason === 'bandwidth'
 * ```
 */
export interface SessionPlan {
  readonly sessionId: string
  readonly score: number
  readonly committedTokens: number
  /** Pages of the chain (full committed pages). */
  readonly syncablePages: number
  readonly confirmedPages: number
  /** `committedTokens − pageSize · confirmedPages`: what a reseed would re-prefill now, beyond the append. */
  readonly confirmedStaleness: number
  /** Leading pages P will hold once in-flight and planned transfers land. */
  readonly projectedPages: number
  readonly projectedStaleness: number
  /** Bytes needed to bring the session within β (`null` when impossible: unavailable or unreachable). */
  readonly neededBytes: number | null
  /** Bytes planned for the session this round. */
  readonly plannedBytes: number
  /** `projectedStaleness ≤ β`. */
  readonly withinBudget: boolean
  readonly reason: OverBudgetReason | null
}

/**
 * One planned transfer: a contiguous segment of a session's chain (one message on the wire).
 * `phase` says why it was planned: to keep the session within β (`budget`), to make progress on a
 * session that cannot get within β this round (`progress`), or with spare bandwidth (`eager`).
 *
 * @example
 * ```ts
 * import type { PlannedTransfer } from '@kvc/dto-p-sync'
 * const kvTokens = (t: PlannedTransfer, pageSize: number) => t.kvBlocks * pageSize
 * ```
 */
export interface PlannedTransfer {
  readonly sessionId: string
  readonly extraKey: string
  readonly version: number
  readonly startPage: number
  readonly blocks: readonly TransferBlock[]
  /** Blocks sent with their KV (the others are identity-only: P already holds them). */
  readonly kvBlocks: number
  /** Bytes on the wire ({@link messageBytes}). */
  readonly bytes: number
  readonly phase: 'budget' | 'progress' | 'eager'
}

/**
 * Result of {@link planSync}.
 *
 * @example
 * ```ts
 * import type { SyncPlan } from '@kvc/dto-p-sync'
 * const summary = (p: SyncPlan) => `${p.transfers.length} transfers, ${p.overBudget.length} over β`
 * ```
 */
export interface SyncPlan {
  readonly budgetBytes: number
  readonly plannedBytes: number
  /** Transfers in the order to send them. */
  readonly transfers: readonly PlannedTransfer[]
  /** Every session, highest priority first. */
  readonly sessions: readonly SessionPlan[]
  /** Ids of the sessions that will not be within β (see `reason`). */
  readonly overBudget: readonly string[]
}

enum Act {
  InFlight = 0,
  Hash = 1,
  Kv = 2,
  Unavailable = 3,
  Planned = 4,
}

interface Work {
  readonly s: PlanSession
  readonly score: number
  readonly extraKey: string
  readonly n: number
  readonly c: number
  readonly needPages: number
  /** First page from `c` on that can be neither skipped nor sent. */
  readonly availLimit: number
  /**
   * Action of page `c + i` (up to and including the first unavailable page); `null` when no
   * holdings view was given, so that every page goes with its KV (the pages planned are then
   * exactly `[c, frontier)`, since each round plans forward from the frontier).
   */
  readonly acts: number[] | null
  frontier: number
  plannedBytes: number
  neededBytes: number | null
  /** Left out: no room on P (`maxHeldTokens`). */
  capped: boolean
}

/**
 * Plan one round of D→P sync: which pages of which sessions to push, in what order, within the
 * bandwidth budget, so that every session stays within the staleness budget β when bandwidth
 * allows, and which sessions it cannot keep within β (and why).
 *
 * 1. Sessions are ranked by {@link priorityScore} (or `score`), ties by id.
 * 2. **budget**: in rank order, a session whose missing pages up to
 *    `ceil((committedTokens − β)/pageSize)` fit in what is left of the budget gets them all; a
 *    session that does not fit is skipped (so that as many sessions as possible get within β).
 *    Hence: when the needs of all sessions fit in the budget, every reachable session with its
 *    blocks available is planned within β.
 * 3. **progress**: what is left goes, in rank order, to the skipped sessions, as far as it reaches
 *    (a session too large for one round still converges over several).
 * 4. **eager** (optional): then to the rest of every chain.
 *
 * Pages P holds according to `prefillHolds` go without KV (a check-and-pin of a few bytes: dedup
 * against P's holdings); pages in flight are not sent again. The planner is pure: it changes
 * nothing and uses no clock.
 *
 * @example
 * ```ts
 * import { OfferBuilder, planSync } from '@kvc/dto-p-sync'
 * const offers = new OfferBuilder({ pageSize: 4 })
 * offers.commitTurn('s1', Array.from({ length: 41 }, (_, i) => i)) // 10 full pages
 * const s = offers.session('s1')!
 * const plan = planSync({
 *   sessions: [{ ...s, confirmedPages: 0 }], pageSize: 4, beta: 8, horizonMs: 1000,
 *   bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 1000 },
 * })
 * // β = 8 needs ceil((41 − 8) / 4) = 9 pages on P: staleness 41 − 36 = 5 ≤ 8
 * console.log(plan.transfers[0]?.blocks.length, plan.sessions[0]?.withinBudget) // 9 true
 * ```
 */
export function planSync(input: PlanInput): SyncPlan {
  if (input === null || typeof input !== 'object')
    throw invalidOption('planSync input must be an object', input)
  checkPageSize(input.pageSize)
  checkNonNegative('beta', input.beta)
  if (input.bandwidth === null || typeof input.bandwidth !== 'object') {
    throw invalidOption('bandwidth must be { bytesPerSecond, kvBytesPerToken }', input.bandwidth)
  }
  checkPositive('bandwidth.bytesPerSecond', input.bandwidth.bytesPerSecond)
  checkNonNegative('bandwidth.kvBytesPerToken', input.bandwidth.kvBytesPerToken)
  checkNonNegative('horizonMs', input.horizonMs)
  checkNonNegative('backlogBytes', input.backlogBytes ?? 0)
  const maxBlocks = checkNonNegative('maxBlocksPerTransfer', input.maxBlocksPerTransfer ?? 64, true)
  if (maxBlocks === 0) throw invalidOption('maxBlocksPerTransfer must be at least 1', maxBlocks)
  const weights = input.weights === undefined ? DEFAULT_PRIORITY_WEIGHTS : checkWeights(input.weights)
  if (input.score !== undefined && typeof input.score !== 'function')
    throw invalidOption('score must be a function', input.score)
  if (!Array.isArray(input.sessions)) throw invalidOption('sessions must be an array', input.sessions)
  if (input.eager !== undefined && typeof input.eager !== 'boolean')
    throw invalidOption('eager must be a boolean', input.eager)
  if (input.maxHeldTokens !== undefined) checkNonNegative('maxHeldTokens', input.maxHeldTokens)
  const seen = new Set<string>()
  for (const s of input.sessions) checkSession(s, input.pageSize, seen)
  return planUnchecked(input, weights)
}

/**
 * {@link planSync} without input validation (the {@link SyncSource} builds valid input itself).
 * @internal
 */
export function planUnchecked(
  input: PlanInput,
  weights: PriorityWeights = input.weights ?? DEFAULT_PRIORITY_WEIGHTS,
): SyncPlan {
  const ps = input.pageSize
  const beta = input.beta
  const kvb = input.bandwidth.kvBytesPerToken
  const bps = input.bandwidth.bytesPerSecond
  const horizon = input.horizonMs
  const backlog = input.backlogBytes ?? 0
  const maxBlocks = input.maxBlocksPerTransfer ?? 64
  const eager = input.eager ?? false

  const prefillHolds = input.prefillHolds
  const inFlight = input.inFlight
  const available = input.available
  const kvBlock = blockBytes(ps, true, kvb)
  const hashBlock = blockBytes(ps, false, kvb)
  const budget = Number.isFinite(bps * horizon)
    ? Math.max(0, Math.floor((bps * horizon) / 1000) - backlog)
    : Infinity

  // Without a holdings view every page goes with its KV: no page-by-page walk (a session far
  // behind would cost a walk over its whole tail every round).
  const allKv = prefillHolds === undefined && inFlight === undefined && available === undefined

  const works: Work[] = input.sessions.map((s) => {
    const n = s.blocks.length
    const c = Math.min(s.confirmedPages, n)
    const over = s.committedTokens - beta
    const needPages = over <= 0 ? 0 : Math.ceil(over / ps)
    const acts: number[] | null = allKv ? null : []
    let availLimit = n
    for (let k = c; acts !== null && k < n; k++) {
      const h = s.blocks[k]!.hash
      let a: Act
      if (inFlight?.has(h)) a = Act.InFlight
      else if (prefillHolds?.has(h)) a = Act.Hash
      else if (available === undefined || available.has(h)) a = Act.Kv
      else a = Act.Unavailable
      acts.push(a)
      if (a === Act.Unavailable) {
        availLimit = k
        break
      }
    }
    const score =
      input.score === undefined ? priorityScore(s.hints, s.committedTokens, weights) : input.score(s)
    if (typeof score !== 'number' || Number.isNaN(score)) {
      throw invalidOption(`score returned ${describe(score)} for session ${s.sessionId}`, score)
    }
    const w: Work = {
      s,
      score,
      extraKey: s.extraKey ?? '',
      n,
      c,
      needPages,
      availLimit,
      acts,
      frontier: c,
      plannedBytes: 0,
      neededBytes: null,
      capped: false,
    }
    if (needPages <= n && availLimit >= Math.max(needPages, c)) w.neededBytes = costTo(w, needPages)
    return w
  })
  works.sort(
    (a, b) =>
      b.score - a.score || (a.s.sessionId < b.s.sessionId ? -1 : a.s.sessionId > b.s.sessionId ? 1 : 0),
  )

  // P's room: in rank order, the sessions whose pages fit; the rest are left out this round.
  const maxHeld = input.maxHeldTokens ?? Infinity
  if (Number.isFinite(maxHeld)) {
    let held = 0
    for (const w of works) {
      const pages = eager ? w.n : Math.min(w.n, w.needPages)
      if (held + pages * ps <= maxHeld) held += pages * ps
      else w.capped = true
    }
  }

  const transfers: PlannedTransfer[] = []
  let remaining = budget

  function costTo(w: Work, to: number): number {
    if (w.acts === null) {
      const pages = Math.max(0, to - w.frontier)
      return Math.ceil(pages / maxBlocks) * MESSAGE_HEADER_BYTES + pages * kvBlock
    }
    const acts = w.acts
    let bytes = 0
    let run = 0
    for (let k = w.frontier; k < to; k++) {
      const a = acts[k - w.c]!
      if (a === Act.InFlight) {
        run = 0
        continue
      }
      if (run === 0 || run === maxBlocks) {
        bytes += MESSAGE_HEADER_BYTES
        run = 0
      }
      bytes += a === Act.Kv ? kvBlock : hashBlock
      run++
    }
    return bytes
  }

  /** Plan pages [frontier, to) of `w`, stopping when the budget runs out; returns bytes spent. */
  function emit(w: Work, to: number, phase: PlannedTransfer['phase']): void {
    let cur: TransferBlock[] = []
    let curStart = 0
    let curBytes = 0
    let curKv = 0
    const flush = (): void => {
      if (cur.length === 0) return
      transfers.push({
        sessionId: w.s.sessionId,
        extraKey: w.extraKey,
        version: w.s.version,
        startPage: curStart,
        blocks: cur,
        kvBlocks: curKv,
        bytes: curBytes,
        phase,
      })
      w.plannedBytes += curBytes
      cur = []
      curBytes = 0
      curKv = 0
    }
    const acts = w.acts
    let k = w.frontier
    for (; k < to; k++) {
      const a = acts === null ? Act.Kv : acts[k - w.c]!
      if (a === Act.InFlight) {
        flush()
        continue
      }
      const withKv = a === Act.Kv
      const add =
        (cur.length === 0 || cur.length === maxBlocks ? MESSAGE_HEADER_BYTES : 0) +
        (withKv ? kvBlock : hashBlock)
      if (add > remaining) break
      if (cur.length === maxBlocks) flush()
      if (cur.length === 0) curStart = k
      const b = w.s.blocks[k]!
      cur.push({ hash: b.hash, parentHash: b.parentHash, tokens: b.tokens, withKv })
      curBytes += add
      if (withKv) curKv++
      remaining -= add
      if (acts !== null) acts[k - w.c] = Act.Planned
    }
    flush()
    w.frontier = k
  }

  // Phase 1: whole needs, in rank order, skipping sessions that do not fit.
  const deferred: Work[] = []
  for (const w of works) {
    if (w.needPages <= w.c || w.capped) continue
    if (w.neededBytes !== null && w.neededBytes <= remaining) emit(w, w.needPages, 'budget')
    else deferred.push(w)
  }
  // Phase 2: progress on the rest, as far as the budget reaches.
  for (const w of deferred) {
    if (remaining <= 0) break
    emit(w, Math.min(w.n, w.availLimit, Math.max(w.needPages, w.c)), 'progress')
  }
  // Phase 3: eager, the rest of every chain.
  if (eager) {
    for (const w of works) {
      if (remaining <= 0) break
      if (w.frontier < w.availLimit && !w.capped) emit(w, w.availLimit, 'eager')
    }
  }

  const sessions: SessionPlan[] = []
  const overBudget: string[] = []
  let plannedBytes = 0
  for (const w of works) {
    let p = w.acts === null ? w.frontier : w.c
    while (w.acts !== null && p < w.n) {
      const a = w.acts[p - w.c]
      if (a !== Act.Planned && a !== Act.InFlight) break
      p++
    }
    const projectedStaleness = w.s.committedTokens - ps * p
    const withinBudget = projectedStaleness <= beta
    let reason: OverBudgetReason | null = null
    if (!withinBudget) {
      reason =
        w.needPages > w.n
          ? 'unreachable'
          : w.availLimit < w.needPages
            ? 'unavailable'
            : w.capped
              ? 'capacity'
              : 'bandwidth'
      overBudget.push(w.s.sessionId)
    }
    plannedBytes += w.plannedBytes
    sessions.push({
      sessionId: w.s.sessionId,
      score: w.score,
      committedTokens: w.s.committedTokens,
      syncablePages: w.n,
      confirmedPages: w.c,
      confirmedStaleness: w.s.committedTokens - ps * w.c,
      projectedPages: p,
      projectedStaleness,
      neededBytes: w.neededBytes,
      plannedBytes: w.plannedBytes,
      withinBudget,
      reason,
    })
  }
  return { budgetBytes: budget, plannedBytes, transfers, sessions, overBudget }
}

function checkSession(s: PlanSession, ps: number, seen: Set<string>): void {
  if (s === null || typeof s !== 'object') throw invalidOption('each session must be an object', s)
  checkSessionId(s.sessionId)
  if (seen.has(s.sessionId)) throw invalidOption(`session ${s.sessionId} appears twice`, s.sessionId)
  seen.add(s.sessionId)
  checkExtraKey(s.extraKey)
  checkNonNegative('version', s.version, true)
  checkNonNegative('committedTokens', s.committedTokens, true)
  checkNonNegative('confirmedPages', s.confirmedPages, true)
  checkHints(s.hints)
  if (!Array.isArray(s.blocks)) throw invalidOption('blocks must be an array', s.blocks)
  if (s.blocks.length * ps > s.committedTokens) {
    throw invalidOption(
      `session ${s.sessionId}: ${s.blocks.length} pages exceed committedTokens ${s.committedTokens}`,
      s.committedTokens,
    )
  }
  let parent: bigint | null = null
  for (let i = 0; i < s.blocks.length; i++) {
    const b = s.blocks[i]!
    if (
      typeof b.hash !== 'bigint' ||
      b.parentHash !== parent ||
      !(b.tokens instanceof Uint32Array) ||
      b.tokens.length !== ps
    ) {
      throw invalidOption(`session ${s.sessionId}: block ${i} is not a page chained onto block ${i - 1}`, b)
    }
    parent = b.hash
  }
}
