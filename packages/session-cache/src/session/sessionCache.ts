import { type NodeHandle, PagedAllocator, RadixCache, RadixCacheError } from '@kvc/radix-cache'
import { DEFAULT_EVICTION_BUCKETS, Histogram } from '../metrics/histogram.js'
import type {
  CacheReqResult,
  EnsureFreeResult,
  EvictIdleOptions,
  EvictIdleResult,
  EvictionEvent,
  FinishOptions,
  KvPool,
  OpenSessionOptions,
  PoolAccounting,
  RequestInit,
  SessionCacheOptions,
  SessionCacheStats,
  SessionGranularity,
  SessionMatchResult,
  SessionRequest,
  SessionSlot,
  SessionStatus,
} from './types.js'
import { ceilPage, demoteSlot, heldBySlot, poolAccounting, slotResidency, slotStatus } from './residency.js'
import { RowPool } from './rowPool.js'
import { EMPTY_I32, matchResult, RequestState, Slot } from './state.js'
import { streamTokens } from './tokenStream.js'
import { fail, lentView, startsWith, toTokens } from './tokens.js'

function defaultNow(): number {
  return performance.now()
}

/**
 * Session-aware KV retention over a `RadixCache`: the request-level cache operations of a
 * serving engine (SGLang's `match_prefix`, `cache_unfinished_req`, `cache_finished_req`) plus
 * streaming sessions whose KV survives between turns.
 *
 * **Block mode** (`granularity: 'block'`, default; `docs/design/algorithms.md#block-level-retention`):
 * every turn's committed tokens enter the tree; a session is a {@link SessionSlot} — metadata plus
 * one lock on the deepest node of its committed prefix. The lock moves forward each turn (increment the new node first, then
 * decrement the old). Releasing a session only drops that lock; the tree's LRU then sheds its
 * pages block by block, and a later turn re-prefills only the pages it lost.
 *
 * **Session mode** (`granularity: 'session'`): the legacy streaming-session behaviour, for
 * comparison. The slot owns `[cacheProtectedLen, kvAllocatedLen)` outside the tree; later turns
 * bypass the tree; release (or eviction under pressure) frees the whole tail at once.
 *
 * Ownership (SGLang's rule, both modes): the tree owns a request's page-aligned prefix
 * `[0, cacheProtectedLen)`; the request owns the rest. Every path frees only request-owned
 * slots, through the {@link KvPool}; duplicates of tokens the tree already held are freed on
 * insert, and unfinished requests re-match and adopt the tree's indices.
 *
 * Memory pressure reaches the tree through {@link SessionCache.ensureFree}, which
 * {@link SessionCache.prefill} and {@link SessionCache.decode} call before allocating, like
 * SGLang's `evict_from_tree_cache`: evict the shortfall from the tree; when nothing evictable is
 * left, release idle sessions least-recently-used first (block mode: their pages become
 * evictable and only the shortfall is evicted; session mode: each drop frees a whole tail).
 *
 * @example
 * ```ts
 * import { SessionCache } from '@kvc/session-cache'
 * const sc = new SessionCache({ poolSize: 4096, pageSize: 4 })
 * sc.openSession('chat-1')
 *
 * // Turn 1: a 10-token prompt, prefilled in two chunks, then 3 generated tokens.
 * const t1 = sc.createRequest({ rid: 't1', sessionId: 'chat-1', inputIds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] })
 * sc.matchPrefix(t1)                           // nothing cached yet
 * sc.prefill(t1, 6)
 * sc.cacheUnfinishedReq(t1, { chunked: true }) // pages [1..4] enter the tree, t1 adopts them
 * sc.prefill(t1, 4)
 * sc.cacheUnfinishedReq(t1)
 * for (const tok of [11, 12, 13]) sc.decode(t1, tok)
 * sc.cacheFinishedReq(t1)                      // 12 committed tokens: 12 in the tree, session locks them
 *
 * // Turn 2 extends the conversation; the tree serves its prefix.
 * const t2 = sc.createRequest({ rid: 't2', sessionId: 'chat-1', inputIds: [...t1.tokenIds, 14, 15] })
 * sc.matchPrefix(t2).length                    // 12
 * sc.getSessionStatus('chat-1')?.residentTokens // 12
 * ```
 */
export class SessionCache {
  /** `'block'` or the legacy `'session'` mode. */
  readonly granularity: SessionGranularity
  /** The wrapped radix tree. */
  readonly cache: RadixCache
  /** The KV slot pool. */
  readonly pool: KvPool
  /** Tokens per page. */
  readonly pageSize: number

  readonly #legacy: boolean
  readonly #now: () => number
  readonly #releaseExtra: ((extra: unknown, sessionId: string) => void) | undefined
  readonly #onEviction: ((event: EvictionEvent) => void) | undefined
  readonly #releasedMemory: number
  /** `lentTokensFrozen`: lent prompts go into the tree as views. */
  readonly #lendFrozen: boolean
  readonly #slots = new Map<string, Slot>()
  /** Parked tails (`heldBySlot`) of all slots: what releasing the idle ones frees outside the tree. */
  #idleHeld = 0
  /** Scratch of `releasableTokens`: the counted sessions' lock holders. */
  readonly #holderScratch: NodeHandle[] = []
  /** Recently dropped sessions: why, and (evicted ones) how many tokens they had committed. */
  readonly #released = new Map<string, { why: 'released' | 'evicted'; committed: number }>()
  readonly #requests = new Map<string, RequestState>()
  /** KV rows reused across requests (block mode gives them back at a request's end). */
  readonly #rows = new RowPool()
  readonly #hist: Histogram
  #seq = 0

  #sessionsOpened = 0
  #sessionsReleased = 0
  #sessionsEvicted = 0
  #sessionTurns = 0
  #requestsFinished = 0
  #requestsAborted = 0
  #evictions = 0
  #evictedTokens = 0
  #releasedTokens = 0
  #reprefillTokens = 0
  #sessionsDemoted = 0
  #loadedBackTokens = 0
  /** A host tier under the tree. */
  readonly #tiered: boolean
  /** Host hits longer than this are loaded back at admission. */
  readonly #loadThreshold: number

  constructor(options: SessionCacheOptions = {}) {
    if (options === null || typeof options !== 'object')
      fail('INVALID_OPTION', 'options must be an object', options)
    const granularity = options.granularity ?? 'block'
    if (granularity !== 'block' && granularity !== 'session') {
      fail(
        'INVALID_OPTION',
        `granularity must be 'block' or 'session', got ${String(granularity)}`,
        granularity,
      )
    }
    if (options.now !== undefined && typeof options.now !== 'function') {
      fail('INVALID_OPTION', 'now must be a function returning milliseconds', options.now)
    }
    for (const key of ['releaseExtra', 'onEviction'] as const) {
      if (options[key] !== undefined && typeof options[key] !== 'function') {
        fail('INVALID_OPTION', `${key} must be a function`, options[key])
      }
    }
    const releasedMemory = options.releasedMemory ?? 65536
    if (!Number.isInteger(releasedMemory) || releasedMemory < 0) {
      fail(
        'INVALID_OPTION',
        `releasedMemory must be a non-negative integer, got ${releasedMemory}`,
        releasedMemory,
      )
    }
    if (options.lentTokensFrozen !== undefined && typeof options.lentTokensFrozen !== 'boolean') {
      fail(
        'INVALID_OPTION',
        `lentTokensFrozen must be a boolean, got ${String(options.lentTokensFrozen)}`,
        options.lentTokensFrozen,
      )
    }
    const now = options.now ?? defaultNow
    let pool = options.pool
    if (pool !== undefined) {
      const p = pool as Partial<KvPool>
      if (
        typeof p.free !== 'function' ||
        typeof p.allocExtend !== 'function' ||
        typeof p.availableSize !== 'function' ||
        !Number.isInteger(p.size) ||
        !Number.isInteger(p.pageSize) ||
        (p.pageSize ?? 0) <= 0
      ) {
        fail(
          'INVALID_OPTION',
          'pool must implement KvPool (size, pageSize, availableSize, allocExtend, free)',
          pool,
        )
      }
      if (options.pageSize !== undefined && options.pageSize !== pool.pageSize) {
        fail(
          'INVALID_OPTION',
          `pageSize ${options.pageSize} differs from pool.pageSize ${pool.pageSize}`,
          options.pageSize,
        )
      }
    }
    let cache = options.cache
    if (cache !== undefined && options.hostTier !== undefined) {
      fail(
        'INVALID_OPTION',
        'hostTier configures the default cache: give it to the RadixCache passed as cache',
        options.hostTier,
      )
    }
    if (cache !== undefined) {
      if (!(cache instanceof RadixCache)) fail('INVALID_OPTION', 'cache must be a RadixCache', cache)
      if (pool === undefined) {
        fail(
          'INVALID_OPTION',
          'a given cache needs the pool it frees evicted slots into (options.pool)',
          cache,
        )
      }
      if (!cache.trackValues) fail('INVALID_OPTION', 'the cache must track values (trackValues: true)', cache)
      if (cache.pageSize !== pool.pageSize) {
        fail(
          'INVALID_OPTION',
          `cache.pageSize ${cache.pageSize} differs from pool.pageSize ${pool.pageSize}`,
          cache,
        )
      }
    } else {
      if (pool === undefined) {
        const pageSize = options.pageSize ?? 1
        if (!Number.isInteger(pageSize) || pageSize <= 0) {
          fail('INVALID_OPTION', `pageSize must be a positive integer, got ${String(pageSize)}`, pageSize)
        }
        const size = options.poolSize
        if (!Number.isInteger(size) || size! < 0 || size! % pageSize !== 0 || size! > 2 ** 31 - 1) {
          fail(
            'INVALID_OPTION',
            `poolSize must be a non-negative multiple of pageSize (${pageSize}) below 2^31, got ${String(size)}`,
            size,
          )
        }
        pool = new PagedAllocator({ size: size!, pageSize })
      }
      try {
        cache = new RadixCache({
          pageSize: pool.pageSize,
          allocator: pool,
          now,
          ...(options.evictionPolicy !== undefined ? { evictionPolicy: options.evictionPolicy } : {}),
          // Block mode sheds a session's KV page by page (docs/design/prototype.md#block-level-design);
          // the legacy mode keeps SGLang's whole-leaf eviction unless told otherwise.
          evictGranularity: options.evictGranularity ?? (granularity === 'block' ? 'page' : 'leaf'),
          ...(options.hostTier !== undefined ? { hostTier: options.hostTier } : {}),
        })
      } catch (e) {
        if (e instanceof RadixCacheError) fail('INVALID_OPTION', e.message, e.value)
        throw e
      }
    }
    this.#hist = new Histogram(options.evictionBuckets ?? DEFAULT_EVICTION_BUCKETS)
    this.granularity = granularity
    this.cache = cache
    this.pool = pool
    this.pageSize = pool.pageSize
    this.#legacy = granularity === 'session'
    this.#now = now
    this.#releaseExtra = options.releaseExtra
    this.#onEviction = options.onEviction
    this.#releasedMemory = releasedMemory
    this.#lendFrozen = options.lentTokensFrozen === true
    this.#tiered = cache.hostTier !== undefined
    this.#loadThreshold = cache.hostTier?.loadBackThreshold ?? Number.POSITIVE_INFINITY
  }

  // ---------------------------------------------------------------------------------------------
  // Sessions

  /**
   * Open a streaming session. Its requests carry `sessionId`; one may be in flight at a time.
   * Refused with `SESSION_EXISTS` while the id is open (an id may be reopened after release).
   *
   * @example
   * ```ts
   * const sc = new SessionCache({ poolSize: 1024 })
   * sc.openSession('agent-7', { extraKey: 'lora-a', extra: { mambaIdx: 3 } })
   * ```
   */
  openSession(sessionId: string, options: OpenSessionOptions = {}): SessionStatus {
    if (typeof sessionId !== 'string' || sessionId.length === 0) {
      fail('INVALID_REQUEST', `sessionId must be a non-empty string, got ${String(sessionId)}`, sessionId)
    }
    if (options === null || typeof options !== 'object')
      fail('INVALID_OPTION', 'options must be an object', options)
    const extraKey = options.extraKey
    if (extraKey !== undefined && typeof extraKey !== 'string') {
      fail('INVALID_OPTION', `extraKey must be a string, got ${typeof extraKey}`, extraKey)
    }
    if (this.#slots.has(sessionId)) fail('SESSION_EXISTS', `session ${sessionId} is already open`, sessionId)
    const slot = new Slot(sessionId, extraKey ?? '', options.extra, this.#now(), ++this.#seq)
    // A session evicted (TTL, pressure) and opened again: its first turn's re-prefill counts what
    // the eviction cost it, as a later turn's does.
    const before = this.#released.get(sessionId)
    if (before?.why === 'evicted') slot.lostCommitted = before.committed
    this.#slots.set(sessionId, slot)
    this.#released.delete(sessionId)
    this.#sessionsOpened++
    return slotStatus(this.cache, slot, this.#legacy, this.pageSize)
  }

  /**
   * Whether `sessionId` is open.
   *
   * @example
   * ```ts
   * if (!sc.hasSession('agent-7')) sc.openSession('agent-7') // e.g. after it was evicted
   * ```
   */
  hasSession(sessionId: string): boolean {
    return this.#slots.has(sessionId)
  }

  /**
   * Release a session (close or timeout): decrement its lock, run the `extra` release hook, drop
   * the slot. Block mode frees nothing directly — the tree's LRU sheds the pages lazily — and
   * returns 0; session mode frees the slot's tail at once and returns its size (page-rounded).
   * Refused with `UNKNOWN_SESSION`, `SESSION_RELEASED` (releasing twice) or `SESSION_BUSY`
   * (a request of the session is in flight).
   *
   * @example
   * ```ts
   * sc.releaseSession('agent-7') // 0 in block mode
   * sc.releaseSession('agent-7') // throws SessionCacheError SESSION_RELEASED
   * ```
   */
  releaseSession(sessionId: string): number {
    const slot = this.#requireSession(sessionId)
    if (slot.activeRid !== undefined) {
      fail('SESSION_BUSY', `session ${sessionId} has request ${slot.activeRid} in flight`, sessionId)
    }
    this.#sessionsReleased++
    const freed = this.#dropSlot(slot, 'released')
    this.#releasedTokens += freed
    this.#runExtraHook(slot)
    return freed
  }

  /**
   * A session's residency, or `undefined` when it is not open. `residentTokens` comes from the
   * tree in block mode (`tokensUnder(lastNode)`).
   *
   * @example
   * ```ts
   * const s = sc.getSessionStatus('agent-7')
   * if (s?.resident) console.log(s.residentTokens, s.lastAccessTime)
   * ```
   */
  getSessionStatus(sessionId: string): SessionStatus | undefined {
    const slot = this.#slots.get(sessionId)
    return slot === undefined ? undefined : slotStatus(this.cache, slot, this.#legacy, this.pageSize)
  }

  /**
   * Every open session's status, in opening order.
   *
   * @example
   * ```ts
   * const resident = sc.listSessionStatuses().filter((s) => s.resident).map((s) => s.sessionId)
   * ```
   */
  listSessionStatuses(): SessionStatus[] {
    const out: SessionStatus[] = []
    for (const slot of this.#slots.values())
      out.push(slotStatus(this.cache, slot, this.#legacy, this.pageSize))
    return out
  }

  /**
   * A copy of the token ids a session has committed so far (empty before its first turn), or
   * `undefined` when the session is not open. The next turn's prompt must strictly extend them.
   *
   * @example
   * ```ts
   * const committed = sc.committedTokens('agent-7')
   * console.log(committed?.length)
   * ```
   */
  committedTokens(sessionId: string): Uint32Array | undefined {
    return this.#slots.get(sessionId)?.committed.slice()
  }

  /**
   * Whether `tokens` strictly extend what the session has committed, i.e. whether a request
   * with them would pass `matchPrefix`'s append-only check (`false` for a closed session).
   * Validates the token ids like `createRequest`.
   *
   * @example
   * ```ts
   * if (!sc.extendsSession('agent-7', prompt)) console.log('history was rewritten: reseed')
   * ```
   */
  extendsSession(sessionId: string, tokens: ArrayLike<number>): boolean {
    const slot = this.#slots.get(sessionId)
    const t = toTokens(tokens, 0)
    if (slot === undefined) return false
    return t.length > slot.committed.length && startsWith(t, slot.committed)
  }

  /**
   * A snapshot of a session's slot, or `undefined` when it is not open.
   *
   * @example
   * ```ts
   * const slot = sc.getSessionSlot('agent-7')
   * if (slot?.lastNode !== undefined) sc.cache.tokensUnder(slot.lastNode)
   * ```
   */
  getSessionSlot(sessionId: string): SessionSlot | undefined {
    const s = this.#slots.get(sessionId)
    if (s === undefined) return undefined
    return {
      sessionId: s.sessionId,
      extraKey: s.ns === '' ? undefined : s.ns,
      lastNode: s.lastNode,
      lastAccessTime: s.lastAccessTime,
      extra: s.extra,
      committedLen: s.committed.length,
      turns: s.turns,
      activeRid: s.activeRid,
      demoted: s.pinned,
    }
  }

  /**
   * Release idle sessions (no request in flight): every one idle for at least `idleMs` (TTL),
   * then, under pressure, least-recently-used first until `free + evictable >= needTokens`
   * (sessions that hold no device lock are skipped for pressure). Block mode: their locks go,
   * their pages become evictable block by block, nothing is freed here; with a host tier a
   * session under pressure is demoted instead when the host can retain its KV (it stays open,
   * see `demoted`). Session mode: each release frees the slot's tail and counts as one eviction.
   *
   * @example
   * ```ts
   * sc.evictIdleSessions({ idleMs: 60_000 })       // TTL reaping
   * sc.evictIdleSessions({ needTokens: 32_768 })   // make 32K tokens obtainable
   * ```
   */
  evictIdleSessions(options: EvictIdleOptions = {}): EvictIdleResult {
    if (options === null || typeof options !== 'object')
      fail('INVALID_OPTION', 'options must be an object', options)
    const { idleMs, needTokens } = options
    if (idleMs !== undefined && (typeof idleMs !== 'number' || Number.isNaN(idleMs) || idleMs < 0)) {
      fail('INVALID_OPTION', `idleMs must be a non-negative number, got ${String(idleMs)}`, idleMs)
    }
    if (needTokens !== undefined && (!Number.isInteger(needTokens) || needTokens < 0)) {
      fail(
        'INVALID_OPTION',
        `needTokens must be a non-negative integer, got ${String(needTokens)}`,
        needTokens,
      )
    }
    const released: string[] = []
    const dropped: Slot[] = []
    let freed = 0
    if (idleMs !== undefined) {
      const now = this.#now()
      const victims: Slot[] = []
      for (const s of this.#slots.values()) {
        if (s.activeRid === undefined && now - s.lastAccessTime >= idleMs) victims.push(s)
      }
      victims.sort((a, b) => a.lastAccessTime - b.lastAccessTime || a.seq - b.seq)
      for (const v of victims) {
        freed += this.#evictSlot(v)
        released.push(v.sessionId)
        dropped.push(v)
      }
    }
    const demoted: string[] = []
    if (needTokens !== undefined) {
      while (this.pool.availableSize() + this.cache.evictableSize() < needTokens) {
        const v = this.#lruIdle()
        if (v === undefined) break
        freed += this.#shed(v, demoted, released, dropped)
      }
    }
    for (const s of dropped) this.#runExtraHook(s)
    return { released, demoted, freedTokens: freed }
  }

  /**
   * Tokens that releasing the idle sessions (no request in flight; with `idleMs`, only those idle
   * at least that long) would make obtainable, without releasing anything: the tree's tokens that
   * only their locks protect (they would become evictable) plus, in session mode, their parked
   * tails (they would be freed). Shared prefixes count once, and tokens another lock also protects
   * (an active request, a busy or younger session) not at all. This is what a D reports to a router
   * as reclaimable on demand: its admission releases idle sessions before it refuses a request.
   * With `sessionId`, only that session counts (0 when it is busy, unknown or younger than
   * `idleMs`): what releasing it alone would make obtainable, its share of a prefix other sessions
   * also lock excluded — the per-session gain an admission plans releases with (it never
   * overstates: releasing several sessions together gains at least the sum of their counts).
   * A demoted session (host tier) locks nothing on the device and counts 0: its device tokens are
   * already evictable. Demoting a session under pressure gains the same device tokens as releasing
   * it. O(1) for all idle sessions (the tree keeps that count as locks move), O(path length) for
   * one session, O(total path length of the counted sessions) with `idleMs`.
   *
   * @throws SessionCacheError `INVALID_OPTION` (bad `idleMs` or `sessionId`).
   *
   * @example
   * ```ts
   * const reclaimable = sc.pool.availableSize() + sc.cache.evictableSize() + sc.releasableTokens()
   * const ifReleased = sc.releasableTokens({ sessionId: 'agent-7' })
   * ```
   */
  releasableTokens(options: { readonly idleMs?: number; readonly sessionId?: string } = {}): number {
    if (options === null || typeof options !== 'object')
      fail('INVALID_OPTION', 'options must be an object', options)
    const { idleMs, sessionId } = options
    if (idleMs !== undefined && (typeof idleMs !== 'number' || Number.isNaN(idleMs) || idleMs < 0)) {
      fail('INVALID_OPTION', `idleMs must be a non-negative number, got ${String(idleMs)}`, idleMs)
    }
    if (sessionId !== undefined && (typeof sessionId !== 'string' || sessionId.length === 0)) {
      fail('INVALID_OPTION', `sessionId must be a non-empty string, got ${String(sessionId)}`, sessionId)
    }
    // Every idle session: kept up to date as sessions go idle or busy and locks move (O(1)).
    if (idleMs === undefined && sessionId === undefined) return this.#idleHeld + this.cache.idleLockedTokens()
    const now = idleMs === undefined ? 0 : this.#now()
    const holders = this.#holderScratch
    let tokens = 0
    if (sessionId !== undefined) {
      const s = this.#slots.get(sessionId)
      if (s === undefined || s.activeRid !== undefined || s.pinned) return 0 // demoted: no device lock
      if (idleMs !== undefined && now - s.lastAccessTime < idleMs) return 0
      tokens = heldBySlot(s, this.#legacy, this.pageSize)
      if (s.lastNode === undefined) return tokens
      // An idle session's answer stands while no node on its path went between one lock and two.
      const epoch = this.cache.soleLockEpoch()
      if (s.idleMark !== undefined && s.soleEpoch === epoch) return tokens + s.sole
      holders.push(s.lastNode)
      try {
        const sole = this.cache.tokensLockedOnlyBy(holders)
        if (s.idleMark !== undefined) {
          s.sole = sole
          s.soleEpoch = epoch
        }
        return tokens + sole
      } finally {
        holders.length = 0
      }
    } else {
      for (const s of this.#slots.values()) {
        if (s.activeRid !== undefined || now - s.lastAccessTime < idleMs!) continue
        if (s.pinned) continue // a demoted session locks nothing on the device
        tokens += heldBySlot(s, this.#legacy, this.pageSize)
        if (s.lastNode !== undefined) holders.push(s.lastNode)
      }
    }
    if (holders.length === 0) return tokens
    try {
      // The tree's tokens these sessions' locks alone protect (shared prefixes once).
      return tokens + this.cache.tokensLockedOnlyBy(holders)
    } finally {
      holders.length = 0
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Requests

  /**
   * Build the state of a new request (nothing is cached or allocated yet). Session checks run
   * at admission ({@link SessionCache.matchPrefix}).
   *
   * @example
   * ```ts
   * const req = sc.createRequest({ rid: 'r1', inputIds: [5, 6, 7, 8], extraKey: 'lora-a' })
   * req.phase // 'created'
   * ```
   */
  createRequest(init: RequestInit): SessionRequest {
    if (init === null || typeof init !== 'object')
      fail('INVALID_REQUEST', 'request init must be an object', init)
    const { rid, sessionId, extraKey, inputIds } = init
    const priority = init.priority ?? 0
    if (typeof rid !== 'string' || rid.length === 0) {
      fail('INVALID_REQUEST', `rid must be a non-empty string, got ${String(rid)}`, rid)
    }
    if (sessionId !== undefined && (typeof sessionId !== 'string' || sessionId.length === 0)) {
      fail('INVALID_REQUEST', `sessionId must be a non-empty string, got ${String(sessionId)}`, sessionId)
    }
    if (extraKey !== undefined && typeof extraKey !== 'string') {
      fail('INVALID_REQUEST', `extraKey must be a string, got ${typeof extraKey}`, extraKey)
    }
    if (typeof priority !== 'number' || !Number.isFinite(priority)) {
      fail('INVALID_REQUEST', `priority must be a finite number, got ${String(priority)}`, priority)
    }
    const { maxNewTokens, outputFollowsInput } = init
    if (outputFollowsInput !== undefined && typeof outputFollowsInput !== 'boolean') {
      fail(
        'INVALID_REQUEST',
        `outputFollowsInput must be a boolean, got ${String(outputFollowsInput)}`,
        outputFollowsInput,
      )
    }
    if (maxNewTokens !== undefined && (!Number.isInteger(maxNewTokens) || maxNewTokens < 0)) {
      fail(
        'INVALID_REQUEST',
        `maxNewTokens must be a non-negative integer, got ${String(maxNewTokens)}`,
        maxNewTokens,
      )
    }
    // Room for the output, so that decoding does not copy the prompt to grow the buffers.
    const spare = maxNewTokens === undefined ? 64 : Math.min(maxNewTokens, 65_536)
    // A turn that extends its session's last tokens shares the session's token stream: only its
    // new tokens are copied.
    const slot = sessionId === undefined ? undefined : this.#slots.get(sessionId)
    const shared = slot === undefined ? undefined : streamTokens(slot, inputIds, spare)
    // `copyInputIds: false`: read the caller's token array in place.
    const borrowed = shared === undefined && init.copyInputIds === false && inputIds instanceof Uint32Array
    const tokens = shared ?? (borrowed ? lentView(inputIds as Uint32Array, init) : toTokens(inputIds, spare))
    const len = shared === undefined && !borrowed ? tokens.length - spare : inputIds.length
    if (len === 0) fail('INVALID_REQUEST', 'inputIds must hold at least one token', inputIds)
    const req = new RequestState(this, rid, tokens, len, len + spare, sessionId, extraKey, priority)
    req.borrowed = borrowed
    if (shared !== undefined) {
      slot!.streamTail = req
      req.streamSlot = slot
    }
    return req
  }

  /**
   * Admit a request (first call) or re-match it (retry). A pure forward to the radix cache's
   * `matchPrefix` over `tokenIds[0 : len - 1]` (at least one token is left to compute the
   * logits, as SGLang caps it); the result is written to the request's row, and `lastNode` is
   * locked while the request runs (`cacheProtectedLen = kvCommittedLen = length`).
   *
   * A session turn is first checked: the session must be open and idle, its namespace must
   * match, and the tokens must strictly extend the session's committed tokens
   * (`PREFIX_MISMATCH`). In session mode a later turn restores the slot's row instead (the
   * tree is bypassed, `fromSlot`).
   *
   * Retry (chunked-prefill restore, invariant I3): calling it again on a running request
   * returns the same indices unless another request inserted more of its tokens meanwhile; then
   * the request adopts the tree's indices (its own duplicate slots are freed) and the lock moves
   * (new node first).
   *
   * @example
   * ```ts
   * const req = sc.createRequest({ rid: 'r1', inputIds: prompt })
   * const { length, indices } = sc.matchPrefix(req) // cached prefix, locked
   * sc.matchPrefix(req).indices                     // identical (retry)
   * ```
   */
  matchPrefix(req: SessionRequest): SessionMatchResult {
    const r = this.#requireRequest(req, true)
    if (r.phase === 'running') return this.#rematch(r)
    if (this.#requests.has(r.rid)) fail('DUPLICATE_REQUEST', `request ${r.rid} is already in flight`, r.rid)
    let slot: Slot | undefined
    let ns = r.extraKey ?? ''
    if (r.sessionId !== undefined) {
      slot = this.#requireSession(r.sessionId)
      if (slot.activeRid !== undefined) {
        fail(
          'SESSION_BUSY',
          `session ${slot.sessionId} already has request ${slot.activeRid} in flight (one at a time)`,
          r.sessionId,
        )
      }
      if (r.extraKey !== undefined && r.extraKey !== slot.ns) {
        fail(
          'NAMESPACE_MISMATCH',
          `request ${r.rid} has extraKey ${JSON.stringify(r.extraKey)}, its session ${JSON.stringify(slot.ns)}`,
          r.extraKey,
        )
      }
      const c = slot.committed
      if (!(r.len > c.length && startsWith(r.buf, c))) {
        fail(
          'PREFIX_MISMATCH',
          `request ${r.rid} (${r.len} tokens) does not strictly extend the ${c.length} tokens session ${slot.sessionId} committed`,
          r.rid,
        )
      }
      ns = slot.ns
    }
    // Every check passed: admit.
    const now = this.#now()
    r.ns = ns
    r.extraKey = ns === '' ? undefined : ns
    r.phase = 'running'
    this.#requests.set(r.rid, r)
    let length: number
    let indices: Int32Array | undefined
    let fromSlot = false
    let loaded = 0
    const hooks: Slot[] = []
    if (slot !== undefined) {
      slot.activeRid = r.rid
      slot.lastAccessTime = now
      slot.seq = ++this.#seq
      r.extra = slot.extra
      this.#syncIdle(slot)
    }
    if (this.#legacy && slot !== undefined && slot.row !== undefined) {
      // Legacy restore: the slot lends its row; the tree is not consulted.
      r.reqToToken = slot.row
      r.cacheProtectedLen = slot.protectedLen
      r.kvCommittedLen = slot.committed.length
      r.kvAllocatedLen = slot.allocatedLen
      r.restored = true
      r.slotAllocated = slot.allocatedLen
      r.lastNode = slot.lastNode!
      this.cache.incLockRef(r.lastNode)
      length = r.kvCommittedLen
      indices = r.reqToToken.slice(0, length)
      fromSlot = true
    } else {
      // A held session's node is the path of its committed tokens, which the prompt extends: the
      // walk starts there instead of comparing the whole prompt again.
      const from = slot !== undefined && !slot.pinned ? slot.lastNode : undefined
      const tokens = r.buf.subarray(0, r.len - 1)
      // The row has room for the prompt and the expected output; the match writes into it.
      this.#ensureRow(r, r.rowHint)
      const into = r.reqToToken
      const m =
        from === undefined
          ? this.cache.matchPrefix(tokens, { extraKey: ns, into })
          : this.cache._matchPrefixFrom(from, tokens, { extraKey: ns, into })
      length = m.length
      let lastNode = m.lastNode
      if (m.hostLength > this.#loadThreshold) {
        // Load-back on match (SGLang HiCache): copy the host hit back instead of recomputing it.
        const lb = this.#loadBack(m.lastHostNode, m.hostLength, hooks)
        if (lb !== undefined) {
          loaded = m.hostLength
          into.set(lb, length)
          length += loaded
          lastNode = m.lastHostNode // locked by #loadBack: that lock is the request's
        }
      }
      // The caller's copy of row[0, length), made when first read: the row never changes there.
      indices = undefined
      r.cacheProtectedLen = length
      r.kvCommittedLen = length
      r.kvAllocatedLen = length
      if (loaded === 0) this.cache.incLockRef(lastNode)
      r.lastNode = lastNode
    }
    r.cachedTokens = length
    let reprefill = 0
    if (slot !== undefined) {
      // What the session had committed (before an eviction, for a reopened one) and no longer finds.
      const had = slot.committed.length > 0 ? slot.committed.length : Math.min(slot.lostCommitted, r.len - 1)
      reprefill = Math.max(0, had - length)
      slot.lostCommitted = 0
      this.#reprefillTokens += reprefill
    }
    this.#loadedBackTokens += loaded
    for (const h of hooks) this.#runExtraHook(h)
    return matchResult(length, indices, r, r.lastNode!, fromSlot, reprefill, loaded)
  }

  /**
   * Compute (allocate and commit) the next `numTokens` prompt positions of a running request,
   * one prefill chunk. Calls {@link SessionCache.ensureFree} for the pages it needs first.
   * Returns the new slots. Refused with `INVALID_REQUEST` past the prompt; `OUT_OF_MEMORY` when
   * the pool cannot hold the chunk even after evicting.
   *
   * @example
   * ```ts
   * sc.matchPrefix(req)
   * sc.prefill(req, 512)                          // first chunk
   * sc.cacheUnfinishedReq(req, { chunked: true })
   * ```
   */
  prefill(req: SessionRequest, numTokens: number): Int32Array {
    const r = this.#requireRequest(req, false)
    if (!Number.isInteger(numTokens) || numTokens < 0) {
      fail('INVALID_REQUEST', `numTokens must be a non-negative integer, got ${String(numTokens)}`, numTokens)
    }
    const target = r.kvCommittedLen + numTokens
    if (target > r.originInputIds.length) {
      fail(
        'INVALID_REQUEST',
        `prefill of ${numTokens} tokens from ${r.kvCommittedLen} passes the ${r.originInputIds.length}-token prompt`,
        numTokens,
      )
    }
    const from = r.kvCommittedLen
    this.#extendTo(r, target)
    r.kvCommittedLen = target
    return r.reqToToken.subarray(from, target)
  }

  /**
   * One decode step of a running request whose prompt is fully prefilled: the forward pass
   * computes the KV of the last token (a new slot, after {@link SessionCache.ensureFree}) and
   * produces `tokenId`, appended to `outputIds`. The first call after the prefill only records
   * the token the prefill produced, as in SGLang (so a finished request has committed
   * `prompt + output - 1` tokens).
   *
   * @example
   * ```ts
   * sc.prefill(req, req.originInputIds.length - req.kvCommittedLen)
   * for (const tok of generated) sc.decode(req, tok)
   * ```
   */
  decode(req: SessionRequest, tokenId: number): void {
    const r = this.#requireRequest(req, false)
    if (!Number.isInteger(tokenId) || tokenId < 0 || tokenId > 0xffffffff) {
      fail('INVALID_REQUEST', `token ${String(tokenId)} is not an integer in [0, 2^32)`, tokenId)
    }
    const expect = r.outputIds.length > 0 ? r.len - 1 : r.len
    if (r.kvCommittedLen !== expect) {
      fail(
        'INVALID_REQUEST',
        `decode before the prompt is prefilled (${r.kvCommittedLen} of ${r.originInputIds.length} tokens)`,
        r.rid,
      )
    }
    if (r.outputIds.length > 0) {
      this.#extendTo(r, r.len)
      r.kvCommittedLen = r.len
    }
    if (r.borrowed && r.len < r.buf.length && r.buf[r.len] === tokenId) {
      // The caller's buffer goes on with this token (`outputFollowsInput`): read it in place.
      r.len++
      r.outputIds.push(tokenId)
      return
    }
    if (r.len === r.buf.length || r.borrowed) {
      // Grow by a quarter (a turn's output is short next to its prompt): less to allocate and
      // retain than doubling a prompt of tens of thousands of tokens, still amortized O(1). The
      // caller's array (`copyInputIds: false`) is copied first, with room for the expected output
      // (`rowHint`): the cache never writes to it.
      const b = new Uint32Array(r.borrowed ? Math.max(r.rowHint, r.len + 1) : r.len + (r.len >> 2) + 64)
      b.set(r.buf.subarray(0, r.len))
      r.buf = b
      r.borrowed = false
      if (r.streamSlot !== undefined) r.streamSlot.stream = b
    }
    r.buf[r.len++] = tokenId
    r.outputIds.push(tokenId)
  }

  /**
   * After a prefill chunk (`chunked: true`) or the end of the prefill of a request that is not
   * finished: insert the computed tokens (page-aligned) into the tree, free the request's
   * duplicate slots for tokens the tree already held, re-match to adopt the tree's canonical
   * indices, and move the request's lock to the new node (new first, then old).
   * `cacheProtectedLen` becomes the aligned length; the partial tail page stays the request's.
   * Block mode does this for every request, session turn or not
   * (`docs/design/prototype.md#block-level-design`); session mode skips later session turns (legacy).
   *
   * @example
   * ```ts
   * sc.prefill(req, 100)
   * sc.cacheUnfinishedReq(req, { chunked: true }).protectedLen // 96 with pageSize 16
   * ```
   */
  cacheUnfinishedReq(req: SessionRequest, options: { readonly chunked?: boolean } = {}): CacheReqResult {
    const r = this.#requireRequest(req, false)
    if (options === null || typeof options !== 'object')
      fail('INVALID_OPTION', 'options must be an object', options)
    if (r.restored)
      return { insertedTokens: 0, prefixLen: 0, freedTokens: 0, protectedLen: r.cacheProtectedLen }
    const chunked = options.chunked === true
    const c = r.kvCommittedLen
    const tokens = r.buf.subarray(0, c)
    // The request's lock sits on the path of its tokens [0, cacheProtectedLen): walks start there.
    const res = this.cache._insertFrom(r.lastNode!, tokens, r.reqToToken.subarray(0, c), {
      extraKey: r.ns,
      priority: r.priority,
      chunked,
      lendTokens: r.borrowed && this.#lendFrozen,
    })
    const p = r.cacheProtectedLen
    let freed = 0
    if (res.prefixLen > p) {
      this.pool.free(r.reqToToken.subarray(p, res.prefixLen))
      freed = res.prefixLen - p
    }
    const aligned = res.alignedLen
    if (aligned > p) {
      // Re-match (as SGLang does) to adopt the tree's canonical slots for [p, aligned). The insert
      // just ended at `res.lastNode`, whose path is these tokens: the walk starts there (nothing
      // left to compare), with the same effects as a walk from the request's lock. Only the slots
      // of [p, prefixLen) can differ from the row's: the tree took the row's own after that.
      const to = Math.max(p, res.prefixLen)
      const m = this.cache._matchPrefixFrom(
        res.lastNode,
        tokens.subarray(0, aligned),
        { extraKey: r.ns, into: this.#matchScratch(aligned) },
        p,
        to,
      )
      if (m.length !== aligned) {
        throw new Error(`session-cache: re-match found ${m.length} of ${aligned} just-inserted tokens`)
      }
      if (to > p) r.reqToToken.set(m.indices.subarray(p, to), p)
      this.#moveRequestLock(r, m.lastNode)
      r.cacheProtectedLen = aligned
    }
    return {
      insertedTokens: aligned - res.prefixLen,
      prefixLen: res.prefixLen,
      freedTokens: freed,
      protectedLen: r.cacheProtectedLen,
    }
  }

  /**
   * Finish a request: insert its committed tokens `tokenIds[0:kvCommittedLen)` (page-aligned)
   * into the tree, free its duplicate slots and its unaligned tail, and drop its lock. For a
   * session turn (block mode) the session's lock then moves to the new deepest node —
   * increment the new node first, then decrement the old (`docs/design/prototype.md#lock-order`) — and the slot
   * records the committed tokens (a demoted session is held on the device again). A turn that
   * ends before computing what its session retains — only possible when a demoted session's
   * load-back found no device room and the turn finished before recomputing — leaves the session's
   * committed tokens and node as they were. Session mode parks a session turn's row in the slot
   * instead (no insert, no free). Refused with `REQUEST_FINISHED` when called twice.
   *
   * @example
   * ```ts
   * sc.cacheFinishedReq(req)                        // committed tokens now in the tree
   * sc.cacheFinishedReq(req)                        // throws REQUEST_FINISHED
   * ```
   */
  cacheFinishedReq(req: SessionRequest, options: FinishOptions = {}): CacheReqResult {
    const r = this.#requireRequest(req, false)
    if (options === null || typeof options !== 'object')
      fail('INVALID_OPTION', 'options must be an object', options)
    const slot = r.sessionId === undefined ? undefined : this.#slots.get(r.sessionId)
    const c = r.kvCommittedLen
    let result: CacheReqResult
    let keepSession = false
    let replacedExtra = false
    let oldExtra: unknown
    if (slot !== undefined && 'extra' in options && options.extra !== slot.extra) {
      replacedExtra = slot.extra !== undefined
      oldExtra = slot.extra
    }
    if (this.#legacy && slot !== undefined) {
      // Legacy: park the whole row in the slot; the tree only ever holds the first prompt.
      this.#moveSessionLock(slot, r.lastNode!)
      slot.row = r.reqToToken
      slot.protectedLen = r.cacheProtectedLen
      slot.allocatedLen = r.kvAllocatedLen
      this.cache.decLockRef(r.lastNode!)
      result = { insertedTokens: 0, prefixLen: 0, freedTokens: 0, protectedLen: r.cacheProtectedLen }
    } else {
      const res = this.cache._insertFrom(r.lastNode!, r.buf.subarray(0, c), r.reqToToken.subarray(0, c), {
        extraKey: r.ns,
        priority: r.priority,
        lendTokens: r.borrowed && this.#lendFrozen,
      })
      const p = r.cacheProtectedLen
      let freed = 0
      if (res.prefixLen > p) {
        this.pool.free(r.reqToToken.subarray(p, res.prefixLen))
        freed += res.prefixLen - p
      }
      const aligned = res.alignedLen
      if (r.kvAllocatedLen > aligned) {
        this.pool.free(r.reqToToken.subarray(aligned, r.kvAllocatedLen))
        freed += ceilPage(r.kvAllocatedLen, this.pageSize) - aligned
      }
      if (slot !== undefined) {
        // A turn that ends before computing what its session retains (a demoted session whose
        // load-back found no device room, finished early) leaves the session as it was: its
        // retained prefix must not shrink (I2).
        if (slot.lastNode !== undefined && aligned < this.cache.tokensUnder(slot.lastNode)) keepSession = true
        else this.#moveSessionLock(slot, res.lastNode)
      }
      this.cache.decLockRef(r.lastNode!)
      result = {
        insertedTokens: aligned - res.prefixLen,
        prefixLen: res.prefixLen,
        freedTokens: freed,
        protectedLen: aligned,
      }
    }
    this.#endStream(r, slot)
    if (slot !== undefined) {
      if (!keepSession) slot.committed = r.buf.subarray(0, c)
      slot.turns++
      slot.activeRid = undefined
      slot.lastAccessTime = this.#now()
      slot.seq = ++this.#seq
      if ('extra' in options) slot.extra = options.extra
      this.#sessionTurns++
      this.#syncIdle(slot)
    }
    r.phase = 'finished'
    r.lastNode = undefined
    this.#giveRow(r)
    this.#requests.delete(r.rid)
    this.#requestsFinished++
    if (replacedExtra && this.#releaseExtra !== undefined) this.#releaseExtra(oldExtra, slot!.sessionId)
    return result
  }

  /**
   * Abort a request (client abort, retraction, out of memory): free every request-owned slot,
   * drop its lock, insert nothing. A session turn leaves its session as it was before the turn
   * (session mode: pages the slot lent stay the slot's). A request that was never admitted is
   * just marked aborted.
   *
   * @example
   * ```ts
   * try { sc.prefill(req, 4096) } catch { sc.abortReq(req) }
   * ```
   */
  abortReq(req: SessionRequest): void {
    const r = this.#requireRequest(req, true)
    if (r.phase === 'created') {
      this.#endStream(r, undefined)
      r.phase = 'aborted'
      this.#requestsAborted++
      return
    }
    const from = r.restored ? ceilPage(r.slotAllocated, this.pageSize) : r.cacheProtectedLen
    if (r.kvAllocatedLen > from) this.pool.free(r.reqToToken.subarray(from, r.kvAllocatedLen))
    this.cache.decLockRef(r.lastNode!)
    if (r.sessionId !== undefined) {
      const slot = this.#slots.get(r.sessionId)
      if (slot !== undefined) {
        slot.activeRid = undefined
        this.#syncIdle(slot)
      }
    }
    this.#endStream(r, undefined)
    r.phase = 'aborted'
    r.lastNode = undefined
    this.#giveRow(r)
    this.#requests.delete(r.rid)
    this.#requestsAborted++
  }

  /**
   * Requests admitted and not yet finished or aborted, in admission order.
   *
   * @example
   * ```ts
   * for (const r of sc.inFlightRequests()) console.log(r.rid, r.kvCommittedLen)
   * ```
   */
  inFlightRequests(): SessionRequest[] {
    return Array.from(this.#requests.values())
  }

  // ---------------------------------------------------------------------------------------------
  // Memory pressure

  /**
   * Make `numTokens` slots free, like SGLang's `evict_from_tree_cache` before an allocation:
   * evict the shortfall from the tree (block-level: the tree's LRU sheds leaves, or pages with
   * `evictGranularity: 'page'`); when nothing is evictable, release the least-recently-used idle
   * session that holds KV and go on (block mode: its pages become evictable; session mode: its
   * tail is freed at once). Never touches a request in flight or a locked page.
   *
   * @example
   * ```ts
   * const { ok, freedTokens } = sc.ensureFree(2048)
   * if (!ok) console.log('still short: everything left is in use')
   * ```
   */
  ensureFree(numTokens: number): EnsureFreeResult {
    if (!Number.isInteger(numTokens) || numTokens < 0) {
      fail('INVALID_OPTION', `numTokens must be a non-negative integer, got ${String(numTokens)}`, numTokens)
    }
    const res = this.#ensureFree(numTokens)
    for (const s of res.dropped) this.#runExtraHook(s)
    return {
      ok: res.ok,
      available: res.available,
      freedTokens: res.freed,
      releasedSessions: res.released,
      demotedSessions: res.demoted,
    }
  }

  /**
   * Evict at least `numTokens` unlocked tokens from the tree (`RadixCache.evict`), recorded as one
   * eviction. Returns the tokens freed.
   *
   * @example
   * ```ts
   * sc.evict(64) // e.g. 64 with pageSize 16 and evictGranularity 'page'
   * ```
   */
  evict(numTokens: number): number {
    if (typeof numTokens !== 'number' || Number.isNaN(numTokens) || numTokens < 0) {
      fail('INVALID_OPTION', `numTokens must be a non-negative number, got ${String(numTokens)}`, numTokens)
    }
    return this.#evictTree(numTokens)
  }

  // ---------------------------------------------------------------------------------------------
  // Accounting and counters

  /**
   * The pool accounting identity `free + evictable + protected + requestOwned + sessionHeld ==
   * poolSize` (SGLang's idle memory check), with its terms.
   *
   * @example
   * ```ts
   * const acc = sc.poolAccounting()
   * if (!acc.balanced) throw new Error(`KV pool leak: ${JSON.stringify(acc)}`)
   * ```
   */
  poolAccounting(): PoolAccounting {
    return poolAccounting(this.pool, this.cache, this.#requests.values(), this.#slots.values(), this.#legacy)
  }

  /**
   * Counters a serving engine would export (evictions, tokens freed per eviction, sessions held,
   * resident tokens per session...).
   *
   * @example
   * ```ts
   * const { evictions, evictionHistogram, sessionsHeld } = sc.stats()
   * console.log(evictions, evictionHistogram.mean, evictionHistogram.max, sessionsHeld)
   * ```
   */
  stats(): SessionCacheStats {
    const perSession = new Map<string, number>()
    let resident = 0
    let hostResident = 0
    let demotedNow = 0
    for (const s of this.#slots.values()) {
      const t = slotResidency(this.cache, s, this.#legacy)
      perSession.set(s.sessionId, t.device)
      resident += t.device
      hostResident += t.host
      if (s.pinned) demotedNow++
    }
    return {
      granularity: this.granularity,
      sessionsHeld: this.#slots.size,
      requestsInFlight: this.#requests.size,
      sessionsOpened: this.#sessionsOpened,
      sessionsReleased: this.#sessionsReleased,
      sessionsEvicted: this.#sessionsEvicted,
      sessionTurns: this.#sessionTurns,
      requestsFinished: this.#requestsFinished,
      requestsAborted: this.#requestsAborted,
      evictions: this.#evictions,
      evictedTokens: this.#evictedTokens,
      evictionHistogram: this.#hist.snapshot(),
      releasedTokens: this.#releasedTokens,
      reprefillTokens: this.#reprefillTokens,
      residentTokens: resident,
      residentTokensPerSession: perSession,
      hostResidentTokens: hostResident,
      sessionsDemoted: this.#sessionsDemoted,
      sessionsDemotedNow: demotedNow,
      loadedBackTokens: this.#loadedBackTokens,
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Internals

  #requireRequest(req: SessionRequest, allowCreated: boolean): RequestState {
    if (!RequestState.ownedBy(req, this)) {
      fail('UNKNOWN_REQUEST', 'not a request created by this SessionCache', req)
    }
    const r = req
    if (r.phase === 'finished' || r.phase === 'aborted') {
      fail('REQUEST_FINISHED', `request ${r.rid} is already ${r.phase}`, r.rid)
    }
    if (r.phase === 'created' && !allowCreated) {
      fail('UNKNOWN_REQUEST', `request ${r.rid} was not admitted (call matchPrefix first)`, r.rid)
    }
    return r
  }

  #requireSession(sessionId: string): Slot {
    const slot = this.#slots.get(sessionId)
    if (slot !== undefined) return slot
    const why = this.#released.get(sessionId)?.why
    if (why !== undefined) {
      fail(
        'SESSION_RELEASED',
        `session ${sessionId} was ${why === 'evicted' ? 'evicted' : 'released'}; open it again to start over`,
        sessionId,
      )
    }
    fail('UNKNOWN_SESSION', `session ${String(sessionId)} was never opened`, sessionId)
  }

  /** A reusable buffer for `n` match indices (a re-match's are copied out at once). */
  #matchScratch(n: number): Int32Array {
    if (this.#scratch.length < n) this.#scratch = new Int32Array(Math.max(n, this.#scratch.length * 2))
    return this.#scratch
  }

  #scratch: Int32Array = EMPTY_I32

  /** Give the request a row with room for `n` positions (from the pool), keeping its slots. */
  #ensureRow(r: RequestState, n: number): void {
    const row = r.reqToToken
    if (row.length >= n) return
    const grown = this.#rows.take(n)
    grown.set(row.subarray(0, r.kvAllocatedLen))
    // Session mode may have lent the row by a slot: it stays the slot's.
    if (!this.#legacy) this.#rows.give(row)
    r.reqToToken = grown
  }

  /**
   * At a request's end (block mode): its row goes back to the pool (SGLang frees a request's
   * `req_to_token_pool` row too); the request shows an empty one. Session mode keeps rows (a
   * session slot parks them).
   */
  #giveRow(r: RequestState): void {
    if (this.#legacy) return
    this.#rows.give(r.reqToToken)
    r.reqToToken = EMPTY_I32
  }

  /**
   * At a request's end: the tokens it wrote to its session's stream are the stream's now. A
   * session turn that ended on a copy of its own (its prompt did not extend the stream) leaves
   * that copy as the stream when no other request owns the stream's end.
   */
  #endStream(r: RequestState, slot: Slot | undefined): void {
    const s = r.streamSlot
    if (s !== undefined) {
      s.streamLen = r.len
      s.streamTail = undefined
      r.streamSlot = undefined
    } else if (slot !== undefined && r.buf !== slot.stream && !r.borrowed) {
      const tail = slot.streamTail
      if (tail === undefined || tail.phase === 'finished' || tail.phase === 'aborted') {
        slot.stream = r.buf
        slot.streamLen = r.len
        slot.streamTail = undefined
      }
    }
  }

  /** Internal: the row pool's consistency with the requests in flight (for the invariant checks). @internal */
  _checkRows(): string[] {
    const problems: string[] = []
    const inUse = new Set<ArrayBufferLike>()
    for (const r of this.#requests.values()) {
      const b = r.reqToToken.buffer
      if (r.reqToToken.length > 0 && inUse.has(b)) problems.push(`request ${r.rid} shares its KV row`)
      inUse.add(b)
    }
    for (const row of this.#rows.freeRows()) {
      if (inUse.has(row.buffer)) problems.push('a KV row in the pool belongs to a request in flight')
    }
    if (!this.#legacy && this.#rows.rowsOut !== this.#requests.size) {
      problems.push(`${this.#rows.rowsOut} KV rows taken, ${this.#requests.size} requests in flight`)
    }
    return problems
  }

  /** Give positions `[kvAllocatedLen, target)` slots (paged layout), evicting the shortfall first. */
  #extendTo(r: RequestState, target: number): void {
    const have = r.kvAllocatedLen
    if (target <= have) return
    const ps = this.pageSize
    const pages = Math.ceil(target / ps) - Math.ceil(have / ps)
    const need = pages * ps
    if (need > this.pool.availableSize()) {
      const res = this.#ensureFree(need)
      for (const s of res.dropped) this.#runExtraHook(s)
      if (!res.ok) {
        fail(
          'OUT_OF_MEMORY',
          `request ${r.rid} needs ${need} token slots, ${res.available} free after evicting everything unlocked`,
          need,
        )
      }
    }
    const lastLoc = have % ps === 0 ? -1 : r.reqToToken[have - 1]!
    this.#ensureRow(r, target)
    if (pages === 0) {
      // Inside the request's last page (a decode step, mostly): its slots follow `lastLoc`, the
      // page is already the request's; nothing to ask the pool, nothing to allocate.
      const row = r.reqToToken
      for (let i = have; i < target; i++) row[i] = lastLoc + 1 + (i - have)
    } else {
      const pool = this.pool
      if (pool.allocExtendInto !== undefined) pool.allocExtendInto(lastLoc, target - have, r.reqToToken, have)
      else r.reqToToken.set(pool.allocExtend(lastLoc, target - have), have)
    }
    r.kvAllocatedLen = target
  }

  #rematch(r: RequestState): SessionMatchResult {
    if (!r.restored) {
      const m = this.cache._matchPrefixFrom(r.lastNode!, r.buf.subarray(0, r.len - 1), {
        extraKey: r.ns,
        into: this.#matchScratch(r.len - 1),
      })
      if (m.length > r.kvCommittedLen) {
        // Another request inserted more of our tokens: adopt the tree's slots.
        const p = r.cacheProtectedLen
        const end = Math.min(r.kvAllocatedLen, m.length)
        if (end > p) this.pool.free(r.reqToToken.subarray(p, end))
        this.#ensureRow(r, m.length)
        r.reqToToken.set(m.indices.subarray(p), p)
        this.#moveRequestLock(r, m.lastNode)
        r.cacheProtectedLen = m.length
        r.kvCommittedLen = m.length
        if (r.kvAllocatedLen < m.length) r.kvAllocatedLen = m.length
      }
    }
    const length = r.kvCommittedLen
    r.cachedTokens = length
    return {
      length,
      indices: r.reqToToken.slice(0, length),
      lastNode: r.lastNode!,
      fromSlot: r.restored,
      reprefillTokens: 0,
      loadedTokens: 0,
    }
  }

  /**
   * Admission load-back of the host-only path ending at `node` (`need` tokens): lock the path, make
   * room like any allocation (`#ensureFree`: tree eviction, then demoting or releasing idle
   * sessions), load. Returns the new device slots with the path still locked (the request's lock),
   * or `undefined` (path unlocked again) when the device cannot make room. Sessions released on
   * the way are appended to `hooks`, whose `extra` hooks run once the admission is complete.
   */
  #loadBack(node: NodeHandle, need: number, hooks: Slot[]): Int32Array | undefined {
    this.cache.incLockRef(node)
    if (this.pool.availableSize() < need) {
      const res = this.#ensureFree(need)
      hooks.push(...res.dropped)
      if (!res.ok) {
        this.cache.decLockRef(node)
        return undefined
      }
    }
    return this.cache.loadBack(node).indices
  }

  /** Move a request's lock: increment the new node first, then decrement the old one. */
  #moveRequestLock(r: RequestState, node: NodeHandle): void {
    const old = r.lastNode!
    if (node === old) return
    this.cache.incLockRef(node)
    this.cache.decLockRef(old)
    r.lastNode = node
  }

  /**
   * Move a session's lock: increment the new node first, then decrement the old one. A demoted
   * session trades its host reference for the device lock (it is held on the device again).
   */
  #moveSessionLock(slot: Slot, node: NodeHandle): void {
    const old = slot.lastNode
    if (node === old && !slot.pinned) return
    this.#unmarkIdle(slot)
    this.cache.incLockRef(node)
    if (old !== undefined) {
      if (slot.pinned) this.cache.releaseHost(old)
      else this.cache.decLockRef(old)
    }
    slot.pinned = false
    slot.lastNode = node
  }

  /**
   * Bring the slot's idle bookkeeping up to date after its state moved: an idle slot (no request
   * in flight, not demoted) has its lock marked idle in the tree, so `cache.idleLockedTokens()`
   * counts what only idle sessions protect, and its parked tail counts in `#idleHeld`.
   */
  #syncIdle(s: Slot): void {
    const want = s.activeRid === undefined && !s.pinned ? s.lastNode : undefined
    if (s.idleMark !== want) {
      if (s.idleMark !== undefined) this.cache.unmarkLockIdle(s.idleMark)
      if (want !== undefined) this.cache.markLockIdle(want)
      s.idleMark = want
      s.soleEpoch = -1
    }
    const held = heldBySlot(s, this.#legacy, this.pageSize)
    this.#idleHeld += held - s.heldCounted
    s.heldCounted = held
  }

  /** Take back the slot's idle mark (before its lock moves or is released). */
  #unmarkIdle(s: Slot): void {
    if (s.idleMark === undefined) return
    this.cache.unmarkLockIdle(s.idleMark)
    s.idleMark = undefined
  }

  /**
   * Drop a slot: release its lock, and in session mode free its tail. Does not run the `extra`
   * hook (callers run it once the cache is consistent). Returns the slots freed.
   */
  #dropSlot(slot: Slot, why: 'released' | 'evicted'): number {
    let freed = 0
    if (this.#legacy && slot.row !== undefined && slot.allocatedLen > slot.protectedLen) {
      this.pool.free(slot.row.subarray(slot.protectedLen, slot.allocatedLen))
      freed = ceilPage(slot.allocatedLen, this.pageSize) - slot.protectedLen
    }
    this.#unmarkIdle(slot)
    this.#idleHeld -= slot.heldCounted
    slot.heldCounted = 0
    if (slot.lastNode !== undefined) {
      if (slot.pinned) this.cache.releaseHost(slot.lastNode)
      else this.cache.decLockRef(slot.lastNode)
    }
    this.#slots.delete(slot.sessionId)
    this.#released.delete(slot.sessionId)
    if (this.#releasedMemory > 0) {
      this.#released.set(slot.sessionId, { why, committed: slot.committed.length })
      if (this.#released.size > this.#releasedMemory) {
        const oldest = this.#released.keys().next().value
        if (oldest !== undefined) this.#released.delete(oldest)
      }
    }
    return freed
  }

  /** Drop a slot under pressure or TTL: counts as an eviction (a freeing one in session mode). */
  #evictSlot(slot: Slot): number {
    const freed = this.#dropSlot(slot, 'evicted')
    this.#sessionsEvicted++
    if (freed > 0) this.#record('session', freed, freed, slot.sessionId)
    return freed
  }

  #runExtraHook(slot: Slot): void {
    if (slot.extra !== undefined && this.#releaseExtra !== undefined)
      this.#releaseExtra(slot.extra, slot.sessionId)
  }

  #lruIdle(): Slot | undefined {
    let best: Slot | undefined
    for (const s of this.#slots.values()) {
      if (s.activeRid !== undefined || s.pinned) continue
      if (this.#legacy ? s.row === undefined && s.lastNode === undefined : s.lastNode === undefined) continue
      if (!this.#legacy && this.cache.tokensUnder(s.lastNode!) === 0) continue
      if (
        best === undefined ||
        s.lastAccessTime < best.lastAccessTime ||
        (s.lastAccessTime === best.lastAccessTime && s.seq < best.seq)
      ) {
        best = s
      }
    }
    return best
  }

  #ensureFree(numTokens: number): {
    ok: boolean
    available: number
    freed: number
    released: string[]
    demoted: string[]
    dropped: Slot[]
  } {
    let freed = 0
    const released: string[] = []
    const demoted: string[] = []
    const dropped: Slot[] = []
    // Like SGLang's evict_from_tree_cache, the first shortfall always goes to the tree's evict.
    let first = true
    for (;;) {
      const avail = this.pool.availableSize()
      if (avail >= numTokens) break
      const short = numTokens - avail
      if (first || this.cache.evictableSize() > 0) {
        first = false
        freed += this.#evictTree(short)
        continue
      }
      const v = this.#lruIdle()
      if (v === undefined) break
      freed += this.#shed(v, demoted, released, dropped)
    }
    const available = this.pool.availableSize()
    return { ok: available >= numTokens, available, freed, released, demoted, dropped }
  }

  /**
   * Pressure on an idle session that holds a device lock: with a host tier (block mode), demote
   * it when the host can retain its KV; otherwise release it (an eviction). Returns slots freed.
   */
  #shed(v: Slot, demoted: string[], released: string[], dropped: Slot[]): number {
    this.#unmarkIdle(v) // a demotion drops the slot's device lock (and a release drops the slot)
    if (this.#tiered && !this.#legacy && demoteSlot(this.cache, v)) {
      this.#syncIdle(v)
      this.#sessionsDemoted++
      demoted.push(v.sessionId)
      return 0
    }
    const freed = this.#evictSlot(v)
    released.push(v.sessionId)
    dropped.push(v)
    return freed
  }

  #evictTree(numTokens: number): number {
    const res = this.cache.evict(numTokens)
    if (res.evictedTokens > 0) this.#record('tree', numTokens, res.evictedTokens, undefined)
    return res.evictedTokens
  }

  #record(kind: 'tree' | 'session', requested: number, freed: number, sessionId: string | undefined): void {
    this.#evictions++
    this.#evictedTokens += freed
    this.#hist.observe(freed)
    if (this.#onEviction !== undefined) {
      this.#onEviction({ kind, requestedTokens: requested, freedTokens: freed, sessionId, time: this.#now() })
    }
  }
}
