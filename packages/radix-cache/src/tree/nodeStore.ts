import type { KvAllocator } from '../allocator/kvAllocator.js'
import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import type { KvEventEmitter } from '../events/kvEventEmitter.js'
import type { HostTier } from '../tier/hostTier.js'
import { EvictionHeap } from './evictionHeap.js'
import type { NodeHandle } from './types.js'

// A handle packs (generation, slot): handle = gen * 2^26 + slot. `handle & SLOT_MASK` recovers the
// slot because ToInt32 keeps the low 32 bits of any integer below 2^53.
const SLOT_BITS = 26
/** Slots per generation of a handle. @internal */
export const SLOT_SPAN = 2 ** SLOT_BITS
/** Mask that recovers a slot from a handle. @internal */
export const SLOT_MASK = SLOT_SPAN - 1
/** Most tree nodes a cache can hold. @internal */
export const MAX_NODES = SLOT_SPAN

/** Shared empty slot-index array. @internal */
export const EMPTY_INDICES = new Int32Array(0)
/** Shared empty token array. @internal */
export const EMPTY_TOKENS = new Uint32Array(0)

// Where a node's KV lives (`NodeStore.tier` bits). Without a host tier every node is DEV. Device
// residency is closed under ancestors (a DEV node's parent is DEV or a root), so a root-to-node
// path is a device part followed by a host-only part; every node is in at least one tier.
/** Tier bit: the node's KV is on the device. @internal */
export const DEV = 1
/** Tier bit: the node's KV has a host copy. @internal */
export const HOST = 2

/** What a {@link NodeStore} is built from (validated by `RadixCache`). @internal */
export interface NodeStoreOptions {
  readonly pageSize: number
  readonly trackValues: boolean
  readonly allocator: KvAllocator | undefined
  readonly policy: number
  readonly slruThreshold: number
  readonly trimPages: boolean
  readonly tiered: boolean
  readonly initialCapacity: number
}

/**
 * The nodes of a `RadixCache`: a struct of arrays indexed by slot (grown by doubling), the child
 * maps, the namespace roots, the device sizes and the device eviction heap, with the structural
 * operations every part of the cache shares (link, split, new leaf, free). The host tier's per-node
 * state lives in its `HostTier`, reached through the hooks `host` and `events`.
 * @internal
 */
export class NodeStore {
  readonly pageSize: number
  readonly trackValues: boolean
  readonly allocator: KvAllocator | undefined
  readonly policy: number
  readonly slruThreshold: number
  readonly trimPages: boolean
  readonly tiered: boolean
  /** Set once by the cache when it has a host tier. */
  host: HostTier | undefined = undefined
  /** Set once by the cache when it emits KV events. */
  events: KvEventEmitter | undefined = undefined
  hasEvents = false

  capacity: number
  gen: Float64Array
  parent: Int32Array
  lockRef: Int32Array
  /** Of `lockRef`, the locks marked idle (`markLockIdle`); never above `lockRef`. */
  idleRef: Int32Array
  childCount: Int32Array
  chainNext: Int32Array
  childKey: Float64Array
  pathLen: Float64Array
  lastAccess: Float64Array
  created: Float64Array
  accessSeq: Float64Array
  createSeq: Float64Array
  hitCount: Float64Array
  priority: Float64Array
  ns: Int32Array
  isRoot: Uint8Array
  readonly keys: Uint32Array[]
  readonly values: (Int32Array | undefined)[]
  readonly children: (Map<number, number> | undefined)[]
  /**
   * Per node (with KV events), the digests of its pages packed back to back, `digestLen` bytes
   * each: one array per node rather than one per page (fewer long-lived objects for the garbage
   * collector).
   */
  readonly digests: (Uint8Array | undefined)[]
  /** Bytes per digest of the cache's block hasher (known from its first digest; 0 before). */
  digestLen = 0
  /** DEV / HOST bits. */
  tier: Uint8Array
  /** Children that are on the device (equals `childCount` without a host tier). */
  devChildren: Int32Array
  freeSlots: Int32Array
  freeTop = 0
  nextSlot = 0
  liveNodes = 0

  readonly heap: EvictionHeap
  readonly nsIds = new Map<string, number>()
  readonly nsNames: string[] = []
  readonly nsRoots: number[] = []

  /** Device tokens in unlocked nodes. */
  evictableTokens = 0
  /** Device tokens in locked nodes. */
  protectedTokens = 0
  /** Tokens of the nodes whose every lock is marked idle (`idleRef === lockRef > 0`). */
  idleLockedTokens = 0
  /** Moves when a node some idle-marked lock passes through goes between one lock and two. */
  soleLockEpoch = 0
  seq = 0
  path: Int32Array = new Int32Array(64)
  /** Sort keys filled by `orderKeys`. */
  ka = 0
  kb = 0
  kc = 0

  // Counters shared by the device and the host eviction.
  splits = 0
  evictCalls = 0
  evictedTokens = 0
  evictedNodes = 0

  constructor(o: NodeStoreOptions) {
    this.pageSize = o.pageSize
    this.trackValues = o.trackValues
    this.allocator = o.allocator
    this.policy = o.policy
    this.slruThreshold = o.slruThreshold
    this.trimPages = o.trimPages
    this.tiered = o.tiered
    const cap = o.initialCapacity
    this.capacity = cap
    this.gen = new Float64Array(cap).fill(1)
    this.parent = new Int32Array(cap).fill(-1)
    this.lockRef = new Int32Array(cap)
    this.idleRef = new Int32Array(cap)
    this.childCount = new Int32Array(cap)
    this.chainNext = new Int32Array(cap).fill(-1)
    this.childKey = new Float64Array(cap)
    this.pathLen = new Float64Array(cap)
    this.lastAccess = new Float64Array(cap)
    this.created = new Float64Array(cap)
    this.accessSeq = new Float64Array(cap)
    this.createSeq = new Float64Array(cap)
    this.hitCount = new Float64Array(cap)
    this.priority = new Float64Array(cap)
    this.ns = new Int32Array(cap)
    this.isRoot = new Uint8Array(cap)
    this.keys = new Array(cap).fill(EMPTY_TOKENS)
    this.values = new Array(cap).fill(undefined)
    this.children = new Array(cap).fill(undefined)
    this.digests = new Array(cap).fill(undefined)
    this.tier = new Uint8Array(cap)
    this.devChildren = new Int32Array(cap)
    this.freeSlots = new Int32Array(cap)
    this.heap = new EvictionHeap(cap)
  }

  handle(slot: number): NodeHandle {
    return (this.gen[slot]! * SLOT_SPAN + slot) as NodeHandle
  }

  isLive(slot: number): boolean {
    return this.isRoot[slot] === 1 || this.parent[slot]! >= 0
  }

  slotOf(node: NodeHandle): number {
    if (typeof node !== 'number' || !Number.isInteger(node) || node < 0) {
      throw new RadixCacheError(RadixCacheErrorCode.UnknownNode, `not a node handle: ${String(node)}`, node)
    }
    const slot = node & SLOT_MASK
    if (slot >= this.nextSlot || this.gen[slot] !== Math.floor(node / SLOT_SPAN) || !this.isLive(slot)) {
      throw new RadixCacheError(
        RadixCacheErrorCode.UnknownNode,
        `node handle ${node} is not a live node of this cache (evicted, reset, or from another cache)`,
        node,
      )
    }
    return slot
  }

  pageKey(key: Uint32Array, off: number): number {
    const ps = this.pageSize
    if (ps === 1) return key[off]!
    let h = 0x811c9dc5 ^ ps
    for (let i = 0; i < ps; i++) h = Math.imul(h ^ key[off + i]!, 0x01000193)
    return h & 0x3fffffff
  }

  findChild(node: number, key: Uint32Array, off: number): number {
    const map = this.children[node]
    if (map === undefined) return -1
    let c = map.get(this.pageKey(key, off))
    if (c === undefined) return -1
    const ps = this.pageSize
    const keys = this.keys
    const next = this.chainNext
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
   * page, since `findChild` already compared the first page.
   */
  matchInChild(child: number, key: Uint32Array, off: number, total: number): number {
    const ckey = this.keys[child]!
    const ps = this.pageSize
    const lim = Math.min(ckey.length, total - off)
    // The node's tokens are the very memory compared with (a lent stream, `lendTokens`): equal.
    const i =
      ckey.buffer === key.buffer && ckey.byteOffset === key.byteOffset + off * 4
        ? lim
        : commonPrefix(ckey, key, off, ps, lim)
    return i - (i % ps)
  }

  touch(node: number, now: number): void {
    this.lastAccess[node] = now
    this.accessSeq[node] = ++this.seq
  }

  /** Fill `ka`, `kb`, `kc` with node `n`'s sort keys under `policy` (a `POLICY_CODE`). */
  orderKeys(n: number, policy: number): void {
    let a: number
    let b: number
    let c: number
    const la = this.lastAccess[n]!
    const as = this.accessSeq[n]!
    switch (policy) {
      case 0: // lru
        a = la
        b = as
        c = 0
        break
      case 1: // lfu
        a = this.hitCount[n]!
        b = la
        c = as
        break
      case 2: // fifo
        a = this.created[n]!
        b = this.createSeq[n]!
        c = 0
        break
      case 3: // mru
        a = -la
        b = -as
        c = 0
        break
      case 4: // filo
        a = -this.created[n]!
        b = -this.createSeq[n]!
        c = 0
        break
      case 5: // priority
        a = this.priority[n]!
        b = la
        c = as
        break
      default: // slru
        a = this.hitCount[n]! >= this.slruThreshold ? 1 : 0
        b = la
        c = as
        break
    }
    this.ka = a
    this.kb = b
    this.kc = c
  }

  pushHeap(n: number): void {
    this.orderKeys(n, this.policy)
    this.heap.push(n, this.ka, this.kb, this.kc)
  }

  reheap(n: number): void {
    this.orderKeys(n, this.policy)
    this.heap.update(n, this.ka, this.kb, this.kc)
  }

  growPath(): Int32Array {
    const p = new Int32Array(this.path.length * 2)
    p.set(this.path)
    this.path = p
    return p
  }

  allocSlot(): number {
    if (this.freeTop > 0) return this.freeSlots[--this.freeTop]!
    if (this.nextSlot === this.capacity) this.#grow()
    return this.nextSlot++
  }

  #grow(): void {
    const cap = this.capacity
    if (cap >= MAX_NODES) {
      throw new RadixCacheError(RadixCacheErrorCode.OutOfMemory, `more than ${MAX_NODES} tree nodes`, cap)
    }
    const n = Math.min(MAX_NODES, cap * 2)
    this.gen = growF64(this.gen, n, 1)
    this.parent = growI32(this.parent, n, -1)
    this.lockRef = growI32(this.lockRef, n, 0)
    this.idleRef = growI32(this.idleRef, n, 0)
    this.childCount = growI32(this.childCount, n, 0)
    this.chainNext = growI32(this.chainNext, n, -1)
    this.childKey = growF64(this.childKey, n, 0)
    this.pathLen = growF64(this.pathLen, n, 0)
    this.lastAccess = growF64(this.lastAccess, n, 0)
    this.created = growF64(this.created, n, 0)
    this.accessSeq = growF64(this.accessSeq, n, 0)
    this.createSeq = growF64(this.createSeq, n, 0)
    this.hitCount = growF64(this.hitCount, n, 0)
    this.priority = growF64(this.priority, n, 0)
    this.ns = growI32(this.ns, n, 0)
    this.isRoot = growU8(this.isRoot, n)
    this.tier = growU8(this.tier, n)
    this.devChildren = growI32(this.devChildren, n, 0)
    for (let i = cap; i < n; i++) {
      this.keys.push(EMPTY_TOKENS)
      this.values.push(undefined)
      this.children.push(undefined)
      this.digests.push(undefined)
    }
    if (this.tiered) this.host!.growNodes(cap, n)
    this.freeSlots = growI32(this.freeSlots, n, 0)
    this.heap.growNodes(n)
    this.capacity = n
  }

  namespaceRoot(extraKey: string, create: boolean): number {
    const id = this.nsIds.get(extraKey)
    if (id !== undefined) return this.nsRoots[id]!
    if (!create) return this.nsRoots[0]!
    const s = this.allocSlot()
    const nsId = this.nsNames.length
    this.nsIds.set(extraKey, nsId)
    this.nsNames.push(extraKey)
    this.nsRoots.push(s)
    this.isRoot[s] = 1
    this.parent[s] = -1
    this.lockRef[s] = 0
    this.idleRef[s] = 0
    this.childCount[s] = 0
    this.devChildren[s] = 0
    this.tier[s] = DEV
    this.pathLen[s] = 0
    this.ns[s] = nsId
    this.keys[s] = EMPTY_TOKENS
    this.values[s] = this.trackValues ? EMPTY_INDICES : undefined
    this.children[s] = undefined
    this.digests[s] = undefined
    this.liveNodes++
    return s
  }

  linkChild(parent: number, child: number, ck: number): void {
    let map = this.children[parent]
    if (map === undefined) {
      map = new Map()
      this.children[parent] = map
    }
    const head = map.get(ck)
    this.chainNext[child] = head === undefined ? -1 : head
    map.set(ck, child)
    this.childKey[child] = ck
    this.childCount[parent]!++
    if ((this.tier[child]! & DEV) !== 0) this.devChildren[parent]!++
  }

  unlinkChild(parent: number, child: number): void {
    const map = this.children[parent]!
    const ck = this.childKey[child]!
    const head = map.get(ck)!
    const next = this.chainNext
    if (head === child) {
      if (next[child] === -1) map.delete(ck)
      else map.set(ck, next[child]!)
    } else {
      let p = head
      while (next[p] !== child) p = next[p]!
      next[p] = next[child]!
    }
    next[child] = -1
    this.childCount[parent]!--
    if ((this.tier[child]! & DEV) !== 0) this.devChildren[parent]!--
  }

  /** Replace `oldChild` by `newChild` at the same place of `parent`'s child chain. */
  #replaceChild(parent: number, oldChild: number, newChild: number): void {
    const map = this.children[parent]!
    const ck = this.childKey[oldChild]!
    const next = this.chainNext
    if (map.get(ck) === oldChild) map.set(ck, newChild)
    else {
      let p = map.get(ck)!
      while (next[p] !== oldChild) p = next[p]!
      next[p] = newChild
    }
    next[newChild] = next[oldChild]!
    next[oldChild] = -1
    this.childKey[newChild] = ck
  }

  /**
   * Split `child` at `m` tokens (a page multiple, 0 < m < len): a new upper node takes the first
   * `m` tokens and inherits the lock count and order attributes; `child` keeps the suffix (and its
   * identity). Sizes do not change.
   */
  split(child: number, m: number): number {
    const up = this.allocSlot()
    const p = this.parent[child]!
    const ckey = this.keys[child]!
    this.keys[up] = ckey.subarray(0, m)
    this.keys[child] = ckey.subarray(m)
    const v = this.values[child]
    if (v !== undefined) {
      this.values[up] = v.subarray(0, m)
      this.values[child] = v.subarray(m)
    } else this.values[up] = undefined
    const d = this.digests[child]
    if (d !== undefined) {
      const bytes = (m / this.pageSize) * this.digestLen
      this.digests[up] = d.subarray(0, bytes)
      this.digests[child] = d.subarray(bytes)
    } else this.digests[up] = undefined
    this.parent[up] = p
    this.isRoot[up] = 0
    this.ns[up] = this.ns[child]!
    this.lockRef[up] = this.lockRef[child]!
    this.idleRef[up] = this.idleRef[child]!
    this.pathLen[up] = this.pathLen[child]! - (ckey.length - m)
    this.lastAccess[up] = this.lastAccess[child]!
    this.created[up] = this.created[child]!
    this.accessSeq[up] = this.accessSeq[child]!
    this.createSeq[up] = this.createSeq[child]!
    this.hitCount[up] = this.hitCount[child]!
    this.priority[up] = this.priority[child]!
    this.tier[up] = this.tier[child]!
    if (this.tiered) this.host!.splitNode(up, child, m)
    this.#replaceChild(p, child, up)
    this.children[up] = undefined
    this.childCount[up] = 0
    this.devChildren[up] = 0
    this.parent[child] = up
    this.linkChild(up, child, this.pageKey(this.keys[child]!, 0))
    this.liveNodes++
    this.splits++
    return up
  }

  newLeaf(
    parent: number,
    key: Uint32Array,
    from: number,
    to: number,
    vals: Int32Array | undefined,
    now: number,
    priority: number,
    countHit: boolean,
    lend: boolean,
  ): number {
    // Hashed first: nothing has changed yet if the hasher throws.
    const digests = this.hasEvents ? this.events!.hashLeaf(key, from, to, parent) : undefined
    const s = this.allocSlot()
    const len = to - from
    // A lent stream (`lendTokens`) is never changed by its owner: a view of it is the node's key.
    this.keys[s] = lend ? key.subarray(from, to) : key.slice(from, to)
    this.values[s] = vals === undefined ? undefined : vals.slice(from, to)
    this.parent[s] = parent
    this.isRoot[s] = 0
    this.ns[s] = this.ns[parent]!
    this.lockRef[s] = 0
    this.pathLen[s] = this.pathLen[parent]! + len
    this.lastAccess[s] = now
    this.created[s] = now
    this.accessSeq[s] = ++this.seq
    this.createSeq[s] = this.seq
    this.hitCount[s] = countHit ? 1 : 0
    this.priority[s] = priority
    this.children[s] = undefined
    this.childCount[s] = 0
    this.devChildren[s] = 0
    this.tier[s] = DEV
    if (this.tiered) this.host!.clearNode(s)
    const parentWasLeaf = this.heap.has(parent)
    this.linkChild(parent, s, this.pageKey(key, from))
    if (parentWasLeaf) this.heap.remove(parent)
    this.liveNodes++
    this.evictableTokens += len
    this.pushHeap(s)
    this.digests[s] = digests
    if (this.hasEvents) this.events!.storedLeaf(s)
    return s
  }

  /** Return a removed node's slot to the free list. */
  freeSlot(x: number): void {
    this.keys[x] = EMPTY_TOKENS
    this.values[x] = undefined
    this.children[x] = undefined
    this.digests[x] = undefined
    this.parent[x] = -1
    this.tier[x] = 0
    if (this.tiered) this.host!.clearNode(x)
    this.gen[x]!++
    this.freeSlots[this.freeTop++] = x
    this.liveNodes--
  }

  /** Remove an unlocked, childless node (already out of the heap). */
  deleteLeaf(x: number): void {
    const p = this.parent[x]!
    const len = this.keys[x]!.length
    const v = this.values[x]
    if (this.allocator !== undefined && v !== undefined && v.length > 0) this.allocator.free(v)
    if (this.hasEvents) this.events!.emitRemoved(x, undefined)
    this.unlinkChild(p, x)
    this.evictableTokens -= len
    this.freeSlot(x)
    if (this.isRoot[p] === 0 && this.childCount[p] === 0 && this.lockRef[p] === 0) this.pushHeap(p)
  }

  /**
   * Drop every node but the namespace roots (handles to them stay valid) and zero the device sizes
   * and eviction counters. The caller has freed the KV slots.
   */
  clearNodes(): void {
    this.heap.clear()
    this.freeTop = 0
    this.liveNodes = 0
    for (let s = 0; s < this.nextSlot; s++) {
      this.children[s] = undefined
      this.childCount[s] = 0
      this.devChildren[s] = 0
      this.digests[s] = undefined
      this.chainNext[s] = -1
      if (this.isRoot[s] === 1) {
        this.liveNodes++
        continue
      }
      if (this.parent[s]! >= 0) this.gen[s]!++
      this.keys[s] = EMPTY_TOKENS
      this.values[s] = undefined
      this.parent[s] = -1
      this.lockRef[s] = 0
      this.idleRef[s] = 0
      this.tier[s] = 0
      this.freeSlots[this.freeTop++] = s
    }
    this.evictableTokens = 0
    this.protectedTokens = 0
    this.idleLockedTokens = 0
    this.splits = 0
    this.evictCalls = 0
    this.evictedTokens = 0
    this.evictedNodes = 0
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

/** @internal */
export function growI32(a: Int32Array, n: number, fill: number): Int32Array {
  const b = new Int32Array(n)
  if (fill !== 0) b.fill(fill, a.length)
  b.set(a)
  return b
}

/** @internal */
export function growU8(a: Uint8Array, n: number): Uint8Array {
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
