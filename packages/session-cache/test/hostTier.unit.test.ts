import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
import { describe, expect, it } from 'vitest'
import { SessionCache, SessionCacheError } from '../src/index.js'
import { checkSessionInvariants } from '../src/testing/index.js'

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i)

/**
 * Page 4, a 64-slot device pool and a 64-slot host tier. Session `a` commits 23 tokens (20 in the
 * tree), session `b` 40; then 4 slots are free.
 */
function twoSessions(hostCapacity = 64) {
  let now = 0
  const sc = new SessionCache({
    poolSize: 64,
    pageSize: 4,
    now: () => now,
    hostTier: { capacity: hostCapacity, loadBackThreshold: 0 },
  })
  sc.openSession('a')
  const a1 = sc.createRequest({ rid: 'a1', sessionId: 'a', inputIds: range(1, 20) })
  sc.matchPrefix(a1)
  sc.prefill(a1, 20)
  sc.cacheUnfinishedReq(a1)
  for (const t of [21, 22, 23, 24]) sc.decode(a1, t)
  sc.cacheFinishedReq(a1) // 23 committed, 20 in the tree
  now = 1
  sc.openSession('b')
  const b1 = sc.createRequest({ rid: 'b1', sessionId: 'b', inputIds: range(100, 41) })
  sc.matchPrefix(b1)
  sc.prefill(b1, 41)
  sc.cacheFinishedReq(b1) // 41 committed, 40 in the tree
  now = 2
  checkSessionInvariants(sc)
  return { sc, a1, setNow: (t: number) => (now = t) }
}

describe('session-cache with a host tier', () => {
  it('pressure demotes the least recently used idle session instead of releasing it; its next turn loads back', () => {
    const { sc, a1, setNow } = twoSessions()
    expect(sc.pool.availableSize()).toBe(4)
    // A 24-token request needs 20 more slots: nothing is evictable, so `a` (LRU) is demoted: its
    // 20 tree tokens are copied to the host and leave the device.
    const x = sc.createRequest({ rid: 'x', inputIds: range(500, 24) })
    sc.matchPrefix(x)
    sc.prefill(x, 24)
    expect(sc.hasSession('a')).toBe(true)
    expect(sc.getSessionStatus('a')).toMatchObject({
      demoted: true,
      residentTokens: 0,
      hostResidentTokens: 20,
      retainedTokens: 20,
      committedTokens: 23,
    })
    expect(sc.getSessionSlot('a')?.demoted).toBe(true)
    expect(sc.stats()).toMatchObject({
      sessionsDemoted: 1,
      sessionsDemotedNow: 1,
      sessionsEvicted: 0,
      hostResidentTokens: 20,
    })
    expect(sc.releasableTokens({ sessionId: 'a' })).toBe(0) // it locks nothing on the device
    checkSessionInvariants(sc)
    sc.abortReq(x)
    // `a` comes back: its 20 host tokens are loaded back, only the partial page is recomputed.
    setNow(3)
    const a2 = sc.createRequest({ rid: 'a2', sessionId: 'a', inputIds: [...a1.tokenIds, 25] })
    const hit = sc.matchPrefix(a2)
    expect(hit).toMatchObject({ length: 20, loadedTokens: 20, reprefillTokens: 3 })
    expect(Array.from(hit.indices)).toEqual(Array.from(a2.prefixIndices))
    checkSessionInvariants(sc)
    // Its prefill needs 8 more slots (4 free): now `b` is the idle session to demote.
    sc.prefill(a2, a2.originInputIds.length - 20)
    sc.cacheFinishedReq(a2)
    expect(sc.getSessionStatus('a')).toMatchObject({
      demoted: false,
      hostResidentTokens: 0,
      residentTokens: 24,
    })
    expect(sc.getSessionStatus('b')).toMatchObject({ demoted: true, retainedTokens: 40 })
    expect(sc.stats()).toMatchObject({ loadedBackTokens: 20, sessionsDemoted: 2, sessionsDemotedNow: 1 })
    checkSessionInvariants(sc)
  })

  it('without host room the session is released, as without a tier', () => {
    const { sc } = twoSessions(8)
    const res = sc.ensureFree(24)
    expect(res).toMatchObject({ ok: true, releasedSessions: ['a'], demotedSessions: [] })
    expect(sc.hasSession('a')).toBe(false)
    checkSessionInvariants(sc)
  })

  it('evictIdleSessions({ needTokens }) demotes, a TTL sweep releases demoted sessions too', () => {
    const { sc } = twoSessions()
    expect(sc.evictIdleSessions({ needTokens: 20 })).toEqual({ released: [], demoted: ['a'], freedTokens: 0 })
    expect(sc.cache.evictableSize()).toBe(20) // a's pages may now leave the device
    expect(sc.ensureFree(24)).toMatchObject({ ok: true, demotedSessions: [], releasedSessions: [] })
    expect(sc.evictIdleSessions({ idleMs: 0 }).released).toEqual(['a', 'b'])
    expect(sc.cache.hostEvictableSize()).toBe(sc.cache.hostOnlySize()) // no host reference is left
    expect(sc.cache.protectedSize()).toBe(0)
    checkSessionInvariants(sc)
  })

  it('a demoted session whose load-back finds no room recomputes, and a turn ended early keeps the session', () => {
    const { sc, a1 } = twoSessions()
    sc.evictIdleSessions({ needTokens: 20 })
    sc.evict(20) // a's tokens are host-only now
    // `b` is busy with a turn, and a request fills the device: nothing can make room.
    const b2 = sc.createRequest({ rid: 'b2', sessionId: 'b', inputIds: [...range(100, 41), 999] })
    expect(sc.matchPrefix(b2).length).toBe(40)
    const y = sc.createRequest({ rid: 'y', inputIds: range(700, 25) })
    sc.matchPrefix(y)
    sc.prefill(y, 24)
    expect(sc.pool.availableSize()).toBe(0)
    const a2 = sc.createRequest({ rid: 'a2', sessionId: 'a', inputIds: [...a1.tokenIds, 25] })
    expect(sc.matchPrefix(a2)).toMatchObject({ length: 0, loadedTokens: 0, reprefillTokens: 23 })
    // It finishes before recomputing anything (an engine giving up): `a` keeps what it retains.
    sc.cacheFinishedReq(a2)
    expect(sc.getSessionStatus('a')).toMatchObject({ demoted: true, retainedTokens: 20, committedTokens: 23 })
    checkSessionInvariants(sc)
  })

  it('poolAccounting balances both tiers', () => {
    const { sc } = twoSessions()
    sc.evictIdleSessions({ needTokens: 20 })
    const acc = sc.poolAccounting()
    expect(acc).toMatchObject({ hostCapacity: 64, hostUsed: 20, hostFree: 44, balanced: true })
  })

  it('INVALID_OPTION: hostTier with a given cache, or a pool that cannot allocate', () => {
    const pool = new PagedAllocator({ size: 64, pageSize: 4 })
    const cache = new RadixCache({ pageSize: 4, allocator: pool })
    const codeOf = (fn: () => unknown) => {
      try {
        fn()
      } catch (e) {
        return e instanceof SessionCacheError ? `${e.code}: ${e.message}` : String(e)
      }
      return 'no error'
    }
    expect(codeOf(() => new SessionCache({ cache, pool, hostTier: { capacity: 64 } }))).toMatch(
      /^INVALID_OPTION: hostTier configures the default cache/,
    )
    const noAlloc = {
      size: 64,
      pageSize: 4,
      availableSize: () => 64,
      allocExtend: () => new Int32Array(0),
      free: () => {},
    }
    expect(codeOf(() => new SessionCache({ pool: noAlloc, hostTier: { capacity: 64 } }))).toMatch(
      /^INVALID_OPTION: hostTier: .*alloc/,
    )
  })
})
