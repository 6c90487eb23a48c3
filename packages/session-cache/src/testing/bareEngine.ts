import {
  type EvictGranularity,
  type EvictionPolicy,
  type NodeHandle,
  PagedAllocator,
  RadixCache,
} from '@kvc/radix-cache'

interface BareReq {
  readonly ns: string
  readonly tokens: number[]
  readonly originLen: number
  readonly row: number[]
  protectedLen: number
  committed: number
  allocated: number
  lastNode: NodeHandle
}

/** Options of {@link BareRadixEngine}. */
export interface BareRadixEngineOptions {
  readonly pageSize: number
  /** Pool size in token slots (a multiple of `pageSize`). */
  readonly poolSize: number
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  readonly now?: () => number
}

/**
 * SGLang's request flow written out plainly over a bare {@link RadixCache} and a
 * {@link PagedAllocator}, with no sessions: match (capped at `len - 1`) and lock; allocate after
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
    })
  }

  /** Admit a request: match `tokens[0:len-1)`, lock the match. Returns the cached length and slots. */
  begin(rid: string, tokens: ArrayLike<number>, extraKey = ''): { length: number; indices: number[] } {
    const toks = Array.from(tokens)
    const m = this.cache.matchPrefix(toks.slice(0, toks.length - 1), { extraKey })
    this.cache.incLockRef(m.lastNode)
    const row = Array.from(m.indices)
    this.#reqs.set(rid, {
      ns: extraKey,
      tokens: toks,
      originLen: toks.length,
      row,
      protectedLen: m.length,
      committed: m.length,
      allocated: m.length,
      lastNode: m.lastNode,
    })
    return { length: m.length, indices: row.slice() }
  }

  /** Re-match a running request (chunked-prefill retry); adopts the tree's slots if it holds more. */
  rematch(rid: string): { length: number; indices: number[] } {
    const r = this.#req(rid)
    const m = this.cache.matchPrefix(r.tokens.slice(0, r.tokens.length - 1), { extraKey: r.ns })
    if (m.length > r.committed) {
      const end = Math.min(r.allocated, m.length)
      if (end > r.protectedLen) this.pool.free(Int32Array.from(r.row.slice(r.protectedLen, end)))
      for (let i = r.protectedLen; i < m.length; i++) r.row[i] = m.indices[i]!
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
    if (r.tokens.length > r.originLen) {
      if (!this.#allocate(r, r.tokens.length)) return false
      r.committed = r.tokens.length
    }
    r.tokens.push(token)
    return true
  }

  /** SGLang's `cache_unfinished_req`. */
  unfinished(rid: string, chunked = false): void {
    const r = this.#req(rid)
    const keys = r.tokens.slice(0, r.committed)
    const res = this.cache.insert(keys, Int32Array.from(r.row.slice(0, r.committed)), {
      extraKey: r.ns,
      chunked,
    })
    if (res.prefixLen > r.protectedLen) {
      this.pool.free(Int32Array.from(r.row.slice(r.protectedLen, res.prefixLen)))
    }
    if (res.alignedLen > r.protectedLen) {
      const m = this.cache.matchPrefix(keys.slice(0, res.alignedLen), { extraKey: r.ns })
      for (let i = r.protectedLen; i < m.length; i++) r.row[i] = m.indices[i]!
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
    const res = this.cache.insert(
      r.tokens.slice(0, r.committed),
      Int32Array.from(r.row.slice(0, r.committed)),
      { extraKey: r.ns },
    )
    if (res.prefixLen > r.protectedLen) {
      this.pool.free(Int32Array.from(r.row.slice(r.protectedLen, res.prefixLen)))
    }
    if (r.allocated > res.alignedLen)
      this.pool.free(Int32Array.from(r.row.slice(res.alignedLen, r.allocated)))
    this.cache.decLockRef(r.lastNode)
    this.#reqs.delete(rid)
  }

  /** Free the request's own slots and unlock, inserting nothing. */
  abort(rid: string): void {
    const r = this.#req(rid)
    if (r.allocated > r.protectedLen)
      this.pool.free(Int32Array.from(r.row.slice(r.protectedLen, r.allocated)))
    this.cache.decLockRef(r.lastNode)
    this.#reqs.delete(rid)
  }

  /** Token ids (prompt + output) of a running request. */
  tokensOf(rid: string): number[] {
    return this.#req(rid).tokens.slice()
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
    for (let i = 0; i < slots.length; i++) r.row[r.allocated + i] = slots[i]!
    r.allocated = target
    return true
  }
}
