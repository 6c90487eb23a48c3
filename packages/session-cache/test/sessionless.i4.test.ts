import { PagedAllocator } from '@kvc/radix-cache'
import { tieredPages } from '@kvc/radix-cache/testing'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { SessionCache, SessionCacheError, type SessionRequest } from '../src/index.js'
import { BareRadixEngine, checkSessionInvariants } from '../src/testing/index.js'

// I4: requests without a session behave exactly like the bare radix cache. The same random script
// of sessionless requests (shared prefixes, two namespaces, chunked prefill, decode, retries,
// finish, abort, explicit evictions, memory pressure) runs on a SessionCache (both granularities)
// and on BareRadixEngine, SGLang's request flow written out over a bare RadixCache. After every
// step the match results (lengths and KV slot indices), the pool, the tree's pages with their lock
// counts and the radix cache's own counters must be identical.
type Op =
  | { k: 'begin'; base: number; append: number[]; ns: boolean }
  | { k: 'prefill'; pick: number; n: number }
  | { k: 'decode'; pick: number; tok: number }
  | { k: 'retry'; pick: number }
  | { k: 'finish'; pick: number }
  | { k: 'abort'; pick: number }
  | { k: 'evict'; n: number }
  | { k: 'tick' }

const tok = fc.constantFrom(0, 1, 2, 3)
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({
      k: fc.constant('begin' as const),
      base: fc.nat(3),
      append: fc.array(tok, { minLength: 1, maxLength: 30 }),
      ns: fc.boolean(),
    }),
    weight: 4,
  },
  {
    arbitrary: fc.record({
      k: fc.constant('prefill' as const),
      pick: fc.nat(99),
      n: fc.integer({ min: 1, max: 40 }),
    }),
    weight: 6,
  },
  { arbitrary: fc.record({ k: fc.constant('decode' as const), pick: fc.nat(99), tok }), weight: 4 },
  { arbitrary: fc.record({ k: fc.constant('retry' as const), pick: fc.nat(99) }), weight: 1 },
  { arbitrary: fc.record({ k: fc.constant('finish' as const), pick: fc.nat(99) }), weight: 3 },
  { arbitrary: fc.record({ k: fc.constant('abort' as const), pick: fc.nat(99) }), weight: 1 },
  { arbitrary: fc.record({ k: fc.constant('evict' as const), n: fc.nat(48) }), weight: 1 },
  { arbitrary: fc.constant({ k: 'tick' as const }), weight: 1 },
)

function runBoth(
  granularity: 'block' | 'session',
  pageSize: number,
  evictGranularity: 'leaf' | 'page',
  ops: Op[],
  hostTier?: { capacity: number; writePolicy: 'write_back' | 'write_through'; loadBackThreshold: number },
) {
  let t = 0
  const now = () => t
  const poolSize = 10 * 16
  const sc = new SessionCache({
    granularity,
    pool: new PagedAllocator({ size: poolSize, pageSize }),
    evictGranularity,
    now,
    ...(hostTier !== undefined ? { hostTier } : {}),
  })
  const bare = new BareRadixEngine({
    pageSize,
    poolSize,
    evictGranularity,
    now,
    ...(hostTier !== undefined ? { hostTier } : {}),
  })
  const system = Array.from({ length: 40 }, (_, i) => 50 + i)
  const live: { rid: string; req: SessionRequest }[] = []
  let n = 0
  let loaded = 0
  const same = () => {
    checkSessionInvariants(sc)
    expect(bare.balanced()).toBe(true)
    expect(sc.pool.availableSize()).toBe(bare.pool.availableSize())
    expect([...tieredPages(sc.cache)].sort()).toEqual([...tieredPages(bare.cache)].sort())
    const sa = sc.cache.stats()
    const sb = bare.cache.stats()
    for (const k of Object.keys(sa) as (keyof typeof sa)[]) expect([k, sa[k]]).toEqual([k, sb[k]])
  }
  const drop = (i: number) => live.splice(i, 1)
  for (const o of ops) {
    const i = live.length === 0 ? -1 : ('pick' in o ? o.pick : 0) % live.length
    const cur = i < 0 ? undefined : live[i]!
    switch (o.k) {
      case 'begin': {
        const rid = `r${++n}`
        const prompt = system.slice(0, o.base * 13).concat(o.append)
        const extraKey = o.ns ? 'lora' : ''
        const req = sc.createRequest({ rid, inputIds: prompt, extraKey })
        const a = sc.matchPrefix(req)
        const b = bare.begin(rid, prompt, extraKey)
        expect(a.length).toBe(b.length)
        loaded += a.loadedTokens
        expect(Array.from(a.indices)).toEqual(Array.from(b.indices))
        live.push({ rid, req })
        break
      }
      case 'prefill': {
        if (cur === undefined) break
        const left = cur.req.originInputIds.length - cur.req.kvCommittedLen
        const k = Math.min(o.n, left)
        if (k <= 0) break
        let oom = false
        try {
          sc.prefill(cur.req, k)
        } catch (e) {
          if (!(e instanceof SessionCacheError) || e.code !== 'OUT_OF_MEMORY') throw e
          oom = true
        }
        expect(bare.prefill(cur.rid, k)).toBe(!oom)
        if (oom) {
          sc.abortReq(cur.req)
          bare.abort(cur.rid)
          drop(i)
          break
        }
        const chunked = k < left
        sc.cacheUnfinishedReq(cur.req, { chunked })
        bare.unfinished(cur.rid, chunked)
        break
      }
      case 'decode': {
        if (cur === undefined || cur.req.kvCommittedLen < cur.req.originInputIds.length) break
        let oom = false
        try {
          sc.decode(cur.req, o.tok)
        } catch (e) {
          if (!(e instanceof SessionCacheError) || e.code !== 'OUT_OF_MEMORY') throw e
          oom = true
        }
        expect(bare.decode(cur.rid, o.tok)).toBe(!oom)
        if (oom) {
          sc.abortReq(cur.req)
          bare.abort(cur.rid)
          drop(i)
        }
        break
      }
      case 'retry': {
        if (cur === undefined) break
        const a = sc.matchPrefix(cur.req)
        const b = bare.rematch(cur.rid)
        expect(a.length).toBe(b.length)
        expect(Array.from(a.indices)).toEqual(Array.from(b.indices))
        break
      }
      case 'finish':
        if (cur === undefined) break
        sc.cacheFinishedReq(cur.req)
        bare.finished(cur.rid)
        drop(i)
        break
      case 'abort':
        if (cur === undefined) break
        sc.abortReq(cur.req)
        bare.abort(cur.rid)
        drop(i)
        break
      case 'evict':
        expect(sc.evict(o.n)).toBe(bare.cache.evict(o.n).evictedTokens)
        break
      case 'tick':
        t++
        break
    }
    same()
  }
  expect(sc.stats().loadedBackTokens).toBe(loaded)
  return loaded
}

describe('I4: requests without a session behave exactly like the bare radix cache', () => {
  for (const granularity of ['block', 'session'] as const) {
    for (const [pageSize, evictGranularity] of [
      [1, 'leaf'],
      [16, 'leaf'],
      [16, 'page'],
    ] as const) {
      it(`${granularity} granularity, pageSize ${pageSize}, ${evictGranularity} eviction`, () => {
        fc.assert(
          fc.property(fc.array(op, { maxLength: 80, size: 'max' }), (ops) => {
            runBoth(granularity, pageSize, evictGranularity, ops)
          }),
          { numRuns: 80 },
        )
      })
    }
  }
  // With a host tier under both: demotion on eviction, load-back at admission, the same pages on
  // each tier with the same locks, the same slots, and identical radix counters (host ones too).
  for (const writePolicy of ['write_back', 'write_through'] as const) {
    it(`block granularity with a host tier (${writePolicy}), pageSize 16, page eviction`, () => {
      let loadedRuns = 0
      fc.assert(
        fc.property(fc.array(op, { maxLength: 80, size: 'max' }), (ops) => {
          const hostTier = { capacity: 2 * 10 * 16, writePolicy, loadBackThreshold: 0 } // SGLang's default ratio 2
          if (runBoth('block', 16, 'page', ops, hostTier) > 0) loadedRuns++
        }),
        { numRuns: 150 },
      )
      // The load-back path is exercised (about one run in ten loads something back).
      expect(loadedRuns).toBeGreaterThanOrEqual(5)
    })
  }
})
