/**
 * KV rows reused from request to request, like SGLang's `req_to_token_pool`: a request takes a row
 * at admission and gives it back when it finishes or aborts, so a serving loop allocates no row
 * per request once the pool has rows of the sizes it needs. SGLang's rows all have the model's
 * context length; here a row has a power-of-two capacity (at least {@link MIN_ROW}), and the pool
 * keeps a free list per capacity. A row's contents are whatever its last user wrote: only
 * `row[0, kvAllocatedLen)` of the request holding it means anything.
 */

/** Capacity of the smallest row. */
export const MIN_ROW = 64
const MIN_CLASS = 6 // log2(MIN_ROW)
/** Rows kept per capacity; more given back are dropped (the garbage collector takes them). */
const MAX_FREE_PER_CLASS = 1024

/** The capacity class of a row for `n` positions: `2^class >= max(n, MIN_ROW)`. */
function classOf(n: number): number {
  return n <= MIN_ROW ? MIN_CLASS : 32 - Math.clz32(n - 1)
}

/** Free rows by capacity class (see the module comment). @internal */
export class RowPool {
  readonly #free: Int32Array[][] = []
  /** Rows handed out by `take` and not given back (bookkeeping for the invariant checks). */
  #out = 0

  /** A row with room for at least `n` positions (a power of two); its contents are unspecified. */
  take(n: number): Int32Array {
    const c = classOf(n)
    const list = this.#free[c]
    this.#out++
    if (list !== undefined && list.length > 0) return list.pop()!
    return new Int32Array(2 ** c)
  }

  /**
   * Give back a row `take` handed out; the caller keeps no view of it. Rows of any other length
   * (the empty row of a request that never had one) are ignored.
   */
  give(row: Int32Array): void {
    const n = row.length
    if (n < MIN_ROW || (n & (n - 1)) !== 0 || row.byteOffset !== 0) return
    const c = classOf(n)
    let list = this.#free[c]
    if (list === undefined) {
      list = []
      this.#free[c] = list
    }
    this.#out--
    if (list.length < MAX_FREE_PER_CLASS) list.push(row)
  }

  /** Rows taken and not given back. */
  get rowsOut(): number {
    return this.#out
  }

  /** Every free row (for the invariant checks). */
  freeRows(): Int32Array[] {
    const out: Int32Array[] = []
    for (const list of this.#free) if (list !== undefined) out.push(...list)
    return out
  }
}
