import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it, vi } from 'vitest'
import {
  Histogram,
  SessionCache,
  SessionCacheError,
  SessionCacheErrorCode,
  type SessionCacheErrorCode as Code,
  type SessionRequest,
} from '../src/index.js'
import { checkSessionInvariants } from '../src/testing/index.js'
import { expectRefused, makeCache, range, turn } from './helpers.js'

function expectCode(fn: () => unknown, code: Code): SessionCacheError {
  try {
    fn()
  } catch (e) {
    expect(e).toBeInstanceOf(SessionCacheError)
    expect((e as SessionCacheError).code).toBe(code)
    return e as SessionCacheError
  }
  throw new Error(`expected ${code}`)
}

// The block-level design's test plan: docs/design/prototype.md#test-plan.
describe('the block-level test plan', () => {
  it('release_session_no_direct_free: block release only decrements the lock', () => {
    const { sc, pool } = makeCache()
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 30), [100, 101, 102], { sessionId: 's' })
    turn(sc, 'b', [...t1.tokenIds, 7, 8, 9], [103, 104], { sessionId: 's' })
    const node = sc.getSessionSlot('s')!.lastNode!
    const free = vi.spyOn(pool, 'free')
    const dec = vi.spyOn(sc.cache, 'decLockRef')
    const evictable = sc.cache.evictableSize()
    expect(sc.releaseSession('s')).toBe(0)
    expect(free).not.toHaveBeenCalled()
    expect(dec).toHaveBeenCalledTimes(1)
    expect(dec).toHaveBeenCalledWith(node)
    // Its pages are now evictable, still in the tree.
    expect(sc.cache.evictableSize()).toBe(evictable + sc.cache.tokensUnder(node))
    checkSessionInvariants(sc)
  })

  it('release in session granularity frees the slot tail at once (the legacy behaviour)', () => {
    const { sc, pool } = makeCache({ granularity: 'session' })
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 30), [100, 101, 102], { sessionId: 's' })
    turn(sc, 'b', [...t1.tokenIds, 7, 8, 9], [103, 104], { sessionId: 's' })
    const held = sc.getSessionStatus('s')!.heldTokens
    expect(held).toBeGreaterThan(0)
    const free = vi.spyOn(pool, 'free')
    expect(sc.releaseSession('s')).toBe(held)
    expect(free).toHaveBeenCalledTimes(1)
    checkSessionInvariants(sc)
  })

  it('subsequent_turn_inserts_radix: every turn finish inserts its committed tokens', () => {
    const { sc } = makeCache()
    sc.openSession('s')
    // The session cache inserts through `_insertFrom` (`insert` that starts at the request's lock).
    const insert = vi.spyOn(sc.cache, '_insertFrom')
    let prompt = range(1, 21)
    let resident = 0
    for (let t = 0; t < 3; t++) {
      const req = turn(sc, `t${t}`, prompt, [200 + t, 300 + t], { sessionId: 's' })
      const last = insert.mock.calls.at(-1)!
      expect(Array.from(last[1])).toEqual(Array.from(req.tokenIds.subarray(0, req.kvCommittedLen)))
      const now = sc.getSessionStatus('s')!.residentTokens
      expect(now).toBe(req.kvCommittedLen - (req.kvCommittedLen % 4))
      expect(now).toBeGreaterThan(resident)
      resident = now
      prompt = [...req.tokenIds, 50 + t, 60 + t, 70 + t]
    }
    // 3 finishes + 3 cacheUnfinishedReq calls (one per prefill)
    expect(insert).toHaveBeenCalledTimes(6)
  })

  it('match_prefix_uses_inner: session and plain requests are matched by the tree', () => {
    const { sc } = makeCache()
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 17), [9], { sessionId: 's' })
    const match = vi.spyOn(sc.cache, 'matchPrefix')
    // A held session's turn starts the walk at the session's node (`_matchPrefixFrom`).
    const matchFrom = vi.spyOn(sc.cache, '_matchPrefixFrom')
    const s2 = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...t1.tokenIds, 5] })
    const r2 = sc.matchPrefix(s2)
    const plain = sc.createRequest({ rid: 'c', inputIds: [...t1.tokenIds, 6] })
    const r3 = sc.matchPrefix(plain)
    expect(matchFrom).toHaveBeenCalledTimes(1)
    expect(matchFrom.mock.calls[0]![0]).toBe(sc.getSessionSlot('s')!.lastNode)
    expect(Array.from(matchFrom.mock.calls[0]![1])).toEqual([...t1.tokenIds])
    expect(match).toHaveBeenCalledTimes(1)
    expect(Array.from(match.mock.calls[0]![0])).toEqual([...t1.tokenIds, 6].slice(0, -1))
    expect(r2.length).toBe(16)
    expect(r3.length).toBe(16)
    expect(Array.from(r2.indices)).toEqual(Array.from(r3.indices))
    expect(r2.fromSlot).toBe(false)
  })

  it('restore_idempotent: a chunked-prefill retry gives identical indices', () => {
    const { sc } = makeCache()
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 25), [9, 10], { sessionId: 's' })
    const req = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...t1.tokenIds, ...range(40, 30)] })
    const first = sc.matchPrefix(req)
    const again = sc.matchPrefix(req)
    expect(again.length).toBe(first.length)
    expect(Array.from(again.indices)).toEqual(Array.from(first.indices))
    expect(again.lastNode).toBe(first.lastNode)
    for (let i = 0; i < 3; i++) {
      sc.prefill(req, 7)
      sc.cacheUnfinishedReq(req, { chunked: true })
      const a = sc.matchPrefix(req)
      const b = sc.matchPrefix(req)
      expect(Array.from(a.indices)).toEqual(Array.from(req.prefixIndices))
      expect(Array.from(b.indices)).toEqual(Array.from(a.indices))
    }
    checkSessionInvariants(sc)
  })

  it('eviction_under_pressure_is_block_level: the LRU sheds only what is asked, no session is released', () => {
    const { sc, pool } = makeCache({ pageSize: 8, poolSize: 8 * 40, evictGranularity: 'page' })
    for (const s of ['a', 'b', 'c']) sc.openSession(s)
    const a = turn(sc, 'a1', range(1000, 90), range(5000, 10), { sessionId: 'a' })
    turn(sc, 'b1', range(2000, 90), range(6000, 10), { sessionId: 'b' })
    turn(sc, 'c1', range(3000, 60), range(7000, 10), { sessionId: 'c' })
    sc.releaseSession('a') // a's pages: evictable, still cached
    const residentA = sc.cache.matchPrefix(a.tokenIds, { readOnly: true }).length
    const heldBefore = sc.listSessionStatuses().map((s) => s.residentTokens)
    const evict = vi.spyOn(sc.cache, 'evict')
    const res = sc.ensureFree(pool.availableSize() + 24)
    expect(res).toMatchObject({ ok: true, freedTokens: 24, releasedSessions: [] })
    expect(evict).toHaveBeenCalledTimes(1)
    expect(evict).toHaveBeenCalledWith(24)
    expect(sc.stats().sessionsEvicted).toBe(0)
    expect(sc.listSessionStatuses().map((s) => s.residentTokens)).toEqual(heldBefore)
    // The released session lost its last 24 tokens (3 pages) and kept the rest.
    expect(sc.cache.matchPrefix(a.tokenIds, { readOnly: true }).length).toBe(residentA - 24)
    checkSessionInvariants(sc)
  })
})

describe('maxNewTokens sizes the buffers only', () => {
  it('gives the same tokens, slots and tree whatever the hint, below or above the output', () => {
    const outcomes = [undefined, 0, 3, 200].map((maxNewTokens) => {
      const { sc, pool } = makeCache()
      sc.openSession('s')
      const prompt = range(1, 40)
      const r = sc.createRequest({
        rid: 'a',
        inputIds: prompt,
        sessionId: 's',
        ...(maxNewTokens === undefined ? {} : { maxNewTokens }),
      })
      sc.matchPrefix(r)
      sc.prefill(r, r.tokenIds.length)
      sc.cacheUnfinishedReq(r)
      for (let t = 0; t < 100; t++) sc.decode(r, 1000 + t)
      expect(r.tokenIds.length).toBe(prompt.length + 100)
      sc.cacheFinishedReq(r)
      checkSessionInvariants(sc)
      return { tokens: Array.from(r.tokenIds), free: pool.availableSize(), tree: sc.cache.totalSize() }
    })
    for (const o of outcomes) expect(o).toEqual(outcomes[0])
  })
})

describe('lock moves: increment the new node first, then decrement the old one', () => {
  it('on cacheFinishedReq (session lock) and cacheUnfinishedReq (request lock)', () => {
    const { sc } = makeCache()
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 20), [9, 9], { sessionId: 's' })
    const oldNode = sc.getSessionSlot('s')!.lastNode!
    const req = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...t1.tokenIds, ...range(50, 12)] })
    sc.matchPrefix(req)
    const inc = vi.spyOn(sc.cache, 'incLockRef')
    const dec = vi.spyOn(sc.cache, 'decLockRef')
    const reqNode = req.lastNode!
    sc.prefill(req, 9)
    sc.cacheUnfinishedReq(req, { chunked: true })
    expect(inc).toHaveBeenCalledTimes(1)
    expect(dec).toHaveBeenCalledTimes(1)
    expect(dec).toHaveBeenCalledWith(reqNode)
    expect(inc.mock.invocationCallOrder[0]!).toBeLessThan(dec.mock.invocationCallOrder[0]!)
    expect(inc.mock.calls[0]![0]).toBe(req.lastNode)
    inc.mockClear()
    dec.mockClear()
    const lockedByReq = req.lastNode!
    sc.prefill(req, req.originInputIds.length - req.kvCommittedLen)
    sc.cacheFinishedReq(req)
    // The finish inserts, locks the new deepest node for the session, then releases the old
    // session node and the request's own lock.
    const newNode = sc.getSessionSlot('s')!.lastNode!
    expect(newNode).not.toBe(oldNode)
    expect(inc.mock.calls.map((c) => c[0])).toEqual([newNode])
    expect(dec.mock.calls.map((c) => c[0])).toEqual([oldNode, lockedByReq])
    expect(inc.mock.invocationCallOrder[0]!).toBeLessThan(Math.min(...dec.mock.invocationCallOrder))
    checkSessionInvariants(sc)
  })
})

describe('I2 (docs/design/algorithms.md#invariants-i1-to-i5): tokensUnder(slot.lastNode) never decreases across turns', () => {
  it('holds for random turn sizes and chunkings', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 1, max: 300 }), fc.integer({ min: 0, max: 40 })), {
          minLength: 1,
          maxLength: 20,
        }),
        fc.integer({ min: 1, max: 128 }),
        (turns, chunk) => {
          const { sc } = makeCache({ pageSize: 16, poolSize: 16 * 1024 })
          sc.openSession('s')
          let history: number[] = []
          let prev = 0
          let next = 1
          turns.forEach(([append, out], i) => {
            const prompt = history.concat(range(next, append))
            next += append
            const req = turn(sc, `t${i}`, prompt, range(next, out), { sessionId: 's', chunk })
            next += out
            history = [...req.tokenIds]
            const resident = sc.getSessionStatus('s')!.residentTokens
            expect(resident).toBeGreaterThanOrEqual(prev)
            expect(resident).toBe(req.kvCommittedLen - (req.kvCommittedLen % 16))
            prev = resident
          })
          checkSessionInvariants(sc)
        },
      ),
      { numRuns: 100 },
    )
  })
})

describe('every error code', () => {
  const cases: Record<Code, () => void> = {
    INVALID_OPTION: () => {
      expectCode(() => new SessionCache({ granularity: 'pages' as never, poolSize: 16 }), 'INVALID_OPTION')
      expectCode(() => new SessionCache({ poolSize: 10, pageSize: 4 }), 'INVALID_OPTION')
      expectCode(() => new SessionCache({}), 'INVALID_OPTION')
      expectCode(
        () => new SessionCache({ poolSize: 16, evictionPolicy: 'random' as never }),
        'INVALID_OPTION',
      )
      expectCode(() => new SessionCache({ cache: new RadixCache() }), 'INVALID_OPTION')
      expectCode(
        () =>
          new SessionCache({
            cache: new RadixCache({ trackValues: false }),
            pool: new PagedAllocator({ size: 16 }),
          }),
        'INVALID_OPTION',
      )
      expectCode(
        () => new SessionCache({ pool: new PagedAllocator({ size: 16, pageSize: 4 }), pageSize: 2 }),
        'INVALID_OPTION',
      )
      expectCode(() => new SessionCache({ poolSize: 16, evictionBuckets: [4, 2] }), 'INVALID_OPTION')
      expectCode(() => new SessionCache({ poolSize: 16, releasedMemory: -1 }), 'INVALID_OPTION')
      expectCode(() => new Histogram([]), 'INVALID_OPTION')
      const { sc } = makeCache()
      expectRefused(sc, 'INVALID_OPTION', () => sc.ensureFree(-1))
      expectRefused(sc, 'INVALID_OPTION', () => sc.evict(Number.NaN))
      expectRefused(sc, 'INVALID_OPTION', () => sc.evictIdleSessions({ idleMs: -5 }))
      expectRefused(sc, 'INVALID_OPTION', () => sc.evictIdleSessions({ needTokens: 1.5 }))
      expectRefused(sc, 'INVALID_OPTION', () => sc.openSession('s', { extraKey: 3 as never }))
    },
    INVALID_REQUEST: () => {
      const { sc } = makeCache()
      expectCode(() => sc.createRequest({ rid: '', inputIds: [1] }), 'INVALID_REQUEST')
      expectCode(() => sc.createRequest({ rid: 'a', inputIds: [] }), 'INVALID_REQUEST')
      expectCode(() => sc.createRequest({ rid: 'a', inputIds: [1, -2] }), 'INVALID_REQUEST')
      expectCode(() => sc.createRequest({ rid: 'a', inputIds: [1], priority: Number.NaN }), 'INVALID_REQUEST')
      expectCode(() => sc.createRequest({ rid: 'a', inputIds: [1], maxNewTokens: -1 }), 'INVALID_REQUEST')
      expectCode(() => sc.createRequest({ rid: 'a', inputIds: [1], maxNewTokens: 1.5 }), 'INVALID_REQUEST')
      expectCode(() => sc.openSession(''), 'INVALID_REQUEST')
      const req = sc.createRequest({ rid: 'a', inputIds: range(1, 10) })
      sc.matchPrefix(req)
      expectRefused(sc, 'INVALID_REQUEST', () => sc.prefill(req, 11))
      expectRefused(sc, 'INVALID_REQUEST', () => sc.prefill(req, -1))
      expectRefused(sc, 'INVALID_REQUEST', () => sc.decode(req, 5)) // prompt not prefilled
      sc.prefill(req, 10)
      expectRefused(sc, 'INVALID_REQUEST', () => sc.decode(req, 2 ** 32))
    },
    UNKNOWN_REQUEST: () => {
      const { sc } = makeCache()
      const other = makeCache().sc
      const foreign = other.createRequest({ rid: 'x', inputIds: [1, 2] })
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.matchPrefix(foreign))
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.matchPrefix({ rid: 'fake' } as never))
      const req = sc.createRequest({ rid: 'a', inputIds: [1, 2] })
      // An object made on a request's prototype, or a copy of one, is not a request either.
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.matchPrefix(Object.create(Object.getPrototypeOf(req))))
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.matchPrefix({ ...req }))
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.prefill(req, 1))
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.cacheUnfinishedReq(req))
      expectRefused(sc, 'UNKNOWN_REQUEST', () => sc.cacheFinishedReq(req))
    },
    DUPLICATE_REQUEST: () => {
      const { sc } = makeCache()
      sc.matchPrefix(sc.createRequest({ rid: 'a', inputIds: [1, 2] }))
      const twin = sc.createRequest({ rid: 'a', inputIds: [3, 4] })
      expectRefused(sc, 'DUPLICATE_REQUEST', () => sc.matchPrefix(twin))
    },
    REQUEST_FINISHED: () => {
      const { sc } = makeCache()
      const req = turn(sc, 'a', range(1, 9), [1])
      expectRefused(sc, 'REQUEST_FINISHED', () => sc.cacheFinishedReq(req))
      expectRefused(sc, 'REQUEST_FINISHED', () => sc.abortReq(req))
      expectRefused(sc, 'REQUEST_FINISHED', () => sc.decode(req, 1))
      const ab = sc.createRequest({ rid: 'b', inputIds: [1, 2] })
      sc.abortReq(ab)
      expectRefused(sc, 'REQUEST_FINISHED', () => sc.matchPrefix(ab))
    },
    UNKNOWN_SESSION: () => {
      const { sc } = makeCache()
      expectRefused(sc, 'UNKNOWN_SESSION', () => sc.releaseSession('nope'))
      const req = sc.createRequest({ rid: 'a', sessionId: 'nope', inputIds: [1, 2] })
      expectRefused(sc, 'UNKNOWN_SESSION', () => sc.matchPrefix(req))
    },
    SESSION_EXISTS: () => {
      const { sc } = makeCache()
      sc.openSession('s')
      expectRefused(sc, 'SESSION_EXISTS', () => sc.openSession('s'))
    },
    SESSION_RELEASED: () => {
      const { sc, clock } = makeCache()
      sc.openSession('s')
      sc.releaseSession('s')
      expectRefused(sc, 'SESSION_RELEASED', () => sc.releaseSession('s'))
      const req = sc.createRequest({ rid: 'a', sessionId: 's', inputIds: [1, 2] })
      expectRefused(sc, 'SESSION_RELEASED', () => sc.matchPrefix(req))
      sc.openSession('t')
      clock.t = 100
      expect(sc.evictIdleSessions({ idleMs: 10 }).released).toEqual(['t'])
      const err = expectRefused(sc, 'SESSION_RELEASED', () => sc.releaseSession('t'))
      expect(err.message).toMatch(/evicted/)
      sc.openSession('s') // an id may be reopened
    },
    SESSION_BUSY: () => {
      const { sc } = makeCache()
      sc.openSession('s')
      sc.matchPrefix(sc.createRequest({ rid: 'a', sessionId: 's', inputIds: [1, 2] }))
      const second = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [1, 2, 3] })
      expectRefused(sc, 'SESSION_BUSY', () => sc.matchPrefix(second))
      expectRefused(sc, 'SESSION_BUSY', () => sc.releaseSession('s'))
    },
    PREFIX_MISMATCH: () => {
      const { sc } = makeCache()
      sc.openSession('s')
      const t1 = turn(sc, 'a', range(1, 10), [50, 51], { sessionId: 's' })
      const committed = [...t1.tokenIds.subarray(0, t1.kvCommittedLen)]
      const changed = [...t1.tokenIds, 9]
      changed[3] = 999
      for (const [rid, inputIds] of [
        ['diverges', changed],
        ['not-longer', committed],
        ['shorter', committed.slice(0, 4)],
      ] as const) {
        const req = sc.createRequest({ rid, sessionId: 's', inputIds })
        expectRefused(sc, 'PREFIX_MISMATCH', () => sc.matchPrefix(req))
      }
      // The uncommitted last output token may be replaced: only committed tokens must match.
      sc.matchPrefix(sc.createRequest({ rid: 'ok', sessionId: 's', inputIds: [...committed, 7] }))
    },
    NAMESPACE_MISMATCH: () => {
      const { sc } = makeCache()
      sc.openSession('s', { extraKey: 'lora-a' })
      const req = sc.createRequest({ rid: 'a', sessionId: 's', extraKey: 'lora-b', inputIds: [1, 2] })
      expectRefused(sc, 'NAMESPACE_MISMATCH', () => sc.matchPrefix(req))
      const ok = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [1, 2] })
      sc.matchPrefix(ok)
      expect(ok.extraKey).toBe('lora-a')
    },
    OUT_OF_MEMORY: () => {
      const { sc } = makeCache({ poolSize: 32 })
      sc.openSession('s')
      const req = sc.createRequest({ rid: 'a', sessionId: 's', inputIds: range(1, 40) })
      sc.matchPrefix(req)
      sc.prefill(req, 20)
      // Out of memory is raised after trying to evict the shortfall (SGLang's order): the tree's
      // evict counter moves, nothing else does.
      const before = JSON.stringify([sc.poolAccounting(), sc.inFlightRequests().map((r) => r.kvAllocatedLen)])
      expectCode(() => sc.prefill(req, 20), 'OUT_OF_MEMORY')
      expect(JSON.stringify([sc.poolAccounting(), sc.inFlightRequests().map((r) => r.kvAllocatedLen)])).toBe(
        before,
      )
      expect(req.kvCommittedLen).toBe(20)
      sc.abortReq(req) // what an engine does with it; nothing leaks
      expect(sc.poolAccounting()).toMatchObject({ free: 32, balanced: true })
    },
  }
  for (const code of Object.values(SessionCacheErrorCode)) {
    it(code, () => {
      cases[code]()
    })
  }
})

describe('the extra release hook', () => {
  it('releases each extra once: replaced by a turn, at release, at eviction', () => {
    const released: [unknown, string][] = []
    const { sc, clock } = makeCache({ releaseExtra: (x, id) => released.push([x, id]) })
    const A = { mamba: 1 }
    const B = { mamba: 2 }
    sc.openSession('s', { extra: A })
    const req = sc.createRequest({ rid: 'a', sessionId: 's', inputIds: range(1, 9) })
    sc.matchPrefix(req)
    expect(req.extra).toBe(A) // lent for the turn
    sc.prefill(req, 9)
    sc.cacheFinishedReq(req, { extra: A }) // same state: nothing released
    expect(released).toEqual([])
    const r2 = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...req.tokenIds, 1] })
    sc.matchPrefix(r2)
    sc.prefill(r2, r2.originInputIds.length - r2.kvCommittedLen)
    sc.cacheFinishedReq(r2, { extra: B })
    expect(released).toEqual([[A, 's']])
    sc.releaseSession('s')
    expect(released).toEqual([
      [A, 's'],
      [B, 's'],
    ])
    const C = { mamba: 3 }
    sc.openSession('t', { extra: C })
    clock.t = 50
    sc.evictIdleSessions({ idleMs: 1 })
    expect(released.at(-1)).toEqual([C, 't'])
    sc.openSession('u') // no extra: no hook call
    sc.releaseSession('u')
    expect(released).toHaveLength(3)
  })
})

describe('status, stats and accounting', () => {
  it('reports residency from the tree and counts evictions in the histogram', () => {
    const { sc, clock } = makeCache({ pageSize: 4, poolSize: 64, evictGranularity: 'page' })
    expect(sc.getSessionStatus('x')).toBeUndefined()
    sc.openSession('a')
    sc.openSession('b')
    expect(sc.listSessionStatuses().map((s) => s.sessionId)).toEqual(['a', 'b'])
    expect(sc.getSessionStatus('a')).toMatchObject({
      resident: false,
      residentTokens: 0,
      active: false,
      turns: 0,
    })
    clock.t = 5
    turn(sc, 'a1', range(1, 22), [90, 91], { sessionId: 'a' })
    expect(sc.getSessionStatus('a')).toMatchObject({
      resident: true,
      residentTokens: 20,
      committedTokens: 23,
      heldTokens: 0,
      lastAccessTime: 5,
      turns: 1,
    })
    turn(sc, 'b1', range(100, 30), [], { sessionId: 'b' })
    sc.releaseSession('a')
    // 64 slots: b holds 28 in the tree, a's 20 are evictable, 16 are free; a 30-token prompt
    // needs 32 slots, so 16 tokens of a are evicted (page by page) and b is untouched.
    const big = sc.createRequest({ rid: 'x', inputIds: range(500, 30) })
    sc.matchPrefix(big)
    sc.prefill(big, 30)
    const st = sc.stats()
    expect(st.evictions).toBe(1)
    expect(st.evictedTokens).toBe(16)
    expect(st.evictionHistogram.counts[0]).toBe(1)
    expect(st.evictionHistogram.max).toBe(16)
    expect(st.sessionsEvicted).toBe(0)
    expect(st.sessionsHeld).toBe(1)
    expect(st.requestsInFlight).toBe(1)
    expect(st.residentTokensPerSession.get('b')).toBe(28)
    expect(st.sessionsReleased).toBe(1)
    expect(sc.poolAccounting()).toMatchObject({ requestOwned: 32, sessionHeld: 0, balanced: true })
    checkSessionInvariants(sc)
  })

  it('ensureFree reports failure when everything left is in use', () => {
    const { sc } = makeCache({ poolSize: 32 })
    const req = sc.createRequest({ rid: 'a', inputIds: range(1, 30) })
    sc.matchPrefix(req)
    sc.prefill(req, 24)
    expect(sc.ensureFree(16)).toMatchObject({ ok: false, available: 8, freedTokens: 0 })
    expect(sc.ensureFree(8).ok).toBe(true)
  })
})

describe('evictIdleSessions', () => {
  it('TTL: releases idle sessions older than idleMs, oldest first, never a busy one', () => {
    const { sc, clock } = makeCache()
    sc.openSession('old')
    clock.t = 10
    sc.openSession('busy')
    sc.matchPrefix(sc.createRequest({ rid: 'r', sessionId: 'busy', inputIds: [1, 2] }))
    clock.t = 20
    sc.openSession('young')
    clock.t = 30
    expect(sc.evictIdleSessions({ idleMs: 15 })).toEqual({ released: ['old'], demoted: [], freedTokens: 0 })
    clock.t = 100
    expect(sc.evictIdleSessions({ idleMs: 15 }).released).toEqual(['young'])
    expect(sc.hasSession('busy')).toBe(true)
    expect(sc.stats().sessionsEvicted).toBe(2)
  })

  it('pressure: least recently used sessions holding KV first, until free + evictable covers the need', () => {
    const { sc, clock } = makeCache({ pageSize: 4, poolSize: 128 })
    for (const [i, s] of ['a', 'b', 'c'].entries()) {
      clock.t = i
      sc.openSession(s)
      turn(sc, s, range(100 * (i + 1), 28), [], { sessionId: s })
    }
    sc.openSession('empty') // holds no KV: never picked for pressure
    const before = sc.pool.availableSize() + sc.cache.evictableSize()
    expect(before).toBe(128 - 84)
    const res = sc.evictIdleSessions({ needTokens: before + 40 })
    expect(res.released).toEqual(['a', 'b'])
    expect(sc.pool.availableSize() + sc.cache.evictableSize()).toBe(before + 56)
    expect(sc.hasSession('empty')).toBe(true)
  })
})

describe('reprefillTokens of a session reopened after an eviction', () => {
  it('counts what it had committed and no longer finds, as for a later turn', () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 256 })
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 28), [100, 101], { sessionId: 's' })
    const committed = sc.getSessionStatus('s')!.committedTokens
    expect(sc.evictIdleSessions({ idleMs: 0 }).released).toEqual(['s']) // reaped
    sc.evict(8) // the tree sheds two pages of its tail
    sc.openSession('s')
    const req = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...t1.tokenIds, 7, 8, 9] })
    const m = sc.matchPrefix(req)
    expect(m.reprefillTokens).toBe(committed - m.length)
    expect(m.reprefillTokens).toBeGreaterThanOrEqual(8)
    expect(sc.stats().reprefillTokens).toBe(m.reprefillTokens)
    sc.abortReq(req)
    // A session the client released and opened again starts over: nothing counts as lost.
    sc.releaseSession('s')
    sc.openSession('s')
    expect(
      sc.matchPrefix(sc.createRequest({ rid: 'c', sessionId: 's', inputIds: range(500, 9) })).reprefillTokens,
    ).toBe(0)
  })
})

describe('decode allocation', () => {
  it('asks the pool only for fresh pages: steps inside the last page take the next slots of that page', () => {
    const { sc, pool } = makeCache({ pageSize: 4, poolSize: 64 })
    const req = sc.createRequest({ rid: 'r', inputIds: range(1, 6) })
    sc.matchPrefix(req)
    sc.prefill(req, 6)
    // A PagedAllocator writes the slots into the request's row (allocExtendInto).
    const spy = vi.spyOn(pool, 'allocExtendInto')
    // Six steps give positions 6..10 their KV (the last sampled token's comes with the next step):
    // page 1 holds 4..7, position 8 opens page 2.
    for (let t = 0; t < 6; t++) sc.decode(req, 100 + t)
    expect(req.kvAllocatedLen).toBe(11)
    expect(spy).toHaveBeenCalledTimes(1)
    const row = req.reqToToken.subarray(0, 11)
    for (let i = 1; i < 11; i++) {
      if (i % 4 !== 0) expect(row[i]).toBe(row[i - 1]! + 1) // consecutive inside a page
    }
    expect(sc.poolAccounting().balanced).toBe(true)
    sc.cacheFinishedReq(req)
    expect(sc.poolAccounting().balanced).toBe(true)
  })

  it('takes the same slots from a pool that only has allocExtend', () => {
    const inner = new PagedAllocator({ size: 64, pageSize: 4 })
    const calls: number[] = []
    const pool = {
      size: inner.size,
      pageSize: inner.pageSize,
      availableSize: () => inner.availableSize(),
      allocExtend: (last: number, n: number) => {
        calls.push(n)
        return inner.allocExtend(last, n)
      },
      free: (i: Int32Array) => inner.free(i),
    }
    const plain = new SessionCache({ pool })
    const { sc } = makeCache({ pageSize: 4, poolSize: 64 })
    const rows: number[][] = []
    for (const c of [plain, sc]) {
      const req = c.createRequest({ rid: 'r', inputIds: range(1, 6) })
      c.matchPrefix(req)
      c.prefill(req, 6)
      for (let t = 0; t < 6; t++) c.decode(req, 100 + t)
      rows.push(Array.from(req.reqToToken.subarray(0, req.kvAllocatedLen)))
      c.cacheFinishedReq(req)
      checkSessionInvariants(c)
    }
    expect(calls).toEqual([6, 1]) // the prefill, then the step that opens page 2
    expect(rows[0]).toEqual(rows[1])
  })
})

describe('maxNewTokens and the match indices', () => {
  it('sizes the buffers for the output (a hint: more still decodes); refuses a bad value', () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 256 })
    const req = sc.createRequest({ rid: 'r', inputIds: range(1, 6), maxNewTokens: 3 })
    sc.matchPrefix(req)
    sc.prefill(req, 6)
    const row = req.reqToToken
    for (let t = 0; t < 3; t++) sc.decode(req, 100 + t)
    expect(req.reqToToken).toBe(row) // three steps fit: the row was not grown
    for (let t = 3; t < 40; t++) sc.decode(req, 100 + t)
    expect(Array.from(req.outputIds)).toEqual(range(100, 40))
    expect(Array.from(req.tokenIds)).toEqual([...range(1, 6), ...range(100, 40)])
    sc.cacheFinishedReq(req)
    checkSessionInvariants(sc)
    for (const bad of [-1, 1.5, Number.NaN]) {
      const e = expectCode(
        () => sc.createRequest({ rid: 'x', inputIds: [1], maxNewTokens: bad }),
        'INVALID_REQUEST',
      )
      expect(e.message).toContain('maxNewTokens')
      expect(Object.is(e.value, bad)).toBe(true)
    }
    expect(sc.inFlightRequests()).toHaveLength(0)
  })

  it('the indices of a match result, read late, are the KV slots the match reused', () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 256 })
    const first = turn(sc, 'a', range(1, 20), [7])
    const req = sc.createRequest({ rid: 'b', inputIds: [...range(1, 20), 5, 6] })
    const m = sc.matchPrefix(req)
    const want = Array.from(req.reqToToken.subarray(0, m.length))
    expect(m.length).toBe(20)
    expect(want).toEqual(
      Array.from(sc.cache.matchPrefix(first.tokenIds.subarray(0, 20), { readOnly: true }).indices),
    )
    sc.prefill(req, 2)
    sc.cacheUnfinishedReq(req)
    for (let t = 0; t < 70; t++) sc.decode(req, 300 + t) // grows the row past its first capacity
    expect(Array.from(m.indices)).toEqual(want)
    expect(m.indices).toBe(m.indices) // one copy
    expect({ ...m }.indices).toEqual(m.indices) // an own, enumerable property
    // The shape of an object literal: these own keys in this order, `indices` an accessor.
    expect(Object.keys(m)).toEqual([
      'length',
      'indices',
      'lastNode',
      'fromSlot',
      'reprefillTokens',
      'loadedTokens',
    ])
    const d = Object.getOwnPropertyDescriptor(m, 'indices')!
    expect([typeof d.get, d.set, d.enumerable, d.configurable]).toEqual(['function', undefined, true, true])
    sc.cacheFinishedReq(req)
    expect(Array.from(m.indices)).toEqual(want) // read before the end: kept
  })

  it('a request gives its KV row back at its end; a match result read only after the end refuses', () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 256 })
    const a = sc.createRequest({ rid: 'a', inputIds: range(1, 20), maxNewTokens: 4 })
    const ma = sc.matchPrefix(a)
    sc.prefill(a, 20)
    const row = a.reqToToken
    expect(row.length).toBeGreaterThanOrEqual(24)
    sc.cacheFinishedReq(a)
    // SGLang's req_to_token_pool: the row is free again, the finished request shows none.
    expect(a.reqToToken.length).toBe(0)
    expect(a.prefixIndices.length).toBe(0)
    expect(Array.from(a.tokenIds)).toEqual(range(1, 20)) // its tokens stay readable
    const e = expectCode(() => ma.indices, 'REQUEST_FINISHED')
    expect(e.value).toBe('a')
    // The next request of that size takes the same row; its slots are its own.
    const b = sc.createRequest({ rid: 'b', inputIds: range(1, 22), maxNewTokens: 2 })
    const mb = sc.matchPrefix(b)
    expect(b.reqToToken).toBe(row)
    expect(mb.length).toBe(20)
    sc.prefill(b, 2)
    checkSessionInvariants(sc)
    const c = sc.createRequest({ rid: 'c', inputIds: range(500, 9) })
    sc.matchPrefix(c)
    expect(c.reqToToken.buffer).not.toBe(b.reqToToken.buffer) // in flight together: two rows
    sc.abortReq(c)
    expect(c.reqToToken.length).toBe(0)
    checkSessionInvariants(sc)
    sc.cacheFinishedReq(b)
    checkSessionInvariants(sc)
  })

  it('copyInputIds: false reads a Uint32Array prompt in place; decoding copies it, never writes it', () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 512 })
    const stream = Uint32Array.from(range(1, 40))
    const prompt = stream.subarray(0, 21)
    const p = sc.createRequest({ rid: 'p', inputIds: prompt, copyInputIds: false })
    expect(p.originInputIds.buffer).toBe(stream.buffer) // no copy
    expect(sc.matchPrefix(p).length).toBe(0)
    sc.prefill(p, 21)
    sc.cacheUnfinishedReq(p)
    sc.cacheFinishedReq(p)
    expect(Array.from(p.tokenIds)).toEqual(range(1, 21))
    // A decoding turn copies the prompt at its first step; the caller's array is never written.
    sc.openSession('s')
    const d = sc.createRequest({ rid: 'd', sessionId: 's', inputIds: prompt, copyInputIds: false })
    sc.matchPrefix(d)
    sc.prefill(d, 21 - d.kvCommittedLen)
    sc.cacheUnfinishedReq(d)
    for (let t = 0; t < 5; t++) sc.decode(d, 900 + t)
    expect(d.tokenIds.buffer).not.toBe(stream.buffer)
    expect(Array.from(stream)).toEqual(range(1, 40))
    sc.cacheFinishedReq(d)
    checkSessionInvariants(sc)
    // The next turn extends the session's stream (its own copy): only its new tokens are copied.
    const next = Uint32Array.from([...d.tokenIds, 7])
    const d2 = sc.createRequest({ rid: 'd2', sessionId: 's', inputIds: next, copyInputIds: false })
    expect(d2.tokenIds.buffer).not.toBe(next.buffer)
    expect(sc.matchPrefix(d2).length).toBe(24)
    // Ignored for a plain array: copied.
    const plain = [5, 6, 7]
    const q = sc.createRequest({ rid: 'q', inputIds: plain, copyInputIds: false })
    expect(Array.from(q.tokenIds)).toEqual(plain)
    expectCode(
      () => sc.createRequest({ rid: 'e', inputIds: new Uint32Array(0), copyInputIds: false }),
      'INVALID_REQUEST',
    )
  })

  it('outputFollowsInput: decode steps read the tokens after a lent prompt in place until one differs', () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 512 })
    // A conversation's stream: turn 1's prompt [1..10], its output [11..14], turn 2's append.
    const stream = Uint32Array.from(range(1, 30))
    const before = stream.slice()
    sc.openSession('s')
    const follow = { copyInputIds: false, outputFollowsInput: true } as const
    const d = sc.createRequest({ rid: 'd', sessionId: 's', inputIds: stream.subarray(0, 10), ...follow })
    expect(Array.from(d.originInputIds)).toEqual(range(1, 10))
    sc.matchPrefix(d)
    sc.prefill(d, 10)
    sc.cacheUnfinishedReq(d)
    for (const t of [11, 12, 13, 14]) sc.decode(d, t)
    expect(d.tokenIds.buffer).toBe(stream.buffer) // nothing copied
    expect(Array.from(d.tokenIds)).toEqual(range(1, 14))
    expect(Array.from(d.outputIds)).toEqual([11, 12, 13, 14])
    sc.cacheFinishedReq(d)
    checkSessionInvariants(sc)
    expect(Array.from(sc.committedTokens('s')!)).toEqual(range(1, 13)) // the last token has no KV yet
    // Turn 2 extends the committed tokens on the same stream; its output differs at the second
    // token: that step copies, and the stream is never written.
    const d2 = sc.createRequest({ rid: 'd2', sessionId: 's', inputIds: stream.subarray(0, 20), ...follow })
    expect(sc.matchPrefix(d2).length).toBe(12)
    sc.prefill(d2, 20 - d2.kvCommittedLen)
    sc.cacheUnfinishedReq(d2)
    sc.decode(d2, 21)
    expect(d2.tokenIds.buffer).toBe(stream.buffer)
    sc.decode(d2, 99)
    sc.decode(d2, 23)
    expect(d2.tokenIds.buffer).not.toBe(stream.buffer)
    expect(Array.from(d2.tokenIds)).toEqual([...range(1, 21), 99, 23])
    sc.cacheFinishedReq(d2)
    checkSessionInvariants(sc)
    expect(Array.from(stream)).toEqual(Array.from(before))
    // At the end of the caller's buffer the next step copies too.
    const e = sc.createRequest({ rid: 'e', inputIds: stream.subarray(25), ...follow })
    sc.matchPrefix(e)
    sc.prefill(e, 5)
    sc.cacheUnfinishedReq(e)
    sc.decode(e, 31)
    expect(Array.from(e.tokenIds)).toEqual([...range(26, 5), 31])
    expect(Array.from(stream)).toEqual(Array.from(before))
    // Without it, the first step copies even when the token follows.
    const f = sc.createRequest({ rid: 'f', inputIds: stream.subarray(0, 3), copyInputIds: false })
    sc.matchPrefix(f)
    sc.prefill(f, 3 - f.kvCommittedLen)
    sc.cacheUnfinishedReq(f)
    sc.decode(f, 4)
    expect(f.tokenIds.buffer).not.toBe(stream.buffer)
    expectCode(
      () =>
        sc.createRequest({
          rid: 'g',
          inputIds: [1],
          outputFollowsInput: 'yes' as unknown as boolean,
        }),
      'INVALID_REQUEST',
    )
    expectCode(
      () => new SessionCache({ poolSize: 16, lentTokensFrozen: 1 as unknown as boolean }),
      'INVALID_OPTION',
    )
  })

  it("a session's turns share one token stream; earlier turns' tokens never change", () => {
    const { sc } = makeCache({ pageSize: 4, poolSize: 1024 })
    sc.openSession('s')
    const run = (rid: string, inputIds: number[], output: number[], maxNewTokens = 8): SessionRequest => {
      const req = sc.createRequest({ rid, sessionId: 's', inputIds, maxNewTokens })
      sc.matchPrefix(req)
      sc.prefill(req, inputIds.length - req.kvCommittedLen)
      sc.cacheUnfinishedReq(req)
      for (const t of output) sc.decode(req, t)
      sc.cacheFinishedReq(req)
      checkSessionInvariants(sc)
      return req
    }
    const t1 = run('t1', range(1, 10), [50, 51], 40)
    const t1Tokens = Array.from(t1.tokenIds)
    const t2 = run('t2', [...t1.tokenIds, 60, 61, 62], [70])
    expect(t2.tokenIds.buffer).toBe(t1.tokenIds.buffer) // only the new tokens were copied
    // A created turn owns the stream's end: another one created meanwhile copies its prompt.
    const t3 = sc.createRequest({
      rid: 't3',
      sessionId: 's',
      inputIds: [...t2.tokenIds, 80],
      maxNewTokens: 0,
    })
    const other = sc.createRequest({ rid: 'x', sessionId: 's', inputIds: [...t2.tokenIds, 90, 91] })
    expect(t3.tokenIds.buffer).toBe(t2.tokenIds.buffer)
    expect(other.tokenIds.buffer).not.toBe(t2.tokenIds.buffer)
    sc.abortReq(other)
    sc.matchPrefix(t3)
    sc.prefill(t3, t3.originInputIds.length - t3.kvCommittedLen)
    sc.cacheUnfinishedReq(t3)
    for (let t = 0; t < 200; t++) sc.decode(t3, 1000 + t) // grows the stream
    sc.cacheFinishedReq(t3)
    checkSessionInvariants(sc)
    // A prompt that rewrites history (not an extension) gets its own copy; the older turns keep theirs.
    const t4 = sc.createRequest({ rid: 't4', sessionId: 's', inputIds: [...range(1, 10), 7] })
    expect(t4.tokenIds.buffer).not.toBe(t3.tokenIds.buffer)
    expectCode(() => sc.matchPrefix(t4), 'PREFIX_MISMATCH')
    const t2Tokens = [...t1Tokens, 60, 61, 62, 70]
    const t3Tokens = [...t2Tokens, 80, ...range(1000, 200)]
    // Token ids are validated on the stream path as on a copy, before anything changes.
    const bad = [...t3.tokenIds, -1]
    expectCode(() => sc.createRequest({ rid: 'bad', sessionId: 's', inputIds: bad }), 'INVALID_REQUEST')
    const t5 = run('t5', [...t3.tokenIds, 5], [6, 7])
    expect(Array.from(t5.tokenIds)).toEqual([...t3Tokens, 5, 6, 7])
    // An aborted turn's tokens stay too; the turn after it copies its own when it does not extend them.
    const t6 = sc.createRequest({ rid: 't6', sessionId: 's', inputIds: [...t5.tokenIds, 8] })
    sc.matchPrefix(t6)
    sc.abortReq(t6)
    const t7 = run('t7', [...t5.tokenIds, 9], [], 20)
    expect(t7.tokenIds.buffer).not.toBe(t6.tokenIds.buffer)
    const t8 = run('t8', [...t7.tokenIds, 10], [11])
    expect(t8.tokenIds.buffer).toBe(t7.tokenIds.buffer) // t7's copy became the stream
    expect(Array.from(t1.tokenIds)).toEqual(t1Tokens)
    expect(Array.from(t2.tokenIds)).toEqual(t2Tokens)
    expect(Array.from(t3.tokenIds)).toEqual(t3Tokens)
    expect(Array.from(t6.tokenIds)).toEqual([...t3Tokens, 5, 6, 7, 8])
    expect(Array.from(t7.tokenIds)).toEqual([...t3Tokens, 5, 6, 7, 9])
    expect(Array.from(t8.tokenIds)).toEqual([...t3Tokens, 5, 6, 7, 9, 10, 11])
  })
})

describe('releasableTokens', () => {
  it('counts what releasing idle sessions would make obtainable: a shared prefix once, nothing another lock holds', () => {
    const { sc, clock } = makeCache({ pageSize: 4, poolSize: 256 })
    const shared = range(1, 16)
    for (const [i, s] of ['a', 'b'].entries()) {
      clock.t = i * 10
      sc.openSession(s)
      turn(sc, s, [...shared, ...range(100 * (i + 1), 12)], [], { sessionId: s })
    }
    // a: 16 shared + 12 own, b: 16 shared + 12 own; the tree holds 40 tokens, all session-locked.
    expect(sc.cache.evictableSize()).toBe(0)
    expect(sc.releasableTokens()).toBe(40)
    // One session alone: its own 12 tokens; the prefix stays locked by the other.
    expect(sc.releasableTokens({ sessionId: 'a' })).toBe(12)
    expect(sc.releasableTokens({ sessionId: 'b' })).toBe(12)
    expect(sc.releasableTokens({ sessionId: 'ghost' })).toBe(0)
    expect(() => sc.releasableTokens({ sessionId: '' })).toThrow(/sessionId must be a non-empty string/)
    clock.t = 15
    expect(sc.releasableTokens({ idleMs: 10 })).toBe(12) // only a: the shared prefix is b's too
    // A request in flight on b: its lock keeps the prefix and b's tokens.
    sc.matchPrefix(
      sc.createRequest({ rid: 'r', sessionId: 'b', inputIds: [...shared, ...range(200, 12), 5] }),
    )
    expect(sc.releasableTokens()).toBe(12)
    expect(sc.releasableTokens({ sessionId: 'b' })).toBe(0) // busy
    // Alone a is the prefix's last idle holder... but b's request holds it too.
    expect(sc.releasableTokens({ sessionId: 'a' })).toBe(12)
    const before = sc.cache.evictableSize()
    sc.evictIdleSessions({ idleMs: 0 })
    expect(sc.cache.evictableSize() - before).toBe(12)
    expect(() => sc.releasableTokens({ idleMs: -1 })).toThrow(SessionCacheError)
  })

  it('session mode adds the parked tails, which a release frees', () => {
    const { sc } = makeCache({ granularity: 'session', pageSize: 4, poolSize: 256 })
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 16), [100, 101, 102], { sessionId: 's' })
    turn(sc, 'b', [...t1.tokenIds, 7, 8, 9, 10, 11], [103, 104], { sessionId: 's' })
    const r = sc.releasableTokens()
    const obtainable = () => sc.pool.availableSize() + sc.cache.evictableSize()
    const before = obtainable()
    expect(sc.getSessionStatus('s')!.heldTokens).toBeGreaterThan(0)
    expect(r).toBeGreaterThan(sc.getSessionStatus('s')!.heldTokens)
    sc.releaseSession('s')
    expect(obtainable() - before).toBe(r)
  })
})

describe('session granularity (legacy)', () => {
  it('parks the row in the slot, restores later turns from it, and frees the tail at once', () => {
    const { sc, pool } = makeCache({ granularity: 'session', pageSize: 4, poolSize: 256 })
    sc.openSession('s')
    const t1 = turn(sc, 'a', range(1, 18), [50, 51, 52], { sessionId: 's' })
    // Only the first prompt (page-aligned) entered the tree; the decode output is slot-owned.
    expect(sc.cache.totalSize()).toBe(16)
    expect(sc.getSessionStatus('s')).toMatchObject({ residentTokens: 20, committedTokens: 20, heldTokens: 4 })
    const match = vi.spyOn(sc.cache, 'matchPrefix')
    const r2 = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...t1.tokenIds, 60, 61] })
    const m = sc.matchPrefix(r2)
    expect(match).not.toHaveBeenCalled()
    expect(m).toMatchObject({ length: 20, fromSlot: true, reprefillTokens: 0 })
    expect(Array.from(m.indices)).toEqual(Array.from(t1.reqToToken.subarray(0, 20)))
    sc.prefill(r2, 3)
    expect(sc.cacheUnfinishedReq(r2).insertedTokens).toBe(0) // later turns bypass the tree
    sc.decode(r2, 70)
    sc.decode(r2, 71)
    sc.cacheFinishedReq(r2)
    expect(sc.cache.totalSize()).toBe(16)
    const held = sc.getSessionStatus('s')!.heldTokens
    expect(held).toBe(8) // committed 24 (23 prompt + 1 decoded): positions 16..23 on 2 pages
    checkSessionInvariants(sc)
    // An aborted later turn leaves the slot as it was.
    const r3 = sc.createRequest({ rid: 'c', sessionId: 's', inputIds: [...r2.tokenIds, ...range(80, 9)] })
    sc.matchPrefix(r3)
    sc.prefill(r3, 10)
    sc.abortReq(r3)
    expect(sc.getSessionStatus('s')!.heldTokens).toBe(held)
    checkSessionInvariants(sc)
    const free = pool.availableSize()
    expect(sc.releaseSession('s')).toBe(held)
    expect(pool.availableSize()).toBe(free + held)
    expect(sc.cache.protectedSize()).toBe(0)
  })

  it('block granularity re-prefills the unaligned tail of each turn; session granularity keeps it', () => {
    for (const granularity of ['block', 'session'] as const) {
      const { sc } = makeCache({ granularity, pageSize: 4 })
      sc.openSession('s')
      const t1 = turn(sc, 'a', range(1, 10), [20, 21, 22], { sessionId: 's' }) // 12 committed
      const r2 = sc.createRequest({ rid: 'b', sessionId: 's', inputIds: [...t1.tokenIds, 5] })
      const m = sc.matchPrefix(r2)
      expect(m.reprefillTokens).toBe(0) // 12 committed tokens: page-aligned, nothing lost
      expect(m.length).toBe(12)
      const r3prompt = [...t1.tokenIds, 5]
      sc.prefill(r2, r3prompt.length - r2.kvCommittedLen)
      sc.decode(r2, 6)
      sc.decode(r2, 7) // 15 committed: 12 aligned + 3
      sc.cacheFinishedReq(r2)
      const r3 = sc.createRequest({ rid: 'c', sessionId: 's', inputIds: [...r2.tokenIds, 8] })
      const m3 = sc.matchPrefix(r3)
      expect(m3.reprefillTokens).toBe(granularity === 'block' ? 3 : 0)
      expect(sc.stats().reprefillTokens).toBe(granularity === 'block' ? 3 : 0)
    }
  })
})

describe('options', () => {
  it('wraps a given cache and pool', () => {
    const pool = new PagedAllocator({ size: 64, pageSize: 4 })
    const cache = new RadixCache({ pageSize: 4, allocator: pool })
    const sc = new SessionCache({ cache, pool })
    expect(sc.cache).toBe(cache)
    expect(sc.pool).toBe(pool)
    expect(sc.granularity).toBe('block')
    turn(sc, 'a', range(1, 9), [1])
    expect(cache.totalSize()).toBe(8)
  })

  it('remembers a bounded number of released ids', () => {
    const { sc } = makeCache({ releasedMemory: 1 })
    sc.openSession('a')
    sc.openSession('b')
    sc.releaseSession('a')
    sc.releaseSession('b')
    expectRefused(sc, 'UNKNOWN_SESSION', () => sc.releaseSession('a'))
    expectRefused(sc, 'SESSION_RELEASED', () => sc.releaseSession('b'))
  })
})

describe('Histogram', () => {
  it('buckets by upper bound', () => {
    const h = new Histogram([16, 256])
    for (const v of [1, 16, 17, 256, 257, 1000]) h.observe(v)
    expect(h.snapshot()).toEqual({
      bounds: [16, 256],
      counts: [2, 2, 2],
      count: 6,
      sum: 1547,
      max: 1000,
      mean: 1547 / 6,
    })
  })
})

describe('committedTokens and extendsSession', () => {
  it('expose what the next turn must extend', () => {
    const { sc } = makeCache()
    expect(sc.committedTokens('s')).toBeUndefined()
    expect(sc.extendsSession('s', [1, 2, 3])).toBe(false)
    sc.openSession('s')
    expect(sc.committedTokens('s')).toEqual(new Uint32Array(0))
    const t1 = turn(sc, 'a', range(1, 10), [100, 101], { sessionId: 's' })
    const committed = sc.committedTokens('s')!
    // A finished request commits prompt + output minus the newest sampled token (SGLang).
    expect(Array.from(committed)).toEqual(Array.from(t1.tokenIds).slice(0, committed.length))
    expect(committed.length).toBe(11)
    expect(sc.extendsSession('s', [...committed, 7])).toBe(true)
    expect(sc.extendsSession('s', committed)).toBe(false) // must strictly extend
    expect(sc.extendsSession('s', [9, ...committed])).toBe(false)
    // The copy is the caller's: mutating it changes nothing.
    committed.fill(0)
    expect(sc.extendsSession('s', [...range(1, 10), 100, 5])).toBe(true)
    expect(() => sc.extendsSession('s', [1, -1])).toThrow(SessionCacheError)
  })
})
