/**
 * An indexed binary min-heap of node indices with three numeric sort keys per node (compared
 * lexicographically). Positions are tracked per node, so update and remove are O(log n) and the
 * heap never needs rebuilding: this is what keeps one `evict` call at O(k log n).
 * @internal
 */
export class EvictionHeap {
  #heap: Int32Array
  #size = 0
  /** node index -> heap position, -1 when absent */
  #pos: Int32Array
  #k1: Float64Array
  #k2: Float64Array
  #k3: Float64Array

  constructor(nodeCapacity: number) {
    this.#heap = new Int32Array(Math.max(16, nodeCapacity))
    this.#pos = new Int32Array(nodeCapacity).fill(-1)
    this.#k1 = new Float64Array(nodeCapacity)
    this.#k2 = new Float64Array(nodeCapacity)
    this.#k3 = new Float64Array(nodeCapacity)
  }

  get size(): number {
    return this.#size
  }

  /** Grow the per-node arrays to hold `nodeCapacity` nodes. */
  growNodes(nodeCapacity: number): void {
    if (nodeCapacity <= this.#pos.length) return
    const pos = new Int32Array(nodeCapacity).fill(-1)
    pos.set(this.#pos)
    this.#pos = pos
    this.#k1 = grow(this.#k1, nodeCapacity)
    this.#k2 = grow(this.#k2, nodeCapacity)
    this.#k3 = grow(this.#k3, nodeCapacity)
  }

  has(node: number): boolean {
    return this.#pos[node]! >= 0
  }

  /** Position of a node in the heap array, or -1 (for invariant checks). */
  positionOf(node: number): number {
    return this.#pos[node]!
  }

  /** Node at heap position `i` (for invariant checks). */
  at(i: number): number {
    return this.#heap[i]!
  }

  peek(): number {
    return this.#size > 0 ? this.#heap[0]! : -1
  }

  push(node: number, a: number, b: number, c: number): void {
    if (this.#size === this.#heap.length) {
      const h = new Int32Array(this.#heap.length * 2)
      h.set(this.#heap)
      this.#heap = h
    }
    this.#k1[node] = a
    this.#k2[node] = b
    this.#k3[node] = c
    const i = this.#size++
    this.#heap[i] = node
    this.#pos[node] = i
    this.#up(i)
  }

  /** Change the keys of a node that is in the heap. */
  update(node: number, a: number, b: number, c: number): void {
    const i = this.#pos[node]!
    this.#k1[node] = a
    this.#k2[node] = b
    this.#k3[node] = c
    this.#up(i)
    this.#down(this.#pos[node]!)
  }

  remove(node: number): void {
    const i = this.#pos[node]!
    this.#pos[node] = -1
    const last = --this.#size
    if (i === last) return
    const moved = this.#heap[last]!
    this.#heap[i] = moved
    this.#pos[moved] = i
    this.#up(i)
    this.#down(this.#pos[moved]!)
  }

  pop(): number {
    const top = this.#heap[0]!
    this.remove(top)
    return top
  }

  clear(): void {
    for (let i = 0; i < this.#size; i++) this.#pos[this.#heap[i]!] = -1
    this.#size = 0
  }

  /** Whether node a sorts strictly before node b. */
  less(a: number, b: number): boolean {
    const k1 = this.#k1
    if (k1[a]! !== k1[b]!) return k1[a]! < k1[b]!
    const k2 = this.#k2
    if (k2[a]! !== k2[b]!) return k2[a]! < k2[b]!
    return this.#k3[a]! < this.#k3[b]!
  }

  #up(i: number): void {
    const heap = this.#heap
    const pos = this.#pos
    const node = heap[i]!
    while (i > 0) {
      const p = (i - 1) >> 1
      const pn = heap[p]!
      if (!this.less(node, pn)) break
      heap[i] = pn
      pos[pn] = i
      i = p
    }
    heap[i] = node
    pos[node] = i
  }

  #down(i: number): void {
    const heap = this.#heap
    const pos = this.#pos
    const n = this.#size
    const node = heap[i]!
    for (;;) {
      const l = 2 * i + 1
      if (l >= n) break
      const r = l + 1
      let c = l
      if (r < n && this.less(heap[r]!, heap[l]!)) c = r
      const cn = heap[c]!
      if (!this.less(cn, node)) break
      heap[i] = cn
      pos[cn] = i
      i = c
    }
    heap[i] = node
    pos[node] = i
  }
}

function grow(a: Float64Array, n: number): Float64Array {
  const b = new Float64Array(n)
  b.set(a)
  return b
}
