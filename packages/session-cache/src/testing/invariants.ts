import type { NodeHandle } from '@kvc/radix-cache'
import { checkRadixInvariants } from '@kvc/radix-cache/testing'
import type { SessionCache } from '../session/sessionCache.js'

/**
 * Check a {@link SessionCache} against its invariants, through its public API only:
 *
 * - the radix tree's own invariants (`checkRadixInvariants`);
 * - the pool accounting identity `free + evictable + protected + requestOwned + sessionHeld ==
 *   poolSize` (and, with a host tier, `hostFree + hostUsed == hostCapacity`);
 * - locks (I5): every node's `lockRef` equals the number of lock holders at or below it — one per
 *   open session with a `lastNode` that is not demoted, one per request in flight — and every
 *   node's host reference count equals the number of demoted sessions at or below it, so no lock
 *   or host reference is leaked or missing;
 * - block mode: a session's `tokensUnder(lastNode)` is its committed length rounded down to a page
 *   (I2's quantity), and `residentTokens + hostResidentTokens == retainedTokens` equals it;
 * - I6 (host tier): a held session's committed prefix is retained whole — on the device under its
 *   lock (no host-only part), or, demoted, with every page on the host under its host reference;
 * - every request in flight: `cacheProtectedLen` is page-aligned, `protected <= committed <=
 *   allocated`, its lock covers exactly `[0, cacheProtectedLen)` (unless lent by a legacy slot),
 *   and its request-owned pages are neither tree pages nor another request's pages (the ownership
 *   rule); its locked prefix is on the device; with a `PagedAllocator`, none of its slots is free;
 * - KV rows: every request in flight has a row of its own, no free row of the row pool is a
 *   request's, and (block mode) the pool has handed out one row per request in flight;
 * - the walks that start at a lock (block mode): a request's locked node's path is its tokens
 *   `[0, cacheProtectedLen)`, and a held session's node's path is its committed tokens rounded down
 *   to a page, token for token.
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
  // KV rows (SGLang's req_to_token_pool): each request in flight has its own, none is also free.
  problems.push(...sc._checkRows())
  const cache = sc.cache
  const ps = sc.pageSize
  const acc = sc.poolAccounting()
  if (!acc.balanced) {
    problems.push(
      `pool accounting: free ${acc.free} + evictable ${acc.evictable} + protected ${acc.protected} + requestOwned ${acc.requestOwned} + sessionHeld ${acc.sessionHeld} != ${acc.poolSize}, or host free ${acc.hostFree} + used ${acc.hostUsed} != ${acc.hostCapacity}`,
    )
  }

  // Expected lock (and host reference) counts: each holder adds one to its node and every
  // ancestor (roots excluded).
  const expected = new Map<NodeHandle, number>()
  const expectedHost = new Map<NodeHandle, number>()
  const addHolder = (node: NodeHandle, who: string, into: Map<NodeHandle, number>): void => {
    if (!cache.isValid(node)) {
      problems.push(`${who} holds a lock on a node that is gone (${node})`)
      return
    }
    let n: NodeHandle | undefined = node
    while (n !== undefined) {
      const info = cache.nodeInfo(n)
      if (info.isRoot) break
      into.set(n, (into.get(n) ?? 0) + 1)
      n = info.parent
    }
  }
  const tiered = cache.hostTier !== undefined
  // The session cache starts walks at these nodes (`_matchPrefixFrom`, `_insertFrom`), vouching
  // that their paths are the holder's tokens: check it token for token.
  const checkPath = (node: NodeHandle, tokens: Uint32Array, who: string): void => {
    if (!cache.isValid(node)) return
    const parts: Uint32Array[] = []
    for (let n: NodeHandle | undefined = node; n !== undefined; ) {
      const info = cache.nodeInfo(n)
      if (info.isRoot) break
      parts.push(info.tokens)
      n = info.parent
    }
    let off = 0
    for (let i = parts.length - 1; i >= 0; i--) {
      const t = parts[i]!
      for (let j = 0; j < t.length; j++) {
        if (tokens[off + j] !== t[j]) {
          problems.push(`${who}: its node's path differs from its tokens at position ${off + j}`)
          return
        }
      }
      off += t.length
    }
  }
  // Idle sessions' locks per node, and their parked tails: what `releasableTokens()` must count.
  const expectedIdle = new Map<NodeHandle, number>()
  let idleHeld = 0
  for (const st of sc.listSessionStatuses()) {
    const slot = sc.getSessionSlot(st.sessionId)!
    const who = `session ${slot.sessionId}`
    if (st.demoted !== slot.demoted) problems.push(`${who}: status and slot disagree on demotion`)
    if (slot.demoted && (!tiered || sc.granularity !== 'block' || slot.lastNode === undefined))
      problems.push(`${who}: demoted without a host tier, in session mode or without a node`)
    if (st.residentTokens + st.hostResidentTokens !== st.retainedTokens)
      problems.push(
        `${who}: resident ${st.residentTokens} + host ${st.hostResidentTokens} != retained ${st.retainedTokens}`,
      )
    if (!st.active && !st.demoted) idleHeld += st.heldTokens
    if (slot.lastNode === undefined) continue
    addHolder(slot.lastNode, who, slot.demoted ? expectedHost : expected)
    if (!st.active && !st.demoted) addHolder(slot.lastNode, who, expectedIdle)
    if (sc.granularity === 'block' && cache.isValid(slot.lastNode)) {
      const want = slot.committedLen - (slot.committedLen % ps)
      const got = cache.tokensUnder(slot.lastNode)
      if (got !== want) problems.push(`${who}: tokensUnder(lastNode) ${got} != ${want}`)
      if (st.retainedTokens !== got) problems.push(`${who}: status retainedTokens ${st.retainedTokens}`)
      checkPath(slot.lastNode, sc.committedTokens(slot.sessionId)!, who)
      // I6: the committed prefix is retained whole, on the device (locked) or on the host (demoted).
      const res = cache.residencyOf(slot.lastNode)
      if (!slot.demoted && res.hostTokens !== 0)
        problems.push(`I6: ${who} holds a device lock but ${res.hostTokens} of its tokens are host-only`)
      if (slot.demoted) {
        for (let n: NodeHandle | undefined = slot.lastNode; n !== undefined; ) {
          const info = cache.nodeInfo(n)
          if (info.isRoot) break
          if (!info.onHost) problems.push(`I6: demoted ${who} has a page off the host (node ${n})`)
          n = info.parent
        }
      }
      if (st.residentTokens !== res.deviceTokens)
        problems.push(
          `${who}: status residentTokens ${st.residentTokens} != ${res.deviceTokens} on the device`,
        )
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
    addHolder(r.lastNode, who, expected)
    if (cache.isValid(r.lastNode) && cache.tokensUnder(r.lastNode) !== p) {
      problems.push(`${who}: lock covers ${cache.tokensUnder(r.lastNode)} tokens, cacheProtectedLen ${p}`)
    }
    if (sc.granularity === 'block') checkPath(r.lastNode, r.tokenIds, who)
    if (cache.isValid(r.lastNode) && cache.residencyOf(r.lastNode).hostTokens !== 0)
      problems.push(`${who}: part of its locked prefix is host-only`)
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

  let idleOnly = 0
  for (const n of allNodes) {
    const info = cache.nodeInfo(n)
    const want = expected.get(n) ?? 0
    const idle = expectedIdle.get(n) ?? 0
    if (idle > 0 && idle === want) idleOnly += info.tokens.length
    if (info.lockRef !== want) problems.push(`node ${n}: lockRef ${info.lockRef}, holders ${want}`)
    const wantHost = expectedHost.get(n) ?? 0
    if (info.hostRef !== wantHost)
      problems.push(`node ${n}: host references ${info.hostRef}, demoted holders ${wantHost}`)
  }
  // Releasable memory: the running count, the walk over the idle sessions' paths (`idleMs: 0`
  // counts every idle session) and the brute-force count above agree.
  const releasable = sc.releasableTokens()
  if (releasable !== idleHeld + idleOnly)
    problems.push(
      `releasableTokens() ${releasable} != parked ${idleHeld} + idle-only tree tokens ${idleOnly}`,
    )
  const walked = sc.releasableTokens({ idleMs: 0 })
  if (walked !== releasable) problems.push(`releasableTokens({ idleMs: 0 }) ${walked} != ${releasable}`)
  // Each idle session alone: its parked tail and the nodes on its path no other lock holds.
  for (const st of sc.listSessionStatuses()) {
    const slot = sc.getSessionSlot(st.sessionId)!
    let want = 0
    if (!st.active && !st.demoted) {
      want = st.heldTokens
      for (let n = slot.lastNode; n !== undefined && cache.isValid(n); ) {
        const info = cache.nodeInfo(n)
        if (info.isRoot || (expected.get(n) ?? 0) > 1) break
        want += info.tokens.length
        n = info.parent
      }
    }
    const got = sc.releasableTokens({ sessionId: st.sessionId })
    if (got !== want) problems.push(`releasableTokens({ sessionId: ${st.sessionId} }) ${got} != ${want}`)
  }
  if (problems.length > 0) throw new Error(`session cache invariants violated:\n- ${problems.join('\n- ')}`)
}
