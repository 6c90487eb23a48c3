import type { HostTier } from '../tier/hostTier.js'
import { DEV, HOST, type NodeStore } from './nodeStore.js'

/**
 * Check a cache's nodes, heaps and size counters against each other (the core of
 * `RadixCache._checkInternals`, used by the invariant checker in `/testing`). Returns a list of
 * problems; empty when consistent.
 * @internal
 */
export function checkInternals(st: NodeStore, host: HostTier | undefined): string[] {
  const problems: string[] = []
  let leaves = 0
  let evictable = 0
  let prot = 0
  let hostSize = 0
  let hostOnly = 0
  let hostEvictable = 0
  let hostLeaves = 0
  let pinned = 0
  let idleOnly = 0
  const tiered = host !== undefined
  for (let s = 0; s < st.nextSlot; s++) {
    if (!st.isLive(s) || st.isRoot[s] === 1) continue
    const len = st.keys[s]!.length
    const t = st.tier[s]!
    const dev = (t & DEV) !== 0
    const p = st.parent[s]!
    if (t === 0 || (!tiered && t !== DEV)) problems.push(`node ${s}: tier bits ${t}`)
    if (dev && st.isRoot[p] === 0 && (st.tier[p]! & DEV) === 0)
      problems.push(`node ${s} is on the device under host-only parent ${p}`)
    if (dev) {
      if (st.lockRef[s] === 0) evictable += len
      else prot += len
    }
    if (len === 0 || len % st.pageSize !== 0) problems.push(`node ${s} has length ${len}`)
    const lock = st.lockRef[s]!
    const idle = st.idleRef[s]!
    if (idle < 0 || idle > lock) problems.push(`node ${s}: ${idle} idle marks on ${lock} locks`)
    if (idle > 0 && idle === lock) idleOnly += len
    if (st.isRoot[p] === 0 && (st.idleRef[p]! < idle || st.lockRef[p]! - st.idleRef[p]! < lock - idle))
      problems.push(`node ${s}: idle or busy locks above its parent's`)
    const isLeaf = dev && st.lockRef[s] === 0 && st.devChildren[s] === 0
    if (isLeaf) leaves++
    if (isLeaf !== st.heap.has(s)) problems.push(`node ${s}: evictable leaf ${isLeaf}, in heap ${!isLeaf}`)
    if (st.pathLen[s] !== st.pathLen[p]! + len) problems.push(`node ${s}: pathLen mismatch`)
    if (st.trackValues && dev && st.values[s]?.length !== len) problems.push(`node ${s}: values length`)
    if (!dev && st.values[s] !== undefined) problems.push(`node ${s}: host-only node keeps device values`)
    let count = 0
    let devCount = 0
    const map = st.children[s]
    if (map !== undefined)
      for (const h of map.values())
        for (let c = h; c !== -1; c = st.chainNext[c]!) {
          count++
          if ((st.tier[c]! & DEV) !== 0) devCount++
        }
    if (count !== st.childCount[s]) problems.push(`node ${s}: childCount ${st.childCount[s]} != ${count}`)
    if (devCount !== st.devChildren[s])
      problems.push(`node ${s}: device children ${st.devChildren[s]} != ${devCount}`)
    const pos = st.heap.positionOf(s)
    if (pos >= 0) {
      const par = (pos - 1) >> 1
      if (pos > 0 && st.heap.less(s, st.heap.at(par))) problems.push(`heap order broken at ${pos}`)
    }
    if (!tiered) continue
    const onHost = (t & HOST) !== 0
    const ref = host.hostRef[s]!
    if (onHost) hostSize += len
    if (onHost && !dev) hostOnly += len
    if (ref > 0) pinned++
    if (ref > 0 && !onHost) problems.push(`node ${s} is host-protected without a host copy`)
    if (st.isRoot[p] === 0 && host.hostRef[p]! < ref)
      problems.push(`node ${s}: host reference ${ref} above its parent's ${host.hostRef[p]}`)
    if (st.trackValues && onHost !== (host.hostValues[s]?.length === len))
      problems.push(`node ${s}: host values do not match its host copy`)
    const hostEv = onHost && !dev && st.lockRef[s] === 0 && ref === 0
    if (hostEv) hostEvictable += len
    if ((host.hostCounted[s] === 1) !== hostEv) problems.push(`node ${s}: host-evictable flag`)
    const hostLeaf = hostEv && count === 0
    if (hostLeaf) hostLeaves++
    if (hostLeaf !== host.heap.has(s))
      problems.push(`node ${s}: host leaf ${hostLeaf}, in host heap ${host.heap.has(s)}`)
    const hp = host.heap.positionOf(s)
    if (hp > 0 && host.heap.less(s, host.heap.at((hp - 1) >> 1)))
      problems.push(`host heap order broken at ${hp}`)
  }
  if (leaves !== st.heap.size) problems.push(`heap size ${st.heap.size} != evictable leaves ${leaves}`)
  if (evictable !== st.evictableTokens) problems.push(`evictableSize ${st.evictableTokens} != ${evictable}`)
  if (prot !== st.protectedTokens) problems.push(`protectedSize ${st.protectedTokens} != ${prot}`)
  if (idleOnly !== st.idleLockedTokens)
    problems.push(`idleLockedTokens ${st.idleLockedTokens} != ${idleOnly}`)
  if (tiered) {
    if (hostSize !== host.size) problems.push(`hostSize ${host.size} != ${hostSize}`)
    if (hostOnly !== host.hostOnly) problems.push(`hostOnlySize ${host.hostOnly} != ${hostOnly}`)
    if (hostEvictable !== host.evictable)
      problems.push(`hostEvictableSize ${host.evictable} != ${hostEvictable}`)
    if (hostLeaves !== host.heap.size)
      problems.push(`host heap size ${host.heap.size} != host leaves ${hostLeaves}`)
    if (pinned !== host.pinnedNodes) problems.push(`protected node count ${host.pinnedNodes} != ${pinned}`)
    if (hostSize > host.capacity) problems.push(`host holds ${hostSize} > capacity ${host.capacity}`)
  }
  return problems
}
