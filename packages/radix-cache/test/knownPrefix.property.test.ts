import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type EvictionPolicy, type NodeHandle, PagedAllocator, RadixCache } from '../src/index.js'
import { checkRadixInvariants } from '../src/testing/index.js'

// `_insertFrom` / `_matchPrefixFrom` start their walk at a node the caller vouches for (its path is
// the tokens' prefix). Differential test: a cache that takes the vouched walks and one that takes
// the full walks run the same operations in lockstep; after every step their results and their
// whole state (every node's tokens, values, lock count, access time, hit count, priority) are
// identical, and so is what each eviction removes (the eviction order). Stale or unqualified
// handles (evicted, other namespace, root, longer than the tokens) fall back to the full walk.
// After an insert, the session cache's re-match starts at the node the insert returned (its path is
// the aligned tokens) and copies only the slots of a range: checked the same way.

type Op =
  | {
      kind: 'insert'
      tokens: number[]
      ns: string
      priority: number
      chunked: boolean
      from: number
      rematch: boolean
    }
  | { kind: 'match'; tokens: number[]; ns: string; readOnly: boolean; from: number }
  | { kind: 'lock'; tokens: number[]; ns: string }
  | { kind: 'unlock'; pick: number }
  | { kind: 'evict'; n: number }
  | { kind: 'reset' }

/** A held lock: the node and the tokens its path is (what a caller may vouch for). */
interface Held {
  readonly node: NodeHandle
  readonly tokens: readonly number[]
  readonly ns: string
}

interface Side {
  readonly cache: RadixCache
  readonly pool: PagedAllocator
}

function makeSide(pageSize: number, policy: EvictionPolicy): Side {
  let t = 0
  const pool = new PagedAllocator({ size: 40 * pageSize, pageSize })
  const cache = new RadixCache({
    pageSize,
    evictionPolicy: policy,
    allocator: pool,
    now: () => t++,
    initialNodeCapacity: 4,
  })
  return { cache, pool }
}

/** Every node's observable state, root-first, children in handle order. */
function dump(cache: RadixCache): string {
  const out: string[] = []
  for (const ns of cache.namespaces()) {
    const stack: NodeHandle[] = [cache.rootNode(ns)!]
    while (stack.length > 0) {
      const n = stack.pop()!
      const i = cache.nodeInfo(n)
      out.push(
        `${n}<${String(i.parent)} [${i.tokens.join(',')}] v[${i.values?.join(',')}] lock ${i.lockRef} t ${i.lastAccessTime} c ${i.creationTime} hit ${i.hitCount} pri ${i.priority}`,
      )
      stack.push(...[...cache.childrenOf(n)].sort((a, b) => a - b))
    }
  }
  return out.join('\n')
}

const token = fc.constantFrom(0, 1, 2, 7)
const tokens = fc.array(token, { maxLength: 18 })
const ns = fc.constantFrom('', 'x')
const op: fc.Arbitrary<Op> = fc.oneof(
  fc
    .record({
      tokens,
      ns,
      priority: fc.constantFrom(0, 0, 3),
      chunked: fc.boolean(),
      from: fc.nat(),
      rematch: fc.boolean(),
    })
    .map((r) => ({ kind: 'insert' as const, ...r })),
  fc
    .record({ tokens, ns, readOnly: fc.boolean(), from: fc.nat() })
    .map((r) => ({ kind: 'match' as const, ...r })),
  fc.record({ tokens, ns }).map((r) => ({ kind: 'lock' as const, ...r })),
  fc.nat().map((pick) => ({ kind: 'unlock' as const, pick })),
  fc.integer({ min: 0, max: 30 }).map((n) => ({ kind: 'evict' as const, n })),
  fc.constant({ kind: 'reset' as const }),
)

/**
 * The tokens and the node to vouch for: a held (or once held, maybe evicted since) lock's path
 * extended by the op's own tokens, in the lock's namespace or (odd `from`) the op's; or a non-node
 * with the op's tokens.
 */
function vouch(
  held: Held[],
  stale: Held[],
  from: number,
  own: number[],
  ownNs: string,
): { node: NodeHandle; tokens: number[]; ns: string } {
  const all = [...held, ...stale]
  const k = (from >> 1) % (all.length + 1)
  if (k === all.length) return { node: -1 as NodeHandle, tokens: own, ns: ownNs }
  const h = all[k]!
  return { node: h.node, tokens: [...h.tokens, ...own], ns: from % 2 === 0 ? h.ns : ownNs }
}

function run(pageSize: number, policy: EvictionPolicy, ops: Op[]): void {
  const full = makeSide(pageSize, policy)
  const fast = makeSide(pageSize, policy)
  const held: Held[] = []
  const stale: Held[] = []
  const same = (what: string, a: unknown, b: unknown): void => {
    expect(b, what).toEqual(a)
  }
  for (const o of ops) {
    switch (o.kind) {
      case 'insert':
      case 'lock': {
        // A lock inserts its tokens and locks their node, as a request does.
        const v =
          o.kind === 'insert'
            ? vouch(held, stale, o.from, o.tokens, o.ns)
            : { node: -1 as NodeHandle, tokens: o.tokens, ns: o.ns }
        const n = v.tokens.length
        const pages = Math.ceil(n / pageSize)
        for (const s of [full, fast]) {
          if (pages > s.pool.freePageCount()) s.cache.evict((pages - s.pool.freePageCount()) * pageSize)
        }
        same('free pages', full.pool.freePageCount(), fast.pool.freePageCount())
        if (pages > full.pool.freePageCount()) break
        const opts =
          o.kind === 'insert'
            ? { extraKey: v.ns, priority: o.priority, chunked: o.chunked }
            : { extraKey: v.ns }
        const sa = full.pool.alloc(n)
        const sb = fast.pool.alloc(n)
        const a = full.cache.insert(v.tokens, sa, opts)
        const b = fast.cache._insertFrom(v.node, v.tokens, sb, opts)
        same('insert', a, b)
        for (const [s, slots] of [
          [full, sa],
          [fast, sb],
        ] as const) {
          if (a.prefixLen > 0) s.pool.free(slots.subarray(0, a.prefixLen))
          if (a.alignedLen < n) s.pool.free(slots.subarray(a.alignedLen))
        }
        if (o.kind === 'insert' && o.rematch) {
          // The re-match of the inserted tokens, from the insert's node, writing the slots of
          // [cut, to) only.
          const k = a.alignedLen
          const cut = k === 0 ? 0 : o.from % (k + 1)
          const to = cut + ((o.from >> 5) % (k - cut + 1))
          const into = new Int32Array(k).fill(-7)
          const fm = full.cache.matchPrefix(v.tokens.slice(0, k), { extraKey: v.ns })
          const gm = fast.cache._matchPrefixFrom(
            b.lastNode,
            v.tokens.slice(0, k),
            { extraKey: v.ns, into },
            cut,
            to,
          )
          same('re-match length and node', [fm.length, fm.lastNode], [gm.length, gm.lastNode])
          same(
            're-match slots',
            Array.from(fm.indices.subarray(cut, to)),
            Array.from(gm.indices.subarray(cut, to)),
          )
          const untouched = [...into.subarray(0, cut), ...into.subarray(to)]
          same(
            'slots outside [cut, to) untouched',
            untouched.map(() => -7),
            untouched,
          )
        }
        if (o.kind === 'lock') {
          same('incLockRef', full.cache.incLockRef(a.lastNode), fast.cache.incLockRef(b.lastNode))
          held.push({ node: a.lastNode, tokens: v.tokens.slice(0, a.alignedLen), ns: v.ns })
        }
        break
      }
      case 'match': {
        const v = vouch(held, stale, o.from, o.tokens, o.ns)
        const opts = { extraKey: v.ns, readOnly: o.readOnly }
        same(
          'match',
          full.cache.matchPrefix(v.tokens, opts),
          fast.cache._matchPrefixFrom(v.node, v.tokens, opts),
        )
        break
      }
      case 'unlock': {
        if (held.length === 0) break
        const [h] = held.splice(o.pick % held.length, 1)
        same('decLockRef', full.cache.decLockRef(h!.node), fast.cache.decLockRef(h!.node))
        stale.push(h!)
        break
      }
      case 'evict':
        same('evict', full.cache.evict(o.n), fast.cache.evict(o.n))
        break
      case 'reset':
        if (held.length > 0) break
        full.cache.reset()
        fast.cache.reset()
        break
    }
    checkRadixInvariants(fast.cache)
    same('state', dump(full.cache), dump(fast.cache))
  }
}

describe('vouched walks (_insertFrom, _matchPrefixFrom) equal the full walks', () => {
  for (const pageSize of [1, 2, 4]) {
    for (const policy of ['lru', 'lfu', 'priority'] as const) {
      it(`pageSize ${pageSize}, ${policy}`, () => {
        fc.assert(
          fc.property(fc.array(op, { maxLength: 50 }), (ops) => run(pageSize, policy, ops)),
          { numRuns: 120 },
        )
      })
    }
  }

  it('a vouched walk skips comparing the prefix (it trusts the caller)', () => {
    const { cache, pool } = makeSide(2, 'lru')
    const a = cache.insert([1, 2, 3, 4], pool.alloc(4))
    cache.incLockRef(a.lastNode)
    // [9, 9] is not the node's path, but the vouched walk starts at the node: it finds [5, 6]
    // under it, which only the vouch makes reachable.
    cache.insert([1, 2, 3, 4, 5, 6], pool.alloc(6))
    expect(cache._matchPrefixFrom(a.lastNode, [9, 9, 9, 9, 5, 6]).length).toBe(6)
    expect(cache.matchPrefix([9, 9, 9, 9, 5, 6]).length).toBe(0)
  })
})
