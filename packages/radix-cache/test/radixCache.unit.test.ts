import { describe, expect, it } from 'vitest'
import {
  type EvictionPolicy,
  formatTree,
  type KvEvent,
  PagedAllocator,
  RadixCache,
  RadixCacheError,
  type RadixCacheErrorCode,
} from '../src/index.js'
import { checkRadixInvariants } from '../src/testing/index.js'

function lengthsOnly(pageSize = 1, extra: Partial<ConstructorParameters<typeof RadixCache>[0]> = {}) {
  let t = 0
  return new RadixCache({ pageSize, trackValues: false, now: () => t++, ...extra })
}

function expectCode(fn: () => unknown, code: RadixCacheErrorCode): RadixCacheError {
  try {
    fn()
  } catch (e) {
    expect(e).toBeInstanceOf(RadixCacheError)
    expect((e as RadixCacheError).code).toBe(code)
    return e as RadixCacheError
  }
  throw new Error(`expected ${code}`)
}

describe('insert and match', () => {
  it('returns the already-present prefix and only inserts page-aligned keys', () => {
    const c = lengthsOnly(4)
    expect(c.insert([1, 2, 3, 4, 5, 6, 7, 8, 9])).toMatchObject({ prefixLen: 0, alignedLen: 8 })
    expect(c.totalSize()).toBe(8)
    expect(c.insert([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]).prefixLen).toBe(8)
    expect(c.insert([1, 2, 3])).toMatchObject({ prefixLen: 0, alignedLen: 0 })
    expect(c.totalSize()).toBe(12)
    checkRadixInvariants(c)
  })

  it('lendTokens: nodes keep views of a lent stream; walks compare it unless it is the same place', () => {
    const c = lengthsOnly(2)
    // One stream lent from two places: [1 2 | 3 4] at 0 and [1 2 | 5 6] at 4.
    const stream = Uint32Array.of(1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 3, 4, 9, 9)
    const copy = stream.slice()
    expect(c.insert(stream.subarray(0, 4), undefined, { lendTokens: true }).prefixLen).toBe(0)
    // The same stream at another place: the first page matches, the second differs.
    expect(c.matchPrefix(stream.subarray(4, 8)).length).toBe(2)
    expect(c.insert(stream.subarray(4, 8), undefined, { lendTokens: true }).prefixLen).toBe(2)
    // Equal tokens at a third place, and the very same place extended.
    expect(c.matchPrefix(stream.subarray(8, 14)).length).toBe(4)
    expect(c.matchPrefix(stream.subarray(0, 8)).length).toBe(4)
    expect(c.insert(stream.subarray(0, 14), undefined, { lendTokens: true }).prefixLen).toBe(4)
    expect(c.matchPrefix([1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 3, 4, 9, 9]).length).toBe(14)
    expect(c.matchPrefix([1, 2, 3, 4, 1, 2, 5, 7]).length).toBe(6)
    expect(c.totalSize()).toBe(16)
    expect(Array.from(stream)).toEqual(Array.from(copy)) // never written
    checkRadixInvariants(c)
    // Ignored for a plain array; anything but a boolean is refused.
    expect(c.insert([7, 7], undefined, { lendTokens: true }).prefixLen).toBe(0)
    expectCode(() => c.insert([8, 8], undefined, { lendTokens: 1 as unknown as boolean }), 'INVALID_OPTION')
  })

  it('matches whole pages only', () => {
    const c = lengthsOnly(4)
    c.insert([1, 2, 3, 4, 5, 6, 7, 8])
    expect(c.matchPrefix([1, 2, 3, 4, 5, 6, 7, 9]).length).toBe(4)
    expect(c.matchPrefix([1, 2, 3]).length).toBe(0)
    expect(c.matchPrefix([]).length).toBe(0)
    expect(c.matchPrefix([9, 9, 9, 9]).length).toBe(0)
  })

  it('splits at the match boundary and keeps the child identity on the suffix', () => {
    const c = lengthsOnly(2)
    const { lastNode } = c.insert([1, 2, 3, 4, 5, 6])
    expect(c.stats().nodeCount).toBe(1)
    const m = c.matchPrefix([1, 2, 3, 4, 9, 9])
    expect(m.length).toBe(4)
    expect(c.stats().nodeCount).toBe(2)
    expect(c.stats().splits).toBe(1)
    expect(c.tokensUnder(m.lastNode)).toBe(4)
    // The old handle still names the (now shorter) suffix node, ending at the same depth.
    expect(c.tokensUnder(lastNode)).toBe(6)
    expect(c.nodeInfo(lastNode).parent).toBe(m.lastNode)
    checkRadixInvariants(c)
  })

  it('readOnly match neither splits nor refreshes access time', () => {
    let t = 100
    const c = new RadixCache({ pageSize: 2, trackValues: false, now: () => t })
    const { lastNode } = c.insert([1, 2, 3, 4])
    t = 200
    const m = c.matchPrefix([1, 2, 9, 9], { readOnly: true })
    expect(m.length).toBe(2)
    expect(c.stats().nodeCount).toBe(1)
    expect(c.nodeInfo(lastNode).lastAccessTime).toBe(100)
    // The match ends inside a node: lastNode is the deepest node wholly inside it (the root).
    expect(c.nodeInfo(m.lastNode).isRoot).toBe(true)
    c.matchPrefix([1, 2, 3, 4])
    expect(c.nodeInfo(lastNode).lastAccessTime).toBe(200)
  })

  it('returns the stored KV slot indices for the matched prefix', () => {
    const pool = new PagedAllocator({ size: 64, pageSize: 2 })
    const c = new RadixCache({ pageSize: 2, allocator: pool })
    const a = Int32Array.of(10, 11, 20, 21, 30, 31)
    c.insert([1, 2, 3, 4, 5, 6], a)
    // insert copies values: later changes to the caller's row do not leak into the tree.
    a.fill(0)
    expect(Array.from(c.matchPrefix([1, 2, 3, 4, 7, 7]).indices)).toEqual([10, 11, 20, 21])
    expect(Array.from(c.matchPrefix([1, 2, 3, 4, 5, 6]).indices)).toEqual([10, 11, 20, 21, 30, 31])
    expect(c.matchPrefix([1, 2, 3, 4, 5, 6], { readOnly: true }).indices.length).toBe(6)
    const row = new Int32Array(8).fill(-1)
    const hit = c.matchPrefix([1, 2, 3, 4, 5, 6, 7], { into: row })
    expect(hit.indices.buffer).toBe(row.buffer)
    expect(Array.from(row)).toEqual([10, 11, 20, 21, 30, 31, -1, -1])
    expectCode(() => c.matchPrefix([1, 2, 3, 4, 5, 6], { into: new Int32Array(4) }), 'INVALID_OPTION')
  })

  it('keeps namespaces apart', () => {
    const c = lengthsOnly(1)
    c.insert([1, 2, 3], undefined, { extraKey: 'lora-a' })
    expect(c.matchPrefix([1, 2, 3]).length).toBe(0)
    expect(c.matchPrefix([1, 2, 3], { extraKey: 'lora-b' }).length).toBe(0)
    expect(c.matchPrefix([1, 2, 3], { extraKey: 'lora-a' }).length).toBe(3)
    expect(c.insert([1, 2, 3]).prefixLen).toBe(0)
    expect(c.namespaces()).toEqual(['', 'lora-a'])
    checkRadixInvariants(c)
  })

  it('handles siblings whose first pages collide in the child-key hash', () => {
    // Many distinct first pages under one parent: correctness must not depend on the hash.
    const c = lengthsOnly(2)
    for (let i = 0; i < 2000; i++) c.insert([7, 7, i, i + 1, 3, 3])
    for (let i = 0; i < 2000; i++)
      expect(c.matchPrefix([7, 7, i, i + 1, 3, 3], { readOnly: true }).length).toBe(6)
    expect(c.matchPrefix([7, 7, 5000, 5001], { readOnly: true }).length).toBe(2)
    checkRadixInvariants(c)
  })

  it('accepts Uint32Array keys at the full token range', () => {
    const c = lengthsOnly(1)
    c.insert(Uint32Array.of(0xffffffff, 0))
    expect(c.matchPrefix([0xffffffff, 0]).length).toBe(2)
  })

  it('counts hits on insert unless chunked, and propagates priority to the max', () => {
    const c = lengthsOnly(1)
    const a = c.insert([1, 2], undefined, { priority: 5 })
    c.insert([1, 2], undefined, { priority: 1 })
    c.insert([1, 2], undefined, { chunked: true })
    expect(c.nodeInfo(a.lastNode).hitCount).toBe(2)
    expect(c.nodeInfo(a.lastNode).priority).toBe(5)
  })
})

describe('locks', () => {
  it('moves sizes on 0<->1 transitions only and walks to the root', () => {
    const c = lengthsOnly(1)
    const a = c.insert([1, 2, 3]).lastNode
    const b = c.insert([1, 2, 3, 4, 5]).lastNode
    expect(c.incLockRef(b)).toBe(5)
    expect(c.incLockRef(a)).toBe(0)
    expect(c.protectedSize()).toBe(5)
    expect(c.decLockRef(b)).toBe(2)
    expect(c.protectedSize()).toBe(3)
    expect(c.decLockRef(a)).toBe(3)
    expect(c.evictableSize()).toBe(5)
    checkRadixInvariants(c)
  })

  it('never evicts a locked path', () => {
    const c = lengthsOnly(1)
    const a = c.insert([1, 2, 3]).lastNode
    c.insert([4, 5, 6])
    c.incLockRef(a)
    expect(c.evict(100).evictedTokens).toBe(3)
    expect(c.matchPrefix([1, 2, 3]).length).toBe(3)
    c.decLockRef(a)
    expect(c.evict(100).evictedTokens).toBe(3)
    expect(c.totalSize()).toBe(0)
  })

  it('locking a root is a no-op', () => {
    const c = lengthsOnly(1)
    const root = c.rootNode()!
    expect(c.incLockRef(root)).toBe(0)
    expect(c.decLockRef(root)).toBe(0)
  })
})

describe('eviction', () => {
  function orderOf(policy: EvictionPolicy, script: (c: RadixCache) => void): string[] {
    let t = 0
    const c = new RadixCache({ pageSize: 1, trackValues: false, evictionPolicy: policy, now: () => t++ })
    script(c)
    const order: string[] = []
    while (c.totalSize() > 0) {
      const before = new Set(c.childrenOf(c.rootNode()!).map((n) => c.nodeInfo(n).tokens[0]))
      c.evict(1)
      const after = new Set(c.childrenOf(c.rootNode()!).map((n) => c.nodeInfo(n).tokens[0]))
      for (const k of before) if (!after.has(k)) order.push(String(k))
    }
    return order
  }
  // Three leaves under the root: created a, b, c; accessed c, a; b hit three times, c with priority 9.
  const script = (c: RadixCache): void => {
    c.insert([1])
    c.insert([2])
    c.insert([3], undefined, { priority: 9 })
    c.insert([2])
    c.insert([2])
    c.matchPrefix([3])
    c.matchPrefix([1])
  }
  it.each([
    ['lru', ['2', '3', '1']],
    ['mru', ['1', '3', '2']],
    ['fifo', ['1', '2', '3']],
    ['filo', ['3', '2', '1']],
    ['lfu', ['3', '1', '2']],
    ['priority', ['2', '1', '3']],
    ['slru', ['3', '1', '2']],
  ] as const)('%s order', (policy, expected) => {
    expect(orderOf(policy, script)).toEqual(expected)
  })

  it('leaf granularity frees whole leaves and cascades to parents', () => {
    const c = lengthsOnly(2)
    c.insert([1, 2, 3, 4, 5, 6])
    c.insert([1, 2, 7, 8])
    expect(c.evict(1)).toEqual({ evictedTokens: 4, evictedNodes: 1 })
    expect(c.evict(3)).toEqual({ evictedTokens: 4, evictedNodes: 2 })
    expect(c.totalSize()).toBe(0)
  })

  it('page granularity trims the tail of the leaf page by page', () => {
    const events: KvEvent[] = []
    let t = 0
    const c = new RadixCache({
      pageSize: 2,
      trackValues: false,
      evictGranularity: 'page',
      now: () => t++,
      onEvent: (e) => events.push(e),
    })
    c.insert([1, 2, 3, 4, 5, 6, 7, 8])
    events.length = 0
    expect(c.evict(3)).toEqual({ evictedTokens: 4, evictedNodes: 1 })
    expect(c.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8], { readOnly: true }).length).toBe(4)
    expect(events.map((e) => e.type)).toEqual(['BlockRemoved', 'BlockRemoved'])
    checkRadixInvariants(c)
  })

  it('frees evicted slots to the allocator', () => {
    const pool = new PagedAllocator({ size: 16, pageSize: 2 })
    const c = new RadixCache({ pageSize: 2, allocator: pool })
    const slots = pool.alloc(6)
    c.insert([1, 2, 3, 4, 5, 6], slots)
    expect(pool.availableSize()).toBe(10)
    c.evict(6)
    expect(pool.availableSize()).toBe(16)
  })

  it('evicts one least-recently-used leaf per call among many leaves, parents once they become leaves', () => {
    // The cost (O(log n) per call, the heap kept incrementally) is measured in bench/evict.bench.ts.
    const c = lengthsOnly(1)
    for (let i = 0; i < 20000; i++) c.insert([i >> 8, i & 255, 7])
    for (let i = 0; i < 1000; i++) c.evict(1)
    // Each call evicts one node: the leaves [i & 255, 7] in insertion order, and each parent [g]
    // right after its 256th child, when it is the oldest leaf: 3 x 257 calls, then leaves 768..996.
    expect(c.stats().evictedNodes).toBe(1000)
    expect(c.stats().evictedTokens).toBe(997 * 2 + 3)
    expect(c.matchPrefix([0, 0, 7], { readOnly: true }).length).toBe(0)
    expect(c.matchPrefix([2, 255, 7], { readOnly: true }).length).toBe(0)
    expect(c.matchPrefix([3, 996 & 255, 7], { readOnly: true }).length).toBe(1)
    expect(c.matchPrefix([3, 997 & 255, 7], { readOnly: true }).length).toBe(3)
    expect(c.matchPrefix([77, 19999 & 255, 7], { readOnly: true }).length).toBe(3)
    checkRadixInvariants(c)
  })
})

describe('KV events', () => {
  it('emits one BlockStored per page with chained parents, and balances removals', () => {
    const events: KvEvent[] = []
    const c = new RadixCache({ pageSize: 2, trackValues: false, onEvent: (e) => events.push(e) })
    c.insert([1, 2, 3, 4])
    c.insert([1, 2, 5, 6], undefined, { extraKey: 'salt' })
    c.insert([1, 2, 3, 4, 9, 9])
    const stored = events.filter((e) => e.type === 'BlockStored')
    expect(stored).toHaveLength(5)
    expect(events.map((e) => e.eventId)).toEqual([0, 1, 2, 3, 4])
    const [a, b, , , e] = stored
    expect(a!.parentBlockHash).toBeNull()
    expect(b!.parentBlockHash).toBe(a!.blockHashes[0])
    expect(e!.parentBlockHash).toBe(b!.blockHashes[0])
    expect(e!.tokenIds).toEqual([9, 9])
    expect(stored[2]!.extraKey).toBe('salt')
    c.evict(Number.POSITIVE_INFINITY)
    const removed = events.filter((x) => x.type === 'BlockRemoved').flatMap((x) => x.blockHashes)
    expect(new Set(removed)).toEqual(new Set(stored.flatMap((x) => x.blockHashes)))
    c.reset()
    expect(events.at(-1)).toEqual({ type: 'AllBlocksCleared', eventId: events.length - 1 })
  })

  it("'node' batching emits one event per node with the same hashes, and tokenIds can be left out", () => {
    const perPage: KvEvent[] = []
    const perNode: KvEvent[] = []
    const a = new RadixCache({ pageSize: 2, trackValues: false, onEvent: (e) => perPage.push(e) })
    const b = new RadixCache({
      pageSize: 2,
      trackValues: false,
      eventBatching: 'node',
      eventTokenIds: false,
      onEvent: (e) => perNode.push(e),
    })
    for (const c of [a, b]) {
      c.insert([1, 2, 3, 4, 5, 6])
      c.insert([1, 2, 3, 4, 7, 8])
      c.evict(Number.POSITIVE_INFINITY)
    }
    const stored = (es: KvEvent[]) => es.flatMap((e) => (e.type === 'BlockStored' ? e.blockHashes : []))
    const removed = (es: KvEvent[]) => es.flatMap((e) => (e.type === 'BlockRemoved' ? e.blockHashes : []))
    expect(stored(perNode)).toEqual(stored(perPage))
    expect(new Set(removed(perNode))).toEqual(new Set(removed(perPage)))
    expect(perPage).toHaveLength(8)
    // 2 stores (the first leaf, then [7,8] under the split), 3 removals (two leaves, then the parent).
    expect(perNode.map((e) => e.type)).toEqual([
      'BlockStored',
      'BlockStored',
      'BlockRemoved',
      'BlockRemoved',
      'BlockRemoved',
    ])
    const second = perNode[1]!
    expect(second.type === 'BlockStored' && second.parentBlockHash).toBe(stored(perPage)[1])
    expect(second.type === 'BlockStored' && second.tokenIds).toEqual([])
    expect(() => new RadixCache({ eventBatching: 'x' as 'page' })).toThrow(RadixCacheError)
  })

  it('blockHashDump lists exactly the held blocks, consistent with the event stream', () => {
    const events: KvEvent[] = []
    const c = new RadixCache({ pageSize: 2, trackValues: false, onEvent: (e) => events.push(e) })
    expect(c.blockHashDump()).toEqual({ blockHashes: [], lastEventId: -1 })
    c.insert([1, 2, 3, 4, 5, 6])
    c.insert([1, 2, 7, 8])
    c.evict(2)
    const held = new Set<bigint>()
    for (const e of events) {
      if (e.type === 'BlockStored') for (const h of e.blockHashes) held.add(h)
      if (e.type === 'BlockRemoved') for (const h of e.blockHashes) held.delete(h)
    }
    const dump = c.blockHashDump()
    expect(new Set(dump.blockHashes)).toEqual(held)
    expect(dump.blockHashes).toHaveLength(2) // [1,2] and [7,8]: the LRU leaf [3..6] went
    expect(dump.lastEventId).toBe(events.length - 1)
    expect(c.lastEventId()).toBe(events.length - 1)
    expect(new RadixCache({ trackValues: false }).blockHashDump().blockHashes).toEqual([])
  })

  it('keeps page hashes across splits', () => {
    const events: KvEvent[] = []
    const c = new RadixCache({ pageSize: 1, trackValues: false, onEvent: (e) => events.push(e) })
    c.insert([1, 2, 3])
    const m = c.matchPrefix([1, 2, 9])
    expect(c.blockHashesOf(m.lastNode)).toEqual(
      events.slice(0, 2).flatMap((e) => (e.type === 'BlockStored' ? e.blockHashes : [])),
    )
    c.insert([1, 2, 8])
    const last = events.at(-1)
    expect(last?.type === 'BlockStored' && last.parentBlockHash).toBe(c.blockHashesOf(m.lastNode)[1])
  })
})

describe('reset and stats', () => {
  it('reset empties the tree, keeps namespace roots and is refused while locked', () => {
    const pool = new PagedAllocator({ size: 8, pageSize: 1 })
    const c = new RadixCache({ allocator: pool })
    const { lastNode } = c.insert([1, 2], pool.alloc(2), { extraKey: 'x' })
    c.incLockRef(lastNode)
    expectCode(() => c.reset(), 'RESET_WHILE_LOCKED')
    expect(c.totalSize()).toBe(2)
    c.decLockRef(lastNode)
    c.reset()
    expect(c.totalSize()).toBe(0)
    expect(pool.availableSize()).toBe(8)
    expect(c.isValid(lastNode)).toBe(false)
    expect(c.rootNode('x')).toBeDefined()
    checkRadixInvariants(c)
  })

  it('stats count matches, hits and evictions', () => {
    const c = lengthsOnly(1)
    c.insert([1, 2, 3, 4])
    c.matchPrefix([1, 2, 9, 9])
    c.evict(2)
    expect(c.stats()).toMatchObject({
      matchCalls: 1,
      matchQueriedTokens: 4,
      matchHitTokens: 2,
      hitRatio: 0.5,
      insertCalls: 1,
      insertedTokens: 4,
      evictCalls: 1,
      evictedTokens: 2,
    })
  })
})

describe('formatTree', () => {
  it('prints the tree shape like SGLang pretty_print', () => {
    const c = lengthsOnly(2)
    c.insert([1, 2, 3, 4, 5, 6])
    c.insert([1, 2, 3, 4, 7, 8])
    c.insert([9, 9])
    c.insert([1, 2], undefined, { extraKey: 'lora' })
    c.incLockRef(c.matchPrefix([9, 9]).lastNode)
    expect(formatTree(c)).toMatchInlineSnapshot(`
      "4 [1,2,3,4] r=0
        2 [5,6] r=0
        2 [7,8] r=0
      2 [9,9] r=1
      [ns=lora]
        2 [1,2] r=0
      #tokens: 12"
    `)
    expect(formatTree(c, { maxTokens: 1 })).toContain('4 [1,…] r=0')
  })
})

describe('errors: refused and nothing changes', () => {
  it.each([
    ['pageSize 0', () => new RadixCache({ pageSize: 0 }), 'INVALID_OPTION'],
    ['pageSize 1.5', () => new RadixCache({ pageSize: 1.5 }), 'INVALID_OPTION'],
    ['unknown policy', () => new RadixCache({ evictionPolicy: 'nope' as EvictionPolicy }), 'INVALID_OPTION'],
    ['bad granularity', () => new RadixCache({ evictGranularity: 'x' as 'leaf' }), 'INVALID_OPTION'],
  ] as const)('%s', (_name, fn, code) => {
    expectCode(fn, code)
  })

  it('bad tokens, values and handles', () => {
    const pool = new PagedAllocator({ size: 64, pageSize: 1 })
    const c = new RadixCache({ allocator: pool })
    c.insert([1, 2], pool.alloc(2))
    const before = formatTree(c, { showValues: true })
    expect(expectCode(() => c.insert([1, -1], Int32Array.of(5, 6)), 'INVALID_TOKEN').value).toBe(-1)
    expectCode(() => c.insert([1, 2.5], Int32Array.of(5, 6)), 'INVALID_TOKEN')
    expectCode(() => c.insert([1, 2 ** 32], Int32Array.of(5, 6)), 'INVALID_TOKEN')
    expectCode(() => c.matchPrefix([Number.NaN]), 'INVALID_TOKEN')
    expect(expectCode(() => c.insert([1, 2, 3], Int32Array.of(1)), 'VALUES_LENGTH_MISMATCH').value).toBe(1)
    expectCode(() => c.insert([1, 2, 3]), 'VALUES_REQUIRED')
    expectCode(() => c.insert([1, 2, 3], [1, -2, 3]), 'VALUES_LENGTH_MISMATCH')
    expectCode(() => c.evict(-1), 'INVALID_OPTION')
    expectCode(() => c.evict(Number.NaN), 'INVALID_OPTION')
    expectCode(() => c.insert([1], Int32Array.of(1), { priority: Number.NaN }), 'INVALID_OPTION')
    const { lastNode } = c.matchPrefix([1, 2])
    expectCode(() => c.decLockRef(lastNode), 'LOCK_UNDERFLOW')
    expectCode(() => c.incLockRef(12345 as never), 'UNKNOWN_NODE')
    expectCode(() => c.incLockRef(-1 as never), 'UNKNOWN_NODE')
    expectCode(() => c.tokensUnder('x' as never), 'UNKNOWN_NODE')
    expect(formatTree(c, { showValues: true })).toBe(before)
    expect(c.protectedSize()).toBe(0)
    c.evict(10)
    expectCode(() => c.incLockRef(lastNode), 'UNKNOWN_NODE')
    const other = new RadixCache({ trackValues: false })
    expectCode(() => other.insert([1], Int32Array.of(1)), 'VALUES_NOT_TRACKED')
    expectCode(() => other.decLockRef(other.insert([5, 6, 7]).lastNode), 'LOCK_UNDERFLOW')
  })
})

describe('PagedAllocator', () => {
  it('allocates whole pages, frees pages, and detects double frees', () => {
    const pool = new PagedAllocator({ size: 8, pageSize: 4 })
    const a = pool.alloc(5)
    expect(Array.from(a)).toEqual([0, 1, 2, 3, 4])
    expect(pool.availableSize()).toBe(0)
    expectCode(() => pool.alloc(1), 'OUT_OF_MEMORY')
    pool.free(a.subarray(4))
    expect(pool.availableSize()).toBe(4)
    expectCode(() => pool.free(a.subarray(4)), 'DOUBLE_FREE')
    expect(pool.availableSize()).toBe(4)
    expectCode(() => pool.free(Int32Array.of(99)), 'INVALID_INDEX')
    expectCode(() => pool.alloc(-1), 'INVALID_OPTION')
    expectCode(() => new PagedAllocator({ size: 6, pageSize: 4 }), 'INVALID_OPTION')
    expectCode(() => new PagedAllocator({ size: 8, pageSize: 0 }), 'INVALID_OPTION')
  })

  it('allocExtend fills the rest of the last page first', () => {
    const pool = new PagedAllocator({ size: 16, pageSize: 4 })
    const a = pool.alloc(2)
    const b = pool.allocExtend(a[1]!, 4)
    expect(Array.from(b)).toEqual([2, 3, 4, 5])
    expect(pool.availableSize()).toBe(8)
    expect(Array.from(pool.allocExtend(-1, 1))).toEqual([8])
    expectCode(() => pool.allocExtend(13, 1), 'INVALID_INDEX')
    pool.clear()
    expect(pool.availableSize()).toBe(16)
  })

  it('allocExtendInto writes the slots allocExtend would return into a row, and refuses a row without room', () => {
    const pool = new PagedAllocator({ size: 16, pageSize: 4 })
    const row = new Int32Array(8).fill(-1)
    pool.allocExtendInto(-1, 2, row, 0)
    pool.allocExtendInto(row[1]!, 4, row, 2)
    expect(Array.from(row)).toEqual([0, 1, 2, 3, 4, 5, -1, -1])
    expect(pool.availableSize()).toBe(8)
    for (const [out, at] of [
      [row, 7],
      [row, -1],
      [new Uint32Array(8), 0],
    ] as const) {
      expectCode(() => pool.allocExtendInto(5, 2, out as Int32Array, at), 'INVALID_OPTION')
    }
    expect(pool.availableSize()).toBe(8)
    expect(Array.from(row)).toEqual([0, 1, 2, 3, 4, 5, -1, -1])
  })
})
