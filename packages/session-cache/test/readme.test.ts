import { expect, it } from 'vitest'
import { SessionCache } from '../src/index.js'

// The worked example of README.md, step for step (keep the two in sync).
it('README worked example', () => {
  let now = 0
  const sc = new SessionCache({
    poolSize: 64, // 16 pages of 4 token slots
    pageSize: 4,
    evictGranularity: 'page',
    now: () => now,
  })
  const system = [1, 2, 3, 4, 5, 6, 7, 8] // shared boilerplate: 2 pages

  // Turn 1 of alice: prompt = boilerplate + question, prefilled in two chunks.
  sc.openSession('alice')
  const a1 = sc.createRequest({ rid: 'a1', sessionId: 'alice', inputIds: [...system, 10, 11, 12, 13, 14] })
  expect(sc.matchPrefix(a1).length).toBe(0) // nothing cached yet
  sc.prefill(a1, 8)
  sc.cacheUnfinishedReq(a1, { chunked: true }) // the boilerplate enters the tree
  sc.prefill(a1, 5)
  sc.cacheUnfinishedReq(a1)
  for (const tok of [20, 21, 22, 23]) sc.decode(a1, tok) // 4 generated tokens
  expect(sc.cacheFinishedReq(a1)).toEqual({
    insertedTokens: 4,
    prefixLen: 12,
    freedTokens: 0,
    protectedLen: 16,
  })
  expect(sc.getSessionStatus('alice')).toMatchObject({ residentTokens: 16, committedTokens: 16 })

  // bob shares the boilerplate.
  now = 1
  sc.openSession('bob')
  const b1 = sc.createRequest({
    rid: 'b1',
    sessionId: 'bob',
    inputIds: [...system, 30, 31, 32, 33, 34, 35, 36],
  })
  expect(sc.matchPrefix(b1).length).toBe(8)
  sc.prefill(b1, 7)
  sc.cacheUnfinishedReq(b1)
  sc.decode(b1, 40)
  sc.cacheFinishedReq(b1)

  // Turn 2 of alice extends turn 1 (append-only); the tree serves its whole committed prefix.
  now = 2
  const a2 = sc.createRequest({ rid: 'a2', sessionId: 'alice', inputIds: [...a1.tokenIds, 15, 16, 17] })
  const m = sc.matchPrefix(a2)
  expect(m.length).toBe(16)
  expect(m.reprefillTokens).toBe(0)
  sc.prefill(a2, 4)
  sc.cacheUnfinishedReq(a2)
  sc.decode(a2, 24)
  sc.decode(a2, 25)
  sc.cacheFinishedReq(a2)
  expect(sc.getSessionStatus('alice')!.residentTokens).toBe(20)

  // alice goes quiet; the server reaps her by TTL. Nothing is freed: her pages become evictable.
  now = 100
  expect(sc.evictIdleSessions({ idleMs: 60 })).toEqual({
    released: ['bob', 'alice'],
    demoted: [],
    freedTokens: 0,
  })
  expect(sc.poolAccounting()).toMatchObject({ free: 40, evictable: 24, protected: 0 })

  // A big request needs 44 slots, 4 more than are free: the tree's LRU sheds one page — the tail
  // of bob, the least recently used. Nobody loses more than needed.
  const big = sc.createRequest({ rid: 'x', inputIds: Array.from({ length: 44 }, (_, i) => 900 + i) })
  sc.matchPrefix(big)
  sc.prefill(big, 44)
  expect(sc.stats()).toMatchObject({ evictions: 1, evictedTokens: 4 })
  sc.cacheFinishedReq(big)

  // alice comes back with her next turn: everything she had is still in the tree.
  now = 101
  sc.openSession('alice')
  const a3 = sc.createRequest({ rid: 'a3', sessionId: 'alice', inputIds: [...a2.tokenIds, 18] })
  expect(sc.matchPrefix(a3).length).toBe(20)
  sc.abortReq(a3)
  expect(sc.poolAccounting().balanced).toBe(true)
})
