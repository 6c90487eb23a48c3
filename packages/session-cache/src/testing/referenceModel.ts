import { TieredReferenceModel } from '@kvc/radix-cache/testing'
import type { SessionCacheErrorCode } from '../errors/sessionCacheError.js'
import type { SessionGranularity } from '../session/types.js'

/**
 * A session as the naive model sees it.
 *
 * @example
 * ```ts
 * const m = new SessionReferenceModel('block', 4, 256)
 * m.open('s', '', undefined)
 * m.sessions.get('s')?.committed // []
 * ```
 */
export interface ModelSession {
  readonly id: string
  readonly ns: string
  /** Committed token ids. */
  committed: number[]
  /** Opened again after an eviction: what it had committed then (until its first match). */
  lostCommitted: number
  /** The session's lock covers `lockTokens[0:lockLen)` (0: no lock). */
  lockTokens: number[]
  lockLen: number
  active: string | undefined
  lastAccess: number
  seq: number
  extra: unknown
  turns: number
  /** Session mode: the slot parks a row with this ownership split. */
  hasRow: boolean
  protectedLen: number
  allocated: number
  /** Demoted to the host tier: holds a host reference on `lockTokens[0:lockLen)`, no device lock. */
  pinned: boolean
  /** Picked by memory pressure; the real cache decides between demotion and release (see `settle`). */
  shedPending: boolean
}

/**
 * A request in flight as the naive model sees it.
 *
 * @example
 * ```ts
 * const m = new SessionReferenceModel('block', 4, 256)
 * m.admit('r1', undefined, undefined, [1, 2, 3, 4, 5])
 * m.requests[0]?.protectedLen // 0
 * ```
 */
export interface ModelRequest {
  readonly rid: string
  readonly sid: string | undefined
  readonly ns: string
  readonly tokens: number[]
  readonly originLen: number
  protectedLen: number
  committed: number
  allocated: number
  restored: boolean
  slotAllocated: number
}

/**
 * Expected outcome of a model call that may be refused.
 *
 * @example
 * ```ts
 * const out = new SessionReferenceModel('block', 4, 256).release('never-opened')
 * out.error // 'UNKNOWN_SESSION'
 * ```
 */
export type ModelOutcome<T> =
  | { readonly error: SessionCacheErrorCode }
  | { readonly error?: undefined; readonly value: T }

function ok<T>(value: T): ModelOutcome<T> {
  return { value }
}

function err<T>(error: SessionCacheErrorCode): ModelOutcome<T> {
  return { error }
}

/**
 * A deliberately naive model of a `SessionCache`: the tree is a set of cached page paths
 * with their tiers, lock and host-reference counts (the radix package's `TieredReferenceModel`;
 * one tier unless a host capacity is given), sessions and requests are plain records, and the
 * free pool is derived from the accounting identity. It predicts every observable result — match
 * and load-back lengths, freed slots, which sessions pressure sheds (least recently used first,
 * while `free + evictable < need`), which calls are refused and with which code — except which
 * unlocked pages an eviction picks and whether a shed session was demoted to the host or released
 * (a host-capacity question), which it takes from the real cache after checking that only
 * allowed changes happened.
 *
 * @example
 * ```ts
 * import { SessionReferenceModel } from '@kvc/session-cache/testing'
 * const m = new SessionReferenceModel('block', 4, 256)
 * m.open('s', '', undefined)
 * const r = m.admit('r1', 's', undefined, [1, 2, 3, 4, 5])
 * m.freeSlots() // 256
 * ```
 */
export class SessionReferenceModel {
  readonly tree: TieredReferenceModel
  readonly granularity: SessionGranularity
  readonly pageSize: number
  readonly poolSize: number
  /** Host tier capacity in tokens (0: no host tier). */
  readonly hostCapacity: number
  /** Host hits longer than this are loaded back at admission. */
  readonly loadBackThreshold: number
  /** Sessions picked by pressure and not yet settled, in order. */
  readonly pendingVictims: ModelSession[] = []
  readonly sessions = new Map<string, ModelSession>()
  readonly released = new Map<string, { why: 'released' | 'evicted'; committed: number }>()
  /** Requests in flight, in admission order. */
  readonly requests: ModelRequest[] = []
  /** Extras whose release hook must have run, in order. */
  readonly expectedHooks: unknown[] = []
  /** Clock (ms). */
  now = 0
  #seq = 0

  constructor(
    granularity: SessionGranularity,
    pageSize: number,
    poolSize: number,
    host: { readonly capacity: number; readonly loadBackThreshold?: number } = { capacity: 0 },
  ) {
    this.granularity = granularity
    this.pageSize = pageSize
    this.poolSize = poolSize
    this.hostCapacity = host.capacity
    this.loadBackThreshold = host.capacity > 0 ? (host.loadBackThreshold ?? 10) : Number.POSITIVE_INFINITY
    this.tree = new TieredReferenceModel(pageSize, host.capacity)
  }

  get legacy(): boolean {
    return this.granularity === 'session'
  }

  ceil(n: number): number {
    return Math.ceil(n / this.pageSize) * this.pageSize
  }

  floor(n: number): number {
    return n - (n % this.pageSize)
  }

  /** Σ request-owned slots. */
  requestOwned(): number {
    let s = 0
    for (const r of this.requests) s += this.ceil(r.allocated) - r.protectedLen
    return s
  }

  /** Σ slots idle legacy slots hold outside the tree. */
  sessionHeld(): number {
    let s = 0
    if (!this.legacy) return 0
    for (const x of this.sessions.values()) {
      if (x.hasRow && x.active === undefined) s += this.ceil(x.allocated) - x.protectedLen
    }
    return s
  }

  /** Free slots implied by the accounting identity. */
  freeSlots(): number {
    return this.poolSize - this.tree.sizes().total - this.requestOwned() - this.sessionHeld()
  }

  evictable(): number {
    return this.tree.sizes().evictable
  }

  request(rid: string): ModelRequest | undefined {
    return this.requests.find((r) => r.rid === rid)
  }

  open(sid: string, ns: string, extra: unknown): ModelOutcome<void> {
    if (this.sessions.has(sid)) return err('SESSION_EXISTS')
    this.sessions.set(sid, {
      id: sid,
      ns,
      committed: [],
      lostCommitted: this.released.get(sid)?.why === 'evicted' ? this.released.get(sid)!.committed : 0,
      lockTokens: [],
      lockLen: 0,
      active: undefined,
      lastAccess: this.now,
      seq: ++this.#seq,
      extra,
      turns: 0,
      hasRow: false,
      protectedLen: 0,
      allocated: 0,
      pinned: false,
      shedPending: false,
    })
    this.released.delete(sid)
    return ok(undefined)
  }

  #requireSession(sid: string): ModelSession | SessionCacheErrorCode {
    const s = this.sessions.get(sid)
    if (s !== undefined) return s
    return this.released.has(sid) ? 'SESSION_RELEASED' : 'UNKNOWN_SESSION'
  }

  /**
   * `matchPrefix` of a new request: `{ length, reprefill, loaded }` or the refusal. A load-back
   * under pressure may pick sessions (see {@link SessionReferenceModel.pendingVictims}).
   */
  admit(
    rid: string,
    sid: string | undefined,
    extraKey: string | undefined,
    tokens: readonly number[],
  ): ModelOutcome<{ length: number; reprefill: number; restored: boolean; loaded: number; shed: string[] }> {
    if (this.request(rid) !== undefined) return err('DUPLICATE_REQUEST')
    let s: ModelSession | undefined
    let ns = extraKey ?? ''
    if (sid !== undefined) {
      const found = this.#requireSession(sid)
      if (typeof found === 'string') return err(found)
      s = found
      if (s.active !== undefined) return err('SESSION_BUSY')
      if (extraKey !== undefined && extraKey !== s.ns) return err('NAMESPACE_MISMATCH')
      const c = s.committed
      let extends_ = tokens.length > c.length
      for (let i = 0; extends_ && i < c.length; i++) if (tokens[i] !== c[i]) extends_ = false
      if (!extends_) return err('PREFIX_MISMATCH')
      ns = s.ns
    }
    const r: ModelRequest = {
      rid,
      sid,
      ns,
      tokens: tokens.slice(),
      originLen: tokens.length,
      protectedLen: 0,
      committed: 0,
      allocated: 0,
      restored: false,
      slotAllocated: 0,
    }
    if (s !== undefined) {
      s.active = rid
      s.lastAccess = this.now
      s.seq = ++this.#seq
    }
    let length: number
    let loaded = 0
    let shed: string[] = []
    if (this.legacy && s?.hasRow) {
      r.protectedLen = s.protectedLen
      r.committed = s.committed.length
      r.allocated = s.allocated
      r.restored = true
      r.slotAllocated = s.allocated
      length = r.committed
      this.tree.lock(r.tokens, r.protectedLen, ns, 1)
    } else {
      const m = this.tree.match(tokens.slice(0, tokens.length - 1), ns)
      length = m.device
      if (m.host > this.loadBackThreshold) {
        // Load-back: lock the whole matched path, make room like any allocation, load.
        this.tree.lock(r.tokens, m.device + m.host, ns, 1)
        const p = this.pressure(m.host)
        shed = p.released
        if (p.ok) {
          loaded = m.host
          length += loaded
        } else this.tree.lock(r.tokens, m.device + m.host, ns, -1)
      }
      r.protectedLen = length
      r.committed = length
      r.allocated = length
      if (loaded === 0) this.tree.lock(r.tokens, r.protectedLen, ns, 1)
    }
    this.requests.push(r)
    let reprefill = 0
    if (s !== undefined) {
      const had = s.committed.length > 0 ? s.committed.length : Math.min(s.lostCommitted, tokens.length - 1)
      reprefill = Math.max(0, had - length)
      s.lostCommitted = 0
    }
    return ok({ length, reprefill, restored: r.restored, loaded, shed })
  }

  /** Re-match a running request; returns its new committed length. */
  rematch(r: ModelRequest): number {
    if (r.restored) return r.committed
    const m = this.tree.match(r.tokens.slice(0, r.tokens.length - 1), r.ns).device
    if (m > r.committed) {
      this.tree.lock(r.tokens, m, r.ns, 1)
      this.tree.lock(r.tokens, r.protectedLen, r.ns, -1)
      r.protectedLen = m
      r.committed = m
      r.allocated = Math.max(r.allocated, m)
    }
    return r.committed
  }

  /** Slots (page-rounded) a request needs to grow to `target` positions. */
  need(r: ModelRequest, target: number): number {
    if (target <= r.allocated) return 0
    return this.ceil(target) - this.ceil(r.allocated)
  }

  #lruIdleWithKv(): ModelSession | undefined {
    let best: ModelSession | undefined
    for (const s of this.sessions.values()) {
      if (s.active !== undefined || s.pinned || s.shedPending) continue
      if (this.legacy ? !s.hasRow : s.lockLen === 0) continue
      if (
        best === undefined ||
        s.lastAccess < best.lastAccess ||
        (s.lastAccess === best.lastAccess && s.seq < best.seq)
      ) {
        best = s
      }
    }
    return best
  }

  /**
   * Memory pressure for `need` slots: shed idle sessions holding a device lock, least recently
   * used first, while `free + evictable < need`. Returns the shed ids and whether the need can be
   * met (the real cache then evicts `need - free` unlocked tokens). Without a host tier (or in
   * session mode) a shed session is released at once; with one, its device lock goes now and
   * {@link SessionReferenceModel.settle} records, after the real call, whether the real cache
   * demoted it (kept on the host) or released it.
   */
  pressure(need: number): { released: string[]; ok: boolean } {
    const released: string[] = []
    if (need <= this.freeSlots()) return { released, ok: true }
    while (this.freeSlots() + this.evictable() < need) {
      const v = this.#lruIdleWithKv()
      if (v === undefined) break
      if (this.hostCapacity > 0 && !this.legacy) {
        this.tree.lock(v.lockTokens, v.lockLen, v.ns, -1)
        v.shedPending = true
        this.pendingVictims.push(v)
      } else this.drop(v, 'evicted')
      released.push(v.id)
    }
    return { released, ok: this.freeSlots() + this.evictable() >= need }
  }

  /**
   * Settle a session picked by {@link SessionReferenceModel.pressure}: `'demoted'` (it stays open
   * with a host reference on its committed prefix) or `'released'` (evicted).
   */
  settle(v: ModelSession, how: 'demoted' | 'released'): void {
    const i = this.pendingVictims.indexOf(v)
    if (i < 0) throw new Error(`model: session ${v.id} is not pending`)
    this.pendingVictims.splice(i, 1)
    v.shedPending = false
    if (how === 'demoted') {
      v.pinned = true
      this.tree.pin(v.lockTokens, v.lockLen, v.ns, 1)
    } else this.#forget(v, 'evicted')
  }

  /** Grow a request to `target` allocated positions; `false` on out-of-memory. */
  grow(r: ModelRequest, target: number): { released: string[]; ok: boolean } {
    const need = this.need(r, target)
    const p = need > 0 ? this.pressure(need) : { released: [], ok: true }
    if (p.ok && target > r.allocated) r.allocated = target
    return p
  }

  /** `cacheUnfinishedReq`: `{ inserted, prefixLen, freed, protectedLen }`. */
  unfinished(
    r: ModelRequest,
    chunked = false,
  ): { inserted: number; prefixLen: number; freed: number; protectedLen: number } {
    if (r.restored) return { inserted: 0, prefixLen: 0, freed: 0, protectedLen: r.protectedLen }
    const c = r.committed
    const aligned = this.floor(c)
    const prefixLen = this.tree.insert(r.tokens.slice(0, c), r.ns, !chunked)
    const freed = Math.max(0, prefixLen - r.protectedLen)
    this.tree.lock(r.tokens, aligned, r.ns, 1)
    this.tree.lock(r.tokens, r.protectedLen, r.ns, -1)
    r.protectedLen = aligned
    return { inserted: aligned - prefixLen, prefixLen, freed, protectedLen: aligned }
  }

  /** `cacheFinishedReq`: the same shape as {@link SessionReferenceModel.unfinished}. */
  finished(
    r: ModelRequest,
    extra: { readonly value: unknown } | undefined,
  ): { inserted: number; prefixLen: number; freed: number; protectedLen: number } {
    const s = r.sid === undefined ? undefined : this.sessions.get(r.sid)
    const c = r.committed
    let keep = false
    let out: { inserted: number; prefixLen: number; freed: number; protectedLen: number }
    if (this.legacy && s !== undefined) {
      if (!s.hasRow) {
        this.tree.lock(r.tokens, r.protectedLen, r.ns, 1)
        s.lockTokens = r.tokens
        s.lockLen = r.protectedLen
      }
      s.hasRow = true
      s.protectedLen = r.protectedLen
      s.allocated = r.allocated
      out = { inserted: 0, prefixLen: 0, freed: 0, protectedLen: r.protectedLen }
    } else {
      const aligned = this.floor(c)
      const prefixLen = this.tree.insert(r.tokens.slice(0, c), r.ns, true)
      let freed = Math.max(0, prefixLen - r.protectedLen)
      if (r.allocated > aligned) freed += this.ceil(r.allocated) - aligned
      if (s !== undefined && aligned < s.lockLen)
        keep = true // ended before reaching what it retains
      else if (s !== undefined) {
        this.tree.lock(r.tokens, aligned, r.ns, 1)
        if (s.pinned) this.tree.pin(s.lockTokens, s.lockLen, s.ns, -1)
        else this.tree.lock(s.lockTokens, s.lockLen, s.ns, -1)
        s.pinned = false
        s.lockTokens = r.tokens
        s.lockLen = aligned
      }
      out = { inserted: aligned - prefixLen, prefixLen, freed, protectedLen: aligned }
    }
    this.tree.lock(r.tokens, r.protectedLen, r.ns, -1)
    if (s !== undefined) {
      if (!keep) s.committed = r.tokens.slice(0, c)
      s.turns++
      s.active = undefined
      s.lastAccess = this.now
      s.seq = ++this.#seq
      if (extra !== undefined && extra.value !== s.extra) {
        if (s.extra !== undefined) this.expectedHooks.push(s.extra)
        s.extra = extra.value
      }
    }
    this.requests.splice(this.requests.indexOf(r), 1)
    return out
  }

  abort(r: ModelRequest): void {
    this.tree.lock(r.tokens, r.protectedLen, r.ns, -1)
    const s = r.sid === undefined ? undefined : this.sessions.get(r.sid)
    if (s !== undefined) s.active = undefined
    this.requests.splice(this.requests.indexOf(r), 1)
  }

  /** Drop a session slot (release or eviction); returns the slots it freed directly. */
  drop(s: ModelSession, why: 'released' | 'evicted'): number {
    const freed = this.legacy && s.hasRow ? this.ceil(s.allocated) - s.protectedLen : 0
    if (s.pinned) this.tree.pin(s.lockTokens, s.lockLen, s.ns, -1)
    else this.tree.lock(s.lockTokens, s.lockLen, s.ns, -1)
    this.#forget(s, why)
    return freed
  }

  #forget(s: ModelSession, why: 'released' | 'evicted'): void {
    this.sessions.delete(s.id)
    this.released.set(s.id, { why, committed: s.committed.length })
    if (s.extra !== undefined) this.expectedHooks.push(s.extra)
  }

  release(sid: string): ModelOutcome<number> {
    const s = this.#requireSession(sid)
    if (typeof s === 'string') return err(s)
    if (s.active !== undefined) return err('SESSION_BUSY')
    return ok(this.drop(s, 'released'))
  }

  /**
   * `evictIdleSessions`: the released ids in order and the slots freed directly. With a host tier
   * the sessions shed for `needTokens` are pending: settle each after the real call.
   */
  evictIdle(
    idleMs: number | undefined,
    needTokens: number | undefined,
  ): { released: string[]; freed: number } {
    const released: string[] = []
    let freed = 0
    if (idleMs !== undefined) {
      const victims = [...this.sessions.values()]
        .filter((s) => s.active === undefined && this.now - s.lastAccess >= idleMs)
        .sort((a, b) => a.lastAccess - b.lastAccess || a.seq - b.seq)
      for (const v of victims) {
        freed += this.drop(v, 'evicted')
        released.push(v.id)
      }
    }
    if (needTokens !== undefined) {
      while (this.freeSlots() + this.evictable() < needTokens) {
        const v = this.#lruIdleWithKv()
        if (v === undefined) break
        if (this.hostCapacity > 0 && !this.legacy) {
          this.tree.lock(v.lockTokens, v.lockLen, v.ns, -1)
          v.shedPending = true
          this.pendingVictims.push(v)
        } else freed += this.drop(v, 'evicted')
        released.push(v.id)
      }
    }
    return { released, freed }
  }
}
