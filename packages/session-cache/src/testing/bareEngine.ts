import {
  type EvictGranularity,
  type EvictionPolicy,
  type HostTierOptions,
  type NodeHandle,
  PagedAllocator,
  RadixCache,
} from '@kvc/radix-cache'

interface BareReq {
  readonly ns: string
  /** Prompt + output; capacity grows by doubling. */
  tokens: Uint32Array
  len: number
  readonly originLen: number
  /** KV slot per position; capacity grows by doubling. */
  row: Int32Array
  protectedLen: number
  committed: number
  allocated: number
  lastNode: NodeHandle
}

/**
 * Options of {@link BareRadixEngine}.
 *
 * @example
 * ```ts
 * const bare = new BareRadixEngine({ pageSize: 16, poolSize: 65_536, evictGranularity: 'page' })
 * ```
 */
export interface BareRadixEngineOptions {
  readonly pageSize: number
  /** Pool size in token slots (a multiple of `pageSize`). */
  readonly poolSize: number
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  readonly now?: () => number
  /** A host tier under the cache: `begin` then loads host hits back (SGLang HiCache's load-back on match). */
  readonly hostTier?: HostTierOptions
}

/**
 * SGLang's request flow written out plainly over a bare `RadixCache` and a
 * `PagedAllocator`, with no sessions: match (capped at `len - 1`) and lock; allocate after
 * evicting the shortfall; `cache_unfinished_req` (insert, free duplicates, re-match, adopt, move
 * the lock); `cache_finished_req` (insert the committed tokens, free duplicates and the unaligned
 * tail, unlock); abort. It is the reference for invariant I4 (requests without a session behave
 * exactly like the bare radix cache) and the baseline of the benchmark.
 *
 * @example
 * ```ts
 * import { BareRadixEngine } from '@kvc/session-cache/testing'
 * const e = new BareRadixEngine({ pageSize: 4, poolSize: 256 })
 * e.begin('r1', [1, 2, 3, 4, 5, 6, 7, 8, 9])  // 0 tokens cached
 * e.prefill('r1', 9)
 * e.finished('r1')
 * e.begin('r2', [1, 2, 3, 4, 5, 6, 7, 8, 10]).length // 8
 * ```
 */
export class BareRadixEngine {
  readonly cache: RadixCache
  readonly pool: PagedAllocator
  readonly pageSize: number
  readonly #reqs = new Map<string, BareReq>()

  constructor(options: BareRadixEngineOptions) {
    this.pageSize = options.pageSize
    this.pool = new PagedAllocator({ size: options.poolSize, pageSize: options.pageSize })
    this.cache = new RadixCache({
      pageSize: options.pageSize,
      allocator: this.pool,
      evictionPolicy: options.evictionPolicy ?? 'lru',
      evictGranularity: options.evictGranularity ?? 'leaf',
      ...(options.now !== undefined ? { now: options.now } : {}),
      ...(options.hostTier !== undefined ? { hostTier: options.hostTier } : {}),
    })
  }

  /**
   * Admit a request: match `tokens[0:len-1)`, lock the match. With a host tier, a host hit above
   * the load-back threshold is loaded back first (the path locked, the device shortfall evicted).
   * Returns the cached length and slots.
   */
  begin(rid: string, tokens: ArrayLike<number>, extraKey = ''): { length: number; indices: Int32Array } {
    const toks = new Uint32Array(tokens.length + 64)
    for (let i = 0; i < tokens.length; i++) toks[i] = tokens[i]!
    const m = this.cache.matchPrefix(toks.subarray(0, tokens.length - 1), { extraKey })
    let length = m.length
    let indices = m.indices
    let lastNode = m.lastNode
    const threshold = this.cache.hostTier?.loadBackThreshold ?? Number.POSITIVE_INFINITY
    if (m.hostLength > threshold) {
      this.cache.incLockRef(m.lastHostNode)
      const avail = this.pool.availableSize()
      if (avail < m.hostLength) this.cache.evict(m.hostLength - avail)
      if (this.pool.availableSize() >= m.hostLength) {
        const lb = this.cache.loadBack(m.lastHostNode)
        indices = new Int32Array(length + lb.loadedTokens)
        indices.set(m.indices)
        indices.set(lb.indices, length)
        length += lb.loadedTokens
        lastNode = m.lastHostNode
      } else this.cache.decLockRef(m.lastHostNode)
    }
    if (lastNode === m.lastNode) this.cache.incLockRef(m.lastNode)
    const row = new Int32Array(Math.max(16, tokens.length + 64))
    row.set(indices)
    this.#reqs.set(rid, {
      ns: extraKey,
      tokens: toks,
      len: tokens.length,
      originLen: tokens.length,
      row,
      protectedLen: length,
      committed: length,
      allocated: length,
      lastNode,
    })
    return { length, indices }
  }

  /** Re-match a running request (chunked-prefill retry); adopts the tree's slots if it holds more. */
  rematch(rid: string): { length: number; indices: Int32Array } {
    const r = this.#req(rid)
    const m = this.cache.matchPrefix(r.tokens.subarray(0, r.len - 1), { extraKey: r.ns })
    if (m.length > r.committed) {
      const end = Math.min(r.allocated, m.length)
      if (end > r.protectedLen) this.pool.free(r.row.subarray(r.protectedLen, end))
      r.row.set(m.indices.subarray(r.protectedLen), r.protectedLen)
      this.cache.incLockRef(m.lastNode)
      this.cache.decLockRef(r.lastNode)
      r.lastNode = m.lastNode
      r.protectedLen = m.length
      r.committed = m.length
      r.allocated = Math.max(r.allocated, m.length)
    }
    return { length: r.committed, indices: r.row.slice(0, r.committed) }
  }

  /** Compute the next `n` prompt tokens. `false` (nothing allocated) when the pool is short. */
  prefill(rid: string, n: number): boolean {
    const r = this.#req(rid)
    if (!this.#allocate(r, r.committed + n)) return false
    r.committed += n
    return true
  }

  /** One decode step producing `token`. `false` (nothing changed) when the pool is short. */
  decode(rid: string, token: number): boolean {
    const r = this.#req(rid)
    if (r.len > r.originLen) {
      if (!this.#allocate(r, r.len)) return false
      r.committed = r.len
    }
    if (r.len === r.tokens.length) {
      const t = new Uint32Array(r.tokens.length * 2)
      t.set(r.tokens)
      r.tokens = t
    }
    r.tokens[r.len++] = token
    return true
  }

  /** SGLang's `cache_unfinished_req`. */
  unfinished(rid: string, chunked = false): void {
    const r = this.#req(rid)
    const keys = r.tokens.subarray(0, r.committed)
    const res = this.cache.insert(keys, r.row.subarray(0, r.committed), { extraKey: r.ns, chunked })
    if (res.prefixLen > r.protectedLen) this.pool.free(r.row.subarray(r.protectedLen, res.prefixLen))
    if (res.alignedLen > r.protectedLen) {
      const m = this.cache.matchPrefix(keys.subarray(0, res.alignedLen), { extraKey: r.ns })
      r.row.set(m.indices.subarray(r.protectedLen), r.protectedLen)
      if (m.lastNode !== r.lastNode) {
        this.cache.incLockRef(m.lastNode)
        this.cache.decLockRef(r.lastNode)
        r.lastNode = m.lastNode
      }
      r.protectedLen = res.alignedLen
    }
  }

  /** SGLang's `cache_finished_req`. */
  finished(rid: string): void {
    const r = this.#req(rid)
    const res = this.cache.insert(r.tokens.subarray(0, r.committed), r.row.subarray(0, r.committed), {
      extraKey: r.ns,
    })
    if (res.prefixLen > r.protectedLen) this.pool.free(r.row.subarray(r.protectedLen, res.prefixLen))
    if (r.allocated > res.alignedLen) this.pool.free(r.row.subarray(res.alignedLen, r.allocated))
    this.cache.decLockRef(r.lastNode)
    this.#reqs.delete(rid)
  }

  /** Free the request's own slots and unlock, inserting nothing. */
  abort(rid: string): void {
    const r = this.#req(rid)
    if (r.allocated > r.protectedLen) this.pool.free(r.row.subarray(r.protectedLen, r.allocated))
    this.cache.decLockRef(r.lastNode)
    this.#reqs.delete(rid)
  }

  /** Token ids (prompt + output) of a running request (a copy). */
  tokensOf(rid: string): Uint32Array {
    const r = this.#req(rid)
    return r.tokens.slice(0, r.len)
  }

  /** Positions of a running request whose KV is computed. */
  committedOf(rid: string): number {
    return this.#req(rid).committed
  }

  /** `free + evictable + protected + requestOwned == poolSize`. */
  balanced(): boolean {
    let owned = 0
    const ps = this.pageSize
    for (const r of this.#reqs.values()) owned += Math.ceil(r.allocated / ps) * ps - r.protectedLen
    return (
      this.pool.availableSize() + this.cache.evictableSize() + this.cache.protectedSize() + owned ===
      this.pool.size
    )
  }

  #req(rid: string): BareReq {
    const r = this.#reqs.get(rid)
    if (r === undefined) throw new Error(`BareRadixEngine: unknown request ${rid}`)
    return r
  }

  #allocate(r: BareReq, target: number): boolean {
    if (target <= r.allocated) return true
    const ps = this.pageSize
    const need = (Math.ceil(target / ps) - Math.ceil(r.allocated / ps)) * ps
    const avail = this.pool.availableSize()
    if (need > avail) this.cache.evict(need - avail)
    if (need > this.pool.availableSize()) return false
    const last = r.allocated % ps === 0 ? -1 : r.row[r.allocated - 1]!
    const slots = this.pool.allocExtend(last, target - r.allocated)
    if (r.row.length < target) {
      const grown = new Int32Array(Math.max(target, r.row.length * 2))
      grown.set(r.row.subarray(0, r.allocated))
      r.row = grown
    }
    r.row.set(slots, r.allocated)
    r.allocated = target
    return true
  }
}
