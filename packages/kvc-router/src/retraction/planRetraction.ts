/**
 * Hot-session retraction: a D whose KV is held by more hot sessions than it can keep below its
 * backpressure threshold gives up the coldest of them, so that the others stop waiting out its
 * pause hints (`docs/design/algorithms.md#hot-session-retraction`). Pure: no I/O, no clock.
 *
 * @module
 */
import { RouterError, describeValue } from '../errors/routerError.js'

/**
 * One session on the D, as its admission sees it.
 *
 * @example
 * ```ts
 * import type { RetractionSession } from '@kvc/kvc-router'
 * const s: RetractionSession = { sessionId: 's7', residentTokens: 31_000, idle: false, lastAccessTime: 163_200 }
 * ```
 */
export interface RetractionSession {
  readonly sessionId: string
  /** KV tokens retracting it would unlock (its resident tokens). */
  readonly residentTokens: number
  /** Idle sessions are the admission's to release: never retracted here. */
  readonly idle: boolean
  /** When the session last ran a turn here (any clock; only the order matters). */
  readonly lastAccessTime: number
  /**
   * The session came here by a retraction and has not run a later turn since (optional; absent:
   * false). With `placeableTokens` set such a session is never retracted again: moving it twice
   * in a row only moves the pressure.
   */
  readonly recentlyMoved?: boolean
}

/**
 * What the plan reads: the D's usage after the request being admitted (its admission answer's
 * `tokenUsageAfter`), its capacity, its sessions, and the session whose turn is being admitted
 * (never retracted: it is about to run).
 *
 * @example
 * ```ts
 * import type { RetractionSignals } from '@kvc/kvc-router'
 * const s: RetractionSignals = { capacityTokens: 200_000, tokenUsageAfter: 0.95, sessions: [], requester: 's1' }
 * ```
 */
export interface RetractionSignals {
  readonly capacityTokens: number
  readonly tokenUsageAfter: number
  readonly sessions: readonly RetractionSession[]
  readonly requester?: string
  /**
   * Optional, the router's view of the other D workers: for each, the tokens it can take before
   * it reaches its pause threshold (negative or 0: none). When set, a session is retracted only
   * if one of them can take its resident tokens (its next turn re-prefills there) and it was not
   * `recentlyMoved`; each retracted session is charged to the D with the most room left. Absent:
   * the D retracts without asking where its sessions go (the plan of `retract=on`).
   */
  readonly placeableTokens?: readonly number[]
}

/**
 * The plan's parameters.
 *
 * @example
 * ```ts
 * import { DEFAULT_RETRACTION_PARAMS, type RetractionParams } from '@kvc/kvc-router'
 * const p: RetractionParams = { ...DEFAULT_RETRACTION_PARAMS, retractTo: 0.75 }
 * ```
 */
export interface RetractionParams {
  /** Usage at or above which the D retracts (0.90: where the pause hint's overshoot rule starts). */
  readonly retractAbove: number
  /** Usage the retraction brings the D down to (0.80; below `retractAbove`: hysteresis). */
  readonly retractTo: number
  /** Hot sessions the D always keeps, the requester's included (1). */
  readonly keepHot: number
}

/**
 * Defaults: retract at 90% usage, down to 80%, keep at least one hot session.
 *
 * @example
 * ```ts
 * import { DEFAULT_RETRACTION_PARAMS } from '@kvc/kvc-router'
 * DEFAULT_RETRACTION_PARAMS.retractAbove // 0.9
 * ```
 */
export const DEFAULT_RETRACTION_PARAMS: RetractionParams = Object.freeze({
  retractAbove: 0.9,
  retractTo: 0.8,
  keepHot: 1,
})

/**
 * The plan: the sessions to retract (coldest first), the usage before and after, and why.
 *
 * @example
 * ```ts
 * import type { RetractionPlan } from '@kvc/kvc-router'
 * const p: RetractionPlan = { sessions: ['s3'], usageBefore: 0.95, usageAfter: 0.8, reason: '...' }
 * ```
 */
export interface RetractionPlan {
  readonly sessions: readonly string[]
  readonly usageBefore: number
  readonly usageAfter: number
  readonly reason: string
}

function bad(what: string, x: unknown, must: string): never {
  throw new RouterError('INVALID_OPTION', `${what} must be ${must}, got ${describeValue(x)}`, x)
}

function checkParams(p: RetractionParams): void {
  if (typeof p !== 'object' || p === null) bad('retraction params', p, 'an object')
  const { retractAbove, retractTo, keepHot } = p
  if (typeof retractAbove !== 'number' || !(retractAbove > 0 && retractAbove <= 1))
    bad('retractAbove', retractAbove, 'a number in (0, 1]')
  if (typeof retractTo !== 'number' || !(retractTo >= 0 && retractTo < retractAbove))
    bad('retractTo', retractTo, `a number in [0, retractAbove = ${retractAbove})`)
  if (!Number.isInteger(keepHot) || keepHot < 1) bad('keepHot', keepHot, 'an integer >= 1')
}

function checkSignals(s: RetractionSignals): void {
  if (typeof s !== 'object' || s === null) bad('retraction signals', s, 'an object')
  if (typeof s.capacityTokens !== 'number' || !Number.isFinite(s.capacityTokens) || s.capacityTokens <= 0)
    bad('capacityTokens', s.capacityTokens, 'a positive finite number')
  if (typeof s.tokenUsageAfter !== 'number' || !Number.isFinite(s.tokenUsageAfter) || s.tokenUsageAfter < 0)
    bad('tokenUsageAfter', s.tokenUsageAfter, 'a non-negative finite number')
  if (!Array.isArray(s.sessions)) bad('sessions', s.sessions, 'an array')
  for (const x of s.sessions) {
    if (typeof x !== 'object' || x === null || typeof x.sessionId !== 'string') bad('session', x, 'a session')
    if (typeof x.residentTokens !== 'number' || !Number.isFinite(x.residentTokens) || x.residentTokens < 0)
      bad(`residentTokens of ${x.sessionId}`, x.residentTokens, 'a non-negative finite number')
    if (typeof x.lastAccessTime !== 'number' || Number.isNaN(x.lastAccessTime))
      bad(`lastAccessTime of ${x.sessionId}`, x.lastAccessTime, 'a number')
    if (x.recentlyMoved !== undefined && typeof x.recentlyMoved !== 'boolean')
      bad(`recentlyMoved of ${x.sessionId}`, x.recentlyMoved, 'a boolean')
  }
  const room = s.placeableTokens
  if (room !== undefined) {
    if (!Array.isArray(room)) bad('placeableTokens', room, 'an array')
    for (const r of room)
      if (typeof r !== 'number' || Number.isNaN(r)) bad('placeableTokens entry', r, 'a number')
  }
}

/**
 * Which hot sessions a D under memory pressure retracts. Nothing below `retractAbove`; at or above
 * it, hot sessions other than the requester, least recently used first (the ones whose next turn
 * is furthest away), until the usage falls to `retractTo` or only `keepHot` hot sessions are
 * left. A retracted session finishes its running turn; its next turn is placed elsewhere (a
 * reseed), which the D's pause would otherwise have made every hot session wait for, turn after
 * turn: while the hot sessions' KV stays, the D stays above its threshold and each answer renews
 * the pause.
 *
 * With `placeableTokens` (the router's view of the other D workers' room below their pause
 * threshold) the plan retracts only what can go somewhere: a candidate is skipped when no other D
 * can take its resident tokens (its re-prefill would push that D over its threshold, which then
 * retracts in turn) or when it was `recentlyMoved`, and each retracted session uses up room on
 * the D with the most left.
 *
 * Properties (fast-check tests): nothing below the threshold; never an idle session or the
 * requester; at least `keepHot` hot sessions kept; coldest first (a retracted session is never
 * more recent than a kept candidate); minimal (without its last session the plan would not reach
 * `retractTo`); monotone (a higher usage retracts a superset). With `placeableTokens`: the
 * retracted sessions fit the room (charged greedily), none is `recentlyMoved`, no room retracts
 * nothing, unbounded room gives the plan without it (when no session is `recentlyMoved`).
 *
 * @throws RouterError `INVALID_OPTION` on a bad signal or parameter.
 *
 * @example
 * ```ts
 * import { DEFAULT_RETRACTION_PARAMS, planRetraction } from '@kvc/kvc-router'
 * const signals = {
 *   capacityTokens: 200_000, tokenUsageAfter: 0.95, requester: 'a',
 *   sessions: [
 *     { sessionId: 'a', residentTokens: 60_000, idle: false, lastAccessTime: 30 },
 *     { sessionId: 'b', residentTokens: 60_000, idle: false, lastAccessTime: 10 },
 *     { sessionId: 'c', residentTokens: 60_000, idle: false, lastAccessTime: 20 },
 *   ],
 * }
 * const plan = planRetraction(signals, DEFAULT_RETRACTION_PARAMS)
 * plan.sessions // ['b']: the coldest hot session; 0.95 − 0.30 ≤ 0.80
 * // The other D workers have room for 40K tokens only: 'b' (60K) cannot go anywhere.
 * planRetraction({ ...signals, placeableTokens: [40_000] }).sessions // []
 * ```
 */
export function planRetraction(
  s: RetractionSignals,
  p: RetractionParams = DEFAULT_RETRACTION_PARAMS,
): RetractionPlan {
  checkParams(p)
  checkSignals(s)
  const before = s.tokenUsageAfter
  if (before < p.retractAbove) {
    return { sessions: [], usageBefore: before, usageAfter: before, reason: 'below the threshold' }
  }
  let hot = 0
  const cands: RetractionSession[] = []
  for (const x of s.sessions) {
    if (x.idle) continue
    hot++
    if (x.sessionId !== s.requester) cands.push(x)
  }
  // The requester counts as hot (its turn is being admitted) even when the D saw it idle.
  if (s.requester !== undefined && !s.sessions.some((x) => !x.idle && x.sessionId === s.requester)) hot++
  cands.sort(
    (a, b) =>
      a.lastAccessTime - b.lastAccessTime ||
      (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0),
  )
  const out: string[] = []
  const room = s.placeableTokens === undefined ? undefined : s.placeableTokens.slice()
  let noRoom = 0
  let usage = before
  for (const c of cands) {
    if (usage <= p.retractTo || hot - out.length <= p.keepHot) break
    if (c.residentTokens === 0) continue
    if (room !== undefined) {
      if (c.recentlyMoved === true) {
        noRoom++
        continue
      }
      const at = mostRoom(room)
      if (at < 0 || room[at]! < c.residentTokens) {
        noRoom++
        continue
      }
      room[at] = room[at]! - c.residentTokens
    }
    out.push(c.sessionId)
    usage -= c.residentTokens / s.capacityTokens
  }
  const after = Math.max(0, usage)
  const skipped = noRoom === 0 ? '' : `; ${noRoom} left: no other D has room or just moved`
  const reason =
    out.length === 0
      ? `usage ${before.toFixed(3)} ≥ ${p.retractAbove} but no hot session can go (${hot} hot, keep ${p.keepHot}${skipped})`
      : `usage ${before.toFixed(3)} ≥ ${p.retractAbove}: retract ${out.length} coldest hot session(s) → ${after.toFixed(3)}${skipped}`
  return { sessions: out, usageBefore: before, usageAfter: after, reason }
}

/** Index of the largest entry (the first of equals), -1 when empty. */
function mostRoom(room: readonly number[]): number {
  let at = -1
  for (let i = 0; i < room.length; i++) if (at < 0 || room[i]! > room[at]!) at = i
  return at
}
