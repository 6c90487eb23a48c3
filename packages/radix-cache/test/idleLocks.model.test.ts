import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type NodeHandle, PagedAllocator, RadixCache, RadixCacheError } from '../src/index.js'

// Model-based test of the idle marks (`markLockIdle` / `unmarkLockIdle` / `idleLockedTokens`):
// random command lists move locks and marks on a real cache while a naive model keeps the list of
// held locks and which of them are marked. After every command the cache's invariant checker runs
// and `idleLockedTokens()` must equal the brute-force count: walk every held lock's path, count
// all locks and the marked ones per node, and add the own tokens of every node whose locks are all
// marked.

interface Model {
  /** Handles seen so far (live or not). */
  readonly seen: NodeHandle[]
  /**
   * One entry per lock held: its handle, whether it is marked idle and, for a marked one, its
   * sole tokens (`tokensLockedOnlyBy([node])`) when `soleLockEpoch()` was `epoch` (-1: none yet).
   */
  readonly locks: { node: NodeHandle; idle: boolean; epoch: number; sole: number }[]
}

interface Real {
  readonly cache: RadixCache
  readonly insert: (t: number[], extraKey: string) => NodeHandle | undefined
  readonly match: (t: number[], extraKey: string) => NodeHandle
}

/** Own tokens of `n` (its edge), through the public API. */
function ownTokens(cache: RadixCache, n: NodeHandle): number {
  const p = cache.parentOf(n)
  return cache.tokensUnder(n) - (p === undefined ? 0 : cache.tokensUnder(p))
}

/** Per node: [locks through it, marked locks through it], from the model's lock list. */
function countsOf(cache: RadixCache, m: Model): Map<NodeHandle, [number, number]> {
  const c = new Map<NodeHandle, [number, number]>()
  for (const { node, idle } of m.locks) {
    for (let n: NodeHandle | undefined = node; n !== undefined && cache.parentOf(n) !== undefined; ) {
      const e = c.get(n) ?? [0, 0]
      e[0]++
      if (idle) e[1]++
      c.set(n, e)
      n = cache.parentOf(n)
    }
  }
  return c
}

/** The brute-force answer `idleLockedTokens()` must give. */
function naiveIdleLocked(cache: RadixCache, m: Model): number {
  let tokens = 0
  for (const [n, [all, idle]] of countsOf(cache, m))
    if (idle > 0 && idle === all) tokens += ownTokens(cache, n)
  return tokens
}

function check(m: Model, r: Real): void {
  const problems = r.cache._checkInternals()
  if (problems.length > 0) throw new Error(problems.join('; '))
  for (const { node } of m.locks) {
    // The model's lock counts are the cache's: no lock was lost or invented.
    const all = countsOf(r.cache, m).get(node)
    if (r.cache.parentOf(node) !== undefined) expect(r.cache.lockRefOf(node)).toBe(all?.[0])
  }
  const want = naiveIdleLocked(r.cache, m)
  expect(r.cache.idleLockedTokens()).toBe(want)
  // The same count as the walk over the marked handles.
  expect(r.cache.tokensLockedOnlyBy(m.locks.filter((l) => l.idle).map((l) => l.node))).toBe(want)
  // While the epoch stands still, a marked holder's sole tokens do not change.
  const epoch = r.cache.soleLockEpoch()
  const counts = countsOf(r.cache, m)
  for (const lock of m.locks) {
    if (!lock.idle) continue
    let sole = 0
    for (let n: NodeHandle | undefined = lock.node; n !== undefined && r.cache.parentOf(n) !== undefined; ) {
      if (counts.get(n)![0] === 1) sole += ownTokens(r.cache, n)
      n = r.cache.parentOf(n)
    }
    expect(r.cache.tokensLockedOnlyBy([lock.node])).toBe(sole)
    if (lock.epoch === epoch) {
      coverage.soleKept++
      expect(sole).toBe(lock.sole)
    }
    lock.epoch = epoch
    lock.sole = sole
  }
}

/** How often the interesting moves happened (a run that never made them would prove nothing). */
const coverage = { busyLockedOverMarks: 0, busyReleasedUnderMarks: 0, soleKept: 0 }

const live = (m: Model, r: Real) => m.seen.filter((h) => r.cache.isValid(h))

type Cmd = fc.Command<Model, Real>
const tokens = fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 12 })
const nss = ['', 'a']

class Insert implements Cmd {
  constructor(
    readonly t: number[],
    readonly ns: number,
  ) {}
  check = () => true
  run(m: Model, r: Real): void {
    const h = r.insert(this.t, nss[this.ns]!)
    if (h !== undefined) m.seen.push(h)
    check(m, r)
  }
  toString = () => `insert([${this.t}], ${this.ns})`
}

class Match implements Cmd {
  constructor(
    readonly t: number[],
    readonly ns: number,
  ) {}
  check = () => true
  run(m: Model, r: Real): void {
    m.seen.push(r.match(this.t, nss[this.ns]!))
    check(m, r)
  }
  toString = () => `match([${this.t}], ${this.ns})`
}

/** Lock a live node, one already locked (`again`), or an ancestor `up` levels above it. */
class Lock implements Cmd {
  constructor(
    readonly pick: number,
    readonly up: number,
    readonly again: boolean,
  ) {}
  check = () => true
  run(m: Model, r: Real): void {
    const l = this.again && m.locks.length > 0 ? m.locks.map((x) => x.node) : live(m, r)
    if (l.length === 0) return
    let h = l[this.pick % l.length]!
    for (let i = 0; i < this.up; i++) {
      const p = r.cache.parentOf(h)
      if (p === undefined || r.cache.parentOf(p) === undefined) break
      h = p
    }
    if (r.cache.parentOf(h) === undefined) return // a namespace root holds no lock
    if ((countsOf(r.cache, m).get(h)?.[1] ?? 0) > 0) coverage.busyLockedOverMarks++
    r.cache.incLockRef(h)
    m.locks.push({ node: h, idle: false, epoch: -1, sole: 0 })
    m.seen.push(h)
    check(m, r)
  }
  toString = () => `lock(${this.pick}, up ${this.up}${this.again ? ', a locked one' : ''})`
}

/** Release a held lock: an unmarked one is released; a marked one only after its unmark. */
class Unlock implements Cmd {
  constructor(
    readonly pick: number,
    readonly unmarkFirst: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.locks.length > 0
  run(m: Model, r: Real): void {
    const i = this.pick % m.locks.length
    const lock = m.locks[i]!
    if (lock.idle && !this.unmarkFirst) {
      // Refused (changing nothing) when every lock through the node is marked; otherwise the
      // cache cannot tell the marked lock from an unmarked one there, so skip it.
      const [all, idle] = countsOf(r.cache, m).get(lock.node)!
      if (idle === all) {
        const before = r.cache.idleLockedTokens()
        expect(() => r.cache.decLockRef(lock.node)).toThrow(RadixCacheError)
        expect(r.cache.idleLockedTokens()).toBe(before)
        check(m, r)
      }
      return
    }
    if (lock.idle) {
      r.cache.unmarkLockIdle(lock.node)
      lock.idle = false
      check(m, r)
    }
    if ((countsOf(r.cache, m).get(lock.node)?.[1] ?? 0) > 0) coverage.busyReleasedUnderMarks++
    r.cache.decLockRef(lock.node)
    m.locks.splice(i, 1)
    check(m, r)
  }
  toString = () => `unlock(${this.pick}${this.unmarkFirst ? ', unmark first' : ''})`
}

class Mark implements Cmd {
  constructor(readonly pick: number) {}
  check = (m: Readonly<Model>) => m.locks.some((l) => !l.idle)
  run(m: Model, r: Real): void {
    const busy = m.locks.filter((l) => !l.idle)
    const lock = busy[this.pick % busy.length]!
    r.cache.markLockIdle(lock.node)
    lock.idle = true
    lock.epoch = -1
    check(m, r)
  }
  toString = () => `mark(${this.pick})`
}

class Unmark implements Cmd {
  constructor(readonly pick: number) {}
  check = (m: Readonly<Model>) => m.locks.some((l) => l.idle)
  run(m: Model, r: Real): void {
    const idle = m.locks.filter((l) => l.idle)
    const lock = idle[this.pick % idle.length]!
    r.cache.unmarkLockIdle(lock.node)
    lock.idle = false
    check(m, r)
  }
  toString = () => `unmark(${this.pick})`
}

/** Marking a node none of whose locks is left unmarked, or unmarking one with no mark: refused. */
class BadMark implements Cmd {
  constructor(readonly pick: number) {}
  check = () => true
  run(m: Model, r: Real): void {
    const l = live(m, r).filter((h) => r.cache.parentOf(h) !== undefined)
    if (l.length === 0) return
    const h = l[this.pick % l.length]!
    const [all, idle] = countsOf(r.cache, m).get(h) ?? [0, 0]
    const before = r.cache.idleLockedTokens()
    if (idle === all) expect(() => r.cache.markLockIdle(h)).toThrow(RadixCacheError)
    if (idle === 0) expect(() => r.cache.unmarkLockIdle(h)).toThrow(RadixCacheError)
    expect(r.cache.idleLockedTokens()).toBe(before)
    check(m, r)
  }
  toString = () => `badMark(${this.pick})`
}

class Evict implements Cmd {
  constructor(readonly n: number) {}
  check = () => true
  run(m: Model, r: Real): void {
    r.cache.evict(this.n)
    check(m, r)
  }
  toString = () => `evict(${this.n})`
}

const commands = [
  fc.tuple(tokens, fc.nat(1)).map(([t, ns]) => new Insert(t, ns)),
  fc.tuple(tokens, fc.nat(1)).map(([t, ns]) => new Match(t, ns)),
  fc
    .tuple(fc.nat(50), fc.integer({ min: 0, max: 2 }), fc.boolean())
    .map(([p, up, again]) => new Lock(p, up, again)),
  fc.tuple(fc.nat(50), fc.boolean()).map(([p, u]) => new Unlock(p, u)),
  fc.nat(50).map((p) => new Mark(p)),
  fc.nat(50).map((p) => new Unmark(p)),
  fc.nat(50).map((p) => new BadMark(p)),
  fc.nat(8).map((n) => new Evict(n)),
]

/** A tree alone (no KV values), or with a device pool and a host tier whose matches load back. */
function makeReal(pageSize: number, tiered: boolean): Real {
  if (!tiered) {
    const cache = new RadixCache({ pageSize, trackValues: false, evictGranularity: 'page' })
    return {
      cache,
      insert: (t, extraKey) => cache.insert(t, undefined, { extraKey }).lastNode,
      match: (t, extraKey) => cache.matchPrefix(t, { extraKey }).lastNode,
    }
  }
  const pool = new PagedAllocator({ size: 24 * pageSize, pageSize })
  const cache = new RadixCache({ pageSize, allocator: pool, hostTier: { capacity: 48 * pageSize } })
  return {
    cache,
    insert: (t, extraKey) => {
      const len = t.length - (t.length % pageSize)
      if (pool.availableSize() < len) cache.evict(len)
      if (pool.availableSize() < len) return undefined
      const slots = pool.alloc(len)
      const res = cache.insert(t.slice(0, len), slots, { extraKey })
      if (res.prefixLen > 0) pool.free(slots.subarray(0, res.prefixLen))
      if (res.alignedLen < len) pool.free(slots.subarray(res.alignedLen))
      return res.lastNode
    },
    match: (t, extraKey) => cache.matchPrefix(t, { extraKey, loadBack: true }).lastNode,
  }
}

describe('idle lock marks agree with the brute-force count', () => {
  for (const [pageSize, tiered] of [
    [1, false],
    [2, false],
    [3, false],
    [1, true],
    [2, true],
  ] as const) {
    it(`pageSize ${pageSize}${tiered ? ', host tier' : ''}`, () => {
      const before = { ...coverage }
      fc.assert(
        fc.property(fc.commands(commands, { maxCommands: 80, size: 'max' }), (cmds) => {
          fc.modelRun(() => ({ model: { seen: [], locks: [] }, real: makeReal(pageSize, tiered) }), cmds)
        }),
        { numRuns: 250 },
      )
      // The runs moved busy locks across marked nodes both ways, many times.
      expect(coverage.busyLockedOverMarks - before.busyLockedOverMarks).toBeGreaterThan(10)
      expect(coverage.busyReleasedUnderMarks - before.busyReleasedUnderMarks).toBeGreaterThan(10)
      expect(coverage.soleKept - before.soleKept).toBeGreaterThan(100)
    })
  }

  it('releasing every marked lock makes exactly the idle-only tokens evictable', () => {
    const cache = new RadixCache({ trackValues: false })
    const a = cache.insert([1, 2, 3, 4]).lastNode
    const b = cache.insert([1, 2, 5, 6]).lastNode
    const c = cache.insert([1, 2, 5, 7]).lastNode
    for (const h of [a, b, c]) cache.incLockRef(h)
    cache.markLockIdle(a)
    cache.markLockIdle(b)
    // [3, 4] and [6]: [1, 2] and [5] are also c's, which is busy.
    expect(cache.idleLockedTokens()).toBe(3)
    const before = cache.evictableSize()
    for (const h of [a, b]) {
      cache.unmarkLockIdle(h)
      cache.decLockRef(h)
    }
    expect(cache.evictableSize()).toBe(before + 3)
    expect(cache.idleLockedTokens()).toBe(0)
    expect(cache._checkInternals()).toEqual([])
  })

  it('a split of a marked node keeps the count', () => {
    const cache = new RadixCache({ trackValues: false })
    const a = cache.insert([1, 2, 3, 4]).lastNode
    cache.incLockRef(a)
    cache.markLockIdle(a)
    cache.insert([1, 2, 9]) // splits [1, 2, 3, 4] at 2
    expect(cache.idleLockedTokens()).toBe(4)
    expect(cache._checkInternals()).toEqual([])
  })

  it('refuses bad marks with IDLE_LOCK_MISMATCH and a stale handle with UNKNOWN_NODE', () => {
    const cache = new RadixCache({ trackValues: false })
    const a = cache.insert([1, 2]).lastNode
    expect(() => cache.markLockIdle(a)).toThrow(
      expect.objectContaining({ code: 'IDLE_LOCK_MISMATCH', value: a }),
    )
    cache.incLockRef(a)
    expect(() => cache.unmarkLockIdle(a)).toThrow(expect.objectContaining({ code: 'IDLE_LOCK_MISMATCH' }))
    cache.markLockIdle(a)
    expect(() => cache.markLockIdle(a)).toThrow(expect.objectContaining({ code: 'IDLE_LOCK_MISMATCH' }))
    expect(() => cache.decLockRef(a)).toThrow(expect.objectContaining({ code: 'IDLE_LOCK_MISMATCH' }))
    expect(cache.lockRefOf(a)).toBe(1)
    expect(cache.idleLockedTokens()).toBe(2)
    cache.unmarkLockIdle(a)
    cache.decLockRef(a)
    cache.evict(2)
    expect(() => cache.markLockIdle(a)).toThrow(expect.objectContaining({ code: 'UNKNOWN_NODE' }))
    expect(cache._checkInternals()).toEqual([])
  })
})
