import type { RadixCache } from '../tree/radixCache.js'
import type { NodeHandle } from '../tree/types.js'

/**
 * Walk a {@link RadixCache} through its public inspection API and check its invariants:
 * `evictable + protected == total == Σ device node lengths`; every node length is a positive page
 * multiple; every locked node's parent is locked at least as often; `tokensUnder` equals the path
 * length; no two siblings share a first page; the internal eviction heap holds exactly the
 * evictable leaves, in heap order.
 *
 * With a host tier, also: every node is on the device, on the host or both; device residency is
 * closed under ancestors; `hostSize`, `hostOnlySize` and `hostEvictableSize` are the sums over
 * the nodes with a host copy, host-only, and host-only unlocked unprotected; a host-protected node
 * has a host copy and its parent is protected at least as often; the host holds at most its
 * capacity, and `hostAvailableSize + hostSize == hostCapacity` unless a shared host allocator is
 * fuller; the host heap holds exactly the host-evictable leaves. Throws an `Error` listing every
 * violation.
 *
 * @example
 * ```ts
 * import { RadixCache } from '@kvc/radix-cache'
 * import { checkRadixInvariants } from '@kvc/radix-cache/testing'
 * const cache = new RadixCache({ pageSize: 4, trackValues: false })
 * cache.insert([1, 2, 3, 4, 5, 6, 7, 8])
 * checkRadixInvariants(cache) // throws if anything is inconsistent
 * ```
 */
export function checkRadixInvariants(cache: RadixCache): void {
  const problems: string[] = [...cache._checkInternals()]
  let sum = 0
  let hostSum = 0
  let hostOnlySum = 0
  let hostEvictableSum = 0
  const ps = cache.pageSize
  for (const ns of cache.namespaces()) {
    const root = cache.rootNode(ns)
    if (root === undefined) continue
    const stack: NodeHandle[] = [root]
    while (stack.length > 0) {
      const n = stack.pop()!
      const info = cache.nodeInfo(n)
      const firstPages = new Set<string>()
      for (const c of cache.childrenOf(n)) {
        const ci = cache.nodeInfo(c)
        if (ci.onDevice) sum += ci.tokens.length
        if (ci.onHost) hostSum += ci.tokens.length
        if (ci.onHost && !ci.onDevice) {
          hostOnlySum += ci.tokens.length
          if (ci.lockRef === 0 && ci.hostRef === 0) hostEvictableSum += ci.tokens.length
        }
        if (!ci.onDevice && !ci.onHost) problems.push(`node ${c} is on no tier`)
        if (ci.onDevice && !info.isRoot && !info.onDevice)
          problems.push(`node ${c} is on the device under a host-only parent`)
        if (ci.hostRef > 0 && !ci.onHost) problems.push(`node ${c} is host-protected without a host copy`)
        if (!info.isRoot && info.hostRef < ci.hostRef)
          problems.push(`node ${c} host-protected ${ci.hostRef}x under parent protected ${info.hostRef}x`)
        if (cache.trackValues && ci.onHost !== (ci.hostValues?.length === ci.tokens.length))
          problems.push(`node ${c}: host values do not match its host copy`)
        if (ci.tokens.length === 0 || ci.tokens.length % ps !== 0) {
          problems.push(`node ${c}: length ${ci.tokens.length} is not a positive multiple of ${ps}`)
        }
        if (ci.lockRef > 0 && !info.isRoot && info.lockRef < ci.lockRef) {
          problems.push(`node ${c} locked ${ci.lockRef}x under parent locked ${info.lockRef}x`)
        }
        if (ci.pathLength !== info.pathLength + ci.tokens.length || cache.tokensUnder(c) !== ci.pathLength) {
          problems.push(`node ${c}: path length ${ci.pathLength} inconsistent`)
        }
        if (ci.extraKey !== ns) problems.push(`node ${c}: namespace ${ci.extraKey} under root of ${ns}`)
        if (cache.trackValues && ci.onDevice && ci.values?.length !== ci.tokens.length)
          problems.push(`node ${c}: values length`)
        if (!ci.onDevice && ci.values !== undefined)
          problems.push(`node ${c}: host-only node with device values`)
        const fp = Array.from(ci.tokens.subarray(0, ps)).join(',')
        if (firstPages.has(fp)) problems.push(`node ${n}: two children start with page [${fp}]`)
        firstPages.add(fp)
        stack.push(c)
      }
    }
  }
  if (sum !== cache.totalSize()) problems.push(`Σ node lengths ${sum} != totalSize ${cache.totalSize()}`)
  if (cache.evictableSize() + cache.protectedSize() !== cache.totalSize())
    problems.push('evictable + protected != total')
  if (cache.evictableSize() < 0 || cache.protectedSize() < 0) problems.push('negative size')
  if (hostSum !== cache.hostSize())
    problems.push(`Σ host node lengths ${hostSum} != hostSize ${cache.hostSize()}`)
  if (hostOnlySum !== cache.hostOnlySize())
    problems.push(`Σ host-only lengths ${hostOnlySum} != hostOnlySize ${cache.hostOnlySize()}`)
  if (hostEvictableSum !== cache.hostEvictableSize())
    problems.push(
      `Σ host-evictable lengths ${hostEvictableSum} != hostEvictableSize ${cache.hostEvictableSize()}`,
    )
  if (cache.hostSize() > cache.hostCapacity())
    problems.push(`host holds ${cache.hostSize()} > capacity ${cache.hostCapacity()}`)
  if (cache.hostAvailableSize() + cache.hostSize() > cache.hostCapacity())
    problems.push(`host available ${cache.hostAvailableSize()} + size ${cache.hostSize()} > capacity`)
  if (problems.length > 0) throw new Error(`radix cache invariants violated:\n- ${problems.join('\n- ')}`)
}

/**
 * Every cached page path of `cache` as `ns|t0,t1,...` (the format of
 * {@link RadixReferenceModel.pages}), with its lock count.
 *
 * @example
 * ```ts
 * import { RadixCache } from '@kvc/radix-cache'
 * import { cachedPages } from '@kvc/radix-cache/testing'
 * const cache = new RadixCache({ pageSize: 1, trackValues: false })
 * cache.insert([7, 8])
 * cachedPages(cache) // Map { '|7' => 0, '|7,8' => 0 }
 * ```
 */
export function cachedPages(cache: RadixCache): Map<string, number> {
  const out = new Map<string, number>()
  const ps = cache.pageSize
  for (const ns of cache.namespaces()) {
    const root = cache.rootNode(ns)
    if (root === undefined) continue
    const walk = (n: NodeHandle, prefix: number[]): void => {
      for (const c of cache.childrenOf(n)) {
        const info = cache.nodeInfo(c)
        const path = prefix.concat(Array.from(info.tokens))
        for (let p = prefix.length / ps + 1; p * ps <= path.length; p++) {
          out.set(`${ns}|${path.slice(0, p * ps).join(',')}`, info.lockRef)
        }
        walk(c, path)
      }
    }
    walk(root, [])
  }
  return out
}

/**
 * Every cached page path of `cache` as `ns|t0,t1,...` (the keys of {@link cachedPages}) with its
 * tiers, lock count and host-reference count: the real side of a two-tier model run.
 *
 * @example
 * ```ts
 * import { RadixCache } from '@kvc/radix-cache'
 * import { tieredPages } from '@kvc/radix-cache/testing'
 * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 8 } })
 * cache.insert([7])
 * cache.evict(1)
 * tieredPages(cache) // Map { '|7' => { dev: false, host: true, lock: 0, pin: 0 } }
 * ```
 */
export function tieredPages(
  cache: RadixCache,
): Map<string, { dev: boolean; host: boolean; lock: number; pin: number }> {
  const out = new Map<string, { dev: boolean; host: boolean; lock: number; pin: number }>()
  const ps = cache.pageSize
  for (const ns of cache.namespaces()) {
    const root = cache.rootNode(ns)
    if (root === undefined) continue
    const walk = (n: NodeHandle, prefix: number[]): void => {
      for (const c of cache.childrenOf(n)) {
        const info = cache.nodeInfo(c)
        const path = prefix.concat(Array.from(info.tokens))
        for (let p = prefix.length / ps + 1; p * ps <= path.length; p++) {
          out.set(`${ns}|${path.slice(0, p * ps).join(',')}`, {
            dev: info.onDevice,
            host: info.onHost,
            lock: info.lockRef,
            pin: info.hostRef,
          })
        }
        walk(c, path)
      }
    }
    walk(root, [])
  }
  return out
}
