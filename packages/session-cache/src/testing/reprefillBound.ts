import { type BlockHasher, type KvEvent, computeBlockHashes } from '@kvc/radix-cache'
import type { EvictionEvent, SessionMatchResult } from '../session/types.js'

/**
 * What a {@link ReprefillBoundTracker} knows about one session since its last finished turn.
 *
 * @example
 * ```ts
 * import type { SessionSinceTurn } from '@kvc/session-cache/testing'
 * const lostShare = (s: SessionSinceTurn) => s.goneTokens / Math.max(1, s.committed)
 * ```
 */
export interface SessionSinceTurn {
  /** Tokens the session committed at its last turn (`C`). */
  readonly committed: number
  /** Tokens of its retained pages (`⌊C/P⌋·P`) that left the device at least once since then. */
  readonly leftDeviceTokens: number
  /** ... that were absent from every tier at least once since then. */
  readonly goneTokens: number
  /** Device tokens freed by all evictions since then (tree evictions, legacy slot drops). */
  readonly evictedSinceTurn: number
  /** The session was never released since then (it may have been demoted). */
  readonly heldThroughout: boolean
}

/** Where the pages of a session's retained path live right before an admission. */
interface Split {
  readonly device: number
  readonly host: number
  readonly absent: number
  readonly prefixClosed: boolean
}

interface Track {
  committed: number
  pages: bigint[]
  leftDevice: Set<number>
  gone: Set<number>
  evicted: number
  held: boolean
  split: Split | undefined
}

/**
 * Checks Theorem 3 (docs/design/host-tier.md) on a running `SessionCache` in block mode: the
 * tokens a session must recompute on its next turn are bounded by what was evicted of its own
 * committed prefix since its last turn. Feed it the radix cache's KV events (`onEvent`, with the
 * hasher the cache uses) and the session cache's evictions (`onEviction`), tell it when a turn
 * finishes or a session is released, call {@link ReprefillBoundTracker.beforeAdmission} right
 * before a session turn's `matchPrefix` and {@link ReprefillBoundTracker.checkAdmission} with its
 * result. Every check that fails is returned as a message.
 *
 * With `C` committed tokens, page size `P`, `R = reprefillTokens` and `B = loadedTokens`:
 *
 * - the pages still present form a prefix of the session's path, and so do those on the device;
 * - without a host tier, or when the host part is not loaded back: `R ≤ C mod P + leftDevice`;
 * - with a load-back: `R ≤ C mod P + gone`, and the loaded part of the prefix `≤ leftDevice`;
 * - held throughout (never released): `leftDevice = 0` without a host tier; `gone = 0` with one
 *   (a demoted session is protected on the host), so `R = C mod P` after a load-back;
 * - always `R ≤ C mod P + evictedSinceTurn` (page eviction: each eviction asked for `n` tokens frees
 *   at most `⌈n/P⌉·P`).
 *
 * @example
 * ```ts
 * import { PagedAllocator, RadixCache, xxh3BlockHasher } from '@kvc/radix-cache'
 * import { SessionCache } from '@kvc/session-cache'
 * import { ReprefillBoundTracker } from '@kvc/session-cache/testing'
 * const hasher = xxh3BlockHasher()
 * const bound = new ReprefillBoundTracker({ pageSize: 16, hasher })
 * const pool = new PagedAllocator({ size: 4096, pageSize: 16 })
 * const cache = new RadixCache({ pageSize: 16, allocator: pool, blockHasher: hasher, onEvent: (e) => bound.onEvent(e) })
 * const sc = new SessionCache({ cache, pool, onEviction: (e) => bound.onEviction(e) })
 * // ... per turn: bound.beforeAdmission(id); const m = sc.matchPrefix(req); bound.checkAdmission(id, m)
 * ```
 */
export class ReprefillBoundTracker {
  readonly pageSize: number
  readonly #hasher: BlockHasher
  readonly #deviceMedium: string
  readonly #tracks = new Map<string, Track>()
  /** Block id → sessions whose retained path holds it. */
  readonly #owners = new Map<bigint, Set<Track>>()
  readonly #device = new Map<bigint, number>()
  readonly #host = new Map<bigint, number>()

  constructor(options: {
    readonly pageSize: number
    readonly hasher: BlockHasher
    readonly deviceMedium?: string
  }) {
    this.pageSize = options.pageSize
    this.#hasher = options.hasher
    this.#deviceMedium = options.deviceMedium ?? 'GPU'
  }

  /** Feed one KV event of the session cache's radix cache. */
  onEvent(e: KvEvent): void {
    if (e.type === 'AllBlocksCleared') {
      for (const h of [...this.#device.keys(), ...this.#host.keys()]) this.#markGone(h)
      this.#device.clear()
      this.#host.clear()
      return
    }
    const onDevice = e.medium === undefined || e.medium === this.#deviceMedium
    const counts = onDevice ? this.#device : this.#host
    for (const h of e.blockHashes) {
      const c = counts.get(h) ?? 0
      if (e.type === 'BlockStored') {
        counts.set(h, c + 1)
        continue
      }
      if (c <= 1) counts.delete(h)
      else counts.set(h, c - 1)
      const owners = this.#owners.get(h)
      if (owners === undefined) continue
      for (const t of owners) {
        const i = t.pages.indexOf(h)
        if (onDevice) t.leftDevice.add(i)
        if (!this.#device.has(h) && !this.#host.has(h)) t.gone.add(i)
      }
    }
  }

  /** Feed one eviction of the session cache (`onEviction`). */
  onEviction(e: EvictionEvent): void {
    for (const t of this.#tracks.values()) t.evicted += e.freedTokens
  }

  /** A turn of `sessionId` finished having committed `committedTokens`. */
  turnFinished(sessionId: string, committedTokens: ArrayLike<number>, extraKey?: string): void {
    this.#untrack(sessionId)
    const pages = computeBlockHashes(this.#hasher, committedTokens, this.pageSize, extraKey)
    const t: Track = {
      committed: committedTokens.length,
      pages,
      leftDevice: new Set(),
      gone: new Set(),
      evicted: 0,
      held: true,
      split: undefined,
    }
    this.#tracks.set(sessionId, t)
    for (const h of pages) {
      let s = this.#owners.get(h)
      if (s === undefined) {
        s = new Set()
        this.#owners.set(h, s)
      }
      s.add(t)
    }
  }

  /** `sessionId` was released (by the caller, TTL or pressure); its bound still applies. */
  released(sessionId: string): void {
    const t = this.#tracks.get(sessionId)
    if (t !== undefined) t.held = false
  }

  /** Figures of `sessionId` since its last turn (`undefined` before its first). */
  since(sessionId: string): SessionSinceTurn | undefined {
    const t = this.#tracks.get(sessionId)
    if (t === undefined) return undefined
    return {
      committed: t.committed,
      leftDeviceTokens: t.leftDevice.size * this.pageSize,
      goneTokens: t.gone.size * this.pageSize,
      evictedSinceTurn: t.evicted,
      heldThroughout: t.held,
    }
  }

  /** Record where the session's retained pages live, right before its next turn's `matchPrefix`. */
  beforeAdmission(sessionId: string): void {
    const t = this.#tracks.get(sessionId)
    if (t === undefined) return
    let device = 0
    let host = 0
    let absent = 0
    let prefixClosed = true
    for (const h of t.pages) {
      const d = this.#device.has(h)
      const o = this.#host.has(h)
      if (d && (host > 0 || absent > 0)) prefixClosed = false
      if (!d && o && absent > 0) prefixClosed = false
      if (d) device++
      else if (o) host++
      else absent++
    }
    t.split = { device, host, absent, prefixClosed }
  }

  /**
   * Check the admission of `sessionId`'s next turn against Theorem 3. `tiered`: the cache has a
   * host tier. Returns the violated statements (empty when the bound holds).
   */
  checkAdmission(sessionId: string, result: SessionMatchResult, tiered: boolean): string[] {
    const t = this.#tracks.get(sessionId)
    if (t === undefined) return []
    const P = this.pageSize
    const out: string[] = []
    const R = result.reprefillTokens
    const B = result.loadedTokens
    const partial = t.committed % P
    const left = t.leftDevice.size * P
    const gone = t.gone.size * P
    const sp = t.split
    if (sp !== undefined) {
      if (!sp.prefixClosed)
        out.push(`${sessionId}: its present (or device) pages are not a prefix of its path`)
      if ((sp.host + sp.absent) * P > left)
        out.push(`${sessionId}: ${(sp.host + sp.absent) * P} tokens off the device, only ${left} left it`)
      if (sp.absent * P > gone) out.push(`${sessionId}: ${sp.absent * P} tokens absent, only ${gone} went`)
      // The match may run past the retained path (pages of an aborted turn): only more hits.
      if (result.length < sp.device * P)
        out.push(`${sessionId}: matched ${result.length} < ${sp.device * P} on the device`)
      if (B > 0 && result.length < (sp.device + sp.host) * P)
        out.push(
          `${sessionId}: loaded ${B} but matched only ${result.length} of ${(sp.device + sp.host) * P} retained`,
        )
      const loadedOwn = Math.min(B, t.pages.length * P - sp.device * P)
      if (loadedOwn > left)
        out.push(`${sessionId}: loaded ${loadedOwn} of its prefix > ${left} that left the device`)
    }
    if (R > partial + left)
      out.push(`${sessionId}: recomputes ${R} > ${partial} + ${left} that left the device`)
    if (B > 0 && R > partial + gone) out.push(`${sessionId}: recomputes ${R} > ${partial} + ${gone} gone`)
    if (R > partial + t.evicted) out.push(`${sessionId}: recomputes ${R} > ${partial} + ${t.evicted} evicted`)
    if (t.held && !tiered && left > 0)
      out.push(`${sessionId}: held throughout, yet ${left} tokens left the device`)
    if (t.held && tiered && gone > 0) out.push(`${sessionId}: held throughout, yet ${gone} tokens went`)
    return out
  }

  #untrack(sessionId: string): void {
    const t = this.#tracks.get(sessionId)
    if (t === undefined) return
    for (const h of t.pages) {
      const s = this.#owners.get(h)
      s?.delete(t)
      if (s?.size === 0) this.#owners.delete(h)
    }
    this.#tracks.delete(sessionId)
  }

  #markGone(h: bigint): void {
    const owners = this.#owners.get(h)
    if (owners === undefined) return
    for (const t of owners) {
      const i = t.pages.indexOf(h)
      t.leftDevice.add(i)
      t.gone.add(i)
    }
  }
}
