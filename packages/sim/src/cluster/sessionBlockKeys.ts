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
 * The block keys of each turn's prompt (what the router routes on), hashed once per session: a
 * session's next prompt reuses the keys of the full pages it shares with the previous one. The
 * keys are `simBlockHasher`'s, chained through their two 32-bit lanes (no digest bytes, no
 * view per page).
 */
export class SessionBlockKeys {
  readonly #pageSize: number
  readonly #bySession = new Map<number, { prompt: Uint32Array; keys: BlockKeys }>()

  constructor(pageSize: number) {
    this.#pageSize = pageSize
  }

  /** The block keys of `prompt`, a turn of `session` (negative: no session, nothing kept). */
  keysFor(session: number, prompt: Uint32Array): BlockKeys {
    const ps = this.#pageSize
    const pages = Math.floor(prompt.length / ps)
    const prev = session >= 0 ? this.#bySession.get(session) : undefined
    const keys = new BlockKeys(Math.max(1, pages))
    let keep = 0
    if (prev !== undefined) {
      keep = Math.min(Math.floor(commonPrefixLength(prev.prompt, prompt) / ps), prev.keys.length, pages)
      keys.hi.set(prev.keys.hi.subarray(0, keep))
      keys.lo.set(prev.keys.lo.subarray(0, keep))
    }
    let h1: number
    let h2: number
    if (keep === 0) {
      rootLanes(undefined)
      h1 = LANES[0]!
      h2 = LANES[1]!
    } else {
      h1 = keys.hi[keep - 1]!
      h2 = keys.lo[keep - 1]!
    }
    const hi = keys.hi
    const lo = keys.lo
    for (let p = keep; p < pages; p++) {
      hashLanes(h1, h2, prompt, p * ps, (p + 1) * ps)
      h1 = LANES[0]!
      h2 = LANES[1]!
      hi[p] = h1
      lo[p] = h2
    }
    keys.length = pages
    if (session >= 0) this.#bySession.set(session, { prompt, keys })
    return keys
  }
}
