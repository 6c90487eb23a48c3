import { checkOption } from '../errors/simError.js'

/** 32-bit FNV-1a of a string, used to derive independent streams from names. */
function hashString(s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/** SplitMix32 step, used only to spread a seed over the generator's four words. */
function splitmix32(state: { s: number }): number {
  state.s = (state.s + 0x9e3779b9) | 0
  let z = state.s
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  return (z ^ (z >>> 16)) >>> 0
}

/**
 * A seeded pseudo-random generator (SFC32: small, fast, passes PractRand to 2^40+), with named
 * independent streams: `new Prng(seed, 'arrivals')` and `new Prng(seed, 'jitter')` never
 * influence each other, so a policy that draws more jitter cannot shift the workload's arrivals.
 * That is what makes paired comparisons possible: every policy of a trial sees the same
 * sessions, turns and think times.
 *
 * @example
 * ```ts
 * import { Prng } from '@kvc/sim'
 * const a = new Prng(42, 'arrivals')
 * const b = new Prng(42, 'arrivals')
 * console.log(a.next() === b.next()) // true: same seed and stream, same sequence
 * console.log(a.int(6))              // an integer in [0, 6)
 * ```
 */
export class Prng {
  #a: number
  #b: number
  #c: number
  #d: number
  #spare = Number.NaN
  /** The seed this generator was created with. */
  readonly seed: number
  /** The stream name. */
  readonly stream: string

  constructor(seed: number, stream = '') {
    checkOption(Number.isSafeInteger(seed), `seed must be a safe integer, got ${String(seed)}`, seed)
    this.seed = seed
    this.stream = stream
    const st = { s: (seed ^ Math.floor(seed / 0x1_0000_0000) ^ hashString(stream)) | 0 }
    this.#a = splitmix32(st)
    this.#b = splitmix32(st)
    this.#c = splitmix32(st)
    this.#d = splitmix32(st) | 1
    for (let i = 0; i < 12; i++) this.#u32()
  }

  #u32(): number {
    const t = (((this.#a + this.#b) | 0) + this.#d) | 0
    this.#d = (this.#d + 1) | 0
    this.#a = this.#b ^ (this.#b >>> 9)
    this.#b = (this.#c + (this.#c << 3)) | 0
    this.#c = (this.#c << 21) | (this.#c >>> 11)
    this.#c = (this.#c + t) | 0
    return t >>> 0
  }

  /** A uniform number in `[0, 1)` with 32 bits of randomness. */
  next(): number {
    return this.#u32() / 4294967296
  }

  /** A uniform integer in `[0, n)`. */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }

  /** A uniform number in `[lo, hi)`. */
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next()
  }

  /** An exponential variate with the given mean. */
  exponential(mean: number): number {
    return -mean * Math.log(1 - this.next())
  }

  /** A standard normal variate (Box–Muller, the spare value is kept). */
  normal(): number {
    if (!Number.isNaN(this.#spare)) {
      const s = this.#spare
      this.#spare = Number.NaN
      return s
    }
    let u = this.next()
    while (u === 0) u = this.next()
    const v = this.next()
    const r = Math.sqrt(-2 * Math.log(u))
    this.#spare = r * Math.sin(2 * Math.PI * v)
    return r * Math.cos(2 * Math.PI * v)
  }

  /** A log-normal variate with the given median and log-space standard deviation. */
  lognormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal())
  }

  /** A generator on a derived, independent stream (`stream/name`). */
  fork(name: string): Prng {
    return new Prng(this.seed, `${this.stream}/${name}`)
  }

  /** A function `() => number` in `[0, 1)`, the shape the pure packages take as `random`. */
  asRandom(): () => number {
    return () => this.next()
  }
}
