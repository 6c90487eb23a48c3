import { checkOption } from '../errors/simError.js'

/**
 * The simulator's future-event list: a binary min-heap over struct-of-arrays typed storage,
 * ordered by `(time, insertion sequence)`. Equal times pop in the order they were pushed (stable
 * tie-breaking), so a run is a pure function of its inputs. An event is a time plus three
 * integers (`kind`, `a`, `b`) that the caller interprets; nothing is allocated per event, and
 * the arrays grow by doubling, so millions of pending events cost about 32 bytes each.
 *
 * Events are never removed from the middle: a caller that wants to cancel one keeps a
 * generation counter in `b` and ignores stale events when they pop.
 *
 * @example
 * ```ts
 * import { EventQueue } from '@kvc/sim'
 * const q = new EventQueue()
 * q.push(5, 1, 10, 0)
 * q.push(2, 2, 20, 0)
 * q.push(2, 3, 30, 0) // same time as the previous one: pops after it
 * while (q.pop()) console.log(q.time, q.kind, q.a) // 2 2 20, 2 3 30, 5 1 10
 * ```
 */
export class EventQueue {
  #time: Float64Array
  #seq: Float64Array
  #kind: Int32Array
  #a: Int32Array
  #b: Int32Array
  #size = 0
  #nextSeq = 0
  #pushed = 0

  /** Time of the last popped event. */
  time = 0
  /** Kind of the last popped event. */
  kind = 0
  /** First payload of the last popped event. */
  a = 0
  /** Second payload of the last popped event. */
  b = 0

  constructor(initialCapacity = 1024) {
    checkOption(
      Number.isInteger(initialCapacity) && initialCapacity >= 1,
      `initialCapacity must be a positive integer, got ${initialCapacity}`,
      initialCapacity,
    )
    this.#time = new Float64Array(initialCapacity)
    this.#seq = new Float64Array(initialCapacity)
    this.#kind = new Int32Array(initialCapacity)
    this.#a = new Int32Array(initialCapacity)
    this.#b = new Int32Array(initialCapacity)
  }

  /** Pending events. */
  get size(): number {
    return this.#size
  }

  /** Events pushed since construction. */
  get pushed(): number {
    return this.#pushed
  }

  /** Time of the next event (`Infinity` when empty). */
  peekTime(): number {
    return this.#size === 0 ? Number.POSITIVE_INFINITY : this.#time[0]!
  }

  /** Schedule an event. `time` must be a finite number. */
  push(time: number, kind: number, a: number, b: number): void {
    if (!Number.isFinite(time)) throw new RangeError(`event time must be finite, got ${time}`)
    if (this.#size === this.#time.length) this.#grow()
    const seq = this.#nextSeq++
    this.#pushed++
    // Sift up with a hole.
    let i = this.#size++
    const T = this.#time
    const S = this.#seq
    while (i > 0) {
      const p = (i - 1) >> 1
      const pt = T[p]!
      if (pt < time || (pt === time && S[p]! < seq)) break
      this.#move(p, i)
      i = p
    }
    T[i] = time
    S[i] = seq
    this.#kind[i] = kind
    this.#a[i] = a
    this.#b[i] = b
  }

  /** Remove the earliest event into `time`, `kind`, `a`, `b`; `false` when empty. */
  pop(): boolean {
    const n = this.#size
    if (n === 0) return false
    const T = this.#time
    const S = this.#seq
    this.time = T[0]!
    this.kind = this.#kind[0]!
    this.a = this.#a[0]!
    this.b = this.#b[0]!
    const last = n - 1
    this.#size = last
    if (last === 0) return true
    const lt = T[last]!
    const ls = S[last]!
    const lk = this.#kind[last]!
    const la = this.#a[last]!
    const lb = this.#b[last]!
    // Sift down with a hole from the root.
    let i = 0
    for (;;) {
      let c = 2 * i + 1
      if (c >= last) break
      const r = c + 1
      if (r < last && (T[r]! < T[c]! || (T[r]! === T[c]! && S[r]! < S[c]!))) c = r
      const ct = T[c]!
      if (lt < ct || (lt === ct && ls < S[c]!)) break
      this.#move(c, i)
      i = c
    }
    T[i] = lt
    S[i] = ls
    this.#kind[i] = lk
    this.#a[i] = la
    this.#b[i] = lb
    return true
  }

  /** Drop every pending event. */
  clear(): void {
    this.#size = 0
  }

  #move(from: number, to: number): void {
    this.#time[to] = this.#time[from]!
    this.#seq[to] = this.#seq[from]!
    this.#kind[to] = this.#kind[from]!
    this.#a[to] = this.#a[from]!
    this.#b[to] = this.#b[from]!
  }

  #grow(): void {
    const cap = this.#time.length * 2
    const t = new Float64Array(cap)
    t.set(this.#time)
    this.#time = t
    const s = new Float64Array(cap)
    s.set(this.#seq)
    this.#seq = s
    const k = new Int32Array(cap)
    k.set(this.#kind)
    this.#kind = k
    const a = new Int32Array(cap)
    a.set(this.#a)
    this.#a = a
    const b = new Int32Array(cap)
    b.set(this.#b)
    this.#b = b
  }
}
