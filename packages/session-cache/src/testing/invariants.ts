import type { NodeHandle } from '@kvc/radix-cache'
import { checkRadixInvariants } from '@kvc/radix-cache/testing'
import type { SessionCache } from '../session/sessionCache.js'

/**
 * Check a {@link SessionCache} against its invariants, through its public API only:
 *
 * - the radix tree's own invariants (`checkRadixInvariants`);
 * - the pool accounting identity `free + evictable + protected + requestOwned + sessionHeld ==
 *   poolSize`;
 * - locks (I5): every node's `lockRef` equals the number of lock holders at or below it — one per
 *   open session with a `lastNode`, one per request in flight — so no lock is leaked or missing;
 * - block mode: a session's `tokensUnder(lastNode)` is its committed length rounded down to a page
 *   (I2's quantity), and it is locked;
 * - every request in flight: `cacheProtectedLen` is page-aligned, `protected <= committed <=
 *   allocated`, its lock covers exactly `[0, cacheProtectedLen)` (unless lent by a legacy slot),
 *   and its request-owned pages are neither tree pages nor another request's pages (the ownership
 *   rule); with a `PagedAllocator`, none of its slots is free.
 *
 * Throws an `Error` listing every violation.
 *
 * @example
 * ```ts
 * import { SessionCache } from '@kvc/session-cache'
 * import { checkSessionInvariants } from '@kvc/session-cache/testing'
 * const sc = new SessionCache({ poolSize: 256, pageSize: 4 })
 * sc.openSession('s')
 * checkSessionInvariants(sc) // throws if anything is inconsistent
 * ```
 */
export function checkSessionInvariants(sc: SessionCache): void {
  const problems: string[] = []
  try {
    checkRadixInvariants(sc.cache)
  } catch (e) {
    problems.push((e as Error).message)
  }
  const cache = sc.cache
  const ps = sc.pageSize
  const acc = sc.poolAccounting()
  if (!acc.balanced) {
    problems.push(
      `pool accounting: free ${acc.free} + evictable ${acc.evictable} + protected ${acc.protected} + requestOwned ${acc.requestOwned} + sessionHeld ${acc.sessionHeld} != ${acc.poolSize}`,
    )
  }

  // Expected lock counts: each holder adds one to its node and every ancestor (roots excluded).
  const expected = new Map<NodeHandle, number>()
  const addHolder = (node: NodeHandle, who: string): void => {
    if (!cache.isValid(node)) {
      problems.push(`${who} holds a lock on a node that is gone (${node})`)
      return
    }
    let n: NodeHandle | undefined = node
    while (n !== undefined) {
      const info = cache.nodeInfo(n)
      if (info.isRoot) break
      expected.set(n, (expected.get(n) ?? 0) + 1)
      n = info.parent
    }
  }
  for (const st of sc.listSessionStatuses()) {
    const slot = sc.getSessionSlot(st.sessionId)!
    if (slot.lastNode === undefined) continue
    addHolder(slot.lastNode, `session ${slot.sessionId}`)
    if (sc.granularity === 'block' && cache.isValid(slot.lastNode)) {
      const want = slot.committedLen - (slot.committedLen % ps)
      const got = cache.tokensUnder(slot.lastNode)
      if (got !== want) problems.push(`session ${slot.sessionId}: tokensUnder(lastNode) ${got} != ${want}`)
      if (st.residentTokens !== got)
        problems.push(`session ${slot.sessionId}: status residentTokens ${st.residentTokens}`)
    }
  }

  // Tree pages (to check that request-owned pages are disjoint from them).
  const treePages = new Set<number>()
  const allNodes: NodeHandle[] = []
  for (const ns of cache.namespaces()) {
    const root = cache.rootNode(ns)
    if (root === undefined) continue
    const stack: NodeHandle[] = [root]
    while (stack.length > 0) {
      const n = stack.pop()!
      for (const c of cache.childrenOf(n)) {
        allNodes.push(c)
        const v = cache.nodeInfo(c).values
        if (v !== undefined) for (let i = 0; i < v.length; i += ps) treePages.add(Math.floor(v[i]! / ps))
        stack.push(c)
      }
    }
  }

  const pool = sc.pool as { isFree?: (i: number) => boolean }
  const ownedPages = new Map<number, string>()
  for (const r of sc.inFlightRequests()) {
    const who = `request ${r.rid}`
    const p = r.cacheProtectedLen
    if (p % ps !== 0) problems.push(`${who}: cacheProtectedLen ${p} is not page-aligned`)
    if (!(p <= r.kvCommittedLen && r.kvCommittedLen <= r.kvAllocatedLen)) {
      problems.push(
        `${who}: protected ${p} <= committed ${r.kvCommittedLen} <= allocated ${r.kvAllocatedLen} broken`,
      )
    }
    if (r.lastNode === undefined) {
      problems.push(`${who}: running without a lock`)
      continue
    }
    addHolder(r.lastNode, who)
    if (cache.isValid(r.lastNode) && cache.tokensUnder(r.lastNode) !== p) {
      problems.push(`${who}: lock covers ${cache.tokensUnder(r.lastNode)} tokens, cacheProtectedLen ${p}`)
    }
    const row = r.reqToToken
    if (typeof pool.isFree === 'function') {
      for (let i = 0; i < r.kvAllocatedLen; i++) {
        if (pool.isFree(row[i]!)) {
          problems.push(`${who}: slot ${row[i]} of position ${i} is free`)
          break
        }
      }
    }
    for (let i = p; i < r.kvAllocatedLen; i++) {
      const page = Math.floor(row[i]! / ps)
      if (i > p && Math.floor(row[i - 1]! / ps) === page) continue // checked once per page
      if (treePages.has(page)) problems.push(`${who}: owned position ${i} sits in tree page ${page}`)
      const other = ownedPages.get(page)
      if (other !== undefined && other !== who) problems.push(`${who}: page ${page} also owned by ${other}`)
      ownedPages.set(page, who)
    }
  }

  for (const n of allNodes) {
    const got = cache.nodeInfo(n).lockRef
    const want = expected.get(n) ?? 0
    if (got !== want) problems.push(`node ${n}: lockRef ${got}, holders ${want}`)
  }
  if (problems.length > 0) throw new Error(`session cache invariants violated:\n- ${problems.join('\n- ')}`)
}
