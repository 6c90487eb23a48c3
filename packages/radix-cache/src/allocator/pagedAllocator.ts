import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import type { KvAllocator } from './kvAllocator.js'

const EMPTY = new Int32Array(0)

/**
 * A paged KV slot pool: `size` token slots grouped in pages of `pageSize`; slot `i` lives in page
 * `floor(i / pageSize)`. Allocation hands out whole pages (the last one possibly partly used),
 * like SGLang's paged token-to-KV allocator; freeing returns every page an index touches.
 * Double frees and foreign indices are refused with a {@link RadixCacheError} before anything
 * changes.
 *
 * @example
 * ```ts
 * import { PagedAllocator } from '@kvc/radix-cache'
 * const pool = new PagedAllocator({ size: 64, pageSize: 16 })
 * const slots = pool.alloc(20)          // 2 pages
 * console.log(pool.availableSize())     // 32
 * pool.free(slots)
 * console.log(pool.availableSize())     // 64
 * ```
 */
export class PagedAllocator implements KvAllocator {
  /** Tokens per page. */
  readonly pageSize: number
  /** Total token slots. */
  readonly size: number
  readonly #numPages: number
  readonly #freePages: Int32Array
  #freeTop: number
  readonly #isFree: Uint8Array

  constructor(options: { readonly size: number; readonly pageSize?: number }) {
    const pageSize = options.pageSize ?? 1
    if (!Number.isInteger(pageSize) || pageSize <= 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidOption,
        `pageSize must be a positive integer, got ${pageSize}`,
        pageSize,
      )
    }
    const size = options.size
    if (!Number.isInteger(size) || size < 0 || size % pageSize !== 0 || size > 2 ** 31 - 1) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidOption,
        `size must be a non-negative multiple of pageSize (${pageSize}) below 2^31, got ${size}`,
        size,
      )
    }
    this.pageSize = pageSize
    this.size = size
    this.#numPages = size / pageSize
    this.#freePages = new Int32Array(this.#numPages)
    this.#isFree = new Uint8Array(this.#numPages).fill(1)
    // Lowest page numbers are handed out first.
    for (let i = 0; i < this.#numPages; i++) this.#freePages[i] = this.#numPages - 1 - i
    this.#freeTop = this.#numPages
  }

  /** Free token slots (whole free pages times `pageSize`). */
  availableSize(): number {
    return this.#freeTop * this.pageSize
  }

  /** Number of free pages. */
  freePageCount(): number {
    return this.#freeTop
  }

  /**
   * Allocate `numTokens` slots on `ceil(numTokens / pageSize)` fresh pages.
   * Throws `OUT_OF_MEMORY` (and allocates nothing) when not enough pages are free.
   */
  alloc(numTokens: number): Int32Array {
    this.#checkCount(numTokens)
    if (numTokens === 0) return EMPTY
    const ps = this.pageSize
    const pages = Math.ceil(numTokens / ps)
    if (pages > this.#freeTop) {
      throw new RadixCacheError(
        RadixCacheErrorCode.OutOfMemory,
        `cannot allocate ${numTokens} tokens (${pages} pages): ${this.#freeTop} pages free`,
        numTokens,
      )
    }
    const out = new Int32Array(numTokens)
    let k = 0
    for (let p = 0; p < pages; p++) {
      const page = this.#freePages[--this.#freeTop]!
      this.#isFree[page] = 0
      const base = page * ps
      for (let j = 0; j < ps && k < numTokens; j++) out[k++] = base + j
    }
    return out
  }

  /**
   * Allocate `numTokens` slots that continue a sequence whose last slot is `lastLoc`: the rest of
   * `lastLoc`'s page is used first (the caller must own that page), then fresh pages. Pass
   * `lastLoc = -1` for an empty sequence. Mirrors SGLang's `alloc_extend`.
   */
  allocExtend(lastLoc: number, numTokens: number): Int32Array {
    this.#checkCount(numTokens)
    if (lastLoc === -1) return this.alloc(numTokens)
    this.#checkIndex(lastLoc)
    const ps = this.pageSize
    const page = Math.floor(lastLoc / ps)
    if (this.#isFree[page] === 1) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidIndex,
        `lastLoc ${lastLoc} lies in page ${page}, which is free`,
        lastLoc,
      )
    }
    const inPage = Math.min(numTokens, ps - 1 - (lastLoc % ps))
    const rest = numTokens - inPage
    const fresh = rest > 0 ? this.alloc(rest) : EMPTY
    if (inPage === 0) return fresh
    const out = new Int32Array(numTokens)
    for (let j = 0; j < inPage; j++) out[j] = lastLoc + 1 + j
    out.set(fresh, inPage)
    return out
  }

  /**
   * Return the pages touched by `indices` to the pool. Refuses (throws, frees nothing) when an
   * index is outside the pool or its page is already free.
   */
  free(indices: Int32Array): void {
    const ps = this.pageSize
    const n = indices.length
    // Validate everything first so that a refused free changes nothing.
    let prevPage = -1
    for (let i = 0; i < n; i++) {
      const idx = indices[i]!
      this.#checkIndex(idx)
      const page = (idx / ps) | 0
      if (page === prevPage) continue
      if (this.#isFree[page] === 1) {
        throw new RadixCacheError(
          RadixCacheErrorCode.DoubleFree,
          `slot ${idx} (page ${page}) is already free`,
          idx,
        )
      }
      prevPage = page
    }
    prevPage = -1
    for (let i = 0; i < n; i++) {
      const page = (indices[i]! / ps) | 0
      if (page === prevPage || this.#isFree[page] === 1) continue
      this.#isFree[page] = 1
      this.#freePages[this.#freeTop++] = page
      prevPage = page
    }
  }

  /** Whether the page holding slot `index` is free. */
  isFree(index: number): boolean {
    this.#checkIndex(index)
    return this.#isFree[(index / this.pageSize) | 0] === 1
  }

  /** Free every page (for example after a cache reset). */
  clear(): void {
    for (let i = 0; i < this.#numPages; i++) {
      this.#freePages[i] = this.#numPages - 1 - i
      this.#isFree[i] = 1
    }
    this.#freeTop = this.#numPages
  }

  #checkCount(numTokens: number): void {
    if (!Number.isInteger(numTokens) || numTokens < 0) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidOption,
        `numTokens must be a non-negative integer, got ${numTokens}`,
        numTokens,
      )
    }
  }

  #checkIndex(idx: number): void {
    if (!Number.isInteger(idx) || idx < 0 || idx >= this.size) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidIndex,
        `slot index ${idx} is outside the pool [0, ${this.size})`,
        idx,
      )
    }
  }
}
