import type {
  EvictGranularity,
  EvictionPolicy,
  HostTierOptions,
  KvAllocator,
  NodeHandle,
  RadixCache,
} from '@kvc/radix-cache'
import type { HistogramSnapshot } from '../metrics/histogram.js'

/**
 * Where a session's KV lives between turns.
 *
 * - `'block'` (default, `docs/design/algorithms.md#block-level-retention`): a session is metadata
 *   plus one lock on the deepest node of its committed prefix. Every turn's committed tokens enter
 *   the radix tree; after release (or under pressure) the tree's LRU sheds them page by page.
 * - `'session'`: the legacy, pre-refactor behaviour (SGLang's streaming `SessionAwareCache`).
 *   Only the first turn's prompt enters the tree; the slot owns `[cacheProtectedLen,
 *   kvAllocatedLen)` outside the tree and frees it all at once on release. Kept to compare.
 *
 * @example
 * ```ts
 * import { SessionCache, type SessionGranularity } from '@kvc/session-cache'
 * const caches = (['block', 'session'] as SessionGranularity[]).map(
 *   (granularity) => new SessionCache({ granularity, poolSize: 65_536, pageSize: 16 }),
 * )
 * ```
 */
export type SessionGranularity = 'block' | 'session'

/**
 * The KV slot pool a {@link SessionCache} allocates from and frees to: the radix package's
 * `KvAllocator` (`free`) plus what allocation needs. The radix package's `PagedAllocator`
 * satisfies it; a serving engine can plug its own pool in.
 *
 * Slots are laid out as SGLang's paged allocator lays them out: position `p` of a request's row
 * sits at offset `p % pageSize` of its page, and a page belongs to one owner at a time (the tree,
 * one request, or one legacy session slot). The pool must serve only this cache (otherwise the
 * accounting identity of {@link SessionCache.poolAccounting} gets an extra term).
 *
 * @example
 * ```ts
 * import { PagedAllocator } from '@kvc/radix-cache'
 * import type { KvPool } from '@kvc/session-cache'
 * const pool: KvPool = new PagedAllocator({ size: 4096, pageSize: 16 })
 * ```
 */
export interface KvPool extends KvAllocator {
  /** Total token slots. */
  readonly size: number
  /** Tokens per page; must equal the radix cache's `pageSize`. */
  readonly pageSize: number
  /** Free token slots (whole free pages times `pageSize`). */
  availableSize(): number
  /**
   * Slots for `numTokens` positions that continue a sequence whose last slot is `lastLoc`
   * (`-1`: start on fresh pages): the rest of `lastLoc`'s page first, then fresh pages. Throws
   * when the pool is short (the cache checks `availableSize` first). Positions that stay inside
   * `lastLoc`'s page get `lastLoc + 1, lastLoc + 2, …` without a call: the cache fills them itself
   * (a decode step mostly), so the pool sees only requests that take fresh pages.
   */
  allocExtend(lastLoc: number, numTokens: number): Int32Array
  /**
   * Optional: `allocExtend` written into `out[at, at + numTokens)` (the request's KV row) instead
   * of a new array; the cache uses it when present (`PagedAllocator` has it).
   */
  allocExtendInto?(lastLoc: number, numTokens: number, out: Int32Array, at: number): void
}

/**
 * Options of the {@link SessionCache} constructor.
 *
 * @example
 * ```ts
 * import { SessionCache, type SessionCacheOptions } from '@kvc/session-cache'
 * const options: SessionCacheOptions = {
 *   poolSize: 1 << 20,
 *   pageSize: 16,
 *   evictGranularity: 'page',
 *   releaseExtra: (extra, sessionId) => mambaPool.free(extra, sessionId),
 *   onEviction: (e) => metrics.observe(e.freedTokens),
 * }
 * const sc = new SessionCache(options)
 * ```
 */
export interface SessionCacheOptions {
  /** `'block'` (default) or the legacy `'session'` mode, see {@link SessionGranularity}. */
  readonly granularity?: SessionGranularity
  /**
   * An existing radix cache to wrap. It must track values and must have been created with
   * `allocator: pool` (the tree frees evicted slots into it), so `pool` is required with it.
   */
  readonly cache?: RadixCache
  /** The KV pool (default: a `PagedAllocator` of `poolSize` slots and `pageSize`). */
  readonly pool?: KvPool
  /** Size in token slots of the default pool (required without `pool`; a multiple of `pageSize`). */
  readonly poolSize?: number
  /** Tokens per page of the default cache and pool (default 1). */
  readonly pageSize?: number
  /** Eviction order of the default cache (default `'lru'`). */
  readonly evictionPolicy?: EvictionPolicy
  /**
   * Eviction granularity of the default cache: `'page'` (trim the least-recently-used leaf page
   * by page, so an eviction frees what was asked rounded up to a page; the default in block
   * granularity, as `docs/design/prototype.md#block-level-design` designs it) or `'leaf'` (SGLang's
   * whole leaves; the default in session granularity).
   */
  readonly evictGranularity?: EvictGranularity
  /** Clock in milliseconds (default `performance.now`); shared with the default cache. */
  readonly now?: () => number
  /**
   * Release hook of slot-owned `extra` state (Mamba / recurrent state...): called once per
   * `extra` value when its session is released or evicted, or when a turn replaces it.
   */
  readonly releaseExtra?: (extra: unknown, sessionId: string) => void
  /** Called after every eviction (a tree eviction that freed tokens, or a legacy session drop). */
  readonly onEviction?: (event: EvictionEvent) => void
  /** Upper bounds of the tokens-freed-per-eviction histogram (default {@link DEFAULT_EVICTION_BUCKETS}). */
  readonly evictionBuckets?: readonly number[]
  /**
   * How many released session ids are remembered, to tell "releasing twice" (`SESSION_RELEASED`)
   * from "never opened" (`UNKNOWN_SESSION`). Oldest forgotten first (default 65536).
   */
  readonly releasedMemory?: number
  /**
   * `true`: the `Uint32Array`s lent with `copyInputIds: false` (and what decode steps read after
   * them, `outputFollowsInput`) never change while this cache exists, not only while their requests
   * and sessions last (a simulator's or a replayer's immutable token streams). The tree then keeps
   * views of them instead of copies of its new nodes' tokens (the radix cache's `lendTokens`), and
   * walks that meet them again skip comparing them. Default `false`.
   */
  readonly lentTokensFrozen?: boolean
  /**
   * A host KV tier under the default radix cache (see `@kvc/radix-cache`'s `hostTier`; with
   * `cache`, configure the tier on that cache instead). Then tree eviction demotes pages to host
   * memory instead of discarding them, a match loads a host hit back instead of recomputing it,
   * and in block mode memory pressure **demotes** an idle session (its KV stays retained on the
   * host) rather than releasing it. A `pool` given with a host tier must also `alloc` (load-back
   * takes fresh device slots from it).
   */
  readonly hostTier?: HostTierOptions
}

/**
 * Options of {@link SessionCache.openSession}.
 *
 * @example
 * ```ts
 * sc.openSession('agent-7', { extraKey: 'lora-a', extra: mambaPool.alloc() })
 * ```
 */
export interface OpenSessionOptions {
  /** Namespace (LoRA id, cache salt) of every request of the session (default: none). */
  readonly extraKey?: string
  /** Initial slot-owned state, released through `releaseExtra`. */
  readonly extra?: unknown
}

/**
 * What a session slot keeps: metadata only in block mode (the KV is in the tree).
 * `lastNode`, `lastAccessTime` and `extra` are the fields of the block-level design
 * (`docs/design/prototype.md#block-level-design`); the rest is bookkeeping.
 *
 * @example
 * ```ts
 * const slot = sc.getSessionSlot('agent-7')
 * if (slot?.lastNode !== undefined) console.log(sc.cache.tokensUnder(slot.lastNode), slot.turns)
 * ```
 */
export interface SessionSlot {
  /** The session id. */
  readonly sessionId: string
  /** Namespace of the session's requests (`undefined`: the default namespace). */
  readonly extraKey: string | undefined
  /**
   * The node the session keeps locked: block mode, the deepest node of its committed,
   * page-aligned prefix (moves forward every turn); session mode, the first turn's protected
   * prefix. `undefined` before the first turn finished.
   */
  readonly lastNode: NodeHandle | undefined
  /** Clock time of the last admission or finish of one of its requests (or of the open). */
  readonly lastAccessTime: number
  /** Slot-owned opaque state (released through the `releaseExtra` hook). */
  readonly extra: unknown
  /** Tokens the session has committed (prompt + output whose KV was computed), all turns. */
  readonly committedLen: number
  /** Finished turns. */
  readonly turns: number
  /** `rid` of the request in flight, if any (one at a time). */
  readonly activeRid: string | undefined
  /**
   * Demoted under memory pressure (block mode with a host tier): the slot holds a host reference
   * on `lastNode` instead of a device lock, so its KV may leave the device but stays on the host.
   */
  readonly demoted: boolean
}

/**
 * A session's residency as a router or an admission check reads it, from the tree
 * (`docs/design/prototype.md#block-level-design`).
 *
 * @example
 * ```ts
 * const s = sc.getSessionStatus('agent-7')
 * if (s?.resident && !s.active) console.log(`${s.residentTokens} tokens ready for the next turn`)
 * ```
 */
export interface SessionStatus {
  readonly sessionId: string
  /** `residentTokens > 0`. */
  readonly resident: boolean
  /**
   * Tokens of the session's KV on the device for its next turn: block mode the device part of
   * `tokensUnder(lastNode)` (the tree is the truth; all of it unless demoted); session mode the
   * whole committed length (the slot pins it).
   */
  readonly residentTokens: number
  /**
   * Tokens of the session's committed prefix that only the host tier holds (0 without one): its
   * next turn loads them back instead of recomputing them. A router estimates that turn's prefix
   * cost as `hostResidentTokens` at the load-back rate plus `committedTokens - retainedTokens` at
   * the prefill rate.
   */
  readonly hostResidentTokens: number
  /**
   * Tokens the session retains across both tiers: `residentTokens + hostResidentTokens`
   * (block mode `tokensUnder(lastNode)`, never decreasing while the session is held: I2).
   */
  readonly retainedTokens: number
  /** Demoted to the host under memory pressure (see {@link SessionSlot.demoted}). */
  readonly demoted: boolean
  /** Tokens the session has committed. */
  readonly committedTokens: number
  /** Session mode: token slots the slot owns outside the tree (page-rounded); block mode 0. */
  readonly heldTokens: number
  readonly lastAccessTime: number
  /** Whether a request of the session is in flight. */
  readonly active: boolean
  readonly turns: number
}

/**
 * Lifecycle of a {@link SessionRequest}.
 *
 * @example
 * ```ts
 * const req = sc.createRequest({ rid: 'r1', inputIds: [1, 2, 3] })
 * req.phase // 'created'
 * sc.matchPrefix(req)
 * req.phase // 'running'
 * ```
 */
export type RequestPhase = 'created' | 'running' | 'finished' | 'aborted'

/**
 * The state a serving engine tracks for one request, mirroring SGLang's `Req` (field names in
 * camelCase). Created by {@link SessionCache.createRequest}, admitted by
 * {@link SessionCache.matchPrefix}, grown by {@link SessionCache.prefill} /
 * {@link SessionCache.decode}, and ended by {@link SessionCache.cacheFinishedReq} or
 * {@link SessionCache.abortReq}. Read-only to callers: the cache owns the transitions.
 *
 * Ownership (SGLang's rule): positions `[0, cacheProtectedLen)` belong to the radix tree (the
 * request keeps them alive with a lock on `lastNode`); `[cacheProtectedLen, kvAllocatedLen)`
 * belong to the request (in session mode, for a later turn, they are lent by the session slot).
 * Every path frees only the request-owned range.
 *
 * @example
 * ```ts
 * const req = sc.createRequest({ rid: 'r1', sessionId: 'agent-7', inputIds: prompt })
 * sc.matchPrefix(req)
 * req.cacheProtectedLen // tokens the tree holds for it (locked through req.lastNode)
 * req.prefixIndices     // their KV slots, then the request's own
 * ```
 */
export interface SessionRequest {
  /** Request id, unique among requests in flight. */
  readonly rid: string
  /** The streaming session this request is a turn of, if any. */
  readonly sessionId: string | undefined
  /** Namespace (LoRA id / cache salt); for a session turn, the session's. */
  readonly extraKey: string | undefined
  /** Priority for the `priority` eviction policy, raised along the path on insert (default 0). */
  readonly priority: number
  /** The prompt (for a session turn: the session's committed tokens plus the append). */
  readonly originInputIds: Uint32Array
  /** Generated tokens. */
  readonly outputIds: readonly number[]
  /** `originInputIds` followed by `outputIds` (SGLang's `fill_ids` once the prompt is prefilled). */
  readonly tokenIds: Uint32Array
  /**
   * The request's KV slot row (SGLang's `req_to_token[req_pool_idx]`): the slot of position `p`
   * is `reqToToken[p]`, valid for `p < kvAllocatedLen`.
   */
  readonly reqToToken: Int32Array
  /**
   * Slots of the positions whose KV is computed, `reqToToken[0:kvCommittedLen)`: the tree's
   * canonical indices over `[0, cacheProtectedLen)`, then the request's own.
   */
  readonly prefixIndices: Int32Array
  /** Page-aligned length owned by the tree and locked through `lastNode`. */
  readonly cacheProtectedLen: number
  /** Positions whose KV is computed (prefilled or decoded). */
  readonly kvCommittedLen: number
  /** Positions that have a KV slot (`>= kvCommittedLen`). */
  readonly kvAllocatedLen: number
  /** The node this request keeps locked (its cached prefix); `undefined` before admission and after the end. */
  readonly lastNode: NodeHandle | undefined
  /** Tokens reused at the last `matchPrefix` (SGLang's `cached_tokens`). */
  readonly cachedTokens: number
  /** Session turn: the slot's `extra`, lent for the turn. */
  readonly extra: unknown
  /** Lifecycle phase. */
  readonly phase: RequestPhase
}

/**
 * Input of {@link SessionCache.createRequest}.
 *
 * @example
 * ```ts
 * const req = sc.createRequest({ rid: 'turn-3', sessionId: 'agent-7', inputIds: [...history, ...append] })
 * ```
 */
export interface RequestInit {
  /** Request id (a non-empty string). */
  readonly rid: string
  /** Prompt token ids (integers in `[0, 2^32)`, at least one). */
  readonly inputIds: ArrayLike<number>
  /** Session id: the request is a turn of this (open) session. */
  readonly sessionId?: string
  /** Namespace; for a session turn it may be omitted (the session's is used) or must match it. */
  readonly extraKey?: string
  /** Priority for the `priority` eviction policy (default 0). */
  readonly priority?: number
  /**
   * Output tokens to expect (SGLang's `max_new_tokens`), a sizing hint only: the request's token
   * buffer and KV row are allocated for the prompt plus this many decoded tokens (at most 65,536;
   * default 64) and grow as needed beyond. A non-negative integer.
   */
  readonly maxNewTokens?: number
  /**
   * `false`: a `Uint32Array` of `inputIds` is read in place instead of copied (SGLang's `Req` keeps
   * its input ids by reference too), for a caller whose prompts are views of token streams it
   * never changes: the caller must not modify them while the request is in flight, nor, for a
   * session turn, while the session is open (its committed tokens may be views of them).
   * `originInputIds` is then a view of the caller's array; the first decode step copies the
   * tokens into the request's own buffer. A session turn that extends its session's token stream
   * shares the stream instead (only its new tokens are copied). Default `true`; ignored for
   * other array types.
   */
  readonly copyInputIds?: boolean
  /**
   * With `copyInputIds: false`: the caller's buffer goes on after the prompt with the tokens the
   * request is expected to decode (a replayed conversation's token stream: the prompt, then its
   * recorded output), and the caller changes none of it while the prompt's rule above holds. A
   * decode step whose token is the next one in that buffer extends the request's view of it
   * instead of copying the prompt into a buffer of the request's own; the first step that
   * differs, or the end of the buffer, copies as before. The cache never writes to the buffer.
   * Default `false`.
   */
  readonly outputFollowsInput?: boolean
}

/**
 * Result of {@link SessionCache.matchPrefix}.
 *
 * @example
 * ```ts
 * const { length, indices, reprefillTokens } = sc.matchPrefix(req)
 * // prefill tokenIds[length:]; `indices` are the KV slots of the first `length` tokens
 * if (reprefillTokens > 0) console.log(`recomputing ${reprefillTokens} tokens lost since the last turn`)
 * ```
 */
export interface SessionMatchResult {
  /** Tokens whose KV the request reuses (a page multiple unless restored from a legacy slot). */
  readonly length: number
  /** Their KV slots (a copy of `reqToToken[0:length)`). */
  readonly indices: Int32Array
  /** The node the request now keeps locked. */
  readonly lastNode: NodeHandle
  /** Session mode only: the prefix came from the session slot, bypassing the tree. */
  readonly fromSlot: boolean
  /**
   * Session turns: committed tokens of the session that this turn must compute again
   * (`committedLen - length`, at least 0): pages lost to eviction, plus the unaligned tail the
   * tree cannot hold in block mode. The first turn of a session opened again after it was evicted
   * (TTL or pressure) counts against what it had committed before (up to this prompt's length).
   * Tokens loaded back from the host tier are part of `length`, not of this.
   */
  readonly reprefillTokens: number
  /**
   * Tokens of `length` this admission loaded back from the host tier (copied, not recomputed):
   * the host hit beyond the device hit, when longer than the tier's `loadBackThreshold` and the
   * device could make room (evicting, demoting or releasing idle sessions as for any allocation).
   */
  readonly loadedTokens: number
}

/**
 * Result of {@link SessionCache.cacheUnfinishedReq} and {@link SessionCache.cacheFinishedReq}.
 *
 * @example
 * ```ts
 * const { insertedTokens, freedTokens, protectedLen } = sc.cacheUnfinishedReq(req, { chunked: true })
 * ```
 */
export interface CacheReqResult {
  /** Tokens of the request that entered the tree with this call (0 when nothing was inserted). */
  readonly insertedTokens: number
  /** Tokens the tree already held (`insert`'s `prefixLen`; 0 when nothing was inserted). */
  readonly prefixLen: number
  /** Request-owned token slots given back to the pool (duplicates, unaligned tail), page-rounded. */
  readonly freedTokens: number
  /** The request's `cacheProtectedLen` afterwards. */
  readonly protectedLen: number
}

/**
 * Options of {@link SessionCache.cacheFinishedReq}.
 *
 * @example
 * ```ts
 * sc.cacheFinishedReq(req, { extra: newMambaState }) // the previous state goes to releaseExtra
 * ```
 */
export interface FinishOptions {
  /**
   * Session turn: the slot-owned state after this turn (e.g. the new Mamba state). Replaces the
   * slot's `extra`; the previous value goes through `releaseExtra` when it differs.
   */
  readonly extra?: unknown
}

/**
 * Options of {@link SessionCache.evictIdleSessions}.
 *
 * @example
 * ```ts
 * sc.evictIdleSessions({ idleMs: 300_000, needTokens: 65_536 })
 * ```
 */
export interface EvictIdleOptions {
  /** Release every idle session whose last access is at least `idleMs` old (TTL). */
  readonly idleMs?: number
  /**
   * Memory pressure: release idle sessions least-recently-used first until
   * `free + evictable >= needTokens` (or none is left).
   */
  readonly needTokens?: number
}

/**
 * Result of {@link SessionCache.evictIdleSessions}.
 *
 * @example
 * ```ts
 * const { released } = sc.evictIdleSessions({ idleMs: 300_000 })
 * for (const id of released) router.forget(id)
 * ```
 */
export interface EvictIdleResult {
  /** Sessions released, in order. */
  readonly released: readonly string[]
  /** Sessions demoted to the host tier under `needTokens` pressure (still open), in order. */
  readonly demoted: readonly string[]
  /** Token slots freed directly (session mode: the slots' tails; block mode: 0). */
  readonly freedTokens: number
}

/**
 * Result of {@link SessionCache.ensureFree}.
 *
 * @example
 * ```ts
 * const { ok, available, releasedSessions } = sc.ensureFree(4096)
 * ```
 */
export interface EnsureFreeResult {
  /** Whether `availableSize() >= numTokens` now. */
  readonly ok: boolean
  /** Free slots afterwards. */
  readonly available: number
  /** Tokens freed by this call (tree evictions and session-mode slot drops). */
  readonly freedTokens: number
  /** Sessions released by this call, least-recently-used first. */
  readonly releasedSessions: readonly string[]
  /** Sessions demoted to the host tier by this call (still open), least-recently-used first. */
  readonly demotedSessions: readonly string[]
}

/**
 * One eviction: a tree eviction (`evict` of the shortfall; block mode sheds sessions' pages this
 * way) or, in session mode, the drop of an idle session slot with its whole tail.
 *
 * @example
 * ```ts
 * const sc = new SessionCache({
 *   poolSize: 65_536,
 *   onEviction: (e) => console.log(e.kind, e.requestedTokens, e.freedTokens, e.sessionId),
 * })
 * ```
 */
export interface EvictionEvent {
  readonly kind: 'tree' | 'session'
  /** Tokens the pressure asked for (tree: the `evict` argument; session: the slot's tail). */
  readonly requestedTokens: number
  /** Tokens freed. */
  readonly freedTokens: number
  /** The dropped session (`kind: 'session'`). */
  readonly sessionId: string | undefined
  /** Clock time. */
  readonly time: number
}

/**
 * The pool accounting identity (SGLang's idle memory check):
 * `free + evictable + protected + requestOwned + sessionHeld == poolSize`, and with a host tier
 * `hostFree + hostUsed == hostCapacity`.
 *
 * @example
 * ```ts
 * const { free, evictable, protected: locked, requestOwned, sessionHeld, balanced } = sc.poolAccounting()
 * ```
 */
export interface PoolAccounting {
  readonly poolSize: number
  /** Free slots in the pool. */
  readonly free: number
  /** Tree tokens in unlocked nodes. */
  readonly evictable: number
  /** Tree tokens in locked nodes. */
  readonly protected: number
  /** Slots owned by requests in flight: `Σ ceilPage(kvAllocatedLen) - cacheProtectedLen`. */
  readonly requestOwned: number
  /** Session mode: slots idle session slots own outside the tree (block mode: always 0). */
  readonly sessionHeld: number
  /** Host tier capacity in tokens (0 without one). */
  readonly hostCapacity: number
  /** Free host slots. */
  readonly hostFree: number
  /** Host slots holding KV (host-only pages and host copies of device pages). */
  readonly hostUsed: number
  /** Whether both identities hold. */
  readonly balanced: boolean
}

/**
 * Counters a serving engine would export.
 *
 * @example
 * ```ts
 * const st = sc.stats()
 * gauge('sessions_held', st.sessionsHeld)
 * counter('evictions_total', st.evictions)
 * for (const [id, tokens] of st.residentTokensPerSession) gauge('resident_tokens', tokens, { session: id })
 * ```
 */
export interface SessionCacheStats {
  readonly granularity: SessionGranularity
  /** Open sessions. */
  readonly sessionsHeld: number
  /** Requests admitted and not yet finished or aborted. */
  readonly requestsInFlight: number
  readonly sessionsOpened: number
  /** Sessions released by the caller. */
  readonly sessionsReleased: number
  /** Sessions released by `evictIdleSessions` or under pressure. */
  readonly sessionsEvicted: number
  /** Finished session turns. */
  readonly sessionTurns: number
  /** Requests finished / aborted. */
  readonly requestsFinished: number
  readonly requestsAborted: number
  /** Eviction events (see {@link EvictionEvent}). */
  readonly evictions: number
  /** Tokens freed by evictions. */
  readonly evictedTokens: number
  /** Tokens freed per eviction. */
  readonly evictionHistogram: HistogramSnapshot
  /** Session mode: tokens freed by the caller's releases (not evictions). */
  readonly releasedTokens: number
  /** Σ over session turns of {@link SessionMatchResult.reprefillTokens}. */
  readonly reprefillTokens: number
  /** Σ resident tokens over open sessions. */
  readonly residentTokens: number
  /** Resident tokens per open session, as in {@link SessionStatus.residentTokens}. */
  readonly residentTokensPerSession: ReadonlyMap<string, number>
  /** Σ {@link SessionStatus.hostResidentTokens} over open sessions. */
  readonly hostResidentTokens: number
  /** Sessions demoted to the host tier under pressure (each demotion counts). */
  readonly sessionsDemoted: number
  /** Open sessions that are demoted now. */
  readonly sessionsDemotedNow: number
  /** Σ over admissions of {@link SessionMatchResult.loadedTokens}. */
  readonly loadedBackTokens: number
}
