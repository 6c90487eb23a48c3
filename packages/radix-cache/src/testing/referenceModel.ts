/**
 * A deliberately naive model of a paged prefix cache: the set of cached page paths per namespace,
 * with a lock count per page path. No tree, no splitting, no ordering: it answers "what must the
 * real cache report" by brute force, so a model-based test can compare the two.
 *
 * @example
 * ```ts
 * import { RadixReferenceModel } from '@kvc/radix-cache/testing'
 * const model = new RadixReferenceModel(2)
 * model.insert([1, 2, 3, 4, 5], '') // 0 tokens were present
 * model.match([1, 2, 3, 9], '')     // 2
 * ```
 */
export class RadixReferenceModel {
  /** Tokens per page. */
  readonly pageSize: number
  /** namespace -> (page path key -> lock count) */
  readonly #pages = new Map<string, Map<string, number>>()

  constructor(pageSize: number) {
    this.pageSize = pageSize
  }

  /** Key of the path made of the first `pages` pages of `tokens`. */
  static pathKey(tokens: ArrayLike<number>, pages: number, pageSize: number): string {
    return Array.prototype.slice.call(tokens, 0, pages * pageSize).join(',')
  }

  #ns(ns: string): Map<string, number> {
    let m = this.#pages.get(ns)
    if (m === undefined) {
      m = new Map()
      this.#pages.set(ns, m)
    }
    return m
  }

  /** Insert the page-aligned part; returns the tokens already present. */
  insert(tokens: ArrayLike<number>, ns: string): number {
    const m = this.#ns(ns)
    const pages = Math.floor(tokens.length / this.pageSize)
    const present = this.match(tokens, ns)
    for (let p = 1; p <= pages; p++) {
      const k = RadixReferenceModel.pathKey(tokens, p, this.pageSize)
      if (!m.has(k)) m.set(k, 0)
    }
    return present
  }

  /** Longest cached page-aligned prefix length. */
  match(tokens: ArrayLike<number>, ns: string): number {
    const m = this.#pages.get(ns)
    if (m === undefined) return 0
    const pages = Math.floor(tokens.length / this.pageSize)
    let p = 0
    while (p < pages && m.has(RadixReferenceModel.pathKey(tokens, p + 1, this.pageSize))) p++
    return p * this.pageSize
  }

  /** Add `delta` (±1) to the lock count of every page of the first `length` tokens. */
  lock(tokens: ArrayLike<number>, length: number, ns: string, delta: 1 | -1): void {
    const m = this.#ns(ns)
    for (let p = 1; p * this.pageSize <= length; p++) {
      const k = RadixReferenceModel.pathKey(tokens, p, this.pageSize)
      const c = m.get(k)
      if (c === undefined) throw new Error(`model: locking a page that is not cached: ${k}`)
      if (c + delta < 0) throw new Error(`model: lock count below zero at ${k}`)
      m.set(k, c + delta)
    }
  }

  /** Tokens cached, locked, and unlocked. */
  sizes(): { total: number; protected: number; evictable: number } {
    let total = 0
    let prot = 0
    for (const m of this.#pages.values()) {
      for (const c of m.values()) {
        total += this.pageSize
        if (c > 0) prot += this.pageSize
      }
    }
    return { total, protected: prot, evictable: total - prot }
  }

  /** Every cached page path as `ns|tokens`, with its lock count. */
  pages(): Map<string, number> {
    const out = new Map<string, number>()
    for (const [ns, m] of this.#pages) for (const [k, c] of m) out.set(`${ns}|${k}`, c)
    return out
  }

  /**
   * Replace the page set by `observed` (the real cache's pages after an eviction) after checking
   * that only unlocked pages disappeared and nothing new appeared. Returns the tokens removed.
   */
  applyEviction(observed: ReadonlySet<string>): number {
    let removed = 0
    for (const [ns, m] of this.#pages) {
      for (const [k, c] of m) {
        const full = `${ns}|${k}`
        if (observed.has(full)) continue
        if (c > 0) throw new Error(`model: locked page evicted: ${full}`)
        m.delete(k)
        removed += this.pageSize
      }
    }
    const mine = this.pages()
    for (const k of observed) if (!mine.has(k)) throw new Error(`model: page appeared from nowhere: ${k}`)
    return removed
  }

  /** Drop everything (refused by the real cache while locked; the caller checks that first). */
  reset(): void {
    this.#pages.clear()
  }
}
