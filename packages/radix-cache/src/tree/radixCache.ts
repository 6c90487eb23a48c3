import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import { KvEventEmitter } from '../events/kvEventEmitter.js'
import type { BlockHasher } from '../hashing/blockHasher.js'
import { sglangBlockHasher } from '../hashing/sglangBlockHasher.js'
import { resolveHostTier } from '../tier/config.js'
import { HostTier } from '../tier/hostTier.js'
import type { HostTierConfig, KvSlotAllocator, LoadBackResult, Residency } from '../tier/types.js'
import { checkInternals } from './checkInternals.js'
import { DEV, EMPTY_INDICES, HOST, MAX_NODES, NodeStore, SLOT_MASK, SLOT_SPAN } from './nodeStore.js'
import {
  EVICTION_POLICIES,
  type EvictGranularity,
  type EvictionPolicy,
  type EvictResult,
  type InsertOptions,
  type InsertResult,
  type MatchOptions,
  type MatchResult,
  type NodeHandle,
  type NodeInfo,
  type RadixCacheOptions,
  type RadixCacheStats,
} from './types.js'

const POLICY_CODE: Record<EvictionPolicy, number> = {
  lru: 0,
  lfu: 1,
  fifo: 2,
  mru: 3,
  filo: 4,
  priority: 5,
  slru: 6,
}

// The cache is three parts: the nodes and their device bookkeeping (`NodeStore`), the host tier
// (`HostTier`, only with `hostTier`) and the KV events (`KvEventEmitter`, only with `onEvent`).
// This class validates input, keeps the public API and runs the hot paths (match, insert, locks,
// device eviction) over the node arrays.

/**
 * A paged radix tree over token ids: the prefix cache of an LLM serving engine, with SGLang's
 * semantics (`RadixCache`) in camelCase.
 *
 * - Only page-aligned prefixes enter the tree; matches are page multiples.
 * - `insert` returns how many tokens were already present and **never frees**: the caller owns
 *   its duplicate KV slots for `[protectedLen, prefixLen)` and its unaligned tail, and frees them
 *   (SGLang's ownership rule: the tree owns the page-aligned committed prefix, the request owns
 *   the rest).
 * - `matchPrefix` splits a node at the match boundary and refreshes access times (unless
 *   `readOnly`); lock the returned `lastNode` while using the prefix.
 * - Locks walk to the root and move sizes between evictable and protected on 0↔1 transitions.
 * - The evictable-leaf order is kept in an indexed heap, updated incrementally: an `evict` that
 *   removes `k` leaves costs O(k log n).
 * - With `hostTier`, a second tier in host memory (SGLang HiCache's L2): device eviction demotes
 *   pages to it (`write_back`) or finds the copy `write_through` made; the host evicts by its own
 *   policy; `matchPrefix` reports `hostLength` beyond the device hit; `loadBack` promotes host
 *   pages onto device slots; `protectHost` keeps a path on the host while letting it leave the
 *   device. Sizes (`totalSize`, `evictableSize`, `protectedSize`) stay device sizes.
 *
 * @example
 * ```ts
 * import { RadixCache, PagedAllocator } from '@kvc/radix-cache'
 * const pool = new PagedAllocator({ size: 1024, pageSize: 4 })
 * const cache = new RadixCache({ pageSize: 4, allocator: pool })
 * const prompt = Uint32Array.of(1, 2, 3, 4, 5, 6, 7, 8, 9)
 * const slots = pool.alloc(prompt.length)
 * const { prefixLen, alignedLen } = cache.insert(prompt, slots) // 0, 8: slot of token 9 stays ours
 * const hit = cache.matchPrefix(Uint32Array.of(1, 2, 3, 4, 5, 6, 7, 8, 42))
 * console.log(hit.length, hit.indices) // 8, the first 8 slots
 * cache.incLockRef(hit.lastNode)       // protect while in use
 * cache.decLockRef(hit.lastNode)
 * cache.evict(8)                        // frees the slots back to `pool`
 * ```
 */
export class RadixCache {
  /** Tokens per page. */
  readonly pageSize: number
  /** Eviction order of unlocked leaves. */
  readonly evictionPolicy: EvictionPolicy
  /** Whole-leaf or page-by-page eviction. */
  readonly evictGranularity: EvictGranularity
  /** Whether KV slot indices are stored per token. */
  readonly trackValues: boolean
  /** The host tier's configuration, `undefined` without one. */
  readonly hostTier: HostTierConfig | undefined

  readonly #now: () => number
  readonly #hasher: BlockHasher | undefined
  readonly #st: NodeStore
  readonly #host: HostTier | undefined
  readonly #events: KvEventEmitter | undefined

  // Counters.
  #matchCalls = 0
  #matchQueried = 0
  #matchHit = 0
  #insertCalls = 0
  #insertedTokens = 0

  constructor(options: RadixCacheOptions = {}) {
    const pageSize = options.pageSize ?? 1
    if (!Number.isInteger(pageSize) || pageSize <= 0) {
      throw invalidOption(`pageSize must be a positive integer, got ${String(pageSize)}`, pageSize)
    }
    const policy = options.evictionPolicy ?? 'lru'
    if (!EVICTION_POLICIES.includes(policy)) {
      throw invalidOption(
        `evictionPolicy must be one of ${EVICTION_POLICIES.join(', ')}, got ${String(policy)}`,
        policy,
      )
    }
    const granularity = options.evictGranularity ?? 'leaf'
    if (granularity !== 'leaf' && granularity !== 'page') {
      throw invalidOption(
        `evictGranularity must be 'leaf' or 'page', got ${String(granularity)}`,
        granularity,
      )
    }
    const slru = options.slruProtectedThreshold ?? 2
    if (!Number.isFinite(slru)) throw invalidOption(`slruProtectedThreshold must be finite`, slru)
    const initial = options.initialNodeCapacity ?? 1024
    if (!Number.isInteger(initial) || initial < 1 || initial > MAX_NODES) {
      throw invalidOption(`initialNodeCapacity must be an integer in [1, 2^26], got ${initial}`, initial)
    }
    if (options.now !== undefined && typeof options.now !== 'function') {
      throw invalidOption('now must be a function returning milliseconds', options.now)
    }
    this.pageSize = pageSize
    this.evictionPolicy = policy
    this.evictGranularity = granularity
    this.trackValues = options.trackValues ?? true
    this.#now = options.now ?? defaultNow
    const onEvent = options.onEvent
    const hasEvents = typeof onEvent === 'function'
    this.#hasher = hasEvents ? (options.blockHasher ?? sglangBlockHasher()) : options.blockHasher
    const batching = options.eventBatching ?? 'page'
    if (batching !== 'page' && batching !== 'node') {
      throw invalidOption(`eventBatching must be 'page' or 'node', got ${String(batching)}`, batching)
    }
    const tier =
      options.hostTier === undefined
        ? undefined
        : resolveHostTier(options.hostTier, pageSize, this.trackValues, options.allocator)
    this.hostTier = tier?.config
    const st = new NodeStore({
      pageSize,
      trackValues: this.trackValues,
      allocator: this.trackValues ? options.allocator : undefined,
      policy: POLICY_CODE[policy],
      slruThreshold: slru,
      trimPages: granularity === 'page',
      tiered: tier !== undefined,
      initialCapacity: initial,
    })
    const events = hasEvents
      ? new KvEventEmitter(st, {
          onEvent,
          hasher: this.#hasher!,
          perNode: batching === 'node',
          tokenIds: options.eventTokenIds !== false,
          deviceMedium: tier?.config.deviceMedium,
        })
      : undefined
    const host =
      tier === undefined ? undefined : new HostTier(st, tier, POLICY_CODE[tier.config.evictionPolicy], events)
    st.events = events
    st.hasEvents = hasEvents
    st.host = host
    this.#st = st
    this.#events = events
    this.#host = host
    st.namespaceRoot('', true)
  }

  // ---------------------------------------------------------------------------------------------
  // Public API

  /**
   * Insert `tokens` (page-aligned part only) with their KV slot indices `values` (one per token,
   * same length as `tokens`; required when `trackValues`). Returns the number of tokens that were
   * already present: the caller frees its own slots for them. Insert never frees. With a host
   * tier, host-only nodes on the path take the caller's slots (they were recomputed) and do not
   * count as present; `write_through*` copies the walked pages to the host.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ pageSize: 2, trackValues: false })
   * cache.insert([1, 2, 3, 4]).prefixLen    // 0
   * cache.insert([1, 2, 3, 4, 5]).prefixLen // 4 (token 5 is an unaligned tail: not inserted)
   * ```
   */
  insert(tokens: ArrayLike<number>, values?: ArrayLike<number>, options?: InsertOptions): InsertResult {
    return this.#insert(-1, tokens, values, options)
  }

  /**
   * `insert` for a caller that vouches that `tokens[0 : tokensUnder(known))` is exactly the path
   * root → `known` (the session cache: a request's or session's lock sits on the node its own,
   * unchanged tokens matched or inserted). The walk starts at `known` instead of comparing that
   * prefix again; every effect and the result are those of `insert`. Falls back to the full walk
   * when `known` is not a live device node of the namespace within the aligned length, or with a
   * host tier. A wrong vouch corrupts the tree: session-cache's invariant checker verifies it.
   * @internal
   */
  _insertFrom(
    known: NodeHandle,
    tokens: ArrayLike<number>,
    values?: ArrayLike<number>,
    options?: InsertOptions,
  ): InsertResult {
    return this.#insert(known, tokens, values, options)
  }

  #insert(
    known: number,
    tokens: ArrayLike<number>,
    values: ArrayLike<number> | undefined,
    options: InsertOptions | undefined,
  ): InsertResult {
    const key = toTokenArray(tokens)
    const vals = this.#checkValues(key, values)
    const extraKey = options?.extraKey ?? ''
    const priority = options?.priority ?? 0
    if (typeof extraKey !== 'string') {
      throw invalidOption(`extraKey must be a string, got ${typeof extraKey}`, extraKey)
    }
    if (typeof priority !== 'number' || !Number.isFinite(priority)) {
      throw invalidOption(`priority must be a finite number, got ${String(priority)}`, priority)
    }
    const lend = options?.lendTokens
    if (lend !== undefined && typeof lend !== 'boolean') {
      throw invalidOption(`lendTokens must be a boolean, got ${String(lend)}`, lend)
    }
    const countHit = options?.chunked !== true
    const st = this.#st
    this.#insertCalls++
    const ps = this.pageSize
    const total = key.length - (key.length % ps)
    let node = st.namespaceRoot(extraKey, true)
    if (total === 0) return { prefixLen: 0, lastNode: st.handle(node), alignedLen: 0 }

    const now = this.#now()
    const keys = st.keys
    const host = this.#host
    const tiered = host !== undefined
    const writeThrough = tiered && host.writeThrough && countHit
    let walked = 0
    st.lastAccess[node] = now
    let off = 0
    // With a host tier, host-only nodes on the path take the caller's device slots (SGLang's
    // HiRadixCache does the same: the request recomputed them); they are not "already present".
    let prefixLen = -1
    const start = known < 0 || tiered ? -1 : this.#knownStart(known, node, total)
    if (start >= 0) {
      // The vouched prefix: every node on it is matched whole (no split, no host-only node).
      const path = st.path
      for (let d = start - 1; d >= 0; d--) {
        const next = path[d]!
        st.touch(next, now)
        if (countHit) st.hitCount[next]!++
        if (priority > st.priority[next]!) st.priority[next] = priority
        if (st.heap.has(next)) st.reheap(next)
      }
      if (start > 0) {
        node = path[0]!
        off = st.pathLen[node]!
      }
    }
    while (off < total) {
      const child = st.findChild(node, key, off)
      if (child < 0) break
      const clen = keys[child]!.length
      const m = st.matchInChild(child, key, off, total)
      let next = child
      if (m < clen) next = st.split(child, m)
      st.touch(next, now)
      if (countHit) st.hitCount[next]!++
      if (priority > st.priority[next]!) st.priority[next] = priority
      if (tiered) {
        if (st.tier[next] === HOST) {
          if (prefixLen < 0) prefixLen = off
          host.adopt(next, vals, off)
        }
        if (writeThrough) host.scratchPush(walked++, next)
      }
      if (st.heap.has(next)) st.reheap(next)
      node = next
      off += m
      if (m < clen) break
    }
    if (prefixLen < 0) prefixLen = off
    if (off < total) {
      node = st.newLeaf(node, key, off, total, vals, now, priority, countHit, lend === true && key === tokens)
      this.#insertedTokens += total - off
      if (writeThrough) host.scratchPush(walked++, node)
    }
    if (writeThrough) host.writeThroughScratch(walked)
    return { prefixLen, lastNode: st.handle(node), alignedLen: total }
  }

  /**
   * Longest cached page-aligned prefix of `tokens`. Splits the last node at the match boundary
   * and refreshes access times along the path, unless `readOnly`. With a host tier, `length` is
   * the part on the device and `hostLength` the host-only part after it (`lastHostNode` at its
   * end); `loadBack: true` loads a host hit above the tier's threshold back first.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ pageSize: 2, trackValues: false })
   * cache.insert([1, 2, 3, 4])
   * cache.matchPrefix([1, 2, 3, 9]).length                   // 2
   * cache.matchPrefix([1, 2, 3, 4], { readOnly: true }).length // 4
   * ```
   */
  matchPrefix(tokens: ArrayLike<number>, options?: MatchOptions): MatchResult {
    return this.#match(-1, tokens, options, 0, Number.POSITIVE_INFINITY)
  }

  /**
   * `matchPrefix` for a caller that vouches that `tokens[0 : tokensUnder(known))` is exactly the
   * path root → `known` (see `_insertFrom`): the walk starts at `known`. Same effects and result
   * as `matchPrefix`; the full walk when `known` does not qualify, with a host tier or `readOnly`.
   * Only `indices[indicesFrom, indicesTo)` are written (a caller that needs only the slots of part
   * of the match: the others are left as they were in `options.into`).
   * @internal
   */
  _matchPrefixFrom(
    known: NodeHandle,
    tokens: ArrayLike<number>,
    options?: MatchOptions,
    indicesFrom = 0,
    indicesTo = Number.POSITIVE_INFINITY,
  ): MatchResult {
    return this.#match(known, tokens, options, indicesFrom, indicesTo)
  }

  /**
   * The start of a vouched walk: fills `st.path[0 : depth)` with `known`'s path, deepest first,
   * and returns its depth (0 for a root); -1 when `known` is not a live node of `root`'s tree
   * whose path fits in `total` tokens, or not wholly on the device.
   */
  #knownStart(known: number, root: number, total: number): number {
    const st = this.#st
    if (typeof known !== 'number' || !Number.isInteger(known) || known < 0) return -1
    const slot = known & SLOT_MASK
    if (slot >= st.nextSlot || st.gen[slot] !== Math.floor(known / SLOT_SPAN) || !st.isLive(slot)) return -1
    if (st.ns[slot] !== st.ns[root] || st.pathLen[slot]! > total) return -1
    let path = st.path
    let depth = 0
    let n = slot
    while (st.isRoot[n] === 0) {
      if ((st.tier[n]! & DEV) === 0) return -1
      if (depth === path.length) path = st.growPath()
      path[depth++] = n
      n = st.parent[n]!
    }
    return n === root ? depth : -1
  }

  #match(
    known: number,
    tokens: ArrayLike<number>,
    options: MatchOptions | undefined,
    indicesFrom: number,
    indicesTo: number,
  ): MatchResult {
    const key = toTokenArray(tokens)
    const extraKey = options?.extraKey ?? ''
    if (typeof extraKey !== 'string') {
      throw invalidOption(`extraKey must be a string, got ${typeof extraKey}`, extraKey)
    }
    const readOnly = options?.readOnly === true
    const into = options?.into
    const host = this.#host
    const tiered = host !== undefined
    const loadBack = options?.loadBack === true && tiered
    if (loadBack && readOnly) throw invalidOption('loadBack cannot be combined with readOnly', options)
    const ps = this.pageSize
    const total = key.length - (key.length % ps)
    if (into !== undefined && (!(into instanceof Int32Array) || into.length < total)) {
      throw invalidOption(
        `into must be an Int32Array with room for ${total} indices, got ${into instanceof Int32Array ? `length ${into.length}` : typeof into}`,
        into,
      )
    }
    const st = this.#st
    this.#matchCalls++
    this.#matchQueried += total
    // A match never creates a namespace (salts can be unbounded): an unknown one matches nothing
    // and reports the default root as lastNode (locking a root is a no-op).
    const nsId = st.nsIds.get(extraKey)
    const root = nsId === undefined ? st.nsRoots[0]! : st.nsRoots[nsId]!
    if (nsId === undefined || total === 0) {
      const h = st.handle(root)
      return {
        length: 0,
        indices: EMPTY_INDICES,
        lastNode: h,
        hostLength: 0,
        lastHostNode: h,
        loadedTokens: 0,
      }
    }
    const now = readOnly ? 0 : this.#now()
    if (!readOnly) st.lastAccess[root] = now
    const keys = st.keys
    let node = root
    let path = st.path
    let depth = 0
    let lastTake = 0
    let off = 0
    // The device part of the match: device residency is closed under ancestors, so it is a prefix
    // of the path (the whole path without a host tier).
    let devDepth = 0
    let devOff = 0
    const start = known < 0 || tiered || readOnly ? -1 : this.#knownStart(known, root, total)
    if (start > 0) {
      // The vouched prefix, matched whole: reverse it into root-first order and touch it.
      path = st.path
      for (let a = 0, b = start - 1; a < b; a++, b--) {
        const t = path[a]!
        path[a] = path[b]!
        path[b] = t
      }
      for (let d = 0; d < start; d++) {
        const next = path[d]!
        st.touch(next, now)
        if (st.heap.has(next)) st.reheap(next)
      }
      depth = start
      node = path[start - 1]!
      lastTake = keys[node]!.length
      off = st.pathLen[node]!
      devDepth = depth
      devOff = off
    }
    while (off < total) {
      const child = st.findChild(node, key, off)
      if (child < 0) break
      const clen = keys[child]!.length
      const m = st.matchInChild(child, key, off, total)
      let next = child
      if (m < clen && !readOnly) next = st.split(child, m)
      if (!readOnly) {
        st.touch(next, now)
        if (st.heap.has(next)) st.reheap(next)
        else if (tiered && host.heap.has(next)) host.rehost(next)
      }
      if (depth === path.length) path = st.growPath()
      path[depth++] = next
      lastTake = m
      off += m
      if (!tiered || (st.tier[next]! & DEV) !== 0) {
        devDepth = depth
        devOff = off
      }
      if (m < clen) break
      node = next
    }
    let loaded = 0
    if (tiered) {
      host.matchHostHit += off - devOff
      if (loadBack && off - devOff > host.config.loadBackThreshold) {
        const got = host.loadBackSlots(path[depth - 1]!)
        if (got > 0) {
          loaded = got
          devDepth = depth
          devOff = off
        }
      }
    }
    this.#matchHit += devOff
    const lastNode = devDepth > 0 ? path[devDepth - 1]! : root
    let indices: Int32Array = EMPTY_INDICES
    if (this.trackValues && devOff > 0) {
      indices = into === undefined ? new Int32Array(devOff) : into.subarray(0, devOff)
      const values = st.values
      let w = 0
      for (let d = 0; d < devDepth; d++) {
        const v = values[path[d]!]!
        const take = d === depth - 1 && lastTake < v.length ? lastTake : v.length
        if (w >= indicesFrom && w + take <= indicesTo)
          indices.set(take === v.length ? v : v.subarray(0, take), w)
        else if (w + take > indicesFrom && w < indicesTo) {
          const a = Math.max(w, indicesFrom)
          indices.set(v.subarray(a - w, Math.min(take, indicesTo - w)), a)
        }
        w += take
      }
    }
    // A read-only partial match ends inside a node that was not split; report its parent as
    // the last node (the deepest node wholly inside the match).
    const handleNode =
      readOnly && devDepth === depth && depth > 0 && lastTake < keys[lastNode]!.length
        ? st.parent[lastNode]!
        : lastNode
    const handle = st.handle(handleNode)
    if (devDepth === depth) {
      return {
        length: devOff,
        indices,
        lastNode: handle,
        hostLength: 0,
        lastHostNode: handle,
        loadedTokens: loaded,
      }
    }
    const lastHost = path[depth - 1]!
    const hostHandle = readOnly && lastTake < keys[lastHost]!.length ? st.parent[lastHost]! : lastHost
    return {
      length: devOff,
      indices,
      lastNode: handle,
      hostLength: off - devOff,
      lastHostNode: st.handle(hostHandle),
      loadedTokens: loaded,
    }
  }

  /**
   * Lock `node` and its ancestors against eviction. Returns the tokens moved from evictable to
   * protected (nodes whose `lockRef` went 0 → 1). With a host tier a lock protects a node in
   * whatever tier it is: host-only nodes are then not host-evicted (they move no device tokens).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const { lastNode } = cache.insert([1, 2, 3])
   * cache.incLockRef(lastNode) // 3
   * cache.protectedSize()      // 3
   * ```
   */
  incLockRef(node: NodeHandle): number {
    const st = this.#st
    let n = st.slotOf(node)
    this.#lockEpoch++
    if (this.#host !== undefined) return this.#host.incLock(n)
    const lockRef = st.lockRef
    const isRoot = st.isRoot
    const parent = st.parent
    const keys = st.keys
    const heap = st.heap
    const idleRef = st.idleRef
    let delta = 0
    while (isRoot[n] === 0) {
      const l = lockRef[n]!
      if (l === 0) {
        const len = keys[n]!.length
        delta += len
        if (heap.has(n)) heap.remove(n)
      } else {
        const i = idleRef[n]!
        if (i !== 0) {
          if (i === l) st.idleLockedTokens -= keys[n]!.length // no longer idle-only
          if (l === 1) st.soleLockEpoch++ // an idle holder's sole tokens shrink
        }
      }
      lockRef[n] = l + 1
      n = parent[n]!
    }
    st.evictableTokens -= delta
    st.protectedTokens += delta
    return delta
  }

  /**
   * Release one lock on `node` and its ancestors. Returns the tokens moved back from protected to
   * evictable. Throws `LOCK_UNDERFLOW` (changing nothing) when `node` is not locked, and
   * `IDLE_LOCK_MISMATCH` when all its locks are marked idle ({@link RadixCache.markLockIdle}: unmark
   * the lock before releasing it).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const { lastNode } = cache.insert([1, 2, 3])
   * cache.incLockRef(lastNode)
   * cache.decLockRef(lastNode) // 3
   * ```
   */
  decLockRef(node: NodeHandle): number {
    const st = this.#st
    let n = st.slotOf(node)
    const lockRef = st.lockRef
    const isRoot = st.isRoot
    if (isRoot[n] === 0 && lockRef[n] === 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.LockUnderflow,
        `decLockRef on node ${node} whose lockRef is already 0`,
        node,
      )
    }
    const idleRef = st.idleRef
    if (isRoot[n] === 0 && idleRef[n] === lockRef[n]) {
      // Every lock on the node is marked idle: the caller must unmark the one it releases first.
      throw new RadixCacheError(
        RadixCacheErrorCode.IdleLockMismatch,
        `decLockRef on node ${node} whose ${lockRef[n]} lock(s) are all marked idle (unmarkLockIdle first)`,
        node,
      )
    }
    this.#lockEpoch++
    if (this.#host !== undefined) return this.#host.decLock(n)
    const parent = st.parent
    const keys = st.keys
    const childCount = st.childCount
    let delta = 0
    while (isRoot[n] === 0) {
      const l = lockRef[n]! - 1
      lockRef[n] = l
      if (l === 0) {
        delta += keys[n]!.length
        if (childCount[n] === 0) st.pushHeap(n)
      } else {
        const i = idleRef[n]!
        if (i !== 0) {
          if (i === l) st.idleLockedTokens += keys[n]!.length // idle locks only now
          if (l === 1) st.soleLockEpoch++ // an idle holder's sole tokens grow
        }
      }
      n = parent[n]!
    }
    st.evictableTokens += delta
    st.protectedTokens -= delta
    return delta
  }

  /**
   * Evict at least `numTokens` tokens (or everything evictable) from unlocked leaves, in policy
   * order, cascading to parents that become evictable leaves. KV slots go back to the
   * `allocator`. With `evictGranularity: 'page'` the last leaf is trimmed from its tail so that
   * the call frees `numTokens` rounded up to a page. With a host tier the tokens leave the device
   * only: a page with a host copy keeps it, `write_back` copies one that has none (evicting host
   * pages for room), and a page that cannot be copied is discarded.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ pageSize: 2, trackValues: false, evictGranularity: 'page' })
   * cache.insert([1, 2, 3, 4, 5, 6])
   * cache.evict(1) // { evictedTokens: 2, evictedNodes: 1 }
   * cache.totalSize() // 4
   * ```
   */
  evict(numTokens: number): EvictResult {
    if (typeof numTokens !== 'number' || Number.isNaN(numTokens) || numTokens < 0) {
      throw invalidOption(`numTokens must be a non-negative number, got ${String(numTokens)}`, numTokens)
    }
    if (this.#host !== undefined) return this.#host.evictDevice(numTokens)
    const st = this.#st
    st.evictCalls++
    const heap = st.heap
    const keys = st.keys
    const ps = this.pageSize
    let evicted = 0
    let nodes = 0
    while (evicted < numTokens && heap.size > 0) {
      const x = heap.peek()
      const len = keys[x]!.length
      const need = numTokens - evicted
      if (st.trimPages && len > need) {
        const trim = Math.ceil(need / ps) * ps
        if (trim < len) {
          st.split(x, len - trim)
          heap.remove(x)
          // Deleting the tail makes the upper part a childless, unlocked leaf: back in the heap.
          st.deleteLeaf(x)
          evicted += trim
          nodes++
          break
        }
      }
      heap.remove(x)
      st.deleteLeaf(x)
      evicted += len
      nodes++
    }
    st.evictedTokens += evicted
    st.evictedNodes += nodes
    return { evictedTokens: evicted, evictedNodes: nodes }
  }

  /** Tokens in the tree (`evictableSize() + protectedSize()`). */
  totalSize(): number {
    return this.#st.evictableTokens + this.#st.protectedTokens
  }

  /** Tokens in unlocked nodes. */
  evictableSize(): number {
    return this.#st.evictableTokens
  }

  /** Tokens in locked nodes. */
  protectedSize(): number {
    return this.#st.protectedTokens
  }

  // ---------------------------------------------------------------------------------------------
  // Host tier (the work is `HostTier`'s)

  /**
   * Host tier capacity in tokens (0 without a host tier).
   *
   * @example
   * ```ts
   * new RadixCache({ trackValues: false, hostTier: { capacity: 4096 } }).hostCapacity() // 4096
   * ```
   */
  hostCapacity(): number {
    return this.#host === undefined ? 0 : this.#host.capacity
  }

  /**
   * Tokens with a copy on the host tier: host-only pages plus backups of device pages.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64, writePolicy: 'write_through' } })
   * cache.insert([1, 2, 3, 4])
   * cache.hostSize()     // 4: copied on insert
   * cache.hostOnlySize() // 0: still on the device too
   * ```
   */
  hostSize(): number {
    return this.#host === undefined ? 0 : this.#host.size
  }

  /**
   * Tokens only the host tier holds (what a match can load back instead of recomputing).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * cache.insert([1, 2, 3, 4])
   * cache.evict(4)
   * cache.hostOnlySize() // 4
   * ```
   */
  hostOnlySize(): number {
    return this.#host === undefined ? 0 : this.#host.hostOnly
  }

  /**
   * Host-only tokens that are neither locked nor host-protected: what host eviction can free.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * const { lastNode } = cache.insert([1, 2, 3, 4])
   * cache.evict(4)
   * cache.hostEvictableSize() // 4
   * cache.incLockRef(lastNode)
   * cache.hostEvictableSize() // 0
   * ```
   */
  hostEvictableSize(): number {
    return this.#host === undefined ? 0 : this.#host.evictable
  }

  /**
   * Free host slots (`hostCapacity() - hostSize()`, or less when a shared host allocator is fuller).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * cache.insert([1, 2, 3, 4])
   * cache.evict(4)
   * cache.hostAvailableSize() // 60
   * ```
   */
  hostAvailableSize(): number {
    return this.#host === undefined ? 0 : this.#host.free()
  }

  /**
   * Where the tokens of the path root → `node` live: a device part, then a part only the host tier
   * holds (device residency is closed under ancestors). Without a host tier everything is on the
   * device. O(host-only nodes on the path).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * const { lastNode } = cache.insert([1, 2, 3, 4])
   * cache.evict(4)                 // write_back: demoted, not discarded
   * cache.residencyOf(lastNode)    // { deviceTokens: 0, hostTokens: 4 }
   * ```
   */
  residencyOf(node: NodeHandle): Residency {
    const st = this.#st
    let n = st.slotOf(node)
    let host = 0
    const tier = st.tier
    while (tier[n] === HOST) {
      host += st.keys[n]!.length
      n = st.parent[n]!
    }
    return { deviceTokens: st.pathLen[n]!, hostTokens: host }
  }

  /**
   * Host references (`protectHost`) on `node` (0 without a host tier).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * const { lastNode } = cache.insert([1, 2])
   * cache.protectHost(lastNode)
   * cache.hostRefOf(lastNode) // 1
   * ```
   */
  hostRefOf(node: NodeHandle): number {
    const s = this.#st.slotOf(node)
    return this.#host === undefined ? 0 : this.#host.hostRef[s]!
  }

  /**
   * Evict at least `numTokens` tokens from the host tier (host-only pages that are neither locked
   * nor protected), leaf first in the host tier's own policy order. Device eviction calls this
   * itself when a demotion needs room; call it to shrink the host tier.
   *
   * @throws RadixCacheError `NO_HOST_TIER` without a host tier, `INVALID_OPTION` for a bad count.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * cache.insert([1, 2, 3, 4])
   * cache.evict(4)     // demoted to host
   * cache.evictHost(1) // { evictedTokens: 4, evictedNodes: 1 }: gone from both tiers
   * ```
   */
  evictHost(numTokens: number): EvictResult {
    const host = this.#requireTier('evictHost')
    if (typeof numTokens !== 'number' || Number.isNaN(numTokens) || numTokens < 0) {
      throw invalidOption(`numTokens must be a non-negative number, got ${String(numTokens)}`, numTokens)
    }
    return host.evictHost(numTokens)
  }

  /**
   * Promote the host-only part of the path root → `node` onto device slots (SGLang HiCache's
   * `load_back`), keeping the host copy. The path is locked meanwhile: the device eviction that
   * makes room (when the allocator is short) never touches it, nor any other locked node. Returns
   * the tokens loaded and their new device slots; 0 when `node` is already on the device. A
   * length-only cache (`trackValues: false`) has no device pool to check: evict first.
   *
   * @throws RadixCacheError `NO_HOST_TIER`, `UNKNOWN_NODE`, or `OUT_OF_MEMORY` (nothing changed)
   *   when free plus evictable device slots are fewer than the tokens to load.
   *
   * @example
   * ```ts
   * const pool = new PagedAllocator({ size: 64, pageSize: 4 })
   * const cache = new RadixCache({ pageSize: 4, allocator: pool, hostTier: { capacity: 64 } })
   * const { lastNode } = cache.insert([1, 2, 3, 4], pool.alloc(4))
   * cache.evict(4)                       // demoted: the host holds it, the device slots are free
   * const hit = cache.matchPrefix([1, 2, 3, 4, 5])
   * hit.length, hit.hostLength           // 0, 4
   * cache.loadBack(hit.lastHostNode)     // { loadedTokens: 4, indices: <4 fresh device slots> }
   * ```
   */
  loadBack(node: NodeHandle): LoadBackResult {
    const host = this.#requireTier('loadBack')
    const st = this.#st
    const s = st.slotOf(node)
    const got = host.loadBackSlots(s)
    if (got < 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.OutOfMemory,
        `loadBack needs ${host.loadNeed} device slots: ${(st.allocator as KvSlotAllocator).availableSize()} free + ${st.evictableTokens} evictable`,
        host.loadNeed,
      )
    }
    return { loadedTokens: got, indices: got > 0 ? host.lastLoad : EMPTY_INDICES }
  }

  /**
   * Keep the path root → `node` on the host tier (SGLang's `protect_host`): copy to the host every
   * page of it that has no host copy yet, and take a host reference on each node. A protected node
   * may leave the device (its eviction then just frees the device slots) but never the host, until
   * `releaseHost`. This is how a session's KV can be demoted as a whole instead of released: protect
   * it, then drop its device lock. Returns the tokens copied to the host.
   *
   * @throws RadixCacheError `NO_HOST_TIER`, `UNKNOWN_NODE`, or `HOST_OUT_OF_MEMORY` (nothing
   *   changed) when the host cannot hold the path even after evicting every unprotected host page.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * const { lastNode } = cache.insert([1, 2, 3, 4])
   * cache.protectHost(lastNode) // 4: copied to host
   * cache.evict(4)              // leaves the device only
   * cache.evictHost(64)         // { evictedTokens: 0, ... }: protected
   * cache.releaseHost(lastNode)
   * ```
   */
  protectHost(node: NodeHandle): number {
    const host = this.#requireTier('protectHost')
    return host.protect(this.#st.slotOf(node))
  }

  /**
   * Drop one host reference taken by {@link RadixCache.protectHost} on `node` and its ancestors.
   * Returns the host-only tokens that became host-evictable.
   *
   * @throws RadixCacheError `NO_HOST_TIER`, `UNKNOWN_NODE`, or `HOST_REF_UNDERFLOW` (nothing
   *   changed) when `node` holds no host reference.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 64 } })
   * const { lastNode } = cache.insert([1, 2])
   * cache.protectHost(lastNode)
   * cache.releaseHost(lastNode) // 0: the tokens are still on the device
   * ```
   */
  releaseHost(node: NodeHandle): number {
    const host = this.#requireTier('releaseHost')
    const s = this.#st.slotOf(node)
    if (this.#st.isRoot[s] === 1) return 0
    if (host.hostRef[s] === 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.HostRefUnderflow,
        `releaseHost on node ${node} whose host reference count is already 0`,
        node,
      )
    }
    const before = host.evictable
    host.unpin(s)
    return host.evictable - before
  }

  /**
   * Tokens on the path root → `node` (what a session holding a lock on `node` keeps resident).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * cache.tokensUnder(cache.insert([1, 2, 3]).lastNode) // 3
   * ```
   */
  tokensUnder(node: NodeHandle): number {
    return this.#st.pathLen[this.#st.slotOf(node)]!
  }

  /** Lock count of `node` (cheap; {@link RadixCache.nodeInfo} copies the node's arrays). */
  lockRefOf(node: NodeHandle): number {
    return this.#st.lockRef[this.#st.slotOf(node)]!
  }

  /** Parent of `node`, `undefined` for a namespace root (cheap). */
  parentOf(node: NodeHandle): NodeHandle | undefined {
    const p = this.#st.parent[this.#st.slotOf(node)]!
    return p < 0 ? undefined : this.#st.handle(p)
  }

  /**
   * Tokens only the given locks protect: every node on the paths of `nodes` whose lock count
   * equals the number of those handles whose path runs through it. Each handle stands for one
   * lock the caller holds on it (`incLockRef`; a handle locked twice may repeat); a handle that
   * holds no lock makes the count unspecified. What dropping exactly those locks would make
   * evictable, shared prefixes counted once. At most O(total path length), no allocation: a walk
   * stops at a node that more locks hold than the given handles could account for.
   * Throws `UNKNOWN_NODE` (changing nothing) for a handle that is not a live node.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const a = cache.insert([1, 2, 3, 4]).lastNode
   * const b = cache.insert([1, 2, 5]).lastNode // splits: [1, 2] is shared
   * cache.incLockRef(a)
   * cache.incLockRef(b)
   * cache.tokensLockedOnlyBy([a])    // 2: [3, 4]; [1, 2] is also b's
   * cache.tokensLockedOnlyBy([a, b]) // 5
   * ```
   */
  tokensLockedOnlyBy(nodes: readonly NodeHandle[]): number {
    const st = this.#st
    for (let i = 0; i < nodes.length; i++) st.slotOf(nodes[i]!)
    if (nodes.length === 1) {
      // One holder: its path's nodes that no other lock holds, up to the first one another holds
      // (the general walk below, without its per-node counts).
      const lockRef = st.lockRef
      const isRoot = st.isRoot
      const parent = st.parent
      const keys = st.keys
      let tokens = 0
      for (let n = nodes[0]! & SLOT_MASK; isRoot[n] === 0; n = parent[n]!) {
        const l = lockRef[n]!
        if (l > 1) break
        if (l === 1) tokens += keys[n]!.length
      }
      return tokens
    }
    // The same holders as the last call, and no lock moved since: the same count (a D's capacity
    // report asks it for all its idle sessions, often several times between two lock moves).
    const h = nodes.length
    let last = this.#lastHolders
    if (this.#lastEpoch === this.#lockEpoch && this.#lastHolderCount === h) {
      let i = 0
      while (i < h && last[i] === nodes[i]) i++
      if (i === h) return this.#lastTokens
    }
    const tokens = this.#countLockedOnlyBy(nodes)
    if (last.length < h) {
      last = new Float64Array(Math.max(h, last.length * 2))
      this.#lastHolders = last
    }
    for (let i = 0; i < h; i++) last[i] = nodes[i]!
    this.#lastHolderCount = h
    this.#lastEpoch = this.#lockEpoch
    this.#lastTokens = tokens
    return tokens
  }

  /**
   * Mark one lock the caller holds on `node` as idle (a session between turns, say): the tree then
   * keeps {@link RadixCache.idleLockedTokens}, the tokens only idle locks protect, up to date as
   * locks move, so asking it costs O(1) instead of a walk over every idle holder. A mark changes
   * no lock, size or eviction order; unmark it ({@link RadixCache.unmarkLockIdle}) before releasing
   * the lock (`decLockRef` refuses to release the last unmarked lock's node while marks remain on
   * it). O(depth of `node`). A namespace root takes no mark (like `incLockRef`, a no-op).
   * Throws `UNKNOWN_NODE` for a stale handle and `IDLE_LOCK_MISMATCH` when every lock through `node`
   * is already marked, changing nothing. Like `decLockRef`, the call trusts that the caller holds
   * the lock it marks on `node` itself (the counts cannot tell it from a lock further down).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const a = cache.insert([1, 2, 3, 4]).lastNode
   * const b = cache.insert([1, 2, 5]).lastNode // [1, 2] is shared
   * cache.incLockRef(a)
   * cache.incLockRef(b)
   * cache.markLockIdle(a)
   * cache.idleLockedTokens() // 2: [3, 4]; [1, 2] is also b's, which is busy
   * cache.markLockIdle(b)
   * cache.idleLockedTokens() // 5
   * cache.unmarkLockIdle(b)
   * cache.decLockRef(b)
   * cache.idleLockedTokens() // 4
   * ```
   */
  markLockIdle(node: NodeHandle): void {
    const st = this.#st
    let n = st.slotOf(node)
    const lockRef = st.lockRef
    const idleRef = st.idleRef
    const isRoot = st.isRoot
    if (isRoot[n] === 1) return
    if (idleRef[n]! >= lockRef[n]!) {
      throw new RadixCacheError(
        RadixCacheErrorCode.IdleLockMismatch,
        `markLockIdle on node ${node}: none of its ${lockRef[n]} lock(s) is left to mark`,
        node,
      )
    }
    const parent = st.parent
    const keys = st.keys
    let tokens = 0
    for (; isRoot[n] === 0; n = parent[n]!) {
      const i = idleRef[n]! + 1
      idleRef[n] = i
      if (i === lockRef[n]) tokens += keys[n]!.length
    }
    st.idleLockedTokens += tokens
  }

  /**
   * Take back one idle mark on `node` ({@link RadixCache.markLockIdle}): its lock counts as busy
   * again. O(depth of `node`); a namespace root is a no-op. Throws `UNKNOWN_NODE` for a stale
   * handle and `IDLE_LOCK_MISMATCH` when no lock through `node` is marked, changing nothing (the
   * mark must be one the caller put on `node` itself).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const a = cache.insert([1, 2, 3]).lastNode
   * cache.incLockRef(a)
   * cache.markLockIdle(a)
   * cache.unmarkLockIdle(a)
   * cache.idleLockedTokens() // 0
   * ```
   */
  unmarkLockIdle(node: NodeHandle): void {
    const st = this.#st
    let n = st.slotOf(node)
    const lockRef = st.lockRef
    const idleRef = st.idleRef
    const isRoot = st.isRoot
    if (isRoot[n] === 1) return
    if (idleRef[n] === 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.IdleLockMismatch,
        `unmarkLockIdle on node ${node}, which carries no idle mark`,
        node,
      )
    }
    const parent = st.parent
    const keys = st.keys
    let tokens = 0
    for (; isRoot[n] === 0; n = parent[n]!) {
      const i = idleRef[n]!
      if (i === lockRef[n]) tokens += keys[n]!.length
      idleRef[n] = i - 1
    }
    st.idleLockedTokens -= tokens
  }

  /**
   * Tokens only the locks marked idle protect ({@link RadixCache.markLockIdle}): every node whose
   * locks are all marked, shared prefixes counted once. The same as
   * {@link RadixCache.tokensLockedOnlyBy} over the marked locks' handles (host-only nodes included,
   * like there), kept up to date as locks and marks move: O(1).
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const a = cache.insert([1, 2, 3]).lastNode
   * cache.incLockRef(a)
   * cache.markLockIdle(a)
   * cache.idleLockedTokens() // 3
   * ```
   */
  idleLockedTokens(): number {
    return this.#st.idleLockedTokens
  }

  /**
   * A counter that moves whenever a node that some idle-marked lock passes through
   * ({@link RadixCache.markLockIdle}) goes from one lock to two or back. While it stands still,
   * `tokensLockedOnlyBy([h])` gives the same answer for every idle-marked holder `h`: a caller that
   * asks it for many idle holders (a D's admission, for each idle session) can keep the answers
   * and recompute only when this moved or the holder's mark did.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ trackValues: false })
   * const a = cache.insert([1, 2, 3]).lastNode
   * cache.incLockRef(a)
   * cache.markLockIdle(a)
   * const epoch = cache.soleLockEpoch()
   * cache.incLockRef(cache.insert([1, 2, 3, 4]).lastNode) // a second lock on [1, 2, 3]
   * cache.soleLockEpoch() === epoch // false: a's sole tokens went from 3 to 0
   * ```
   */
  soleLockEpoch(): number {
    return this.#st.soleLockEpoch
  }

  /** Lock moves so far: what the last multi-holder count (below) was taken at. */
  #lockEpoch = 0
  #lastEpoch = -1
  #lastHolders: Float64Array = new Float64Array(0)
  #lastHolderCount = 0
  #lastTokens = 0

  #countLockedOnlyBy(nodes: readonly NodeHandle[]): number {
    const st = this.#st
    if (this.#onlyCount.length < st.capacity) {
      this.#onlyCount = new Int32Array(st.capacity)
      this.#onlyDead = new Uint8Array(st.capacity)
    }
    const count = this.#onlyCount
    const dead = this.#onlyDead
    const parent = st.parent
    const isRoot = st.isRoot
    const lockRef = st.lockRef
    let seen = this.#onlySeen
    let k = 0
    const h = nodes.length
    for (let i = 0; i < h; i++) {
      // A node with more locks than the holders that can still reach it is protected by some
      // other lock, and so are its ancestors: the walk stops there.
      const rest = h - 1 - i
      for (let n = nodes[i]! & SLOT_MASK; isRoot[n] === 0 && dead[n] === 0; n = parent[n]!) {
        const c = count[n]! + 1
        count[n] = c
        if (c === 1) {
          if (k === seen.length) {
            const grown = new Int32Array(seen.length * 2)
            grown.set(seen)
            seen = grown
            this.#onlySeen = seen
          }
          seen[k++] = n
        }
        if (lockRef[n]! > c + rest) {
          dead[n] = 1
          break
        }
      }
    }
    const keys = st.keys
    let tokens = 0
    for (let i = 0; i < k; i++) {
      const n = seen[i]!
      if (dead[n] === 0 && lockRef[n] === count[n]) tokens += keys[n]!.length
      count[n] = 0
      dead[n] = 0
    }
    return tokens
  }

  #onlyDead: Uint8Array = new Uint8Array(0)
  #onlyCount: Int32Array = EMPTY_INDICES
  #onlySeen: Int32Array = new Int32Array(64)

  /** Whether `node` is a live handle of this cache. */
  isValid(node: NodeHandle): boolean {
    if (typeof node !== 'number' || !Number.isInteger(node) || node < 0) return false
    const st = this.#st
    const slot = node & SLOT_MASK
    return slot < st.nextSlot && st.gen[slot] === Math.floor(node / SLOT_SPAN) && st.isLive(slot)
  }

  /**
   * Drop every node and emit `AllBlocksCleared`. The KV slots of the tree go back to the
   * allocator (and the host tier's to its allocator); namespace roots (and handles to them)
   * survive. Refused with `RESET_WHILE_LOCKED` while any node is locked or host-protected (like
   * SGLang's `/flush_cache`, which is refused while requests run).
   */
  reset(): void {
    const st = this.#st
    const host = this.#host
    let locked = st.protectedTokens
    // Host-only locked nodes and host references count too (locks and protections alike).
    if (host !== undefined && locked === 0 && host.anyHeld()) locked = 1
    if (locked > 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.ResetWhileLocked,
        `reset() while ${st.protectedTokens} device tokens are locked${host !== undefined ? ' (or host tokens locked or protected)' : ''}`,
        st.protectedTokens,
      )
    }
    const allocator = st.allocator
    if (allocator !== undefined) {
      for (let s = 0; s < st.nextSlot; s++) {
        const v = st.values[s]
        if (st.isLive(s) && st.isRoot[s] === 0 && v !== undefined && v.length > 0) allocator.free(v)
      }
    }
    if (host !== undefined) host.reset()
    // Namespace roots survive a reset (so handles to them stay valid); every other node goes.
    st.clearNodes()
    this.#matchCalls = 0
    this.#matchQueried = 0
    this.#matchHit = 0
    this.#insertCalls = 0
    this.#insertedTokens = 0
    if (this.#events !== undefined) this.#events.cleared()
  }

  /** Counters since construction or the last reset. */
  stats(): RadixCacheStats {
    const st = this.#st
    const host = this.#host
    return {
      totalSize: this.totalSize(),
      evictableSize: st.evictableTokens,
      protectedSize: st.protectedTokens,
      nodeCount: st.liveNodes - st.nsRoots.length,
      evictableLeaves: st.heap.size,
      matchCalls: this.#matchCalls,
      matchQueriedTokens: this.#matchQueried,
      matchHitTokens: this.#matchHit,
      hitRatio: this.#matchQueried > 0 ? this.#matchHit / this.#matchQueried : 0,
      insertCalls: this.#insertCalls,
      insertedTokens: this.#insertedTokens,
      splits: st.splits,
      evictCalls: st.evictCalls,
      evictedTokens: st.evictedTokens,
      evictedNodes: st.evictedNodes,
      eventsEmitted: this.#events === undefined ? 0 : this.#events.emitted,
      hostCapacity: host === undefined ? 0 : host.capacity,
      hostSize: host === undefined ? 0 : host.size,
      hostOnlySize: host === undefined ? 0 : host.hostOnly,
      hostEvictableSize: host === undefined ? 0 : host.evictable,
      matchHostHitTokens: host === undefined ? 0 : host.matchHostHit,
      demotedTokens: host === undefined ? 0 : host.demotedTokens,
      discardedTokens: host === undefined ? 0 : host.discardedTokens,
      hostWriteTokens: host === undefined ? 0 : host.hostWriteTokens,
      hostEvictedTokens: host === undefined ? 0 : host.hostEvictedTokens,
      loadedBackTokens: host === undefined ? 0 : host.loadedBackTokens,
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Inspection (read-only)

  /** The root of a namespace (`''`, the default, always exists). `undefined` if never used. */
  rootNode(extraKey = ''): NodeHandle | undefined {
    const id = this.#st.nsIds.get(extraKey)
    return id === undefined ? undefined : this.#st.handle(this.#st.nsRoots[id]!)
  }

  /** Namespaces that have a root (the default `''` first). */
  namespaces(): string[] {
    return this.#st.nsNames.slice()
  }

  /** Children of `node`, in insertion order of their first pages. */
  childrenOf(node: NodeHandle): NodeHandle[] {
    const st = this.#st
    const s = st.slotOf(node)
    const out: NodeHandle[] = []
    const map = st.children[s]
    if (map === undefined) return out
    for (const head of map.values()) {
      for (let c = head; c !== -1; c = st.chainNext[c]!) out.push(st.handle(c))
    }
    return out
  }

  /** A read-only snapshot of one node. */
  nodeInfo(node: NodeHandle): NodeInfo {
    const st = this.#st
    const host = this.#host
    const s = st.slotOf(node)
    const v = st.values[s]
    const p = st.parent[s]!
    return {
      handle: node,
      parent: p < 0 ? undefined : st.handle(p),
      isRoot: st.isRoot[s] === 1,
      extraKey: st.nsNames[st.ns[s]!]!,
      tokens: st.keys[s]!.slice(),
      values: v === undefined ? undefined : v.slice(),
      pathLength: st.pathLen[s]!,
      lockRef: st.lockRef[s]!,
      lastAccessTime: st.lastAccess[s]!,
      creationTime: st.created[s]!,
      hitCount: st.hitCount[s]!,
      priority: st.priority[s]!,
      childCount: st.childCount[s]!,
      evictableLeaf: st.heap.has(s),
      onDevice: (st.tier[s]! & DEV) !== 0,
      onHost: (st.tier[s]! & HOST) !== 0,
      hostValues: host === undefined ? undefined : host.hostValues[s]?.slice(),
      hostRef: host === undefined ? 0 : host.hostRef[s]!,
      hostEvictableLeaf: host === undefined ? false : host.heap.has(s),
    }
  }

  /**
   * Chained block hashes of the pages of `node`'s own edge (not its ancestors), as carried by
   * its `BlockStored` events. Empty unless the cache emits events.
   */
  blockHashesOf(node: NodeHandle): bigint[] {
    const s = this.#st.slotOf(node)
    const d = this.#st.digests[s]
    if (d === undefined || this.#events === undefined) return []
    return this.#events.ids(d)
  }

  /**
   * Id of the last KV event emitted (-1 before the first). With {@link RadixCache.blockHashDump}
   * it lets a consumer that lost events resynchronize (the router's `ResidencyIndex.resync`).
   */
  lastEventId(): number {
    return (this.#events === undefined ? 0 : this.#events.eventId) - 1
  }

  /**
   * Every block hash the tree holds right now on one tier (`'device'`, the default, or `'host'`),
   * with the id of the last event already reflected in it: a full dump for a consumer that lost
   * events. Empty unless the cache emits events.
   *
   * @example
   * ```ts
   * const cache = new RadixCache({ pageSize: 2, trackValues: false, onEvent: () => {} })
   * cache.insert([1, 2, 3, 4])
   * const { blockHashes, lastEventId } = cache.blockHashDump() // 2 hashes, lastEventId 1
   * ```
   */
  blockHashDump(tier: 'device' | 'host' = 'device'): { blockHashes: bigint[]; lastEventId: number } {
    if (tier !== 'device' && tier !== 'host')
      throw invalidOption(`tier must be 'device' or 'host', got ${String(tier)}`, tier)
    const out: bigint[] = []
    const hasher = this.#hasher
    const st = this.#st
    const bit = tier === 'device' ? DEV : HOST
    if (hasher !== undefined && this.#events !== undefined) {
      for (let s = 0; s < st.nextSlot; s++) {
        if (st.isRoot[s] === 1 || st.parent[s]! < 0 || (st.tier[s]! & bit) === 0) continue
        const d = st.digests[s]
        if (d !== undefined) for (const id of this.#events.ids(d)) out.push(id)
      }
    }
    return { blockHashes: out, lastEventId: this.lastEventId() }
  }

  /**
   * Check the internal heap against the tree (used by the invariant checker in `/testing`).
   * Returns a list of problems; empty when consistent.
   * @internal
   */
  _checkInternals(): string[] {
    return checkInternals(this.#st, this.#host)
  }

  // ---------------------------------------------------------------------------------------------
  // Internals

  #requireTier(what: string): HostTier {
    const host = this.#host
    if (host === undefined) {
      throw new RadixCacheError(
        RadixCacheErrorCode.NoHostTier,
        `${what} needs a host tier (create the cache with the hostTier option)`,
        what,
      )
    }
    return host
  }

  #checkValues(key: Uint32Array, values: ArrayLike<number> | undefined): Int32Array | undefined {
    if (!this.trackValues) {
      if (values !== undefined) {
        throw new RadixCacheError(
          RadixCacheErrorCode.ValuesNotTracked,
          'this cache was created with trackValues: false and does not store values',
          values,
        )
      }
      return undefined
    }
    if (values === undefined) {
      throw new RadixCacheError(
        RadixCacheErrorCode.ValuesRequired,
        'insert needs one KV slot index per token (or create the cache with trackValues: false)',
        values,
      )
    }
    if (values.length !== key.length) {
      throw new RadixCacheError(
        RadixCacheErrorCode.ValuesLengthMismatch,
        `values has ${values.length} entries for ${key.length} tokens`,
        values.length,
      )
    }
    if (values instanceof Int32Array) return values
    const out = new Int32Array(values.length)
    for (let i = 0; i < values.length; i++) {
      const v = values[i]!
      if (!Number.isInteger(v) || v < 0 || v > 0x7fffffff) {
        throw new RadixCacheError(
          RadixCacheErrorCode.ValuesLengthMismatch,
          `values[${i}] = ${v} is not a KV slot index (integer in [0, 2^31))`,
          v,
        )
      }
      out[i] = v
    }
    return out
  }
}

function defaultNow(): number {
  return performance.now()
}

function invalidOption(message: string, value: unknown): RadixCacheError {
  return new RadixCacheError(RadixCacheErrorCode.InvalidOption, message, value)
}

/**
 * Validate token ids and return them as a `Uint32Array` (zero-copy for a `Uint32Array`).
 * @internal
 */
export function toTokenArray(tokens: ArrayLike<number>): Uint32Array {
  if (tokens instanceof Uint32Array) return tokens
  if (tokens === null || typeof tokens !== 'object' || typeof tokens.length !== 'number') {
    throw new RadixCacheError(
      RadixCacheErrorCode.InvalidToken,
      `tokens must be an array of token ids, got ${tokens === null ? 'null' : typeof tokens}`,
      tokens,
    )
  }
  const n = tokens.length
  const out = new Uint32Array(n)
  for (let i = 0; i < n; i++) {
    const t = tokens[i]!
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidToken,
        `token ${String(t)} at index ${i} is not an integer in [0, 2^32)`,
        t,
      )
    }
    out[i] = t
  }
  return out
}
