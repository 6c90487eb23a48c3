/**
 * A set of keys given as two 32-bit lanes (`hi`, `lo`), in open-addressed typed arrays: what a
 * `Set<number>` of chained page keys costs without a heap number per key above 2^31 or a hash
 * table entry object. Two keys are equal when both lanes are. Internal to the simulator.
 */
export class PairKeySet {
  #hi: Int32Array
  #lo: Int32Array
  #used: Uint8Array
  #mask: number
  #size = 0

  constructor(expected = 1024) {
    let cap = 16
    while (cap < expected * 2) cap *= 2
    this.#hi = new Int32Array(cap)
    this.#lo = new Int32Array(cap)
    this.#used = new Uint8Array(cap)
    this.#mask = cap - 1
  }

  /** Number of distinct keys added. */
  get size(): number {
    return this.#size
  }

  /** Adds the key; `true` when it was new. */
  add(hi: number, lo: number): boolean {
    hi |= 0
    lo |= 0
    const mask = this.#mask
    let i = slotOf(hi, lo) & mask
    const used = this.#used
    while (used[i] !== 0) {
      if (this.#hi[i] === hi && this.#lo[i] === lo) return false
      i = (i + 1) & mask
    }
    used[i] = 1
    this.#hi[i] = hi
    this.#lo[i] = lo
    if (++this.#size * 2 > mask) this.#grow()
    return true
  }

  /** Whether the key was added. */
  has(hi: number, lo: number): boolean {
    hi |= 0
    lo |= 0
    const mask = this.#mask
    const used = this.#used
    for (let i = slotOf(hi, lo) & mask; used[i] !== 0; i = (i + 1) & mask) {
      if (this.#hi[i] === hi && this.#lo[i] === lo) return true
    }
    return false
  }

  #grow(): void {
    const hi = this.#hi
    const lo = this.#lo
    const used = this.#used
    const cap = used.length * 2
    this.#hi = new Int32Array(cap)
    this.#lo = new Int32Array(cap)
    this.#used = new Uint8Array(cap)
    this.#mask = cap - 1
    const mask = this.#mask
    for (let j = 0; j < used.length; j++) {
      if (used[j] === 0) continue
      let i = slotOf(hi[j]!, lo[j]!) & mask
      while (this.#used[i] !== 0) i = (i + 1) & mask
      this.#used[i] = 1
      this.#hi[i] = hi[j]!
      this.#lo[i] = lo[j]!
    }
  }
}

/** Mixes both lanes (murmur3's finalizer) so that keys differing in either lane spread. */
function slotOf(hi: number, lo: number): number {
  let h = Math.imul(hi ^ Math.imul(lo, 0x9e3779b1), 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  return h ^ (h >>> 16)
}
