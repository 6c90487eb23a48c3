interface Node {
  edge: number[]
  readonly children: Map<number, Node>
  /** tenant → last access time (ms). Insertion order gives "the first tenant found". */
  readonly tenants: Map<string, number>
  parent: Node | undefined
}

function newNode(edge: number[], parent: Node | undefined): Node {
  return { edge, children: new Map(), tenants: new Map(), parent }
}

/**
 * The approximate prefix tree of SGLang's `cache_aware` router
 * (`docs/design/peers.md#sglang-cache-aware-router`), over
 * sequences of numbers (token ids, character codes, or block-key words) instead of characters:
 * one tree shared by all workers ("tenants"), built from the router's own decisions, each node
 * remembering when each tenant last used it; a per-tenant size; and LRU eviction of a tenant's
 * leaves until its size is at most `maxSize`.
 *
 * @example
 * ```ts
 * import { ApproxPrefixTree } from '@kvc/kvc-router'
 * const t = new ApproxPrefixTree()
 * t.insert([1, 2, 3, 4], 'w0', 0)
 * t.prefixMatch([1, 2, 9]) // { matched: 2, tenant: 'w0' }
 * t.tenantSize('w0') // 4
 * ```
 */
export class ApproxPrefixTree {
  readonly #root: Node = newNode([], undefined)
  readonly #sizes = new Map<string, number>()

  /**
   * Adds `key` to the tree for `tenant` (or refreshes its access time along the path).
   *
   * @example
   * ```ts
   * import { ApproxPrefixTree } from '@kvc/kvc-router'
   * const t = new ApproxPrefixTree()
   * t.insert([5, 6], 'a', 1)
   * t.insert([5, 7], 'b', 2)
   * t.tenantSize('b') // 2
   * ```
   */
  insert(key: ArrayLike<number>, tenant: string, now: number): void {
    if (!this.#sizes.has(tenant)) this.#sizes.set(tenant, 0)
    let node = this.#root
    node.tenants.set(tenant, now)
    let i = 0
    const n = key.length
    while (i < n) {
      const child = node.children.get(key[i]!)
      if (child === undefined) {
        const edge: number[] = []
        for (let j = i; j < n; j++) edge.push(key[j]!)
        const leaf = newNode(edge, node)
        node.children.set(key[i]!, leaf)
        leaf.tenants.set(tenant, now)
        this.#sizes.set(tenant, this.#sizes.get(tenant)! + edge.length)
        return
      }
      const e = child.edge
      let k = 0
      while (k < e.length && i + k < n && e[k] === key[i + k]) k++
      let next = child
      if (k < e.length) next = this.#split(child, k)
      if (!next.tenants.has(tenant)) this.#sizes.set(tenant, this.#sizes.get(tenant)! + next.edge.length)
      next.tenants.set(tenant, now)
      node = next
      i += k
    }
  }

  /**
   * The deepest match of `key` and a tenant present there (the first one recorded at that node),
   * `undefined` when nothing matches.
   *
   * @example
   * ```ts
   * import { ApproxPrefixTree } from '@kvc/kvc-router'
   * new ApproxPrefixTree().prefixMatch([1]) // { matched: 0, tenant: undefined }
   * ```
   */
  prefixMatch(key: ArrayLike<number>): { matched: number; tenant: string | undefined } {
    let node = this.#root
    let i = 0
    const n = key.length
    while (i < n) {
      const child = node.children.get(key[i]!)
      if (child === undefined) break
      const e = child.edge
      let k = 0
      while (k < e.length && i + k < n && e[k] === key[i + k]) k++
      i += k
      node = child
      if (k < e.length) break
    }
    let tenant: string | undefined
    for (const t of node.tenants.keys()) {
      tenant = t
      break
    }
    return { matched: node === this.#root ? 0 : i, tenant }
  }

  /**
   * Tokens (characters) the tree holds for a tenant (0 if unknown).
   *
   * @example
   * ```ts
   * import { ApproxPrefixTree } from '@kvc/kvc-router'
   * new ApproxPrefixTree().tenantSize('x') // 0
   * ```
   */
  tenantSize(tenant: string): number {
    return this.#sizes.get(tenant) ?? 0
  }

  /**
   * Of `tenants`, the one with the fewest tokens in the tree (first on ties).
   *
   * @example
   * ```ts
   * import { ApproxPrefixTree } from '@kvc/kvc-router'
   * const t = new ApproxPrefixTree()
   * t.insert([1, 2, 3], 'a', 0)
   * t.smallestTenant(['a', 'b']) // 'b'
   * ```
   */
  smallestTenant(tenants: readonly string[]): string | undefined {
    let best: string | undefined
    let bestSize = Number.POSITIVE_INFINITY
    for (const t of tenants) {
      const s = this.tenantSize(t)
      if (s < bestSize) {
        best = t
        bestSize = s
      }
    }
    return best
  }

  /**
   * Removes a tenant everywhere (a worker that left).
   *
   * @example
   * ```ts
   * import { ApproxPrefixTree } from '@kvc/kvc-router'
   * const t = new ApproxPrefixTree()
   * t.insert([1], 'a', 0)
   * t.removeTenant('a')
   * t.prefixMatch([1]).tenant // undefined
   * ```
   */
  removeTenant(tenant: string): void {
    const stack: Node[] = [this.#root]
    while (stack.length > 0) {
      const node = stack.pop()!
      node.tenants.delete(tenant)
      for (const c of node.children.values()) stack.push(c)
    }
    this.#prune(this.#root)
    this.#sizes.delete(tenant)
  }

  /**
   * Evicts each tenant's least recently used leaves until its size is at most `maxSize`.
   * O(tree) per evicted leaf: it runs on a timer, as upstream's background thread does.
   *
   * @example
   * ```ts
   * import { ApproxPrefixTree } from '@kvc/kvc-router'
   * const t = new ApproxPrefixTree()
   * t.insert([1, 2, 3, 4], 'a', 0)
   * t.insert([9, 9], 'a', 5)
   * t.evictBySize(2)
   * t.prefixMatch([9, 9]).matched // 2: the older branch went first
   * ```
   */
  evictBySize(maxSize: number): void {
    for (const tenant of [...this.#sizes.keys()]) {
      while (this.tenantSize(tenant) > maxSize) {
        const leaf = this.#oldestLeaf(tenant)
        if (leaf === undefined) break
        leaf.tenants.delete(tenant)
        this.#sizes.set(tenant, this.tenantSize(tenant) - leaf.edge.length)
        if (leaf.tenants.size === 0 && leaf.children.size === 0 && leaf.parent !== undefined) {
          leaf.parent.children.delete(leaf.edge[0]!)
        }
      }
    }
  }

  #oldestLeaf(tenant: string): Node | undefined {
    let best: Node | undefined
    let bestT = Number.POSITIVE_INFINITY
    const stack: Node[] = [...this.#root.children.values()]
    while (stack.length > 0) {
      const node = stack.pop()!
      const t = node.tenants.get(tenant)
      if (t === undefined) continue
      let isLeaf = true
      for (const c of node.children.values()) {
        if (c.tenants.has(tenant)) {
          isLeaf = false
          stack.push(c)
        }
      }
      if (isLeaf && t < bestT) {
        best = node
        bestT = t
      }
    }
    return best
  }

  #split(child: Node, at: number): Node {
    const parent = child.parent!
    const head = newNode(child.edge.slice(0, at), parent)
    for (const [t, time] of child.tenants) head.tenants.set(t, time)
    parent.children.set(head.edge[0]!, head)
    child.edge = child.edge.slice(at)
    child.parent = head
    head.children.set(child.edge[0]!, child)
    return head
  }

  #prune(node: Node): void {
    for (const [k, c] of node.children) {
      this.#prune(c)
      if (c.tenants.size === 0 && c.children.size === 0) node.children.delete(k)
    }
  }
}
