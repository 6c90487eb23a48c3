import { PagedAllocator, RadixCache, xxh3BlockHasher } from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { SessionCache, SessionCacheError, type SessionRequest } from '../src/index.js'
import { ReprefillBoundTracker, checkSessionInvariants } from '../src/testing/index.js'

// Theorem 3 (docs/design/host-tier.md): under block-level eviction, the tokens a session must
// recompute on its next turn are at most what was evicted of its own committed prefix since its
// last turn (plus its partial last page) — with a host tier, what left *every* tier — and a held
// session recomputes only its partial page. Random multi-session workloads (turns with chunked
// prefill and decode, explicit evictions, allocation pressure, needTokens and TTL sweeps, caller
// releases, host evictions) run on a SessionCache; ReprefillBoundTracker follows the cache's KV
// events per medium and checks every session turn's admission.
type Op =
  | { k: 'turn'; s: number; append: number; out: number; chunk: number }
  | { k: 'evict'; n: number }
  | { k: 'pressure'; n: number }
  | { k: 'need'; n: number }
  | { k: 'ttl' }
  | { k: 'release'; s: number }
  | { k: 'evictHost'; n: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({
      k: fc.constant('turn' as const),
      s: fc.nat(4),
      append: fc.integer({ min: 1, max: 30 }),
      out: fc.integer({ min: 0, max: 12 }),
      chunk: fc.integer({ min: 4, max: 40 }),
    }),
    weight: 8,
  },
  {
    arbitrary: fc.record({ k: fc.constant('evict' as const), n: fc.integer({ min: 1, max: 60 }) }),
    weight: 1,
  },
  {
    arbitrary: fc.record({ k: fc.constant('pressure' as const), n: fc.integer({ min: 1, max: 100 }) }),
    weight: 1,
  },
  {
    arbitrary: fc.record({ k: fc.constant('need' as const), n: fc.integer({ min: 1, max: 100 }) }),
    weight: 1,
  },
  { arbitrary: fc.constant({ k: 'ttl' as const }), weight: 1 },
  { arbitrary: fc.record({ k: fc.constant('release' as const), s: fc.nat(4) }), weight: 1 },
  {
    arbitrary: fc.record({ k: fc.constant('evictHost' as const), n: fc.integer({ min: 1, max: 60 }) }),
    weight: 1,
  },
)

interface Config {
  readonly evictGranularity: 'leaf' | 'page'
  readonly host?: { readonly capacity: number; readonly writePolicy: 'write_back' | 'write_through' }
}

const P = 4

function run(config: Config, ops: Op[], seen: { reprefills: number; loads: number; admissions: number }) {
  let now = 0
  const hasher = xxh3BlockHasher()
  const bound = new ReprefillBoundTracker({ pageSize: P, hasher })
  const pool = new PagedAllocator({ size: 32 * P, pageSize: P })
  const cache = new RadixCache({
    pageSize: P,
    allocator: pool,
    blockHasher: hasher,
    evictGranularity: config.evictGranularity,
    now: () => now,
    onEvent: (e) => bound.onEvent(e),
    ...(config.host !== undefined ? { hostTier: { ...config.host, loadBackThreshold: 0 } } : {}),
  })
  const sc = new SessionCache({ cache, pool, now: () => now, onEviction: (e) => bound.onEviction(e) })
  const tiered = config.host !== undefined
  const histories = new Map<string, number[]>()
  const tracked = new Set<string>()
  let fresh = 0
  const noteReleases = () => {
    for (const id of tracked) if (!sc.hasSession(id)) bound.released(id)
  }
  const oom = (fn: () => unknown): boolean => {
    try {
      fn()
      return false
    } catch (e) {
      if (e instanceof SessionCacheError && e.code === 'OUT_OF_MEMORY') return true
      throw e
    }
  }
  for (const o of ops) {
    now++
    switch (o.k) {
      case 'turn': {
        const id = `s${o.s}`
        noteReleases()
        if (!sc.hasSession(id)) sc.openSession(id)
        // Appends are unique to the session: only the shared system prompt is shared.
        const base = histories.get(id) ?? Array.from({ length: 8 }, (_, i) => 7 + i)
        const append = Array.from({ length: o.append }, () => 100_000 * (o.s + 1) + fresh++)
        const prompt = base.concat(append)
        const req: SessionRequest = sc.createRequest({ rid: `r${now}`, sessionId: id, inputIds: prompt })
        bound.beforeAdmission(id)
        const m = sc.matchPrefix(req)
        expect(bound.checkAdmission(id, m, tiered)).toEqual([])
        seen.admissions++
        if (m.reprefillTokens > (bound.since(id)?.committed ?? 0) % P) seen.reprefills++
        if (m.loadedTokens > 0) seen.loads++
        let failed = false
        while (!failed && req.kvCommittedLen < prompt.length) {
          const k = Math.min(o.chunk, prompt.length - req.kvCommittedLen)
          failed = oom(() => sc.prefill(req, k))
          if (!failed) sc.cacheUnfinishedReq(req, { chunked: req.kvCommittedLen < prompt.length })
        }
        for (let i = 0; !failed && i < o.out; i++)
          failed = oom(() => sc.decode(req, 100_000 * (o.s + 1) + fresh++))
        if (failed) {
          sc.abortReq(req)
          break
        }
        sc.cacheFinishedReq(req)
        histories.set(id, Array.from(req.tokenIds))
        bound.turnFinished(id, sc.committedTokens(id)!)
        tracked.add(id)
        break
      }
      case 'evict':
        sc.evict(o.n)
        break
      case 'pressure':
        sc.ensureFree(Math.min(o.n, pool.size))
        break
      case 'need':
        sc.evictIdleSessions({ needTokens: o.n })
        break
      case 'ttl':
        sc.evictIdleSessions({ idleMs: 6 })
        break
      case 'release':
        if (sc.hasSession(`s${o.s}`) && sc.getSessionStatus(`s${o.s}`)?.active === false)
          sc.releaseSession(`s${o.s}`)
        break
      case 'evictHost':
        if (tiered) sc.cache.evictHost(o.n)
        break
    }
    noteReleases()
    checkSessionInvariants(sc)
  }
}

describe('Theorem 3: re-prefill under block-level eviction is bounded by what the session lost', () => {
  const configs: [string, Config][] = [
    ['no host tier, page eviction', { evictGranularity: 'page' }],
    ['no host tier, leaf eviction', { evictGranularity: 'leaf' }],
    [
      'host tier 1x (write_back), page eviction',
      { evictGranularity: 'page', host: { capacity: 32 * P, writePolicy: 'write_back' } },
    ],
    [
      'host tier 4x (write_back), leaf eviction',
      { evictGranularity: 'leaf', host: { capacity: 128 * P, writePolicy: 'write_back' } },
    ],
    [
      'small host tier (write_through), page eviction',
      { evictGranularity: 'page', host: { capacity: 8 * P, writePolicy: 'write_through' } },
    ],
  ]
  for (const [name, config] of configs) {
    it(name, () => {
      const seen = { reprefills: 0, loads: 0, admissions: 0 }
      fc.assert(
        fc.property(fc.array(op, { minLength: 10, maxLength: 70 }), (ops) => {
          run(config, ops, seen)
        }),
        { numRuns: 60 },
      )
      // The workloads exercise the bound: sessions do lose device pages (recomputed, or with a
      // tier mostly loaded back: with a 4x host tier almost no admission recomputes anything).
      // (Observed over repeated runs: 115-151 re-prefilling admissions without a tier, 90-140
      // load-backs with the 1x and 4x tiers, 20-32 with the small one.)
      expect(seen.reprefills + seen.loads).toBeGreaterThan(50)
      if (config.host === undefined) expect(seen.reprefills).toBeGreaterThan(50)
      else expect(seen.loads).toBeGreaterThan(config.host.capacity < 32 * P ? 8 : 40)
    })
  }
})

describe('Theorem 3 does not hold for session granularity (the legacy slot)', () => {
  it('one small pressure costs the whole tail beyond the first prompt; block level loses one page', () => {
    const result = (granularity: 'block' | 'session') => {
      let now = 0
      const sc = new SessionCache({
        granularity,
        poolSize: 24 * P,
        pageSize: P,
        evictGranularity: 'page',
        now: () => now,
      })
      sc.openSession('a')
      let history = Array.from({ length: 8 }, (_, i) => i + 1)
      for (let turn = 0; turn < 4; turn++) {
        now++
        const req = sc.createRequest({
          rid: `a${turn}`,
          sessionId: 'a',
          inputIds: history.concat([100 + turn, 200 + turn, 300 + turn]),
        })
        sc.matchPrefix(req)
        sc.prefill(req, req.originInputIds.length - req.kvCommittedLen)
        sc.cacheUnfinishedReq(req)
        for (const t of [400 + turn, 500 + turn, 600 + turn, 700 + turn, 800 + turn]) sc.decode(req, t)
        sc.cacheFinishedReq(req)
        history = Array.from(req.tokenIds)
      }
      // Pressure for one page: block level trims one page off the LRU leaf; the legacy slot is
      // dropped whole.
      now++
      sc.evictIdleSessions({ needTokens: sc.pool.availableSize() + sc.cache.evictableSize() + 1 })
      sc.ensureFree(sc.pool.availableSize() + 1)
      if (!sc.hasSession('a')) sc.openSession('a')
      const req = sc.createRequest({ rid: 'next', sessionId: 'a', inputIds: history.concat([9]) })
      return sc.matchPrefix(req).reprefillTokens
    }
    const block = result('block')
    const legacy = result('session')
    expect(block).toBeLessThanOrEqual(2 * P) // one page lost plus the partial page
    expect(legacy).toBeGreaterThan(6 * P) // the whole tail beyond the first prompt
  })
})
