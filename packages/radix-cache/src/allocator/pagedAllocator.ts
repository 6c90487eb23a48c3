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
  /** Pages found by `free`'s validation pass, freed by its second pass. */
  #scratch: Int32Array = EMPTY

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
    this.#checkPages(numTokens, Math.ceil(numTokens / this.pageSize))
    const out = new Int32Array(numTokens)
    this.#fill(out, 0, numTokens)
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
    const inPage = this.#checkExtend(lastLoc, numTokens)
    if (numTokens === 0) return EMPTY
    // One array: the rest of lastLoc's page, then fresh pages written in place.
    const out = new Int32Array(numTokens)
    for (let j = 0; j < inPage; j++) out[j] = lastLoc + 1 + j
    if (numTokens > inPage) this.#fill(out, inPage, numTokens - inPage)
    return out
  }

  /**
   * {@link PagedAllocator.allocExtend} written into `out[at, at + numTokens)` instead of a new
   * array (a request's KV row: nothing to allocate per call). Same checks, same slots; `out`
   * must be an `Int32Array` with room (`INVALID_OPTION`), and a refusal writes nothing.
   *
   * @example
   * ```ts
   * const pool = new PagedAllocator({ size: 64, pageSize: 16 })
   * const row = new Int32Array(40)
   * pool.allocExtendInto(-1, 20, row, 0)        // row[0..20) = slots 0..19 (pages 0, 1)
   * pool.allocExtendInto(row[19]!, 4, row, 20)  // row[20..24) = slots 20..23, still page 1
   * ```
   */
  allocExtendInto(lastLoc: number, numTokens: number, out: Int32Array, at: number): void {
    this.#checkCount(numTokens)
    if (!(out instanceof Int32Array) || !Number.isInteger(at) || at < 0 || at + numTokens > out.length) {
      throw new RadixCacheError(
        RadixCacheErrorCode.InvalidOption,
        `out must be an Int32Array with room for ${numTokens} slots at ${String(at)}`,
        out,
      )
    }
    if (lastLoc === -1) {
      if (numTokens === 0) return
      this.#checkPages(numTokens, Math.ceil(numTokens / this.pageSize))
      this.#fill(out, at, numTokens)
      return
    }
    const inPage = this.#checkExtend(lastLoc, numTokens)
    for (let j = 0; j < inPage; j++) out[at + j] = lastLoc + 1 + j
    if (numTokens > inPage) this.#fill(out, at + inPage, numTokens - inPage)
  }

  /**
   * Check an extension of `lastLoc` by `numTokens` (its page is allocated, the fresh pages exist)
   * and return how many of them stay in `lastLoc`'s page.
   */
  #checkExtend(lastLoc: number, numTokens: number): number {
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
    if (rest > 0) this.#checkPages(rest, Math.ceil(rest / ps))
    return inPage
  }

  /**
   * Return the pages touched by `indices` to the pool. Refuses (throws, frees nothing) when an
   * index is outside the pool or its page is already free.
   */
  free(indices: Int32Array): void {
    const ps = this.pageSize
    const n = indices.length
    const isFree = this.#isFree
    // Validate everything first so that a refused free changes nothing. Slots of one page come
    // in runs (idx, idx + 1, …): a run is checked by comparing each slot with the next expected
    // one, and its page once. The pages found are noted in a scratch list, then freed.
    let pages = this.#scratch
    let np = 0
    let prevPage = -1
    for (let i = 0; i < n; ) {
      const idx = indices[i]!
      this.#checkIndex(idx)
      const page = (idx / ps) | 0
      if (page !== prevPage) {
        if (isFree[page] === 1) {
          throw new RadixCacheError(
            RadixCacheErrorCode.DoubleFree,
            `slot ${idx} (page ${page}) is already free`,
            idx,
          )
        }
        prevPage = page
        if (np === pages.length) {
          const grown = new Int32Array(Math.max(16, np * 2))
          grown.set(pages)
          pages = grown
          this.#scratch = grown
        }
        pages[np++] = page
      }
      i = runEnd(indices, i, idx, (page + 1) * ps)
    }
    const freePages = this.#freePages
    let top = this.#freeTop
    for (let k = 0; k < np; k++) {
      const page = pages[k]!
      if (isFree[page] === 0) {
        isFree[page] = 1
        freePages[top++] = page
      }
    }
    this.#freeTop = top
  }

  /**
   * Allocate `numPages` whole pages and return their page numbers (page `p` holds slots
   * `p·pageSize … p·pageSize + pageSize − 1`): the pages `alloc(numPages · pageSize)` would take,
   * in the same order, for a caller that only needs to hold memory (O(pages), not O(slots)).
   * Throws `OUT_OF_MEMORY` (and allocates nothing) when not enough pages are free.
   *
   * @example
   * ```ts
   * const pool = new PagedAllocator({ size: 64, pageSize: 16 })
   * const pages = pool.allocPages(2) // Int32Array [0, 1]
   * pool.freePages(pages)
   * ```
   */
  allocPages(numPages: number): Int32Array {
    this.#checkCount(numPages)
    if (numPages === 0) return EMPTY
    this.#checkPages(numPages * this.pageSize, numPages)
    const out = new Int32Array(numPages)
    const freePages = this.#freePages
    const isFree = this.#isFree
    let top = this.#freeTop
    for (let i = 0; i < numPages; i++) {
      const page = freePages[--top]!
      isFree[page] = 0
      out[i] = page
    }
    this.#freeTop = top
    return out
  }

  /**
   * Return whole pages (page numbers, as {@link PagedAllocator.allocPages} gives them) to the
   * pool, in order: the same as freeing all their slots with {@link PagedAllocator.free}.
   * Refuses (throws, frees nothing) a page number outside the pool (`INVALID_INDEX`) or a page
   * that is free or listed twice (`DOUBLE_FREE`).
   */
  freePages(pages: Int32Array): void {
    const n = pages.length
    const isFree = this.#isFree
    // Pages are marked free as they are checked, so that one listed twice is caught; a refusal
    // unmarks the ones before it.
    for (let i = 0; i < n; i++) {
      const page = pages[i]!
      const outside = !Number.isInteger(page) || page < 0 || page >= this.#numPages
      if (outside || isFree[page] === 1) {
        for (let j = 0; j < i; j++) isFree[pages[j]!] = 0
        throw outside
          ? new RadixCacheError(
              RadixCacheErrorCode.InvalidIndex,
              `page ${page} is outside the pool [0, ${this.#numPages})`,
              page,
            )
          : new RadixCacheError(RadixCacheErrorCode.DoubleFree, `page ${page} is already free`, page)
      }
      isFree[page] = 1
    }
    const freePages = this.#freePages
    let top = this.#freeTop
    for (let i = 0; i < n; i++) freePages[top++] = pages[i]!
    this.#freeTop = top
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

  /** Throw `OUT_OF_MEMORY` (changing nothing) when fewer than `pages` pages are free. */
  #checkPages(numTokens: number, pages: number): void {
    if (pages > this.#freeTop) {
      throw new RadixCacheError(
        RadixCacheErrorCode.OutOfMemory,
        `cannot allocate ${numTokens} tokens (${pages} pages): ${this.#freeTop} pages free`,
        numTokens,
      )
    }
  }

  /** Write the slots of `ceil(count / pageSize)` fresh pages into `out[from, from + count)`. */
  #fill(out: Int32Array, from: number, count: number): void {
    const ps = this.pageSize
    const freePages = this.#freePages
    const isFree = this.#isFree
    let top = this.#freeTop
    let k = from
    const end = from + count
    while (k < end) {
      const page = freePages[--top]!
      isFree[page] = 0
      const base = page * ps - k
      const stop = Math.min(end, k + ps)
      for (; k < stop; k++) out[k] = base + k
    }
    this.#freeTop = top
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

/**
 * End (exclusive) of the run of consecutive slots `idx, idx + 1, …` that starts at `indices[i]`
 * and stays below `limit` (the end of `idx`'s page): those slots are valid and share its page.
 */
function runEnd(indices: ArrayLike<number>, i: number, idx: number, limit: number): number {
  const n = indices.length
  let j = i + 1
  let expect = idx + 1
  while (j < n && expect < limit && indices[j] === expect) {
    j++
    expect++
  }
  return j
}
