import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import type { KvEventEmitter } from '../events/kvEventEmitter.js'
import { EvictionHeap } from '../tree/evictionHeap.js'
import { DEV, EMPTY_INDICES, HOST, growI32, growU8, type NodeStore } from '../tree/nodeStore.js'
import type { EvictResult } from '../tree/types.js'
import type { ResolvedHostTier } from './config.js'
import type { HostTierConfig, KvSlotAllocator, KvTransfer } from './types.js'

/**
 * The host tier of a `RadixCache` (SGLang HiCache's L2): the host copy of each node (slots, host
 * references, host-evictable flag), the host heap and sizes, and every move between the tiers
 * (demotion on device eviction, `write_back` / `write_through*` copies, host eviction, discard,
 * adoption by an insert, load-back). Every state change of a node goes through these methods, which
 * keep the device heap (DEV, unlocked, no DEV child), the host heap (host-only, unlocked,
 * unprotected, no child) and the size counters exact.
 * @internal
 */
export class HostTier {
  readonly config: HostTierConfig
  readonly #st: NodeStore
  readonly #events: KvEventEmitter | undefined
  readonly #hasEvents: boolean
  readonly #alloc: KvSlotAllocator | undefined
  readonly #onTransfer: ((transfer: KvTransfer) => void) | undefined
  readonly heap: EvictionHeap
  readonly #policy: number
  readonly capacity: number
  /** Whether inserts copy to the host and device eviction discards pages without a copy. */
  readonly writeThrough: boolean
  readonly #writeThreshold: number
  readonly #devMedium: string | undefined
  readonly #hostMedium: string | undefined

  // Per node, indexed by slot like the `NodeStore` arrays.
  hostRef: Int32Array
  /** 1 when the node's tokens are counted in `evictable`. */
  hostCounted: Uint8Array
  readonly hostValues: (Int32Array | undefined)[]

  /** Tokens with a host copy. */
  size = 0
  /** Tokens only the host holds. */
  hostOnly = 0
  /** Host-only tokens neither locked nor protected. */
  evictable = 0
  /** Nodes with a host reference. */
  pinnedNodes = 0
  /** Device slots of the last load-back. */
  lastLoad: Int32Array = EMPTY_INDICES
  /** Tokens the last refused load-back needed. */
  loadNeed = 0
  #scratch: Int32Array = new Int32Array(16)

  // Counters.
  matchHostHit = 0
  demotedTokens = 0
  discardedTokens = 0
  hostWriteTokens = 0
  hostEvictedTokens = 0
  loadedBackTokens = 0

  constructor(st: NodeStore, tier: ResolvedHostTier, hostPolicy: number, events: KvEventEmitter | undefined) {
    const cap = st.capacity
    this.config = tier.config
    this.#st = st
    this.#events = events
    this.#hasEvents = events !== undefined
    this.#alloc = tier.allocator
    this.#onTransfer = tier.onTransfer
    this.#policy = hostPolicy
    this.capacity = tier.config.capacity
    this.writeThrough = tier.config.writePolicy !== 'write_back'
    this.#writeThreshold = tier.config.writeThroughThreshold
    this.#devMedium = tier.config.deviceMedium
    this.#hostMedium = tier.config.hostMedium
    this.hostRef = new Int32Array(cap)
    this.hostCounted = new Uint8Array(cap)
    this.hostValues = new Array(cap).fill(undefined)
    this.heap = new EvictionHeap(cap)
  }

  // ---------------------------------------------------------------------------------------------
  // Node storage hooks (called by the `NodeStore`)

  growNodes(cap: number, n: number): void {
    this.hostRef = growI32(this.hostRef, n, 0)
    this.hostCounted = growU8(this.hostCounted, n)
    for (let i = cap; i < n; i++) this.hostValues.push(undefined)
    this.heap.growNodes(n)
  }

  /** A fresh or freed slot has no host copy. */
  clearNode(s: number): void {
    this.hostValues[s] = undefined
    this.hostRef[s] = 0
    this.hostCounted[s] = 0
  }

  /** `up` took the first `m` tokens of `child`: it takes their host copy and references too. */
  splitNode(up: number, child: number, m: number): void {
    const hv = this.hostValues[child]
    if (hv !== undefined) {
      this.hostValues[up] = hv.subarray(0, m)
      this.hostValues[child] = hv.subarray(m)
    } else this.hostValues[up] = undefined
    this.hostRef[up] = this.hostRef[child]!
    if (this.hostRef[up]! > 0) this.pinnedNodes++
    this.hostCounted[up] = this.hostCounted[child]!
  }

  // ---------------------------------------------------------------------------------------------
  // Sizes and host-heap bookkeeping

  free(): number {
    const free = this.capacity - this.size
    const a = this.#alloc
    return a === undefined ? free : Math.min(free, a.availableSize())
  }

  #emitTransfer(direction: KvTransfer['direction'], n: number): void {
    const f = this.#onTransfer
    if (f === undefined) return
    f({
      direction,
      tokens: this.#st.keys[n]!.length,
      deviceIndices: this.#st.values[n] ?? EMPTY_INDICES,
      hostIndices: this.hostValues[n] ?? EMPTY_INDICES,
    })
  }

  /** Bring `n`'s host-evictable count and host-heap membership up to date. */
  syncHost(n: number): void {
    const st = this.#st
    const want = st.tier[n] === HOST && st.lockRef[n] === 0 && this.hostRef[n] === 0 ? 1 : 0
    if (want !== this.hostCounted[n]) {
      const len = st.keys[n]!.length
      this.evictable += want === 1 ? len : -len
      this.hostCounted[n] = want
    }
    const heap = this.heap
    const leaf = want === 1 && st.childCount[n] === 0
    if (leaf !== heap.has(n)) {
      if (leaf) {
        st.orderKeys(n, this.#policy)
        heap.push(n, st.ka, st.kb, st.kc)
      } else heap.remove(n)
    }
  }

  rehost(n: number): void {
    const st = this.#st
    st.orderKeys(n, this.#policy)
    this.heap.update(n, st.ka, st.kb, st.kc)
  }

  /** Push `n` on the device heap when it is an unlocked device leaf. */
  #maybePushDevice(n: number): void {
    const st = this.#st
    if (
      st.isRoot[n] === 0 &&
      (st.tier[n]! & DEV) !== 0 &&
      st.lockRef[n] === 0 &&
      st.devChildren[n] === 0 &&
      !st.heap.has(n)
    ) {
      st.pushHeap(n)
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Locks and host references

  incLock(start: number): number {
    const st = this.#st
    const lockRef = st.lockRef
    const isRoot = st.isRoot
    const parent = st.parent
    const tier = st.tier
    const idleRef = st.idleRef
    let delta = 0
    for (let n = start; isRoot[n] === 0; n = parent[n]!) {
      const l = lockRef[n]!++
      if (l === 0) {
        if ((tier[n]! & DEV) !== 0) {
          delta += st.keys[n]!.length
          if (st.heap.has(n)) st.heap.remove(n)
        } else this.syncHost(n)
      } else {
        const i = idleRef[n]!
        if (i !== 0) {
          if (i === l) st.idleLockedTokens -= st.keys[n]!.length // no longer idle-only
          if (l === 1) st.soleLockEpoch++ // an idle holder's sole tokens shrink
        }
      }
    }
    st.evictableTokens -= delta
    st.protectedTokens += delta
    return delta
  }

  decLock(start: number): number {
    const st = this.#st
    const lockRef = st.lockRef
    const isRoot = st.isRoot
    const parent = st.parent
    const tier = st.tier
    const idleRef = st.idleRef
    let delta = 0
    for (let n = start; isRoot[n] === 0; n = parent[n]!) {
      const l = --lockRef[n]!
      if (l === 0) {
        if ((tier[n]! & DEV) !== 0) {
          delta += st.keys[n]!.length
          if (st.devChildren[n] === 0) st.pushHeap(n)
        } else this.syncHost(n)
      } else {
        const i = idleRef[n]!
        if (i !== 0) {
          if (i === l) st.idleLockedTokens += st.keys[n]!.length // idle locks only now
          if (l === 1) st.soleLockEpoch++ // an idle holder's sole tokens grow
        }
      }
    }
    st.evictableTokens += delta
    st.protectedTokens -= delta
    return delta
  }

  /**
   * Take a host reference on the path `s` → root and copy to the host every page of it without a
   * host copy. Returns the tokens copied; throws `HOST_OUT_OF_MEMORY` (nothing changed) when the
   * host cannot hold them.
   */
  protect(s: number): number {
    const st = this.#st
    const isRoot = st.isRoot
    const parent = st.parent
    const hostRef = this.hostRef
    const tier = st.tier
    let need = 0
    for (let n = s; isRoot[n] === 0; n = parent[n]!) {
      if (hostRef[n]!++ === 0) {
        this.pinnedNodes++
        if (tier[n] === HOST) this.syncHost(n)
      }
      if ((tier[n]! & HOST) === 0) need += st.keys[n]!.length
    }
    if (need === 0) return 0
    if (this.free() + this.evictable < need) {
      const free = this.free()
      const evictable = this.evictable
      this.unpin(s)
      throw new RadixCacheError(
        RadixCacheErrorCode.HostOutOfMemory,
        `protectHost needs ${need} host slots: ${free} free + ${evictable} evictable`,
        need,
      )
    }
    this.#reserve(need)
    for (let n = s; isRoot[n] === 0; n = parent[n]!) if ((tier[n]! & HOST) === 0) this.#writeHost(n)
    return need
  }

  /** Drop one host reference along the path `start` → root. */
  unpin(start: number): void {
    const st = this.#st
    const isRoot = st.isRoot
    const parent = st.parent
    const hostRef = this.hostRef
    for (let n = start; isRoot[n] === 0; n = parent[n]!) {
      if (--hostRef[n]! === 0) {
        this.pinnedNodes--
        if (st.tier[n] === HOST) this.syncHost(n)
      }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Device eviction (demotion) and host eviction

  /** Device eviction with a host tier: the evicted pages move to the host or are discarded. */
  evictDevice(numTokens: number): EvictResult {
    const st = this.#st
    st.evictCalls++
    const heap = st.heap
    const keys = st.keys
    const ps = st.pageSize
    let evicted = 0
    let nodes = 0
    while (evicted < numTokens && heap.size > 0) {
      const x = heap.peek()
      const len = keys[x]!.length
      const need = numTokens - evicted
      if (st.trimPages && len > need) {
        const trim = Math.ceil(need / ps) * ps
        if (trim < len) {
          // The tail `trim` tokens leave the device; the upper part becomes the next device leaf.
          st.split(x, len - trim)
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
    st.evictedTokens += evicted
    st.evictedNodes += nodes
    return { evictedTokens: evicted, evictedNodes: nodes }
  }

  /** Evict at least `numTokens` host-only tokens, leaf first in the host policy's order. */
  evictHost(numTokens: number): EvictResult {
    const heap = this.heap
    let evicted = 0
    let nodes = 0
    while (evicted < numTokens && heap.size > 0) {
      const y = heap.peek()
      evicted += this.#st.keys[y]!.length
      this.#evictHostLeaf(y)
      nodes++
    }
    return { evictedTokens: evicted, evictedNodes: nodes }
  }

  /**
   * `x` (an unlocked device leaf, out of the device heap) leaves the device: to the host when it
   * has a copy or `write_back` can make room for one, otherwise it is discarded.
   */
  #evictDeviceNode(x: number): void {
    const len = this.#st.keys[x]!.length
    if ((this.#st.tier[x]! & HOST) === 0) {
      if (this.writeThrough || !this.#reserve(len)) {
        this.#discard(x)
        return
      }
      this.#writeHost(x)
    }
    this.demotedTokens += len
    this.#dropDevice(x)
  }

  /** Copy device node `n` (no host copy yet) to the host; the room is reserved. */
  #writeHost(n: number): void {
    const st = this.#st
    const len = st.keys[n]!.length
    if (this.#alloc !== undefined) this.hostValues[n] = this.#alloc.alloc(len)
    this.#emitTransfer('deviceToHost', n)
    st.tier[n] = DEV | HOST
    this.size += len
    this.hostWriteTokens += len
    if (this.#hasEvents) this.#events!.emitStored(n, this.#hostMedium)
  }

  /** Free the device copy of `n` (unlocked, no DEV child, has a host copy). */
  #dropDevice(x: number): void {
    const st = this.#st
    const len = st.keys[x]!.length
    const v = st.values[x]
    if (st.allocator !== undefined && v !== undefined && v.length > 0) st.allocator.free(v)
    st.values[x] = undefined
    st.tier[x] = HOST
    st.evictableTokens -= len
    this.hostOnly += len
    if (this.#hasEvents) this.#events!.emitRemoved(x, this.#devMedium)
    const p = st.parent[x]!
    st.devChildren[p]!--
    this.#maybePushDevice(p)
    this.syncHost(x)
  }

  /** Make `len` host slots free by host eviction; `false` (nothing evicted) when impossible. */
  #reserve(len: number): boolean {
    if (this.free() >= len) return true
    if (this.free() + this.evictable < len) return false
    const heap = this.heap
    while (this.free() < len && heap.size > 0) this.#evictHostLeaf(heap.peek())
    return this.free() >= len
  }

  /** Remove host leaf `y` (host-only, unlocked, unprotected, childless) from the tree. */
  #evictHostLeaf(y: number): void {
    const st = this.#st
    const len = st.keys[y]!.length
    this.heap.remove(y)
    this.hostCounted[y] = 0
    this.evictable -= len
    this.hostEvictedTokens += len
    this.#removeHostCopy(y)
    const p = st.parent[y]!
    st.unlinkChild(p, y)
    st.freeSlot(y)
    if (st.tier[p] === HOST) this.syncHost(p)
  }

  /** Free `n`'s host slots and emit the host removal (sizes of a host-only node). */
  #removeHostCopy(n: number): void {
    const len = this.#st.keys[n]!.length
    const hv = this.hostValues[n]
    if (this.#alloc !== undefined && hv !== undefined && hv.length > 0) this.#alloc.free(hv)
    this.hostValues[n] = undefined
    if (this.#hasEvents) this.#events!.emitRemoved(n, this.#hostMedium)
    this.size -= len
    this.hostOnly -= len
  }

  /**
   * Discard device leaf `x` (unlocked, no host copy) and its host-only subtree, which no match can
   * reach once `x` is gone.
   */
  #discard(x: number): void {
    const st = this.#st
    const len = st.keys[x]!.length
    if (st.childCount[x]! > 0) {
      const stack: number[] = [x]
      const order: number[] = []
      while (stack.length > 0) {
        const n = stack.pop()!
        const map = st.children[n]
        if (map === undefined) continue
        for (const h of map.values()) {
          for (let c = h; c !== -1; c = st.chainNext[c]!) {
            order.push(c)
            stack.push(c)
          }
        }
      }
      // Children before parents.
      for (let i = order.length - 1; i >= 0; i--) {
        const c = order[i]!
        const clen = st.keys[c]!.length
        if (this.heap.has(c)) this.heap.remove(c)
        if (this.hostCounted[c] === 1) {
          this.evictable -= clen
          this.hostCounted[c] = 0
        }
        this.hostEvictedTokens += clen
        this.#removeHostCopy(c)
        st.unlinkChild(st.parent[c]!, c)
        st.freeSlot(c)
      }
    }
    const v = st.values[x]
    if (st.allocator !== undefined && v !== undefined && v.length > 0) st.allocator.free(v)
    if (this.#hasEvents) this.#events!.emitRemoved(x, this.#devMedium)
    st.evictableTokens -= len
    this.discardedTokens += len
    const p = st.parent[x]!
    st.unlinkChild(p, x)
    st.freeSlot(x)
    this.#maybePushDevice(p)
  }

  // ---------------------------------------------------------------------------------------------
  // Insert and load-back: host-only nodes come back to the device

  /** Host-only `n` on an insert path takes the caller's device slots `vals[off:)`. */
  adopt(n: number, vals: Int32Array | undefined, off: number): void {
    const st = this.#st
    const len = st.keys[n]!.length
    if (vals !== undefined) st.values[n] = vals.slice(off, off + len)
    st.tier[n] = DEV | HOST
    this.hostOnly -= len
    this.syncHost(n)
    if (st.lockRef[n] === 0) st.evictableTokens += len
    else st.protectedTokens += len
    const p = st.parent[n]!
    st.devChildren[p]!++
    if (st.heap.has(p)) st.heap.remove(p)
    this.#maybePushDevice(n)
    if (this.#hasEvents) this.#events!.emitStored(n, this.#devMedium)
  }

  /** Remember node `n` as the `i`-th of the current walk (insert's write-through, load-back). */
  scratchPush(i: number, n: number): void {
    if (i === this.#scratch.length) {
      const g = new Int32Array(i * 2)
      g.set(this.#scratch)
      this.#scratch = g
    }
    this.#scratch[i] = n
  }

  /** Write-through after an insert: copy the walked nodes whose hit count reached the threshold. */
  writeThroughScratch(count: number): void {
    const st = this.#st
    const scratch = this.#scratch
    for (let i = 0; i < count; i++) {
      const n = scratch[i]!
      if ((st.tier[n]! & HOST) !== 0 || st.hitCount[n]! < this.#writeThreshold) continue
      if (this.#reserve(st.keys[n]!.length)) this.#writeHost(n)
    }
  }

  /**
   * Load the host-only part of the path root → `start` onto device slots (kept locked meanwhile).
   * Returns the tokens loaded, or -1 when the device cannot get the slots (nothing changed).
   */
  loadBackSlots(start: number): number {
    const st = this.#st
    const tier = st.tier
    const keys = st.keys
    let need = 0
    let count = 0
    for (let n = start; tier[n] === HOST; n = st.parent[n]!) {
      need += keys[n]!.length
      this.scratchPush(count++, n)
    }
    if (need === 0) return 0
    this.incLock(start)
    let slots: Int32Array | undefined
    if (st.trackValues) {
      const dev = st.allocator as KvSlotAllocator
      const avail = dev.availableSize()
      if (avail < need) {
        if (avail + st.evictableTokens < need) {
          this.decLock(start)
          this.loadNeed = need
          return -1
        }
        this.evictDevice(need - avail)
        if (dev.availableSize() < need) {
          this.decLock(start)
          this.loadNeed = need
          return -1
        }
      }
      slots = dev.alloc(need)
    }
    // Top-down: parents first, so every step keeps device residency closed under ancestors. (Read
    // the node arrays again: the eviction above may have split nodes and grown them.)
    const scratch = this.#scratch
    const tierNow = st.tier
    let off = 0
    for (let i = count - 1; i >= 0; i--) {
      const n = scratch[i]!
      const len = keys[n]!.length
      if (slots !== undefined) st.values[n] = slots.subarray(off, off + len)
      off += len
      tierNow[n] = DEV | HOST
      this.#emitTransfer('hostToDevice', n)
      this.hostOnly -= len
      this.syncHost(n)
      st.protectedTokens += len // locked by this call
      const p = st.parent[n]!
      st.devChildren[p]!++
      if (st.heap.has(p)) st.heap.remove(p)
      if (this.#hasEvents) this.#events!.emitStored(n, this.#devMedium)
    }
    this.loadedBackTokens += need
    this.lastLoad = slots ?? EMPTY_INDICES
    this.decLock(start)
    return need
  }

  // ---------------------------------------------------------------------------------------------
  // Reset

  /** Whether a node is locked or host-protected (host-only locks count too). */
  anyHeld(): boolean {
    const st = this.#st
    for (let s = 0; s < st.nextSlot; s++) {
      if (st.isLive(s) && st.isRoot[s] === 0 && (st.lockRef[s]! > 0 || this.hostRef[s]! > 0)) return true
    }
    return false
  }

  /** Free every host copy and zero the host sizes and counters (before the nodes are cleared). */
  reset(): void {
    const st = this.#st
    const hostAlloc = this.#alloc
    for (let s = 0; s < st.nextSlot; s++) {
      const hv = this.hostValues[s]
      if (hostAlloc !== undefined && st.isLive(s) && hv !== undefined && hv.length > 0) hostAlloc.free(hv)
      this.hostValues[s] = undefined
      this.hostRef[s] = 0
      this.hostCounted[s] = 0
    }
    this.heap.clear()
    this.size = 0
    this.hostOnly = 0
    this.evictable = 0
    this.pinnedNodes = 0
    this.matchHostHit = 0
    this.demotedTokens = 0
    this.discardedTokens = 0
    this.hostWriteTokens = 0
    this.hostEvictedTokens = 0
    this.loadedBackTokens = 0
  }
}
