import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type NodeHandle, RadixCache, RadixCacheError } from '../src/index.js'
import { LOCK_HARNESS_CASES, makeLockHarness } from './lockHarness.js'

/**
 * The naive count `tokensLockedOnlyBy` replaces (what `SessionCache.releasableTokens` did through
 * the public API): walk each holder's path with `parentOf`, count the holders per node in a map,
 * and add the own tokens of every node whose lock count equals its holders.
 */
function naive(cache: RadixCache, nodes: readonly NodeHandle[]): number {
  const count = new Map<NodeHandle, number>()
  for (const h of nodes) {
    for (let n: NodeHandle | undefined = h; n !== undefined; n = cache.parentOf(n)) {
      count.set(n, (count.get(n) ?? 0) + 1)
    }
  }
  let tokens = 0
  for (const [n, c] of count) {
    if (cache.lockRefOf(n) !== c) continue
    const p = cache.parentOf(n)
    tokens += cache.tokensUnder(n) - (p === undefined ? 0 : cache.tokensUnder(p))
  }
  return tokens
}

type Step =
  | { kind: 'insert'; ns: number; tokens: number[] }
  | { kind: 'lock'; pick: number }
  | { kind: 'lockAncestor'; pick: number; up: number }
  | { kind: 'unlock'; pick: number }
  | { kind: 'evict'; n: number }
  | { kind: 'match'; ns: number; tokens: number[] }
  | { kind: 'check'; picks: number[] }

const tokens = fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 12 })
const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), ns: fc.nat(2), tokens }),
  fc.record({ kind: fc.constant('lock' as const), pick: fc.nat(50) }),
  fc.record({
    kind: fc.constant('lockAncestor' as const),
    pick: fc.nat(50),
    up: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({ kind: fc.constant('unlock' as const), pick: fc.nat(50) }),
  fc.record({ kind: fc.constant('evict' as const), n: fc.nat(8) }),
  fc.record({ kind: fc.constant('match' as const), ns: fc.nat(2), tokens }),
  fc.record({ kind: fc.constant('check' as const), picks: fc.array(fc.nat(50), { maxLength: 6 }) }),
)

describe('tokensLockedOnlyBy agrees with the naive per-path count', () => {
  for (const [pageSize, tiered] of LOCK_HARNESS_CASES) {
    it(`pageSize ${pageSize}${tiered ? ', host tier' : ''}`, () => {
      fc.assert(
        fc.property(fc.array(step, { maxLength: 50 }), (steps) => {
          const { cache, insert, match } = makeLockHarness(pageSize, tiered)
          const nss = ['', 'a', 'b']
          // Handles seen so far (live or not) and the locks we hold (a handle per lock).
          const seen: NodeHandle[] = []
          const locks: NodeHandle[] = []
          for (const s of steps) {
            // The last multi-holder count is remembered until a lock moves: after every step, each
            // held lock's count, all of them and the first two (the same holders across a lock move
            // on another handle) are the naive ones (a stale entry would show here).
            for (const h of locks) expect(cache.tokensLockedOnlyBy([h])).toBe(naive(cache, [h]))
            expect(cache.tokensLockedOnlyBy(locks)).toBe(naive(cache, locks))
            const two = locks.slice(0, 2)
            expect(cache.tokensLockedOnlyBy(two)).toBe(naive(cache, two))
            if (s.kind === 'insert') {
              const h = insert(s.tokens, nss[s.ns]!)
              if (h !== undefined) seen.push(h)
            } else if (s.kind === 'match') seen.push(match(s.tokens, nss[s.ns]!))
            else if (s.kind === 'lock') {
              const live = seen.filter((h) => cache.isValid(h))
              if (live.length === 0) continue
              const h = live[s.pick % live.length]!
              cache.incLockRef(h)
              locks.push(h)
            } else if (s.kind === 'lockAncestor') {
              // A lock on a prefix of a locked path: it moves the counts of the locks below it.
              const live = seen.filter((h) => cache.isValid(h))
              if (live.length === 0) continue
              let h = live[s.pick % live.length]!
              for (let i = 0; i < s.up; i++) {
                const p = cache.parentOf(h)
                if (p === undefined || cache.parentOf(p) === undefined) break // not a namespace root
                h = p
              }
              if (cache.parentOf(h) === undefined) continue
              cache.incLockRef(h)
              locks.push(h)
              seen.push(h)
            } else if (s.kind === 'unlock') {
              if (locks.length === 0) continue
              const [h] = locks.splice(s.pick % locks.length, 1)
              cache.decLockRef(h!)
            } else if (s.kind === 'evict') cache.evict(s.n)
            else {
              // Any multiset of held locks (a subset of them, as a session cache counts its idle ones).
              const chosen = locks.length === 0 ? [] : s.picks.map((i) => locks[i % locks.length]!)
              const dedup: NodeHandle[] = []
              const left = [...locks]
              for (const h of chosen) {
                const i = left.indexOf(h)
                if (i >= 0) dedup.push(left.splice(i, 1)[0]!)
              }
              expect(cache.tokensLockedOnlyBy(dedup)).toBe(naive(cache, dedup))
              expect(cache.tokensLockedOnlyBy(locks)).toBe(naive(cache, locks))
            }
          }
          for (const h of locks) expect(cache.tokensLockedOnlyBy([h])).toBe(naive(cache, [h]))
          expect(cache.tokensLockedOnlyBy(locks)).toBe(naive(cache, locks))
          // Releasing every lock: everything they alone protected becomes evictable (on the
          // device: with a host tier, a lock also protects host-only nodes, which the device's
          // evictable size does not count).
          if (tiered) return
          const before = cache.evictableSize()
          const only = cache.tokensLockedOnlyBy(locks)
          for (const h of locks) cache.decLockRef(h)
          expect(cache.evictableSize()).toBe(before + only)
        }),
        { numRuns: 300 },
      )
    })
  }

  it('refuses a stale handle and changes nothing', () => {
    const cache = new RadixCache({ trackValues: false })
    const a = cache.insert([1, 2]).lastNode
    cache.evict(2)
    expect(() => cache.tokensLockedOnlyBy([a])).toThrow(RadixCacheError)
    expect(cache.tokensLockedOnlyBy([])).toBe(0)
  })
})
