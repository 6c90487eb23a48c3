/** A binary min-heap of events ordered by (time, insertion order): ties fire in FIFO order. */
export class EventQueue<E> {
  #times: number[] = []
  #seqs: number[] = []
  #items: E[] = []
  #seq = 0

  get size(): number {
    return this.#items.length
  }

  peekTime(): number | undefined {
    return this.#times[0]
  }

  push(time: number, item: E): void {
    const i = this.#items.length
    this.#times.push(time)
    this.#seqs.push(this.#seq++)
    this.#items.push(item)
    this.#up(i)
  }

  pop(): E | undefined {
    const n = this.#items.length
    if (n === 0) return undefined
    const top = this.#items[0]!
    const lastT = this.#times.pop()!
    const lastS = this.#seqs.pop()!
    const lastI = this.#items.pop()!
    if (n > 1) {
      this.#times[0] = lastT
      this.#seqs[0] = lastS
      this.#items[0] = lastI
      this.#down(0)
    }
    return top
  }

  #less(a: number, b: number): boolean {
    const ta = this.#times[a]!
    const tb = this.#times[b]!
    return ta < tb || (ta === tb && this.#seqs[a]! < this.#seqs[b]!)
  }

  #swap(a: number, b: number): void {
    const t = this.#times[a]!
    this.#times[a] = this.#times[b]!
    this.#times[b] = t
    const s = this.#seqs[a]!
    this.#seqs[a] = this.#seqs[b]!
    this.#seqs[b] = s
    const x = this.#items[a]!
    this.#items[a] = this.#items[b]!
    this.#items[b] = x
  }

  #up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1
      if (!this.#less(i, p)) break
      this.#swap(i, p)
      i = p
    }
  }

  #down(i: number): void {
    const n = this.#items.length
    for (;;) {
      const l = 2 * i + 1
      const r = l + 1
      let m = i
      if (l < n && this.#less(l, m)) m = l
      if (r < n && this.#less(r, m)) m = r
      if (m === i) return
      this.#swap(i, m)
      i = m
    }
  }
}
