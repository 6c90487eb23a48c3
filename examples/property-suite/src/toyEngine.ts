import { PagedAllocator, RadixCache } from '@kvc/radix-cache'

/**
 * A toy serving engine: the part of a real engine's scheduler that talks to the prefix cache.
 * Requests arrive with a prompt, reuse what the cache holds, allocate KV slots for the rest
 * (evicting the shortfall first), and on completion hand their page-aligned tokens to the tree,
 * freeing only what they own. This is the code a framework wants to property-test.
 */
export interface ToyRequest {
  readonly id: number
  readonly tokens: Uint32Array
  readonly row: Int32Array
  readonly prefixLen: number
  readonly lastNode: ReturnType<RadixCache['matchPrefix']>['lastNode']
}

export class ToyEngine {
  readonly cache: RadixCache
  readonly pool: PagedAllocator
  readonly running = new Map<number, ToyRequest>()
  #nextId = 0

  constructor(poolTokens: number, pageSize: number) {
    this.pool = new PagedAllocator({ size: poolTokens, pageSize })
    this.cache = new RadixCache({ pageSize, allocator: this.pool, evictGranularity: 'page' })
  }

  /** Admit a request, or return undefined when its uncached part cannot fit. */
  start(prompt: ArrayLike<number>): ToyRequest | undefined {
    const tokens = Uint32Array.from(prompt)
    const row = new Int32Array(tokens.length)
    const hit = this.cache.matchPrefix(tokens, { into: row })
    this.cache.incLockRef(hit.lastNode)
    const fresh = tokens.length - hit.length
    const needPages = Math.ceil(fresh / this.pool.pageSize)
    if (needPages > this.pool.freePageCount()) {
      this.cache.evict((needPages - this.pool.freePageCount()) * this.pool.pageSize)
    }
    if (needPages > this.pool.freePageCount()) {
      this.cache.decLockRef(hit.lastNode)
      return undefined
    }
    row.set(this.pool.alloc(fresh), hit.length)
    const req: ToyRequest = { id: this.#nextId++, tokens, row, prefixLen: hit.length, lastNode: hit.lastNode }
    this.running.set(req.id, req)
    return req
  }

  /** Finish a request: insert its tokens, free its duplicates and its unaligned tail, unlock. */
  finish(id: number): void {
    const req = this.running.get(id)
    if (req === undefined) throw new Error(`unknown request ${id}`)
    const { prefixLen, alignedLen } = this.cache.insert(req.tokens, req.row)
    if (prefixLen > req.prefixLen) this.pool.free(req.row.subarray(req.prefixLen, prefixLen))
    if (alignedLen < req.tokens.length) this.pool.free(req.row.subarray(alignedLen))
    this.cache.decLockRef(req.lastNode)
    this.running.delete(id)
  }

  /** Tokens owned by running requests (not yet in the tree), page-rounded as the pool counts them. */
  requestOwnedTokens(): number {
    let n = 0
    for (const r of this.running.values()) {
      n += Math.ceil((r.tokens.length - r.prefixLen) / this.pool.pageSize) * this.pool.pageSize
    }
    return n
  }
}
