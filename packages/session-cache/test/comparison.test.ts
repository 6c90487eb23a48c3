import type { NodeHandle } from '@kvc/radix-cache'
import { describe, expect, it } from 'vitest'
import { type EvictionEvent, SessionCache } from '../src/index.js'
import { agenticWorkload, checkSessionInvariants } from '../src/testing/index.js'

// The same scripted multi-session workload under memory pressure, run with the legacy session
// granularity and with block-level retention (leaf and page eviction), turn by turn as a serving
// engine drives it, with every eviction checked as it happens.
const PS = 16
const CHUNK = 256
const workload = agenticWorkload({
  sessions: 12,
  turns: 8,
  systemTokens: 256,
  firstTokens: [500, 1500],
  appendTokens: [100, 400],
  outputTokens: [50, 200],
  seed: 11,
})
const workingSet = workload.reduce((s, t) => s + t.append.length + t.output.length, 0)
const POOL = Math.floor((workingSet * 0.6) / PS) * PS

interface ReturnAfterEviction {
  committed: number
  alignedResident: number
  cached: number
  reprefill: number
  evictedSince: number
  tailFreed: number
}

/** Longest unlocked node: any of them can become the last leaf an eviction removes (cascade). */
function maxUnlockedNode(sc: SessionCache): number {
  let max = 0
  const cache = sc.cache
  for (const ns of cache.namespaces()) {
    const stack: NodeHandle[] = [cache.rootNode(ns)!]
    while (stack.length > 0) {
      for (const c of cache.childrenOf(stack.pop()!)) {
        const info = cache.nodeInfo(c)
        if (info.lockRef === 0 && info.tokens.length > max) max = info.tokens.length
        stack.push(c)
      }
    }
  }
  return max
}

function run(
  granularity: 'block' | 'session',
  evictGranularity: 'leaf' | 'page',
  idleTtl?: number,
  pool = POOL,
) {
  const events: EvictionEvent[] = []
  let clock = 0
  const sc = new SessionCache({
    granularity,
    pageSize: PS,
    poolSize: pool,
    evictGranularity,
    now: () => clock,
    onEviction: (e) => {
      events.push(e)
    },
  })
  // Every tree eviction: never more than asked, rounded up to a leaf boundary (or to a page).
  const evict = sc.cache.evict.bind(sc.cache)
  const treeEvictions: { asked: number; freed: number }[] = []
  sc.cache.evict = (n: number) => {
    const evictable = sc.cache.evictableSize()
    const leaf = maxUnlockedNode(sc)
    const res = evict(n)
    if (evictGranularity === 'page') {
      expect(res.evictedTokens).toBe(Math.min(Math.ceil(n / PS) * PS, evictable))
    } else {
      expect(res.evictedTokens).toBeLessThan(Math.max(n, 1) + leaf)
    }
    treeEvictions.push({ asked: n, freed: res.evictedTokens })
    return res
  }
  const histories = new Map<string, Uint32Array>()
  const committed = new Map<string, number>()
  const evictedAt = new Map<string, number>() // tree-evicted tokens counter when the session went
  const tailAtEviction = new Map<string, number>()
  const returns: ReturnAfterEviction[] = []
  let treeFreed = 0
  let rid = 0
  for (const w of workload) {
    clock++
    const sid = `s${w.session}`
    const held = new Map(sc.listSessionStatuses().map((s) => [s.sessionId, s.heldTokens]))
    const nEvents = events.length
    const treeFreedBefore = treeFreed
    if (idleTtl !== undefined) sc.evictIdleSessions({ idleMs: idleTtl })
    const prev = histories.get(sid)
    const returning = prev !== undefined && !sc.hasSession(sid)
    if (!sc.hasSession(sid)) sc.openSession(sid)
    const prompt = new Uint32Array((prev?.length ?? 0) + w.append.length)
    if (prev !== undefined) prompt.set(prev)
    prompt.set(w.append, prev?.length ?? 0)
    let alignedResident = 0
    if (returning) {
      const c = committed.get(sid)!
      alignedResident = sc.cache.matchPrefix(prompt.subarray(0, c - (c % PS)), { readOnly: true }).length
    }
    const req = sc.createRequest({ rid: `r${rid++}`, sessionId: sid, inputIds: prompt })
    const m = sc.matchPrefix(req)
    if (returning) {
      const c = committed.get(sid)!
      returns.push({
        committed: c,
        alignedResident,
        cached: m.length,
        reprefill: c - m.length,
        evictedSince: treeFreed - evictedAt.get(sid)!,
        tailFreed: tailAtEviction.get(sid) ?? 0,
      })
    }
    while (req.kvCommittedLen < prompt.length) {
      sc.prefill(req, Math.min(CHUNK, prompt.length - req.kvCommittedLen))
      sc.cacheUnfinishedReq(req, { chunked: req.kvCommittedLen < prompt.length })
    }
    for (const tok of w.output) sc.decode(req, tok)
    committed.set(sid, req.kvCommittedLen)
    histories.set(sid, req.tokenIds.slice())
    sc.cacheFinishedReq(req)
    // Note when sessions went (released under pressure or by TTL during this turn).
    for (const e of events.slice(nEvents)) {
      if (e.kind === 'tree') treeFreed += e.freedTokens
      if (e.kind === 'session') {
        // Session granularity: the eviction frees exactly the slot's whole tail, at once.
        expect(e.freedTokens).toBe(held.get(e.sessionId!))
        tailAtEviction.set(e.sessionId!, e.freedTokens)
      }
    }
    for (const s of held.keys()) if (!sc.hasSession(s) && !evictedAt.has(s)) evictedAt.set(s, treeFreedBefore)
    for (const s of [...evictedAt.keys()]) if (sc.hasSession(s) && s === sid) evictedAt.delete(s)
    checkSessionInvariants(sc)
  }
  return { sc, events, treeEvictions, returns }
}

describe('session granularity vs block-level retention on one workload', () => {
  const legacy = run('session', 'leaf')
  const blockLeaf = run('block', 'leaf')
  const blockPage = run('block', 'page')

  it('session granularity: the largest single eviction frees a whole session tail', () => {
    const biggest = legacy.events.reduce((a, b) => (b.freedTokens > a.freedTokens ? b : a))
    expect(biggest.kind).toBe('session')
    expect(biggest.freedTokens).toBeGreaterThan(40 * PS)
    // ... and the session's next turn finds none of that tail in the tree.
    const back = legacy.returns.filter((r) => r.tailFreed > 0)
    expect(back.length).toBeGreaterThan(0)
    for (const r of back) expect(r.cached).toBeLessThanOrEqual(r.committed - r.tailFreed + PS)
  })

  it('block level: no eviction frees more than asked, rounded up to a leaf (leaf) or a page (page)', () => {
    // (checked on every call inside run; here: the sizes seen)
    expect(blockLeaf.treeEvictions.length).toBeGreaterThan(10)
    expect(blockPage.treeEvictions.length).toBeGreaterThan(10)
    for (const e of blockPage.treeEvictions) expect(e.freed).toBeLessThanOrEqual(Math.ceil(e.asked / PS) * PS)
    expect(blockPage.events.every((e) => e.kind === 'tree')).toBe(true)
    const maxPage = Math.max(...blockPage.events.map((e) => e.freedTokens))
    const maxLegacy = Math.max(...legacy.events.map((e) => e.freedTokens))
    expect(maxPage).toBeLessThanOrEqual(CHUNK)
    expect(maxLegacy).toBeGreaterThan(4 * maxPage)
  })

  it('block level: the next turn of an evicted session re-prefills only its lost pages', () => {
    for (const { returns } of [blockLeaf, blockPage]) {
      expect(returns.length).toBeGreaterThan(0)
      // Some came back having lost part of their KV, not all of it: block-level shedding.
      const partial = returns.filter((r) => r.alignedResident > 0 && r.alignedResident < r.committed - PS)
      expect(partial.length).toBeGreaterThan(0)
      for (const r of returns) {
        const aligned = r.committed - (r.committed % PS)
        // It reuses exactly what the tree still holds of its committed prefix ...
        expect(r.cached).toBe(r.alignedResident)
        // ... so it recomputes the lost pages plus the partial last page, nothing more,
        expect(r.reprefill).toBe(aligned - r.alignedResident + (r.committed - aligned))
        // and the lost pages are at most what the tree evicted since the session went.
        expect(aligned - r.alignedResident).toBeLessThanOrEqual(r.evictedSince)
      }
    }
  })

  it('with TTL reaping, a returning session re-prefills far less at block level', () => {
    const ttl = 6
    const pool = Math.floor((workingSet * 0.9) / PS) * PS
    const a = run('session', 'page', ttl, pool)
    const b = run('block', 'page', ttl, pool)
    const sum = (xs: ReturnAfterEviction[]) => xs.reduce((s, r) => s + r.reprefill, 0)
    expect(a.returns.length).toBeGreaterThan(5)
    expect(b.returns.length).toBe(a.returns.length)
    expect(sum(b.returns)).toBeLessThan(sum(a.returns) / 4)
  })
})
