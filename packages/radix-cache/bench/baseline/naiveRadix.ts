/**
 * A straightforward port-style radix cache used as the in-run baseline of the benchmarks: object
 * nodes, `Map<string, Node>` children keyed by the first page joined as a string, `number[]` keys
 * copied with `slice`, and a heap rebuilt over all evictable leaves on every `evict` call (the
 * shape of upstream SGLang's Python `RadixCache`).
 */
interface NaiveNode {
  children: Map<string, NaiveNode>
  parent: NaiveNode | undefined
  key: number[]
  value: number[]
  lockRef: number
  lastAccess: number
}

export class NaiveRadixCache {
  readonly pageSize: number
  root: NaiveNode
  evictable = 0
  #clock = 0

  constructor(pageSize: number) {
    this.pageSize = pageSize
    this.root = { children: new Map(), parent: undefined, key: [], value: [], lockRef: 1, lastAccess: 0 }
  }

  #childKey(key: ArrayLike<number>, off: number): string {
    return Array.prototype.slice.call(key, off, off + this.pageSize).join(',')
  }

  #matchLen(a: number[], b: ArrayLike<number>, off: number): number {
    const n = Math.min(a.length, b.length - off)
    let i = 0
    while (i < n && a[i] === b[off + i]) i++
    return i - (i % this.pageSize)
  }

  #split(child: NaiveNode, m: number): NaiveNode {
    const up: NaiveNode = {
      children: new Map(),
      parent: child.parent,
      key: child.key.slice(0, m),
      value: child.value.slice(0, m),
      lockRef: child.lockRef,
      lastAccess: child.lastAccess,
    }
    child.parent!.children.set(this.#childKey(up.key, 0), up)
    child.key = child.key.slice(m)
    child.value = child.value.slice(m)
    child.parent = up
    up.children.set(this.#childKey(child.key, 0), child)
    return up
  }

  matchPrefix(key: ArrayLike<number>): { length: number; indices: number[] } {
    const total = key.length - (key.length % this.pageSize)
    let node = this.root
    const values: number[][] = []
    let off = 0
    while (off < total) {
      const child = node.children.get(this.#childKey(key, off))
      if (child === undefined) break
      child.lastAccess = ++this.#clock
      const m = this.#matchLen(child.key, key, off)
      if (m < child.key.length) {
        const up = this.#split(child, m)
        values.push(up.value)
        off += m
        break
      }
      values.push(child.value)
      node = child
      off += m
    }
    return { length: off, indices: values.flat() }
  }

  insert(key: ArrayLike<number>, value: ArrayLike<number>): number {
    const total = key.length - (key.length % this.pageSize)
    let node = this.root
    let off = 0
    while (off < total) {
      const child = node.children.get(this.#childKey(key, off))
      if (child === undefined) break
      child.lastAccess = ++this.#clock
      const m = this.#matchLen(child.key, key, off)
      off += m
      if (m < child.key.length) {
        node = this.#split(child, m)
        break
      }
      node = child
    }
    const prefix = off
    if (off < total) {
      const leaf: NaiveNode = {
        children: new Map(),
        parent: node,
        key: Array.prototype.slice.call(key, off, total),
        value: Array.prototype.slice.call(value, off, total),
        lockRef: 0,
        lastAccess: ++this.#clock,
      }
      node.children.set(this.#childKey(key, off), leaf)
      this.evictable += total - off
    }
    return prefix
  }

  evict(numTokens: number): number {
    // Collect evictable leaves and heapify on every call, as upstream does.
    const leaves: NaiveNode[] = []
    const stack: NaiveNode[] = [this.root]
    while (stack.length > 0) {
      const n = stack.pop()!
      if (n.children.size === 0 && n.lockRef === 0) leaves.push(n)
      for (const c of n.children.values()) stack.push(c)
    }
    leaves.sort((a, b) => a.lastAccess - b.lastAccess)
    let evicted = 0
    let i = 0
    while (evicted < numTokens && i < leaves.length) {
      const x = leaves[i++]!
      const p = x.parent!
      p.children.delete(this.#childKey(x.key, 0))
      evicted += x.key.length
      this.evictable -= x.key.length
      if (p !== this.root && p.children.size === 0 && p.lockRef === 0) {
        // Cascade: insert the parent into the sorted remainder.
        let j = i
        while (j < leaves.length && leaves[j]!.lastAccess <= p.lastAccess) j++
        leaves.splice(j, 0, p)
      }
    }
    return evicted
  }
}
