import { RouterError, describeValue } from '../errors/routerError.js'
import { type CostModel, loadBackSeconds } from '../cost/costModel.js'
import { planPrefix } from '../tier/prefixCost.js'
import { type AdmitRequest, type AdmitResponse, type SloClass, parseAdmitRequest } from './contract.js'

/**
 * A session as the D worker's session cache reports it (`getSessionStatus` of
 * `@kvc/session-cache`: `residentTokens = tokensUnder(lastNode)`, `lastAccessTime`), plus
 * whether it is idle (no running request) and how many tokens releasing its lock would make
 * evictable. Structural, so this package does not import the session cache;
 * `admitWorkerState` builds these from one.
 *
 * @example
 * ```ts
 * import type { AdmitSession } from '@kvc/kvc-router'
 * const s: AdmitSession = { sessionId: 'a', residentTokens: 30_000, lastAccessTime: 1_000, idle: true }
 * ```
 */
export interface AdmitSession {
  readonly sessionId: string
  readonly residentTokens: number
  readonly lastAccessTime: number
  /** No request of the session is running: its lock may be released under pressure. */
  readonly idle: boolean
  /** Tokens that become evictable if its lock is released (default `residentTokens`; less when shared with other sessions). */
  readonly releasableTokens?: number
  /**
   * Tokens the session retains only on the D's host tier, after its `residentTokens` (a demoted
   * session; `getSessionStatus(...).hostResidentTokens`): a turn loads them back over PCIe
   * instead of recomputing them. Default 0.
   */
  readonly hostResidentTokens?: number
}

/**
 * A reservation taken by an admitted request: `tokens` are set aside until the request starts
 * (the D then allocates them for real and drops the lease) or until `expiresAt`.
 *
 * @example
 * ```ts
 * import type { Lease } from '@kvc/kvc-router'
 * const l: Lease = { leaseId: 's1/t3/a1', sessionId: 's1', tokens: 1_536, expiresAt: 6_000, sloClass: 'interactive' }
 * ```
 */
export interface Lease {
  readonly leaseId: string
  readonly sessionId: string
  readonly tokens: number
  /** Clock time (ms, the D's clock) when the reservation lapses. */
  readonly expiresAt: number
  readonly sloClass: SloClass
}

/**
 * A D worker's own state, the only input of {@link admit} besides the request.
 *
 * `usedTokens` counts every occupied KV slot (cached and running); `evictableTokens` is the part
 * of it that is unlocked (the radix cache's `evictableSize`). Locked tokens of idle sessions are
 * not evictable until their lock is released.
 *
 * @example
 * ```ts
 * import type { AdmitWorkerState } from '@kvc/kvc-router'
 * const state: AdmitWorkerState = {
 *   capacityTokens: 100_000, usedTokens: 80_000, evictableTokens: 10_000,
 *   sessions: new Map(), leases: [], transferQueueDepth: 0, retractedQueueDepth: 0,
 * }
 * ```
 */
export interface AdmitWorkerState {
  readonly capacityTokens: number
  readonly usedTokens: number
  readonly evictableTokens: number
  readonly sessions: ReadonlyMap<string, AdmitSession>
  readonly leases: readonly Lease[]
  readonly transferQueueDepth: number
  readonly retractedQueueDepth: number
  readonly draining?: boolean
  /** Tokens the D is copying from its host tier onto the device right now (queued load-backs). Default 0. */
  readonly loadBackQueueTokens?: number
}

/**
 * Parameters of the backpressure pause hint (`docs/design/algorithms.md#backpressure-pause-hint`).
 *
 * @example
 * ```ts
 * import { DEFAULT_PAUSE_HINT, type PauseHintParams } from '@kvc/kvc-router'
 * const p: PauseHintParams = { ...DEFAULT_PAUSE_HINT, maxPauseMs: 1_000 }
 * ```
 */
export interface PauseHintParams {
  /** Pause while requests are retracted (1,500 ms). */
  readonly retractedPauseMs: number
  /** Usage at or above which the overshoot rule applies (0.90). */
  readonly usageThreshold: number
  /** Milliseconds per basis point of overshoot (5). */
  readonly msPerBasisPoint: number
  /** Clamp of the overshoot rule (200 .. 2,000 ms). */
  readonly minPauseMs: number
  readonly maxPauseMs: number
  /** Transfer-queue depth at or above which the queue rule applies (8). */
  readonly transferQueueThreshold: number
  /** Milliseconds per queued transfer, capped at `maxPauseMs` (100). */
  readonly msPerQueuedTransfer: number
  /**
   * Queued load-back time (ms) at or above which the load-back rule applies (500; absent: the
   * rule is off). Only {@link admit} with a `costModel` computes that time.
   */
  readonly loadBackPauseMs?: number
}

/**
 * The research prototype's pause-hint constants (`docs/design/prototype.md#backpressure-pause-hint`).
 *
 * @example
 * ```ts
 * import { DEFAULT_PAUSE_HINT } from '@kvc/kvc-router'
 * DEFAULT_PAUSE_HINT.retractedPauseMs // 1500
 * ```
 */
export const DEFAULT_PAUSE_HINT: PauseHintParams = Object.freeze({
  retractedPauseMs: 1500,
  usageThreshold: 0.9,
  msPerBasisPoint: 5,
  minPauseMs: 200,
  maxPauseMs: 2000,
  transferQueueThreshold: 8,
  msPerQueuedTransfer: 100,
  loadBackPauseMs: 500,
})

/**
 * The backpressure pause hint (`docs/design/algorithms.md#backpressure-pause-hint`), first rule that
 * applies:
 * 1. retracted queue > 0 → 1,500 ms;
 * 2. `tokenUsageAfter ≥ 0.90` → `clamp(5 ms × overshoot, 200, 2000)`, overshoot in basis points
 *    above 0.90 (rounded to a whole basis point);
 * 3. transfer queue ≥ 8 → `min(2000, 100 × depth)`;
 * 4. the D's queued load-backs (host tier → device, this request's included) take `loadBackMs ≥
 *    500` → `min(2000, ⌈loadBackMs⌉)`: turns sent sooner would wait behind those copies;
 * 5. otherwise 0.
 *
 * @example
 * ```ts
 * import { recommendedPauseMs } from '@kvc/kvc-router'
 * recommendedPauseMs({ retractedQueueDepth: 0, tokenUsageAfter: 0.92, transferQueueDepth: 0 }) // 1000
 * recommendedPauseMs({ retractedQueueDepth: 0, tokenUsageAfter: 0.5, transferQueueDepth: 9 }) // 900
 * recommendedPauseMs({ retractedQueueDepth: 0, tokenUsageAfter: 0.5, transferQueueDepth: 0, loadBackMs: 700.2 }) // 701
 * ```
 */
export function recommendedPauseMs(
  signal: {
    readonly retractedQueueDepth: number
    readonly tokenUsageAfter: number
    readonly transferQueueDepth: number
    /** Milliseconds of load-backs queued on the D (default 0). */
    readonly loadBackMs?: number
  },
  params: PauseHintParams = DEFAULT_PAUSE_HINT,
): number {
  if (signal.retractedQueueDepth > 0) return params.retractedPauseMs
  if (signal.tokenUsageAfter >= params.usageThreshold) {
    const bps = Math.round((signal.tokenUsageAfter - params.usageThreshold) * 10_000)
    return Math.min(params.maxPauseMs, Math.max(params.minPauseMs, bps * params.msPerBasisPoint))
  }
  if (signal.transferQueueDepth >= params.transferQueueThreshold) {
    return Math.min(params.maxPauseMs, params.msPerQueuedTransfer * signal.transferQueueDepth)
  }
  const lb = signal.loadBackMs ?? 0
  if (params.loadBackPauseMs !== undefined && lb >= params.loadBackPauseMs) {
    return Math.min(params.maxPauseMs, Math.ceil(lb))
  }
  return 0
}

/**
 * Options of {@link admit} (the D worker's configuration).
 *
 * @example
 * ```ts
 * import { DEFAULT_ADMIT_OPTIONS, type AdmitOptions } from '@kvc/kvc-router'
 * const o: AdmitOptions = { ...DEFAULT_ADMIT_OPTIONS, maxAppendTokens: 4_096 }
 * ```
 */
export interface AdmitOptions {
  /** `τ_append` on the D: the largest append it prefills itself on the fast path. */
  readonly maxAppendTokens: number
  /** Decode reserve when the request gives no `expectedOutputTokens`. */
  readonly defaultDecodeReserve: number
  readonly defaultLeaseMs: number
  /** Longest lease a request may ask for. */
  readonly maxLeaseMs: number
  /**
   * Per-SLO-class admission budget: the highest `tokenUsageAfter` a class may reach. Lower classes
   * stop earlier, so under pressure they yield first.
   */
  readonly usageCeiling: Readonly<Record<SloClass, number>>
  readonly pause: PauseHintParams
  /**
   * With a host tier: the cost model that decides whether a session's host-resident tokens are
   * loaded back (when {@link planPrefix} says that is cheaper than recomputing them) and that
   * times the queued load-backs of the pause hint. Absent: host-resident tokens are always loaded
   * back (SGLang HiCache loads back any host hit above its threshold) and the load-back pause
   * rule is off.
   */
  readonly costModel?: CostModel
}

/**
 * Defaults of {@link AdmitOptions} (README parameter table).
 *
 * @example
 * ```ts
 * import { DEFAULT_ADMIT_OPTIONS } from '@kvc/kvc-router'
 * DEFAULT_ADMIT_OPTIONS.usageCeiling.background // 0.9
 * ```
 */
export const DEFAULT_ADMIT_OPTIONS: AdmitOptions = Object.freeze({
  maxAppendTokens: 8192,
  defaultDecodeReserve: 512,
  defaultLeaseMs: 5000,
  maxLeaseMs: 60_000,
  usageCeiling: Object.freeze({ interactive: 1, batch: 0.95, background: 0.9 }),
  pause: DEFAULT_PAUSE_HINT,
})

/**
 * What {@link admit} decided: the wire answer plus the effects the D must apply (take the lease,
 * release the listed idle sessions' locks, drop the expired leases). Nothing is applied by
 * `admit` itself.
 *
 * @example
 * ```ts
 * import type { AdmitDecision } from '@kvc/kvc-router'
 * function apply(d: AdmitDecision) { return d.lease?.tokens ?? 0 }
 * ```
 */
export interface AdmitDecision {
  readonly response: AdmitResponse
  readonly lease: Lease | undefined
  readonly releaseSessions: readonly string[]
  readonly expiredLeases: readonly string[]
  /** Host-resident tokens of the session the admitted turn will load back (0 without a host tier). */
  readonly loadBackTokens: number
}

const cnt = (x: unknown): boolean => typeof x === 'number' && Number.isInteger(x) && x >= 0

function checkState(state: AdmitWorkerState): void {
  const bad = (what: string, v: unknown): never => {
    throw new RouterError('INVALID_STATE', `D worker state: ${what}`, v)
  }
  if (typeof state !== 'object' || state === null) bad('must be an object', state)
  if (!cnt(state.capacityTokens) || state.capacityTokens < 1)
    bad('capacityTokens must be an integer >= 1', state.capacityTokens)
  if (!cnt(state.usedTokens) || state.usedTokens > state.capacityTokens)
    bad('usedTokens must be in [0, capacity]', state.usedTokens)
  if (!cnt(state.evictableTokens) || state.evictableTokens > state.usedTokens) {
    bad('evictableTokens must be in [0, usedTokens]', state.evictableTokens)
  }
  if (!cnt(state.transferQueueDepth))
    bad('transferQueueDepth must be a non-negative integer', state.transferQueueDepth)
  if (!cnt(state.retractedQueueDepth))
    bad('retractedQueueDepth must be a non-negative integer', state.retractedQueueDepth)
  if (!(state.sessions instanceof Map)) bad('sessions must be a Map', state.sessions)
  for (const s of state.sessions.values()) {
    if (!cnt(s.residentTokens)) bad(`session ${s.sessionId}: residentTokens`, s.residentTokens)
    if (s.releasableTokens !== undefined && !cnt(s.releasableTokens)) {
      bad(`session ${s.sessionId}: releasableTokens`, s.releasableTokens)
    }
    if (s.hostResidentTokens !== undefined && !cnt(s.hostResidentTokens)) {
      bad(`session ${s.sessionId}: hostResidentTokens`, s.hostResidentTokens)
    }
  }
  if (state.loadBackQueueTokens !== undefined && !cnt(state.loadBackQueueTokens))
    bad('loadBackQueueTokens must be a non-negative integer', state.loadBackQueueTokens)
  if (!Array.isArray(state.leases)) bad('leases must be an array', state.leases)
  for (const l of state.leases) if (!cnt(l.tokens)) bad(`lease ${l.leaseId}: tokens`, l.tokens)
}

/**
 * Algorithm 2 (Admit), a pure function the D worker (or its sidecar) runs on its own ground
 * truth:
 * - `resident` = the session's resident tokens (or `matchedTokens`, the prompt's prefix match on
 *   the D's tree, if larger); fast path: if `promptTokens − resident > maxAppendTokens` →
 *   `append_too_large`.
 * - With a host tier, the session's `hostResidentTokens` after that (or `hostMatchedTokens`, the
 *   prompt's host-tier match after `matchedTokens`, if larger: a session the D released) are
 *   loaded back (always, or with `options.costModel` when {@link planPrefix} finds it cheaper
 *   than recomputing them): they leave the append and join the need (they take device slots).
 * - `need = promptTokens − resident − loaded back + loaded back + decode reserve`.
 * - Live leases (expired ones are dropped) are reserved. If `free + evictable − reserved` does not
 *   cover the need (plus the SLO class's headroom), idle sessions' locks are released, least
 *   recently used first, until it does (a session holding a live lease is never idle: its
 *   admitted turn has not started yet); still short → `capacity` (or `slo_budget` when only the
 *   class's ceiling is missed), and nothing is released.
 * - Admitted → a lease of `need` tokens for `leaseMs`. A repeated request id with a live lease
 *   gets the same lease again (idempotent retries).
 * - Every answer carries the pause hint ({@link recommendedPauseMs}) from `tokenUsageAfter =
 *   (locked + reserved + need − idle releasable) / capacity`: idle sessions' tokens count as
 *   available (releasing one only drops a lock), so a D full of idle sessions is not paused.
 *
 * @throws RouterError `INVALID_MESSAGE` (bad request), `INVALID_STATE` (inconsistent state),
 * `INVALID_OPTION`.
 *
 * @example
 * ```ts
 * import { admit } from '@kvc/kvc-router'
 * const state = {
 *   capacityTokens: 100_000, usedTokens: 100_000, evictableTokens: 0, leases: [],
 *   transferQueueDepth: 0, retractedQueueDepth: 0,
 *   sessions: new Map([
 *     ['s1', { sessionId: 's1', residentTokens: 40_000, lastAccessTime: 900, idle: false }],
 *     ['old', { sessionId: 'old', residentTokens: 30_000, lastAccessTime: 100, idle: true }],
 *   ]),
 * }
 * const d = admit(state, { requestId: 'r1', sessionId: 's1', path: 'fast', promptTokens: 42_000, appendTokens: 2_000 }, { now: 1_000 })
 * d.response.admitted // true: releasing 'old' made room
 * d.releaseSessions // ['old']
 * d.lease?.tokens // 2512 (2,000 appended + 512 decode reserve)
 * ```
 */
export function admit(
  state: AdmitWorkerState,
  request: AdmitRequest,
  ctx: { readonly now: number; readonly matchedTokens?: number; readonly hostMatchedTokens?: number },
  options: AdmitOptions = DEFAULT_ADMIT_OPTIONS,
): AdmitDecision {
  const req = parseAdmitRequest(request)
  checkState(state)
  // Per admission RPC: the messages are built only for a bad value.
  if (typeof ctx?.now !== 'number' || !Number.isFinite(ctx.now)) {
    throw new RouterError(
      'INVALID_OPTION',
      `now must be a finite number, got ${describeValue(ctx?.now)}`,
      ctx?.now,
    )
  }
  if (ctx.matchedTokens !== undefined && !cnt(ctx.matchedTokens)) {
    throw new RouterError(
      'INVALID_OPTION',
      `matchedTokens must be a non-negative integer, got ${describeValue(ctx.matchedTokens)}`,
      ctx.matchedTokens,
    )
  }
  if (ctx.hostMatchedTokens !== undefined && !cnt(ctx.hostMatchedTokens)) {
    throw new RouterError(
      'INVALID_OPTION',
      `hostMatchedTokens must be a non-negative integer, got ${describeValue(ctx.hostMatchedTokens)}`,
      ctx.hostMatchedTokens,
    )
  }
  const now = ctx.now
  const cls: SloClass = req.sloClass ?? 'interactive'
  const cap = state.capacityTokens

  const expiredLeases: string[] = []
  let reserved = 0
  let existing: Lease | undefined
  // A session with a live lease has an admitted turn on its way: it is not idle, whatever the
  // caller's session cache says (it does not know about leases), so its lock is never released.
  const leased = new Set<string>()
  for (const l of state.leases) {
    if (l.expiresAt <= now) {
      expiredLeases.push(l.leaseId)
      continue
    }
    leased.add(l.sessionId)
    if (l.leaseId === req.requestId) existing = l
    else reserved += l.tokens
  }

  const session = state.sessions.get(req.sessionId)
  const resident = session?.residentTokens ?? 0
  const matched = Math.min(req.promptTokens, Math.max(resident, ctx.matchedTokens ?? 0))
  // A host tier: the session's host-resident tokens follow its device part; loaded back, they
  // are not recomputed (not in the append) but take device slots (in the need).
  // For a session without a slot here (released), the prompt's host match on the tree.
  const hostHit = Math.min(
    Math.max(session?.hostResidentTokens ?? 0, ctx.hostMatchedTokens ?? 0),
    req.promptTokens - matched,
  )
  const cm = options.costModel
  const loadBack =
    hostHit === 0
      ? 0
      : cm === undefined
        ? hostHit
        : planPrefix(cm, { promptTokens: req.promptTokens, deviceTokens: matched, hostTokens: hostHit })
            .loadBackTokens
  const append = req.promptTokens - matched - loadBack
  const reserve = req.expectedOutputTokens ?? options.defaultDecodeReserve
  const need = append + loadBack + reserve
  const loadBackMs =
    cm === undefined ? 0 : loadBackSeconds(cm, (state.loadBackQueueTokens ?? 0) + loadBack) * 1000
  const leaseMs = Math.min(req.leaseMs ?? options.defaultLeaseMs, options.maxLeaseMs)
  const locked = state.usedTokens - state.evictableTokens
  // Tokens every idle session other than the requester would free if released.
  let idleReleasable = 0
  const gainOf = new Map<string, number>()
  for (const s of state.sessions.values()) {
    if (!s.idle || s.sessionId === req.sessionId || leased.has(s.sessionId)) continue
    const gain = Math.max(0, s.releasableTokens ?? s.residentTokens)
    idleReleasable += gain
    gainOf.set(s.sessionId, gain)
  }
  const releasedGain = (ids: readonly string[]): number => {
    let g = 0
    for (const id of ids) g += gainOf.get(id) ?? 0
    return g
  }

  const answer = (
    admitted: boolean,
    reason: AdmitResponse['reason'],
    avail: number,
    released: readonly string[],
    lease: Lease | undefined,
  ): AdmitDecision => {
    // Idle sessions this answer did not release are reclaimable on demand (releasing one only
    // drops a lock): they count as available, so a D full of idle sessions is not paused.
    const tokenUsageAfter = Math.max(
      0,
      (cap - avail - (idleReleasable - releasedGain(released)) + need) / cap,
    )
    const pause = recommendedPauseMs(
      {
        retractedQueueDepth: state.retractedQueueDepth,
        tokenUsageAfter,
        transferQueueDepth: state.transferQueueDepth,
        loadBackMs,
      },
      options.pause,
    )
    // Optional fields by assignment, in the declared order (a spread per field cost microseconds).
    const response: { -readonly [K in keyof AdmitResponse]: AdmitResponse[K] } = {
      requestId: req.requestId,
      admitted,
      reason,
      residentTokens: resident,
      needTokens: need,
      tokenUsageAfter,
      transferQueueDepth: state.transferQueueDepth,
      retractedQueueDepth: state.retractedQueueDepth,
      recommendedPauseMs: pause,
    }
    // Whole milliseconds (the wire contract's integers), whatever the clock's resolution.
    if (lease !== undefined) response.leaseMs = Math.max(0, Math.round(lease.expiresAt - now))
    if (released.length > 0) response.releasedSessions = released
    response.releasableTokens = Math.max(0, Math.round(idleReleasable - releasedGain(released)))
    return {
      response,
      lease,
      releaseSessions: released,
      expiredLeases,
      loadBackTokens: admitted ? loadBack : 0,
    }
  }

  const avail0 = cap - locked - reserved
  if (existing !== undefined) return answer(true, 'ok', avail0, [], existing)
  if (state.draining === true) return answer(false, 'draining', avail0, [], undefined)
  if (req.path === 'fast' && append > options.maxAppendTokens) {
    return answer(false, 'append_too_large', avail0, [], undefined)
  }

  const ceiling = options.usageCeiling[cls]
  // Tokens that must be available so that (cap − avail + need)/cap ≤ ceiling.
  const target = Math.max(need, need + cap - ceiling * cap)
  let avail = avail0
  const released: string[] = []
  if (avail < target) {
    const idle: AdmitSession[] = []
    for (const s of state.sessions.values()) {
      if (s.idle && s.sessionId !== req.sessionId && !leased.has(s.sessionId)) idle.push(s)
    }
    idle.sort((a, b) => a.lastAccessTime - b.lastAccessTime || (a.sessionId < b.sessionId ? -1 : 1))
    for (const s of idle) {
      if (avail >= target) break
      const gain = s.releasableTokens ?? s.residentTokens
      if (gain <= 0) continue
      released.push(s.sessionId)
      avail += gain
    }
  }
  if (avail < need) return answer(false, 'capacity', avail, [], undefined)
  if (avail < target - 1e-9) return answer(false, 'slo_budget', avail, [], undefined)
  const lease: Lease = {
    leaseId: req.requestId,
    sessionId: req.sessionId,
    tokens: need,
    expiresAt: now + leaseMs,
    sloClass: cls,
  }
  return answer(true, 'ok', avail, released, lease)
}

/**
 * A D worker's reservations with expiry: the state {@link admit} reads through
 * `AdmitWorkerState.leases`. `take` records an admitted lease, `release` drops it when the
 * request starts (or is abandoned), `expire` drops lapsed ones.
 *
 * @example
 * ```ts
 * import { LeaseBook } from '@kvc/kvc-router'
 * const book = new LeaseBook()
 * book.take({ leaseId: 'r1', sessionId: 's', tokens: 500, expiresAt: 5_000, sloClass: 'interactive' })
 * book.reservedTokens(1_000) // 500
 * book.expire(6_000) // ['r1']
 * book.reservedTokens(6_000) // 0
 * ```
 */
export class LeaseBook {
  readonly #leases = new Map<string, Lease>()

  /** Records a lease (replacing one with the same id). */
  take(lease: Lease): void {
    if (!cnt(lease.tokens)) throw new RouterError('INVALID_LENGTH', 'lease tokens', lease.tokens)
    this.#leases.set(lease.leaseId, lease)
  }

  /** Drops a lease; true if it existed. */
  release(leaseId: string): boolean {
    return this.#leases.delete(leaseId)
  }

  /** Drops the leases whose `expiresAt <= now`; returns their ids. */
  expire(now: number): string[] {
    const out: string[] = []
    for (const [id, l] of this.#leases) {
      if (l.expiresAt <= now) {
        this.#leases.delete(id)
        out.push(id)
      }
    }
    return out
  }

  /** Live leases at `now`. */
  live(now: number): Lease[] {
    const out: Lease[] = []
    for (const l of this.#leases.values()) if (l.expiresAt > now) out.push(l)
    return out
  }

  /** Tokens reserved by live leases at `now`. */
  reservedTokens(now: number): number {
    let t = 0
    for (const l of this.#leases.values()) if (l.expiresAt > now) t += l.tokens
    return t
  }

  /** Number of leases held (live or not yet expired by `expire`). */
  get size(): number {
    return this.#leases.size
  }

  /** Applies an {@link AdmitDecision}'s lease effects (takes the new lease, drops expired ones). */
  apply(decision: AdmitDecision): void {
    for (const id of decision.expiredLeases) this.#leases.delete(id)
    if (decision.lease !== undefined) this.#leases.set(decision.lease.leaseId, decision.lease)
  }
}
