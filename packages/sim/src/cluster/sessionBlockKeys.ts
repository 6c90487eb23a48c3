import { type BlockKeys, extendBlockKeys } from '../adapters/router.js'
import { simBlockHasher } from '../hashing/simBlockHasher.js'

function bytesOf(a: Uint32Array, from: number, to: number): Buffer {
  return Buffer.from(a.buffer, a.byteOffset + from * 4, (to - from) * 4)
}

/** Length of the common prefix of two token arrays (memcmp on chunks, then a scan). */
function commonPrefixLength(a: Uint32Array, b: Uint32Array): number {
  const n = Math.min(a.length, b.length)
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
 * session's next prompt reuses the keys of the full pages it shares with the previous one.
 */
export class SessionBlockKeys {
  readonly #pageSize: number
  readonly #bySession = new Map<number, { prompt: Uint32Array; keys: BlockKeys; digests: Uint8Array[] }>()

  constructor(pageSize: number) {
    this.#pageSize = pageSize
  }

  /** The block keys of `prompt`, a turn of `session` (negative: no session, nothing kept). */
  keysFor(session: number, prompt: Uint32Array): BlockKeys {
    const ps = this.#pageSize
    const s = session
    const prev = s >= 0 ? this.#bySession.get(s) : undefined
    let shared = 0
    if (prev !== undefined) shared = Math.floor(commonPrefixLength(prev.prompt, prompt) / ps)
    const { keys, digests } = extendBlockKeys(prev?.keys, shared, prev?.digests, prompt, ps, simBlockHasher)
    if (s >= 0) this.#bySession.set(s, { prompt, keys, digests })
    return keys
  }
}
