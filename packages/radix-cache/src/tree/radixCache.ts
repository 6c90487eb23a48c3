import type { KvAllocator } from '../allocator/kvAllocator.js'
import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import type { KvEvent } from '../events/kvEvents.js'
import type { BlockHasher } from '../hashing/blockHasher.js'
import { sglangBlockHasher } from '../hashing/sglangBlockHasher.js'
import { resolveHostTier } from '../tier/config.js'
import type { HostTierConfig, KvSlotAllocator, KvTransfer, LoadBackResult, Residency } from '../tier/types.js'
import { EvictionHeap } from './evictionHeap.js'
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

// A handle packs (generation, slot): handle = gen * 2^26 + slot. `handle & SLOT_MASK` recovers the
// slot because ToInt32 keeps the low 32 bits of any integer below 2^53.
const SLOT_BITS = 26
const SLOT_SPAN = 2 ** SLOT_BITS
const SLOT_MASK = SLOT_SPAN - 1
const MAX_NODES = SLOT_SPAN

const EMPTY_INDICES = new Int32Array(0)
const EMPTY_TOKENS = new Uint32Array(0)
const NO_TOKENS: readonly number[] = Object.freeze([])
const EMPTY_U8 = new Uint8Array(0)

// Where a node's KV lives (#tier bits). Without a host tier every node is DEV. Device residency is
// closed under ancestors (a DEV node's parent is DEV or a root), so a root-to-node path is a device
// part followed by a host-only part; every node is in at least one tier.
const DEV = 1
const HOST = 2

const POLICY_CODE: Record<EvictionPolicy, number> = {
  lru: 0,
  lfu: 1,
  fifo: 2,
  mru: 3,
  filo: 4,
  priority: 5,
  slru: 6,
}

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
  readonly #onEvent: ((event: KvEvent) => void) | undefined
  readonly #hasEvents: boolean
  readonly #hasher: BlockHasher | undefined
  readonly #allocator: KvAllocator | undefined
  readonly #policy: number
  readonly #slruThreshold: number
  readonly #trimPages: boolean
  readonly #eventPerNode: boolean
  readonly #eventTokenIds: boolean
  // Host tier (all unused without one).
  readonly #tiered: boolean
  readonly #hostAlloc: KvSlotAllocator | undefined
  readonly #onTransfer: ((transfer: KvTransfer) => void) | undefined
  readonly #hostHeap: EvictionHeap | undefined
  readonly #hostPolicy: number
  readonly #hostCapacity: number
  readonly #writeThrough: boolean
  readonly #writeThreshold: number
  readonly #devMedium: string | undefined
  readonly #hostMedium: string | undefined

  // Node storage: struct of arrays indexed by slot, grown by doubling.
  #capacity: number
  #gen: Float64Array
  #parent: Int32Array
  #lockRef: Int32Array
  #childCount: Int32Array
  #chainNext: Int32Array
  #childKey: Float64Array
  #pathLen: Float64Array
  #lastAccess: Float64Array
  #created: Float64Array
  #accessSeq: Float64Array
  #createSeq: Float64Array
  #hitCount: Float64Array
  #priority: Float64Array
  #ns: Int32Array
  #isRoot: Uint8Array
  #keys: Uint32Array[]
  #values: (Int32Array | undefined)[]
  #children: (Map<number, number> | undefined)[]
  #digests: (Uint8Array[] | undefined)[]
  /** DEV / HOST bits. */
  #tier: Uint8Array
  /** Children that are on the device (equals `#childCount` without a host tier). */
  #devChildren: Int32Array
  // Host tier only (empty without one).
  #hostRef: Int32Array
  /** 1 when the node's tokens are counted in `#hostEvictable`. */
  #hostCounted: Uint8Array
  #hostValues: (Int32Array | undefined)[]
  #freeSlots: Int32Array
  #freeTop = 0
  #nextSlot = 0
  #liveNodes = 0

  readonly #heap: EvictionHeap
  #nsIds = new Map<string, number>()
  #nsNames: string[] = []
  #nsRoots: number[] = []

  #evictable = 0
  #protected = 0
  #hostSize = 0
  #hostOnly = 0
  #hostEvictable = 0
  #pinnedNodes = 0
  /** Device slots of the last load-back. */
  #lastLoad: Int32Array = EMPTY_INDICES
  /** Tokens the last refused load-back needed. */
  #loadNeed = 0
  #loadScratch: Int32Array = new Int32Array(16)
  #seq = 0
  #eventId = 0
  #path: Int32Array = new Int32Array(64)

  // Counters.
  #matchCalls = 0
  #matchQueried = 0
  #matchHit = 0
  #insertCalls = 0
  #insertedTokens = 0
  #splits = 0
  #evictCalls = 0
  #evictedTokens = 0
  #evictedNodes = 0
  #eventsEmitted = 0
  #matchHostHit = 0
  #demotedTokens = 0
  #discardedTokens = 0
  #hostWriteTokens = 0
  #hostEvictedTokens = 0
  #loadedBackTokens = 0

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
    this.#onEvent = options.onEvent
    this.#hasEvents = typeof options.onEvent === 'function'
    this.#hasher = this.#hasEvents ? (options.blockHasher ?? sglangBlockHasher()) : options.blockHasher
    this.#allocator = this.trackValues ? options.allocator : undefined
    this.#policy = POLICY_CODE[policy]
    this.#slruThreshold = slru
    this.#trimPages = granularity === 'page'
    const batching = options.eventBatching ?? 'page'
    if (batching !== 'page' && batching !== 'node') {
      throw invalidOption(`eventBatching must be 'page' or 'node', got ${String(batching)}`, batching)
    }
    this.#eventPerNode = batching === 'node'
    this.#eventTokenIds = options.eventTokenIds !== false
    const tier =
      options.hostTier === undefined
        ? undefined
        : resolveHostTier(options.hostTier, pageSize, this.trackValues, options.allocator)
    this.hostTier = tier?.config
    this.#tiered = tier !== undefined
    this.#hostAlloc = tier?.allocator
    this.#onTransfer = tier?.onTransfer
    this.#hostPolicy = tier === undefined ? 0 : POLICY_CODE[tier.config.evictionPolicy]
    this.#hostCapacity = tier?.config.capacity ?? 0
    this.#writeThrough = tier !== undefined && tier.config.writePolicy !== 'write_back'
    this.#writeThreshold = tier?.config.writeThroughThreshold ?? 1
    this.#devMedium = tier?.config.deviceMedium
    this.#hostMedium = tier?.config.hostMedium

    const cap = initial
    this.#capacity = cap
    this.#gen = new Float64Array(cap).fill(1)
    this.#parent = new Int32Array(cap).fill(-1)
    this.#lockRef = new Int32Array(cap)
    this.#childCount = new Int32Array(cap)
    this.#chainNext = new Int32Array(cap).fill(-1)
    this.#childKey = new Float64Array(cap)
    this.#pathLen = new Float64Array(cap)
    this.#lastAccess = new Float64Array(cap)
    this.#created = new Float64Array(cap)
    this.#accessSeq = new Float64Array(cap)
    this.#createSeq = new Float64Array(cap)
    this.#hitCount = new Float64Array(cap)
    this.#priority = new Float64Array(cap)
    this.#ns = new Int32Array(cap)
    this.#isRoot = new Uint8Array(cap)
    this.#keys = new Array(cap).fill(EMPTY_TOKENS)
    this.#values = new Array(cap).fill(undefined)
    this.#children = new Array(cap).fill(undefined)
    this.#digests = new Array(cap).fill(undefined)
    this.#tier = new Uint8Array(cap)
    this.#devChildren = new Int32Array(cap)
    this.#hostRef = this.#tiered ? new Int32Array(cap) : EMPTY_INDICES
    this.#hostCounted = this.#tiered ? new Uint8Array(cap) : EMPTY_U8
    this.#hostValues = this.#tiered ? new Array(cap).fill(undefined) : []
    this.#hostHeap = this.#tiered ? new EvictionHeap(cap) : undefined
    this.#freeSlots = new Int32Array(cap)
    this.#heap = new EvictionHeap(cap)
    this.#namespaceRoot('', true)
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
    const countHit = options?.chunked !== true
    this.#insertCalls++
    const ps = this.pageSize
    const total = key.length - (key.length % ps)
    let node = this.#namespaceRoot(extraKey, true)
    if (total === 0) return { prefixLen: 0, lastNode: this.#handle(node), alignedLen: 0 }

    const now = this.#now()
    const keys = this.#keys
    const tiered = this.#tiered
    const writeThrough = this.#writeThrough && countHit
    let walked = 0
    this.#lastAccess[node] = now
    let off = 0
    // With a host tier, host-only nodes on the path take the caller's device slots (SGLang's
    // HiRadixCache does the same: the request recomputed them); they are not "already present".
    let prefixLen = -1
    while (off < total) {
      const child = this.#findChild(node, key, off)
      if (child < 0) break
      const clen = keys[child]!.length
      const m = this.#matchInChild(child, key, off, total)
      let next = child
      if (m < clen) next = this.#split(child, m)
      this.#touch(next, now)
      if (countHit) this.#hitCount[next]!++
      if (priority > this.#priority[next]!) this.#priority[next] = priority
      if (tiered) {
        if (this.#tier[next] === HOST) {
          if (prefixLen < 0) prefixLen = off
          this.#adopt(next, vals, off)
        }
        if (writeThrough) this.#scratchPush(walked++, next)
      }
      if (this.#heap.has(next)) this.#reheap(next)
      node = next
      off += m
      if (m < clen) break
    }
    if (prefixLen < 0) prefixLen = off
    if (off < total) {
      node = this.#newLeaf(node, key, off, total, vals, now, priority, countHit)
      this.#insertedTokens += total - off
      if (writeThrough) this.#scratchPush(walked++, node)
    }
    if (writeThrough) this.#writeThroughScratch(walked)
    return { prefixLen, lastNode: this.#handle(node), alignedLen: total }
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
    const key = toTokenArray(tokens)
    const extraKey = options?.extraKey ?? ''
    if (typeof extraKey !== 'string') {
      throw invalidOption(`extraKey must be a string, got ${typeof extraKey}`, extraKey)
    }
    const readOnly = options?.readOnly === true
    const into = options?.into
    const loadBack = options?.loadBack === true && this.#tiered
    if (loadBack && readOnly) throw invalidOption('loadBack cannot be combined with readOnly', options)
    const ps = this.pageSize
    const total = key.length - (key.length % ps)
    if (into !== undefined && (!(into instanceof Int32Array) || into.length < total)) {
      throw invalidOption(
        `into must be an Int32Array with room for ${total} indices, got ${into instanceof Int32Array ? `length ${into.length}` : typeof into}`,
        into,
      )
    }
    this.#matchCalls++
    this.#matchQueried += total
    // A match never creates a namespace (salts can be unbounded): an unknown one matches nothing
    // and reports the default root as lastNode (locking a root is a no-op).
    const nsId = this.#nsIds.get(extraKey)
    const root = nsId === undefined ? this.#nsRoots[0]! : this.#nsRoots[nsId]!
    if (nsId === undefined || total === 0) {
      const h = this.#handle(root)
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
    if (!readOnly) this.#lastAccess[root] = now
    const keys = this.#keys
    const tiered = this.#tiered
    let node = root
    let path = this.#path
    let depth = 0
    let lastTake = 0
    let off = 0
    // The device part of the match: device residency is closed under ancestors, so it is a prefix
    // of the path (the whole path without a host tier).
    let devDepth = 0
    let devOff = 0
    while (off < total) {
      const child = this.#findChild(node, key, off)
      if (child < 0) break
      const clen = keys[child]!.length
      const m = this.#matchInChild(child, key, off, total)
      let next = child
      if (m < clen && !readOnly) next = this.#split(child, m)
      if (!readOnly) {
        this.#touch(next, now)
        if (this.#heap.has(next)) this.#reheap(next)
        else if (tiered && this.#hostHeap!.has(next)) this.#rehost(next)
      }
      if (depth === path.length) path = this.#growPath()
      path[depth++] = next
      lastTake = m
      off += m
      if (!tiered || (this.#tier[next]! & DEV) !== 0) {
        devDepth = depth
        devOff = off
      }
      if (m < clen) break
      node = next
    }
    let loaded = 0
    if (tiered) {
      this.#matchHostHit += off - devOff
      if (loadBack && off - devOff > this.hostTier!.loadBackThreshold) {
        const got = this.#loadBackSlots(path[depth - 1]!)
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
      const values = this.#values
      let w = 0
      for (let d = 0; d < devDepth; d++) {
        const v = values[path[d]!]!
        if (d === depth - 1 && lastTake < v.length) {
          indices.set(v.subarray(0, lastTake), w)
          w += lastTake
        } else {
          indices.set(v, w)
          w += v.length
        }
      }
    }
    // A read-only partial match ends inside a node that was not split; report its parent as
    // the last node (the deepest node wholly inside the match).
    const handleNode =
      readOnly && devDepth === depth && depth > 0 && lastTake < keys[lastNode]!.length
        ? this.#parent[lastNode]!
        : lastNode
    const handle = this.#handle(handleNode)
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
    const hostHandle = readOnly && lastTake < keys[lastHost]!.length ? this.#parent[lastHost]! : lastHost
    return {
      length: devOff,
      indices,
      lastNode: handle,
      hostLength: off - devOff,
      lastHostNode: this.#handle(hostHandle),
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
    let n = this.#slotOf(node)
    if (this.#tiered) return this.#incLockTiered(n)
    const lockRef = this.#lockRef
    const isRoot = this.#isRoot
    const parent = this.#parent
    const keys = this.#keys
    let delta = 0
    while (isRoot[n] === 0) {
      if (lockRef[n] === 0) {
        const len = keys[n]!.length
        delta += len
        if (this.#heap.has(n)) this.#heap.remove(n)
      }
      lockRef[n]!++
      n = parent[n]!
    }
    this.#evictable -= delta
    this.#protected += delta
    return delta
  }

  /**
   * Release one lock on `node` and its ancestors. Returns the tokens moved back from protected to
   * evictable. Throws `LOCK_UNDERFLOW` (changing nothing) when `node` is not locked.
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
    let n = this.#slotOf(node)
    const lockRef = this.#lockRef
    const isRoot = this.#isRoot
    if (isRoot[n] === 0 && lockRef[n] === 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.LockUnderflow,
        `decLockRef on node ${node} whose lockRef is already 0`,
        node,
      )
    }
    if (this.#tiered) return this.#decLockTiered(n)
    const parent = this.#parent
    const keys = this.#keys
    const childCount = this.#childCount
    let delta = 0
    while (isRoot[n] === 0) {
      if (lockRef[n] === 1) {
        delta += keys[n]!.length
        lockRef[n] = 0
        if (childCount[n] === 0) this.#pushHeap(n)
      } else {
        lockRef[n]!--
      }
      n = parent[n]!
    }
    this.#evictable += delta
    this.#protected -= delta
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
    if (this.#tiered) return this.#evictTiered(numTokens)
    this.#evictCalls++
    const heap = this.#heap
    const keys = this.#keys
    const ps = this.pageSize
    let evicted = 0
    let nodes = 0
    while (evicted < numTokens && heap.size > 0) {
      const x = heap.peek()
      const len = keys[x]!.length
      const need = numTokens - evicted
      if (this.#trimPages && len > need) {
        const trim = Math.ceil(need / ps) * ps
        if (trim < len) {
          this.#split(x, len - trim)
          heap.remove(x)
          // Deleting the tail makes the upper part a childless, unlocked leaf: back in the heap.
          this.#deleteLeaf(x)
          evicted += trim
          nodes++
          break
        }
      }
      heap.remove(x)
      this.#deleteLeaf(x)
      evicted += len
      nodes++
    }
    this.#evictedTokens += evicted
    this.#evictedNodes += nodes
    return { evictedTokens: evicted, evictedNodes: nodes }
  }

  /** Tokens in the tree (`evictableSize() + protectedSize()`). */
  totalSize(): number {
    return this.#evictable + this.#protected
  }

  /** Tokens in unlocked nodes. */
  evictableSize(): number {
    return this.#evictable
  }

  /** Tokens in locked nodes. */
  protectedSize(): number {
    return this.#protected
  }

  // ---------------------------------------------------------------------------------------------
  // Host tier

  /**
   * Host tier capacity in tokens (0 without a host tier).
   *
   * @example
   * ```ts
   * new RadixCache({ trackValues: false, hostTier: { capacity: 4096 } }).hostCapacity() // 4096
   * ```
   */
  hostCapacity(): number {
    return this.#hostCapacity
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
    return this.#hostSize
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
    return this.#hostOnly
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
    return this.#hostEvictable
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
    return this.#tiered ? this.#hostFree() : 0
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
    let n = this.#slotOf(node)
    let host = 0
    const tier = this.#tier
    while (tier[n] === HOST) {
      host += this.#keys[n]!.length
      n = this.#parent[n]!
    }
    return { deviceTokens: this.#pathLen[n]!, hostTokens: host }
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
    const s = this.#slotOf(node)
    return this.#tiered ? this.#hostRef[s]! : 0
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
    this.#requireTier('evictHost')
    if (typeof numTokens !== 'number' || Number.isNaN(numTokens) || numTokens < 0) {
      throw invalidOption(`numTokens must be a non-negative number, got ${String(numTokens)}`, numTokens)
    }
    const heap = this.#hostHeap!
    let evicted = 0
    let nodes = 0
    while (evicted < numTokens && heap.size > 0) {
      const y = heap.peek()
      evicted += this.#keys[y]!.length
      this.#evictHostLeaf(y)
      nodes++
    }
    return { evictedTokens: evicted, evictedNodes: nodes }
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
    this.#requireTier('loadBack')
    const s = this.#slotOf(node)
    const got = this.#loadBackSlots(s)
    if (got < 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.OutOfMemory,
        `loadBack needs ${this.#loadNeed} device slots: ${(this.#allocator as KvSlotAllocator).availableSize()} free + ${this.#evictable} evictable`,
        this.#loadNeed,
      )
    }
    return { loadedTokens: got, indices: got > 0 ? this.#lastLoad : EMPTY_INDICES }
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
    this.#requireTier('protectHost')
    const s = this.#slotOf(node)
    const isRoot = this.#isRoot
    const parent = this.#parent
    const hostRef = this.#hostRef
    const tier = this.#tier
    let need = 0
    for (let n = s; isRoot[n] === 0; n = parent[n]!) {
      if (hostRef[n]!++ === 0) {
        this.#pinnedNodes++
        if (tier[n] === HOST) this.#syncHost(n)
      }
      if ((tier[n]! & HOST) === 0) need += this.#keys[n]!.length
    }
    if (need === 0) return 0
    if (this.#hostFree() + this.#hostEvictable < need) {
      const free = this.#hostFree()
      const evictable = this.#hostEvictable
      this.#unpin(s)
      throw new RadixCacheError(
        RadixCacheErrorCode.HostOutOfMemory,
        `protectHost needs ${need} host slots: ${free} free + ${evictable} evictable`,
        need,
      )
    }
    this.#reserveHost(need)
    for (let n = s; isRoot[n] === 0; n = parent[n]!) if ((tier[n]! & HOST) === 0) this.#writeHost(n)
    return need
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
    this.#requireTier('releaseHost')
    const s = this.#slotOf(node)
    if (this.#isRoot[s] === 1) return 0
    if (this.#hostRef[s] === 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.HostRefUnderflow,
        `releaseHost on node ${node} whose host reference count is already 0`,
        node,
      )
    }
    const before = this.#hostEvictable
    this.#unpin(s)
    return this.#hostEvictable - before
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
    return this.#pathLen[this.#slotOf(node)]!
  }

  /** Lock count of `node` (cheap; {@link RadixCache.nodeInfo} copies the node's arrays). */
  lockRefOf(node: NodeHandle): number {
    return this.#lockRef[this.#slotOf(node)]!
  }

  /** Parent of `node`, `undefined` for a namespace root (cheap). */
  parentOf(node: NodeHandle): NodeHandle | undefined {
    const p = this.#parent[this.#slotOf(node)]!
    return p < 0 ? undefined : this.#handle(p)
  }

  /**
   * Tokens only the given locks protect: every node on the paths of `nodes` (each handle counts
   * as one lock on itself and its ancestors; a handle may repeat) whose lock count equals the
   * number of those handles whose path runs through it. What dropping exactly those locks would
   * make evictable, shared prefixes counted once. O(total path length), no allocation.
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
    for (let i = 0; i < nodes.length; i++) this.#slotOf(nodes[i]!)
    if (this.#onlyCount.length < this.#capacity) this.#onlyCount = new Int32Array(this.#capacity)
    const count = this.#onlyCount
    const parent = this.#parent
    const isRoot = this.#isRoot
    let seen = this.#onlySeen
    let k = 0
    for (let i = 0; i < nodes.length; i++) {
      for (let n = nodes[i]! & SLOT_MASK; isRoot[n] === 0; n = parent[n]!) {
        const c = count[n]!
        count[n] = c + 1
        if (c === 0) {
          if (k === seen.length) {
            const grown = new Int32Array(seen.length * 2)
            grown.set(seen)
            seen = grown
            this.#onlySeen = seen
          }
          seen[k++] = n
        }
      }
    }
    const lockRef = this.#lockRef
    const keys = this.#keys
    let tokens = 0
    for (let i = 0; i < k; i++) {
      const n = seen[i]!
      if (lockRef[n] === count[n]) tokens += keys[n]!.length
      count[n] = 0
    }
    return tokens
  }

  #onlyCount: Int32Array = EMPTY_INDICES
  #onlySeen: Int32Array = new Int32Array(64)

  /** Whether `node` is a live handle of this cache. */
  isValid(node: NodeHandle): boolean {
    if (typeof node !== 'number' || !Number.isInteger(node) || node < 0) return false
    const slot = node & SLOT_MASK
    return slot < this.#nextSlot && this.#gen[slot] === Math.floor(node / SLOT_SPAN) && this.#isLive(slot)
  }

  /**
   * Drop every node and emit `AllBlocksCleared`. The KV slots of the tree go back to the
   * allocator (and the host tier's to its allocator); namespace roots (and handles to them)
   * survive. Refused with `RESET_WHILE_LOCKED` while any node is locked or host-protected (like
   * SGLang's `/flush_cache`, which is refused while requests run).
   */
  reset(): void {
    let locked = this.#protected
    if (this.#tiered) {
      // Host-only locked nodes and host references count too (locks and protections alike).
      for (let s = 0; s < this.#nextSlot && locked === 0; s++) {
        if (this.#isLive(s) && this.#isRoot[s] === 0 && (this.#lockRef[s]! > 0 || this.#hostRef[s]! > 0))
          locked = this.#keys[s]!.length
      }
    }
    if (locked > 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.ResetWhileLocked,
        `reset() while ${this.#protected} device tokens are locked${this.#tiered ? ' (or host tokens locked or protected)' : ''}`,
        this.#protected,
      )
    }
    if (this.#allocator !== undefined) {
      for (let s = 0; s < this.#nextSlot; s++) {
        const v = this.#values[s]
        if (this.#isLive(s) && this.#isRoot[s] === 0 && v !== undefined && v.length > 0)
          this.#allocator.free(v)
      }
    }
    if (this.#tiered) {
      const hostAlloc = this.#hostAlloc
      for (let s = 0; s < this.#nextSlot; s++) {
        const hv = this.#hostValues[s]
        if (hostAlloc !== undefined && this.#isLive(s) && hv !== undefined && hv.length > 0)
          hostAlloc.free(hv)
        this.#hostValues[s] = undefined
        this.#hostRef[s] = 0
        this.#hostCounted[s] = 0
      }
      this.#hostHeap!.clear()
      this.#hostSize = 0
      this.#hostOnly = 0
      this.#hostEvictable = 0
      this.#pinnedNodes = 0
      this.#matchHostHit = 0
      this.#demotedTokens = 0
      this.#discardedTokens = 0
      this.#hostWriteTokens = 0
      this.#hostEvictedTokens = 0
      this.#loadedBackTokens = 0
    }
    this.#heap.clear()
    // Namespace roots survive a reset (so handles to them stay valid); every other node goes.
    this.#freeTop = 0
    this.#liveNodes = 0
    for (let s = 0; s < this.#nextSlot; s++) {
      this.#children[s] = undefined
      this.#childCount[s] = 0
      this.#devChildren[s] = 0
      this.#digests[s] = undefined
      this.#chainNext[s] = -1
      if (this.#isRoot[s] === 1) {
        this.#liveNodes++
        continue
      }
      if (this.#parent[s]! >= 0) this.#gen[s]!++
      this.#keys[s] = EMPTY_TOKENS
      this.#values[s] = undefined
      this.#parent[s] = -1
      this.#lockRef[s] = 0
      this.#tier[s] = 0
      this.#freeSlots[this.#freeTop++] = s
    }
    this.#evictable = 0
    this.#protected = 0
    this.#matchCalls = 0
    this.#matchQueried = 0
    this.#matchHit = 0
    this.#insertCalls = 0
    this.#insertedTokens = 0
    this.#splits = 0
    this.#evictCalls = 0
    this.#evictedTokens = 0
    this.#evictedNodes = 0
    if (this.#hasEvents) this.#emit({ type: 'AllBlocksCleared', eventId: this.#eventId++ })
  }

  /** Counters since construction or the last reset. */
  stats(): RadixCacheStats {
    return {
      totalSize: this.totalSize(),
      evictableSize: this.#evictable,
      protectedSize: this.#protected,
      nodeCount: this.#liveNodes - this.#nsRoots.length,
      evictableLeaves: this.#heap.size,
      matchCalls: this.#matchCalls,
      matchQueriedTokens: this.#matchQueried,
      matchHitTokens: this.#matchHit,
      hitRatio: this.#matchQueried > 0 ? this.#matchHit / this.#matchQueried : 0,
      insertCalls: this.#insertCalls,
      insertedTokens: this.#insertedTokens,
      splits: this.#splits,
      evictCalls: this.#evictCalls,
      evictedTokens: this.#evictedTokens,
      evictedNodes: this.#evictedNodes,
      eventsEmitted: this.#eventsEmitted,
      hostCapacity: this.#hostCapacity,
      hostSize: this.#hostSize,
      hostOnlySize: this.#hostOnly,
      hostEvictableSize: this.#hostEvictable,
      matchHostHitTokens: this.#matchHostHit,
      demotedTokens: this.#demotedTokens,
      discardedTokens: this.#discardedTokens,
      hostWriteTokens: this.#hostWriteTokens,
      hostEvictedTokens: this.#hostEvictedTokens,
      loadedBackTokens: this.#loadedBackTokens,
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Inspection (read-only)

  /** The root of a namespace (`''`, the default, always exists). `undefined` if never used. */
  rootNode(extraKey = ''): NodeHandle | undefined {
    const id = this.#nsIds.get(extraKey)
    return id === undefined ? undefined : this.#handle(this.#nsRoots[id]!)
  }

  /** Namespaces that have a root (the default `''` first). */
  namespaces(): string[] {
    return this.#nsNames.slice()
  }

  /** Children of `node`, in insertion order of their first pages. */
  childrenOf(node: NodeHandle): NodeHandle[] {
    const s = this.#slotOf(node)
    const out: NodeHandle[] = []
    const map = this.#children[s]
    if (map === undefined) return out
    for (const head of map.values()) {
      for (let c = head; c !== -1; c = this.#chainNext[c]!) out.push(this.#handle(c))
    }
    return out
  }

  /** A read-only snapshot of one node. */
  nodeInfo(node: NodeHandle): NodeInfo {
    const s = this.#slotOf(node)
    const v = this.#values[s]
    const p = this.#parent[s]!
    return {
      handle: node,
      parent: p < 0 ? undefined : this.#handle(p),
      isRoot: this.#isRoot[s] === 1,
      extraKey: this.#nsNames[this.#ns[s]!]!,
      tokens: this.#keys[s]!.slice(),
      values: v === undefined ? undefined : v.slice(),
      pathLength: this.#pathLen[s]!,
      lockRef: this.#lockRef[s]!,
      lastAccessTime: this.#lastAccess[s]!,
      creationTime: this.#created[s]!,
      hitCount: this.#hitCount[s]!,
      priority: this.#priority[s]!,
      childCount: this.#childCount[s]!,
      evictableLeaf: this.#heap.has(s),
      onDevice: (this.#tier[s]! & DEV) !== 0,
      onHost: (this.#tier[s]! & HOST) !== 0,
      hostValues: this.#tiered ? this.#hostValues[s]?.slice() : undefined,
      hostRef: this.#tiered ? this.#hostRef[s]! : 0,
      hostEvictableLeaf: this.#tiered && this.#hostHeap!.has(s),
    }
  }

  /**
   * Chained block hashes of the pages of `node`'s own edge (not its ancestors), as carried by
   * its `BlockStored` events. Empty unless the cache emits events.
   */
  blockHashesOf(node: NodeHandle): bigint[] {
    const s = this.#slotOf(node)
    const d = this.#digests[s]
    if (d === undefined || this.#hasher === undefined) return []
    const hasher = this.#hasher
    return d.map((x) => hasher.blockId(x))
  }

  /**
   * Id of the last KV event emitted (-1 before the first). With {@link RadixCache.blockHashDump}
   * it lets a consumer that lost events resynchronize (the router's `ResidencyIndex.resync`).
   */
  lastEventId(): number {
    return this.#eventId - 1
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
    const bit = tier === 'device' ? DEV : HOST
    if (hasher !== undefined && this.#hasEvents) {
      for (let s = 0; s < this.#nextSlot; s++) {
        if (this.#isRoot[s] === 1 || this.#parent[s]! < 0 || (this.#tier[s]! & bit) === 0) continue
        const d = this.#digests[s]
        if (d !== undefined) for (let i = 0; i < d.length; i++) out.push(hasher.blockId(d[i]!))
      }
    }
    return { blockHashes: out, lastEventId: this.#eventId - 1 }
  }

  /**
   * Check the internal heap against the tree (used by the invariant checker in `/testing`).
   * Returns a list of problems; empty when consistent.
   * @internal
   */
  _checkInternals(): string[] {
    const problems: string[] = []
    let leaves = 0
    let evictable = 0
    let prot = 0
    let hostSize = 0
    let hostOnly = 0
    let hostEvictable = 0
    let hostLeaves = 0
    let pinned = 0
    const tiered = this.#tiered
    for (let s = 0; s < this.#nextSlot; s++) {
      if (!this.#isLive(s) || this.#isRoot[s] === 1) continue
      const len = this.#keys[s]!.length
      const t = this.#tier[s]!
      const dev = (t & DEV) !== 0
      const p = this.#parent[s]!
      if (t === 0 || (!tiered && t !== DEV)) problems.push(`node ${s}: tier bits ${t}`)
      if (dev && this.#isRoot[p] === 0 && (this.#tier[p]! & DEV) === 0)
        problems.push(`node ${s} is on the device under host-only parent ${p}`)
      if (dev) {
        if (this.#lockRef[s] === 0) evictable += len
        else prot += len
      }
      if (len === 0 || len % this.pageSize !== 0) problems.push(`node ${s} has length ${len}`)
      const isLeaf = dev && this.#lockRef[s] === 0 && this.#devChildren[s] === 0
      if (isLeaf) leaves++
      if (isLeaf !== this.#heap.has(s))
        problems.push(`node ${s}: evictable leaf ${isLeaf}, in heap ${!isLeaf}`)
      if (this.#pathLen[s] !== this.#pathLen[p]! + len) problems.push(`node ${s}: pathLen mismatch`)
      if (this.trackValues && dev && this.#values[s]?.length !== len)
        problems.push(`node ${s}: values length`)
      if (!dev && this.#values[s] !== undefined)
        problems.push(`node ${s}: host-only node keeps device values`)
      let count = 0
      let devCount = 0
      const map = this.#children[s]
      if (map !== undefined)
        for (const h of map.values())
          for (let c = h; c !== -1; c = this.#chainNext[c]!) {
            count++
            if ((this.#tier[c]! & DEV) !== 0) devCount++
          }
      if (count !== this.#childCount[s])
        problems.push(`node ${s}: childCount ${this.#childCount[s]} != ${count}`)
      if (devCount !== this.#devChildren[s])
        problems.push(`node ${s}: device children ${this.#devChildren[s]} != ${devCount}`)
      const pos = this.#heap.positionOf(s)
      if (pos >= 0) {
        const par = (pos - 1) >> 1
        if (pos > 0 && this.#heap.less(s, this.#heap.at(par))) problems.push(`heap order broken at ${pos}`)
      }
      if (!tiered) continue
      const onHost = (t & HOST) !== 0
      const ref = this.#hostRef[s]!
      if (onHost) hostSize += len
      if (onHost && !dev) hostOnly += len
      if (ref > 0) pinned++
      if (ref > 0 && !onHost) problems.push(`node ${s} is host-protected without a host copy`)
      if (this.#isRoot[p] === 0 && this.#hostRef[p]! < ref)
        problems.push(`node ${s}: host reference ${ref} above its parent's ${this.#hostRef[p]}`)
      if (this.trackValues && onHost !== (this.#hostValues[s]?.length === len))
        problems.push(`node ${s}: host values do not match its host copy`)
      const hostEv = onHost && !dev && this.#lockRef[s] === 0 && ref === 0
      if (hostEv) hostEvictable += len
      if ((this.#hostCounted[s] === 1) !== hostEv) problems.push(`node ${s}: host-evictable flag`)
      const hostLeaf = hostEv && count === 0
      if (hostLeaf) hostLeaves++
      if (hostLeaf !== this.#hostHeap!.has(s))
        problems.push(`node ${s}: host leaf ${hostLeaf}, in host heap ${this.#hostHeap!.has(s)}`)
      const hp = this.#hostHeap!.positionOf(s)
      if (hp > 0 && this.#hostHeap!.less(s, this.#hostHeap!.at((hp - 1) >> 1)))
        problems.push(`host heap order broken at ${hp}`)
    }
    if (leaves !== this.#heap.size)
      problems.push(`heap size ${this.#heap.size} != evictable leaves ${leaves}`)
    if (evictable !== this.#evictable) problems.push(`evictableSize ${this.#evictable} != ${evictable}`)
    if (prot !== this.#protected) problems.push(`protectedSize ${this.#protected} != ${prot}`)
    if (tiered) {
      if (hostSize !== this.#hostSize) problems.push(`hostSize ${this.#hostSize} != ${hostSize}`)
      if (hostOnly !== this.#hostOnly) problems.push(`hostOnlySize ${this.#hostOnly} != ${hostOnly}`)
      if (hostEvictable !== this.#hostEvictable)
        problems.push(`hostEvictableSize ${this.#hostEvictable} != ${hostEvictable}`)
      if (hostLeaves !== this.#hostHeap!.size)
        problems.push(`host heap size ${this.#hostHeap!.size} != host leaves ${hostLeaves}`)
      if (pinned !== this.#pinnedNodes)
        problems.push(`protected node count ${this.#pinnedNodes} != ${pinned}`)
      if (hostSize > this.#hostCapacity)
        problems.push(`host holds ${hostSize} > capacity ${this.#hostCapacity}`)
    }
    return problems
  }

  // ---------------------------------------------------------------------------------------------
  // Internals

  #handle(slot: number): NodeHandle {
    return (this.#gen[slot]! * SLOT_SPAN + slot) as NodeHandle
  }

  #isLive(slot: number): boolean {
    return this.#isRoot[slot] === 1 || this.#parent[slot]! >= 0
  }

  #slotOf(node: NodeHandle): number {
    if (typeof node !== 'number' || !Number.isInteger(node) || node < 0) {
      throw new RadixCacheError(RadixCacheErrorCode.UnknownNode, `not a node handle: ${String(node)}`, node)
    }
    const slot = node & SLOT_MASK
    if (slot >= this.#nextSlot || this.#gen[slot] !== Math.floor(node / SLOT_SPAN) || !this.#isLive(slot)) {
      throw new RadixCacheError(
        RadixCacheErrorCode.UnknownNode,
        `node handle ${node} is not a live node of this cache (evicted, reset, or from another cache)`,
        node,
      )
    }
    return slot
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

  #pageKey(key: Uint32Array, off: number): number {
    const ps = this.pageSize
    if (ps === 1) return key[off]!
    let h = 0x811c9dc5 ^ ps
    for (let i = 0; i < ps; i++) h = Math.imul(h ^ key[off + i]!, 0x01000193)
    return h & 0x3fffffff
  }

  #findChild(node: number, key: Uint32Array, off: number): number {
    const map = this.#children[node]
    if (map === undefined) return -1
    let c = map.get(this.#pageKey(key, off))
    if (c === undefined) return -1
    const ps = this.pageSize
    const keys = this.#keys
    const next = this.#chainNext
    while (c !== -1) {
      const ck = keys[c]!
      let i = 0
      while (i < ps && ck[i] === key[off + i]) i++
      if (i === ps) return c
      c = next[c]!
    }
    return -1
  }

  /**
   * Page-aligned length of the match between `child`'s edge and `key[off:total)`; at least one
   * page, since `#findChild` already compared the first page.
   */
  #matchInChild(child: number, key: Uint32Array, off: number, total: number): number {
    const ckey = this.#keys[child]!
    const ps = this.pageSize
    const i = commonPrefix(ckey, key, off, ps, Math.min(ckey.length, total - off))
    return i - (i % ps)
  }

  #touch(node: number, now: number): void {
    this.#lastAccess[node] = now
    this.#accessSeq[node] = ++this.#seq
  }

  #orderKeys(n: number, policy: number): void {
    // Fills the heap's sort keys for node n according to the policy.
    let a: number
    let b: number
    let c: number
    const la = this.#lastAccess[n]!
    const as = this.#accessSeq[n]!
    switch (policy) {
      case 0: // lru
        a = la
        b = as
        c = 0
        break
      case 1: // lfu
        a = this.#hitCount[n]!
        b = la
        c = as
        break
      case 2: // fifo
        a = this.#created[n]!
        b = this.#createSeq[n]!
        c = 0
        break
      case 3: // mru
        a = -la
        b = -as
        c = 0
        break
      case 4: // filo
        a = -this.#created[n]!
        b = -this.#createSeq[n]!
        c = 0
        break
      case 5: // priority
        a = this.#priority[n]!
        b = la
        c = as
        break
      default: // slru
        a = this.#hitCount[n]! >= this.#slruThreshold ? 1 : 0
        b = la
        c = as
        break
    }
    this.#ka = a
    this.#kb = b
    this.#kc = c
  }

  #ka = 0
  #kb = 0
  #kc = 0

  #pushHeap(n: number): void {
    this.#orderKeys(n, this.#policy)
    this.#heap.push(n, this.#ka, this.#kb, this.#kc)
  }

  #reheap(n: number): void {
    this.#orderKeys(n, this.#policy)
    this.#heap.update(n, this.#ka, this.#kb, this.#kc)
  }

  #growPath(): Int32Array {
    const p = new Int32Array(this.#path.length * 2)
    p.set(this.#path)
    this.#path = p
    return p
  }

  #allocSlot(): number {
    if (this.#freeTop > 0) return this.#freeSlots[--this.#freeTop]!
    if (this.#nextSlot === this.#capacity) this.#grow()
    return this.#nextSlot++
  }

  #grow(): void {
    const cap = this.#capacity
    if (cap >= MAX_NODES) {
      throw new RadixCacheError(RadixCacheErrorCode.OutOfMemory, `more than ${MAX_NODES} tree nodes`, cap)
    }
    const n = Math.min(MAX_NODES, cap * 2)
    this.#gen = growF64(this.#gen, n, 1)
    this.#parent = growI32(this.#parent, n, -1)
    this.#lockRef = growI32(this.#lockRef, n, 0)
    this.#childCount = growI32(this.#childCount, n, 0)
    this.#chainNext = growI32(this.#chainNext, n, -1)
    this.#childKey = growF64(this.#childKey, n, 0)
    this.#pathLen = growF64(this.#pathLen, n, 0)
    this.#lastAccess = growF64(this.#lastAccess, n, 0)
    this.#created = growF64(this.#created, n, 0)
    this.#accessSeq = growF64(this.#accessSeq, n, 0)
    this.#createSeq = growF64(this.#createSeq, n, 0)
    this.#hitCount = growF64(this.#hitCount, n, 0)
    this.#priority = growF64(this.#priority, n, 0)
    this.#ns = growI32(this.#ns, n, 0)
    this.#isRoot = growU8(this.#isRoot, n)
    this.#tier = growU8(this.#tier, n)
    this.#devChildren = growI32(this.#devChildren, n, 0)
    for (let i = cap; i < n; i++) {
      this.#keys.push(EMPTY_TOKENS)
      this.#values.push(undefined)
      this.#children.push(undefined)
      this.#digests.push(undefined)
    }
    if (this.#tiered) {
      this.#hostRef = growI32(this.#hostRef, n, 0)
      this.#hostCounted = growU8(this.#hostCounted, n)
      for (let i = cap; i < n; i++) this.#hostValues.push(undefined)
      this.#hostHeap!.growNodes(n)
    }
    this.#freeSlots = growI32(this.#freeSlots, n, 0)
    this.#heap.growNodes(n)
    this.#capacity = n
  }

  #namespaceRoot(extraKey: string, create: boolean): number {
    const id = this.#nsIds.get(extraKey)
    if (id !== undefined) return this.#nsRoots[id]!
    if (!create) return this.#nsRoots[0]!
    const s = this.#allocSlot()
    const nsId = this.#nsNames.length
    this.#nsIds.set(extraKey, nsId)
    this.#nsNames.push(extraKey)
    this.#nsRoots.push(s)
    this.#isRoot[s] = 1
    this.#parent[s] = -1
    this.#lockRef[s] = 0
    this.#childCount[s] = 0
    this.#devChildren[s] = 0
    this.#tier[s] = DEV
    this.#pathLen[s] = 0
    this.#ns[s] = nsId
    this.#keys[s] = EMPTY_TOKENS
    this.#values[s] = this.trackValues ? EMPTY_INDICES : undefined
    this.#children[s] = undefined
    this.#digests[s] = undefined
    this.#liveNodes++
    return s
  }

  #linkChild(parent: number, child: number, ck: number): void {
    let map = this.#children[parent]
    if (map === undefined) {
      map = new Map()
      this.#children[parent] = map
    }
    const head = map.get(ck)
    this.#chainNext[child] = head === undefined ? -1 : head
    map.set(ck, child)
    this.#childKey[child] = ck
    this.#childCount[parent]!++
    if ((this.#tier[child]! & DEV) !== 0) this.#devChildren[parent]!++
  }

  #unlinkChild(parent: number, child: number): void {
    const map = this.#children[parent]!
    const ck = this.#childKey[child]!
    const head = map.get(ck)!
    const next = this.#chainNext
    if (head === child) {
      if (next[child] === -1) map.delete(ck)
      else map.set(ck, next[child]!)
    } else {
      let p = head
      while (next[p] !== child) p = next[p]!
      next[p] = next[child]!
    }
    next[child] = -1
    this.#childCount[parent]!--
    if ((this.#tier[child]! & DEV) !== 0) this.#devChildren[parent]!--
  }

  /** Replace `oldChild` by `newChild` at the same place of `parent`'s child chain. */
  #replaceChild(parent: number, oldChild: number, newChild: number): void {
    const map = this.#children[parent]!
    const ck = this.#childKey[oldChild]!
    const next = this.#chainNext
    if (map.get(ck) === oldChild) map.set(ck, newChild)
    else {
      let p = map.get(ck)!
      while (next[p] !== oldChild) p = next[p]!
      next[p] = newChild
    }
    next[newChild] = next[oldChild]!
    next[oldChild] = -1
    this.#childKey[newChild] = ck
  }

  /**
   * Split `child` at `m` tokens (a page multiple, 0 < m < len): a new upper node takes the first
   * `m` tokens and inherits the lock count and order attributes; `child` keeps the suffix (and its
   * identity). Sizes do not change.
   */
  #split(child: number, m: number): number {
    const up = this.#allocSlot()
    const p = this.#parent[child]!
    const ckey = this.#keys[child]!
    this.#keys[up] = ckey.subarray(0, m)
    this.#keys[child] = ckey.subarray(m)
    const v = this.#values[child]
    if (v !== undefined) {
      this.#values[up] = v.subarray(0, m)
      this.#values[child] = v.subarray(m)
    } else this.#values[up] = undefined
    const d = this.#digests[child]
    if (d !== undefined) {
      const pages = m / this.pageSize
      this.#digests[up] = d.slice(0, pages)
      this.#digests[child] = d.slice(pages)
    } else this.#digests[up] = undefined
    this.#parent[up] = p
    this.#isRoot[up] = 0
    this.#ns[up] = this.#ns[child]!
    this.#lockRef[up] = this.#lockRef[child]!
    this.#pathLen[up] = this.#pathLen[child]! - (ckey.length - m)
    this.#lastAccess[up] = this.#lastAccess[child]!
    this.#created[up] = this.#created[child]!
    this.#accessSeq[up] = this.#accessSeq[child]!
    this.#createSeq[up] = this.#createSeq[child]!
    this.#hitCount[up] = this.#hitCount[child]!
    this.#priority[up] = this.#priority[child]!
    this.#tier[up] = this.#tier[child]!
    if (this.#tiered) {
      const hv = this.#hostValues[child]
      if (hv !== undefined) {
        this.#hostValues[up] = hv.subarray(0, m)
        this.#hostValues[child] = hv.subarray(m)
      } else this.#hostValues[up] = undefined
      this.#hostRef[up] = this.#hostRef[child]!
      if (this.#hostRef[up]! > 0) this.#pinnedNodes++
      this.#hostCounted[up] = this.#hostCounted[child]!
    }
    this.#replaceChild(p, child, up)
    this.#children[up] = undefined
    this.#childCount[up] = 0
    this.#devChildren[up] = 0
    this.#parent[child] = up
    this.#linkChild(up, child, this.#pageKey(this.#keys[child]!, 0))
    this.#liveNodes++
    this.#splits++
    return up
  }

  #newLeaf(
    parent: number,
    key: Uint32Array,
    from: number,
    to: number,
    vals: Int32Array | undefined,
    now: number,
    priority: number,
    countHit: boolean,
  ): number {
    const s = this.#allocSlot()
    const len = to - from
    this.#keys[s] = key.slice(from, to)
    this.#values[s] = vals === undefined ? undefined : vals.slice(from, to)
    this.#parent[s] = parent
    this.#isRoot[s] = 0
    this.#ns[s] = this.#ns[parent]!
    this.#lockRef[s] = 0
    this.#pathLen[s] = this.#pathLen[parent]! + len
    this.#lastAccess[s] = now
    this.#created[s] = now
    this.#accessSeq[s] = ++this.#seq
    this.#createSeq[s] = this.#seq
    this.#hitCount[s] = countHit ? 1 : 0
    this.#priority[s] = priority
    this.#children[s] = undefined
    this.#childCount[s] = 0
    this.#devChildren[s] = 0
    this.#tier[s] = DEV
    if (this.#tiered) {
      this.#hostValues[s] = undefined
      this.#hostRef[s] = 0
      this.#hostCounted[s] = 0
    }
    const parentWasLeaf = this.#heap.has(parent)
    this.#linkChild(parent, s, this.#pageKey(key, from))
    if (parentWasLeaf) this.#heap.remove(parent)
    this.#liveNodes++
    this.#evictable += len
    this.#pushHeap(s)
    if (this.#hasEvents) this.#storeEvents(s, parent)
    else this.#digests[s] = undefined
    return s
  }

  #storeEvents(s: number, parent: number): void {
    const hasher = this.#hasher!
    const ps = this.pageSize
    const key = this.#keys[s]!
    const pages = key.length / ps
    const nsName = this.#nsNames[this.#ns[s]!]!
    const extraKey = nsName === '' ? undefined : nsName
    const pd = this.#digests[parent]
    let prev: Uint8Array | undefined =
      this.#isRoot[parent] === 1 || pd === undefined ? undefined : pd[pd.length - 1]
    const digests: Uint8Array[] = new Array(pages)
    for (let p = 0; p < pages; p++) {
      const d = hasher.hashBlock(prev, key.subarray(p * ps, (p + 1) * ps), extraKey)
      digests[p] = d
      prev = d
    }
    this.#digests[s] = digests
    this.#emitStored(s, this.#devMedium)
  }

  #emit(event: KvEvent): void {
    this.#eventsEmitted++
    this.#onEvent!(event)
  }

  // ---------------------------------------------------------------------------------------------
  // Host tier internals. Every state change of a node goes through these, which keep the device
  // heap (DEV, unlocked, no DEV child), the host heap (host-only, unlocked, unprotected, no child)
  // and the size counters exact.

  #requireTier(what: string): void {
    if (!this.#tiered) {
      throw new RadixCacheError(
        RadixCacheErrorCode.NoHostTier,
        `${what} needs a host tier (create the cache with the hostTier option)`,
        what,
      )
    }
  }

  #hostFree(): number {
    const free = this.#hostCapacity - this.#hostSize
    const a = this.#hostAlloc
    return a === undefined ? free : Math.min(free, a.availableSize())
  }

  #emitTransfer(direction: KvTransfer['direction'], n: number): void {
    const f = this.#onTransfer
    if (f === undefined) return
    f({
      direction,
      tokens: this.#keys[n]!.length,
      deviceIndices: this.#values[n] ?? EMPTY_INDICES,
      hostIndices: this.#hostValues[n] ?? EMPTY_INDICES,
    })
  }

  /** Bring `n`'s host-evictable count and host-heap membership up to date. */
  #syncHost(n: number): void {
    const want = this.#tier[n] === HOST && this.#lockRef[n] === 0 && this.#hostRef[n] === 0 ? 1 : 0
    if (want !== this.#hostCounted[n]) {
      const len = this.#keys[n]!.length
      this.#hostEvictable += want === 1 ? len : -len
      this.#hostCounted[n] = want
    }
    const heap = this.#hostHeap!
    const leaf = want === 1 && this.#childCount[n] === 0
    if (leaf !== heap.has(n)) {
      if (leaf) {
        this.#orderKeys(n, this.#hostPolicy)
        heap.push(n, this.#ka, this.#kb, this.#kc)
      } else heap.remove(n)
    }
  }

  #rehost(n: number): void {
    this.#orderKeys(n, this.#hostPolicy)
    this.#hostHeap!.update(n, this.#ka, this.#kb, this.#kc)
  }

  /** Push `n` on the device heap when it is an unlocked device leaf. */
  #maybePushDevice(n: number): void {
    if (
      this.#isRoot[n] === 0 &&
      (this.#tier[n]! & DEV) !== 0 &&
      this.#lockRef[n] === 0 &&
      this.#devChildren[n] === 0 &&
      !this.#heap.has(n)
    ) {
      this.#pushHeap(n)
    }
  }

  #incLockTiered(start: number): number {
    const lockRef = this.#lockRef
    const isRoot = this.#isRoot
    const parent = this.#parent
    const tier = this.#tier
    let delta = 0
    for (let n = start; isRoot[n] === 0; n = parent[n]!) {
      if (lockRef[n]!++ === 0) {
        if ((tier[n]! & DEV) !== 0) {
          delta += this.#keys[n]!.length
          if (this.#heap.has(n)) this.#heap.remove(n)
        } else this.#syncHost(n)
      }
    }
    this.#evictable -= delta
    this.#protected += delta
    return delta
  }

  #decLockTiered(start: number): number {
    const lockRef = this.#lockRef
    const isRoot = this.#isRoot
    const parent = this.#parent
    const tier = this.#tier
    let delta = 0
    for (let n = start; isRoot[n] === 0; n = parent[n]!) {
      if (--lockRef[n]! === 0) {
        if ((tier[n]! & DEV) !== 0) {
          delta += this.#keys[n]!.length
          if (this.#devChildren[n] === 0) this.#pushHeap(n)
        } else this.#syncHost(n)
      }
    }
    this.#evictable += delta
    this.#protected -= delta
    return delta
  }

  /** Drop one host reference along the path `start` → root. */
  #unpin(start: number): void {
    const isRoot = this.#isRoot
    const parent = this.#parent
    const hostRef = this.#hostRef
    for (let n = start; isRoot[n] === 0; n = parent[n]!) {
      if (--hostRef[n]! === 0) {
        this.#pinnedNodes--
        if (this.#tier[n] === HOST) this.#syncHost(n)
      }
    }
  }

  #evictTiered(numTokens: number): EvictResult {
    this.#evictCalls++
    const heap = this.#heap
    const keys = this.#keys
    const ps = this.pageSize
    let evicted = 0
    let nodes = 0
    while (evicted < numTokens && heap.size > 0) {
      const x = heap.peek()
      const len = keys[x]!.length
      const need = numTokens - evicted
      if (this.#trimPages && len > need) {
        const trim = Math.ceil(need / ps) * ps
        if (trim < len) {
          // The tail `trim` tokens leave the device; the upper part becomes the next device leaf.
          this.#split(x, len - trim)
          heap.remove(x)
          this.#evictDeviceNode(x)
          evicted += trim
          nodes++
          break
        }
      }
      heap.remove(x)
      this.#evictDeviceNode(x)
      evicted += len
      nodes++
    }
    this.#evictedTokens += evicted
    this.#evictedNodes += nodes
    return { evictedTokens: evicted, evictedNodes: nodes }
  }

  /**
   * `x` (an unlocked device leaf, out of the device heap) leaves the device: to the host when it
   * has a copy or `write_back` can make room for one, otherwise it is discarded.
   */
  #evictDeviceNode(x: number): void {
    const len = this.#keys[x]!.length
    if ((this.#tier[x]! & HOST) === 0) {
      if (this.#writeThrough || !this.#reserveHost(len)) {
        this.#discard(x)
        return
      }
      this.#writeHost(x)
    }
    this.#demotedTokens += len
    this.#dropDevice(x)
  }

  /** Copy device node `n` (no host copy yet) to the host; the room is reserved. */
  #writeHost(n: number): void {
    const len = this.#keys[n]!.length
    if (this.#hostAlloc !== undefined) this.#hostValues[n] = this.#hostAlloc.alloc(len)
    this.#emitTransfer('deviceToHost', n)
    this.#tier[n] = DEV | HOST
    this.#hostSize += len
    this.#hostWriteTokens += len
    if (this.#hasEvents) this.#emitStored(n, this.#hostMedium)
  }

  /** Free the device copy of `n` (unlocked, no DEV child, has a host copy). */
  #dropDevice(x: number): void {
    const len = this.#keys[x]!.length
    const v = this.#values[x]
    if (this.#allocator !== undefined && v !== undefined && v.length > 0) this.#allocator.free(v)
    this.#values[x] = undefined
    this.#tier[x] = HOST
    this.#evictable -= len
    this.#hostOnly += len
    if (this.#hasEvents) this.#emitRemoved(x, this.#devMedium)
    const p = this.#parent[x]!
    this.#devChildren[p]!--
    this.#maybePushDevice(p)
    this.#syncHost(x)
  }

  /** Make `len` host slots free by host eviction; `false` (nothing evicted) when impossible. */
  #reserveHost(len: number): boolean {
    if (this.#hostFree() >= len) return true
    if (this.#hostFree() + this.#hostEvictable < len) return false
    const heap = this.#hostHeap!
    while (this.#hostFree() < len && heap.size > 0) this.#evictHostLeaf(heap.peek())
    return this.#hostFree() >= len
  }

  /** Remove host leaf `y` (host-only, unlocked, unprotected, childless) from the tree. */
  #evictHostLeaf(y: number): void {
    const len = this.#keys[y]!.length
    this.#hostHeap!.remove(y)
    this.#hostCounted[y] = 0
    this.#hostEvictable -= len
    this.#hostEvictedTokens += len
    this.#removeHostCopy(y)
    const p = this.#parent[y]!
    this.#unlinkChild(p, y)
    this.#freeSlot(y)
    if (this.#tier[p] === HOST) this.#syncHost(p)
  }

  /** Free `n`'s host slots and emit the host removal (sizes of a host-only node). */
  #removeHostCopy(n: number): void {
    const len = this.#keys[n]!.length
    const hv = this.#hostValues[n]
    if (this.#hostAlloc !== undefined && hv !== undefined && hv.length > 0) this.#hostAlloc.free(hv)
    this.#hostValues[n] = undefined
    if (this.#hasEvents) this.#emitRemoved(n, this.#hostMedium)
    this.#hostSize -= len
    this.#hostOnly -= len
  }

  /**
   * Discard device leaf `x` (unlocked, no host copy) and its host-only subtree, which no match can
   * reach once `x` is gone.
   */
  #discard(x: number): void {
    const len = this.#keys[x]!.length
    if (this.#childCount[x]! > 0) {
      const stack: number[] = [x]
      const order: number[] = []
      while (stack.length > 0) {
        const n = stack.pop()!
        const map = this.#children[n]
        if (map === undefined) continue
        for (const h of map.values()) {
          for (let c = h; c !== -1; c = this.#chainNext[c]!) {
            order.push(c)
            stack.push(c)
          }
        }
      }
      // Children before parents.
      for (let i = order.length - 1; i >= 0; i--) {
        const c = order[i]!
        const clen = this.#keys[c]!.length
        if (this.#hostHeap!.has(c)) this.#hostHeap!.remove(c)
        if (this.#hostCounted[c] === 1) {
          this.#hostEvictable -= clen
          this.#hostCounted[c] = 0
        }
        this.#hostEvictedTokens += clen
        this.#removeHostCopy(c)
        this.#unlinkChild(this.#parent[c]!, c)
        this.#freeSlot(c)
      }
    }
    const v = this.#values[x]
    if (this.#allocator !== undefined && v !== undefined && v.length > 0) this.#allocator.free(v)
    if (this.#hasEvents) this.#emitRemoved(x, this.#devMedium)
    this.#evictable -= len
    this.#discardedTokens += len
    const p = this.#parent[x]!
    this.#unlinkChild(p, x)
    this.#freeSlot(x)
    this.#maybePushDevice(p)
  }

  /** Host-only `n` on an insert path takes the caller's device slots `vals[off:)`. */
  #adopt(n: number, vals: Int32Array | undefined, off: number): void {
    const len = this.#keys[n]!.length
    if (vals !== undefined) this.#values[n] = vals.slice(off, off + len)
    this.#tier[n] = DEV | HOST
    this.#hostOnly -= len
    this.#syncHost(n)
    if (this.#lockRef[n] === 0) this.#evictable += len
    else this.#protected += len
    const p = this.#parent[n]!
    this.#devChildren[p]!++
    if (this.#heap.has(p)) this.#heap.remove(p)
    this.#maybePushDevice(n)
    if (this.#hasEvents) this.#emitStored(n, this.#devMedium)
  }

  #scratchPush(i: number, n: number): void {
    if (i === this.#loadScratch.length) {
      const g = new Int32Array(i * 2)
      g.set(this.#loadScratch)
      this.#loadScratch = g
    }
    this.#loadScratch[i] = n
  }

  /** Write-through after an insert: copy the walked nodes whose hit count reached the threshold. */
  #writeThroughScratch(count: number): void {
    const scratch = this.#loadScratch
    for (let i = 0; i < count; i++) {
      const n = scratch[i]!
      if ((this.#tier[n]! & HOST) !== 0 || this.#hitCount[n]! < this.#writeThreshold) continue
      if (this.#reserveHost(this.#keys[n]!.length)) this.#writeHost(n)
    }
  }

  /**
   * Load the host-only part of the path root → `start` onto device slots (kept locked meanwhile).
   * Returns the tokens loaded, or -1 when the device cannot get the slots (nothing changed).
   */
  #loadBackSlots(start: number): number {
    const tier = this.#tier
    const keys = this.#keys
    let need = 0
    let count = 0
    for (let n = start; tier[n] === HOST; n = this.#parent[n]!) {
      need += keys[n]!.length
      this.#scratchPush(count++, n)
    }
    if (need === 0) return 0
    this.#incLockTiered(start)
    let slots: Int32Array | undefined
    if (this.trackValues) {
      const dev = this.#allocator as KvSlotAllocator
      const avail = dev.availableSize()
      if (avail < need) {
        if (avail + this.#evictable < need) {
          this.#decLockTiered(start)
          this.#loadNeed = need
          return -1
        }
        this.#evictTiered(need - avail)
        if (dev.availableSize() < need) {
          this.#decLockTiered(start)
          this.#loadNeed = need
          return -1
        }
      }
      slots = dev.alloc(need)
    }
    // Top-down: parents first, so every step keeps device residency closed under ancestors. (Read
    // the node arrays again: the eviction above may have split nodes and grown them.)
    const scratch = this.#loadScratch
    const tierNow = this.#tier
    let off = 0
    for (let i = count - 1; i >= 0; i--) {
      const n = scratch[i]!
      const len = keys[n]!.length
      if (slots !== undefined) this.#values[n] = slots.subarray(off, off + len)
      off += len
      tierNow[n] = DEV | HOST
      this.#emitTransfer('hostToDevice', n)
      this.#hostOnly -= len
      this.#syncHost(n)
      this.#protected += len // locked by this call
      const p = this.#parent[n]!
      this.#devChildren[p]!++
      if (this.#heap.has(p)) this.#heap.remove(p)
      if (this.#hasEvents) this.#emitStored(n, this.#devMedium)
    }
    this.#loadedBackTokens += need
    this.#lastLoad = slots ?? EMPTY_INDICES
    this.#decLockTiered(start)
    return need
  }

  /** Emit `BlockStored` for the pages of `n` (hashes already computed) on `medium`. */
  #emitStored(n: number, medium: string | undefined): void {
    const d = this.#digests[n]
    if (d === undefined) return
    const hasher = this.#hasher!
    const ps = this.pageSize
    const key = this.#keys[n]!
    const ns = this.#nsNames[this.#ns[n]!]!
    const extraKey = ns === '' ? null : ns
    const p = this.#parent[n]!
    const pd = this.#digests[p]
    const parentId =
      this.#isRoot[p] === 1 || pd === undefined || pd.length === 0 ? null : hasher.blockId(pd[pd.length - 1]!)
    const ids = d.map((x) => hasher.blockId(x))
    if (this.#eventPerNode) {
      this.#emit(
        withMedium(
          {
            type: 'BlockStored',
            eventId: this.#eventId++,
            blockHashes: ids,
            parentBlockHash: parentId,
            tokenIds: this.#eventTokenIds ? Array.from(key) : NO_TOKENS,
            blockSize: ps,
            extraKey,
          },
          medium,
        ),
      )
      return
    }
    for (let i = 0; i < ids.length; i++) {
      this.#emit(
        withMedium(
          {
            type: 'BlockStored',
            eventId: this.#eventId++,
            blockHashes: [ids[i]!],
            parentBlockHash: i === 0 ? parentId : ids[i - 1]!,
            tokenIds: this.#eventTokenIds ? Array.from(key.subarray(i * ps, (i + 1) * ps)) : NO_TOKENS,
            blockSize: ps,
            extraKey,
          },
          medium,
        ),
      )
    }
  }

  /** Emit `BlockRemoved` for the pages of `n` on `medium`. */
  #emitRemoved(n: number, medium: string | undefined): void {
    const d = this.#digests[n]
    if (d === undefined) return
    const hasher = this.#hasher!
    const ns = this.#nsNames[this.#ns[n]!]!
    const extraKey = ns === '' ? null : ns
    if (this.#eventPerNode) {
      const ids: bigint[] = new Array(d.length)
      for (let i = 0; i < d.length; i++) ids[i] = hasher.blockId(d[i]!)
      this.#emit(
        withMedium({ type: 'BlockRemoved', eventId: this.#eventId++, blockHashes: ids, extraKey }, medium),
      )
      return
    }
    for (let i = 0; i < d.length; i++) {
      this.#emit(
        withMedium(
          { type: 'BlockRemoved', eventId: this.#eventId++, blockHashes: [hasher.blockId(d[i]!)], extraKey },
          medium,
        ),
      )
    }
  }

  /** Return a removed node's slot to the free list. */
  #freeSlot(x: number): void {
    this.#keys[x] = EMPTY_TOKENS
    this.#values[x] = undefined
    this.#children[x] = undefined
    this.#digests[x] = undefined
    this.#parent[x] = -1
    this.#tier[x] = 0
    if (this.#tiered) {
      this.#hostValues[x] = undefined
      this.#hostRef[x] = 0
      this.#hostCounted[x] = 0
    }
    this.#gen[x]!++
    this.#freeSlots[this.#freeTop++] = x
    this.#liveNodes--
  }

  /** Remove an unlocked, childless node (already out of the heap). */
  #deleteLeaf(x: number): void {
    const p = this.#parent[x]!
    const len = this.#keys[x]!.length
    const v = this.#values[x]
    if (this.#allocator !== undefined && v !== undefined && v.length > 0) this.#allocator.free(v)
    if (this.#hasEvents) this.#emitRemoved(x, undefined)
    this.#unlinkChild(p, x)
    this.#evictable -= len
    this.#freeSlot(x)
    if (this.#isRoot[p] === 0 && this.#childCount[p] === 0 && this.#lockRef[p] === 0) this.#pushHeap(p)
  }
}

/**
 * Length of the common prefix of `a[start:lim)` and `b[off + start:)`, starting at `start`.
 * Eight tokens per step with one branch (XOR is 0 only for equal words): cached prefixes are
 * long equal runs, so this runs at the speed of a plain same-index loop whatever `off` is.
 */
function commonPrefix(a: Uint32Array, b: Uint32Array, off: number, start: number, lim: number): number {
  let i = start
  let j = off + start
  const lim8 = lim - 7
  while (i < lim8) {
    if (
      (a[i]! ^ b[j]!) |
      (a[i + 1]! ^ b[j + 1]!) |
      (a[i + 2]! ^ b[j + 2]!) |
      (a[i + 3]! ^ b[j + 3]!) |
      (a[i + 4]! ^ b[j + 4]!) |
      (a[i + 5]! ^ b[j + 5]!) |
      (a[i + 6]! ^ b[j + 6]!) |
      (a[i + 7]! ^ b[j + 7]!)
    ) {
      break
    }
    i += 8
    j += 8
  }
  while (i < lim && a[i] === b[j]) {
    i++
    j++
  }
  return i
}

function defaultNow(): number {
  return performance.now()
}

function withMedium<E extends KvEvent>(event: E, medium: string | undefined): E {
  return medium === undefined ? event : { ...event, medium }
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

function growI32(a: Int32Array, n: number, fill: number): Int32Array {
  const b = new Int32Array(n)
  if (fill !== 0) b.fill(fill, a.length)
  b.set(a)
  return b
}

function growU8(a: Uint8Array, n: number): Uint8Array {
  const b = new Uint8Array(n)
  b.set(a)
  return b
}

function growF64(a: Float64Array, n: number, fill: number): Float64Array {
  const b = new Float64Array(n)
  if (fill !== 0) b.fill(fill, a.length)
  b.set(a)
  return b
}
