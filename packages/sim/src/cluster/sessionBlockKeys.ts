import { BlockKeys } from '../adapters/router.js'
import { LANES, hashLanes, rootLanes } from '../hashing/simBlockHasher.js'

function bytesOf(a: Uint32Array, from: number, to: number): Buffer {
  return Buffer.from(a.buffer, a.byteOffset + from * 4, (to - from) * 4)
}

/** Length of the common prefix of two token arrays (memcmp on chunks, then a scan). */
function commonPrefixLength(a: Uint32Array, b: Uint32Array): number {
  const n = Math.min(a.length, b.length)
  // Views from the same place of one buffer (a session's turns on the workload's token stream).
  if (a.buffer === b.buffer && a.byteOffset === b.byteOffset) return n
  let lo = 0
  let step = 4096
  while (lo < n) {
    const hi = Math.min(n, lo + step)
    if (bytesOf(a, lo, hi).equals(bytesOf(b, lo, hi))) {
      lo = hi
      step *= 2
    } else if (hi - lo > 64) {
      step = Math.max(64, (hi - lo) >> 2)
    } else {
      while (lo < hi && a[lo] === b[lo]) lo++
      return lo
    }
  }
  return n
}

/**
 * The keys of pages `from` to `to` of `prompt` into `hi` / `lo`, chained from the key of page
 * `from - 1` there (from the root for page 0).
 */
function hashPages(
  prompt: Uint32Array,
  ps: number,
  from: number,
  to: number,
  hi: Uint32Array,
  lo: Uint32Array,
): void {
  let h1: number
  let h2: number
  if (from === 0) {
    rootLanes(undefined)
    h1 = LANES[0]!
    h2 = LANES[1]!
  } else {
    h1 = hi[from - 1]!
    h2 = lo[from - 1]!
  }
  for (let p = from; p < to; p++) {
    hashLanes(h1, h2, prompt, p * ps, (p + 1) * ps)
    h1 = LANES[0]!
    h2 = LANES[1]!
    hi[p] = h1
    lo[p] = h2
  }
}

/** A session's last prompt and its keys, on buffers the session's later keys extend. */
interface SessionKeys {
  prompt: Uint32Array
  keys: BlockKeys
  /** The keys' buffers: `keys.hi` / `keys.lo` are their first `keys.length` entries. */
  hi: Uint32Array
  lo: Uint32Array
}

/**
 * The block keys of each turn's prompt (what the router routes on), hashed once per session: a
 * session's next prompt reuses the keys of the full pages it shares with the previous one. The
 * keys are `simBlockHasher`'s, chained through their two 32-bit lanes (no digest bytes, no
 * view per page). A session's keys live on one pair of buffers that its next prompt extends in
 * place when it keeps all of the previous keys: each turn's `BlockKeys` is a view of exactly its
 * own entries (a view never changes: later turns write after it, and `pushHash` on a full view
 * copies), so a turn allocates no key arrays. A request without a session gets keys of its own,
 * hashed into their arrays directly.
 */
export class SessionBlockKeys {
  readonly #pageSize: number
  readonly #bySession = new Map<number, SessionKeys>()

  constructor(pageSize: number) {
    this.#pageSize = pageSize
  }

  /** The block keys of `prompt`, a turn of `session` (negative: no session, nothing kept). */
  keysFor(session: number, prompt: Uint32Array): BlockKeys {
    const ps = this.#pageSize
    const pages = Math.floor(prompt.length / ps)
    if (session < 0) {
      // Nothing to reuse or keep: the hashes go straight into the keys' own arrays.
      const keys = new BlockKeys(pages)
      hashPages(prompt, ps, 0, pages, keys.hi, keys.lo)
      keys.length = pages
      return keys
    }
    const prev = this.#bySession.get(session)
    let keep = 0
    if (prev !== undefined) {
      keep = Math.min(Math.floor(commonPrefixLength(prev.prompt, prompt) / ps), prev.keys.length, pages)
    }
    let hi: Uint32Array
    let lo: Uint32Array
    if (prev !== undefined && keep === prev.keys.length && prev.hi.length >= pages) {
      // Every earlier view of these buffers ends at or before `keep`: write after it.
      hi = prev.hi
      lo = prev.lo
    } else {
      // Room for a few more turns' pages (a session's prompts grow turn by turn).
      const cap = pages + (pages >> 1) + 16
      hi = new Uint32Array(cap)
      lo = new Uint32Array(cap)
      if (keep > 0) {
        hi.set(prev!.hi.subarray(0, keep))
        lo.set(prev!.lo.subarray(0, keep))
      }
    }
    hashPages(prompt, ps, keep, pages, hi, lo)
    const keys = new BlockKeys(1)
    if (pages > 0) {
      keys.hi = hi.subarray(0, pages)
      keys.lo = lo.subarray(0, pages)
    }
    keys.length = pages
    this.#bySession.set(session, { prompt, keys, hi, lo })
    return keys
  }
}
