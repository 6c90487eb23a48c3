import { describe, expect, it } from 'vitest'
import {
  type KvEvent,
  type KvTransfer,
  PagedAllocator,
  RadixCache,
  RadixCacheError,
  formatTree,
} from '../src/index.js'
import { checkRadixInvariants, tieredPages } from '../src/testing/index.js'

function tiered(opts: {
  pool?: number
  host?: number
  writePolicy?: 'write_back' | 'write_through' | 'write_through_selective'
  evictionPolicy?: 'lru' | 'fifo' | 'mru'
  hostEvictionPolicy?: 'lru' | 'fifo' | 'mru'
  evictGranularity?: 'leaf' | 'page'
}) {
  let t = 0
  const events: KvEvent[] = []
  const transfers: KvTransfer[] = []
  const pool = new PagedAllocator({ size: opts.pool ?? 32, pageSize: 2 })
  const cache = new RadixCache({
    pageSize: 2,
    allocator: pool,
    now: () => t++,
    onEvent: (e) => events.push(e),
    ...(opts.evictionPolicy !== undefined ? { evictionPolicy: opts.evictionPolicy } : {}),
    ...(opts.evictGranularity !== undefined ? { evictGranularity: opts.evictGranularity } : {}),
    hostTier: {
      capacity: opts.host ?? 64,
      ...(opts.writePolicy !== undefined ? { writePolicy: opts.writePolicy } : {}),
      ...(opts.hostEvictionPolicy !== undefined ? { evictionPolicy: opts.hostEvictionPolicy } : {}),
      onTransfer: (x) => transfers.push(x),
    },
  })
  const insert = (tokens: number[]) => {
    const slots = pool.alloc(tokens.length)
    const res = cache.insert(tokens, slots)
    if (res.prefixLen > 0) pool.free(slots.subarray(0, res.prefixLen))
    if (res.alignedLen < tokens.length) pool.free(slots.subarray(res.alignedLen))
    return res
  }
  return { cache, pool, events, transfers, insert }
}

function expectCode(fn: () => unknown, code: string): RadixCacheError {
  try {
    fn()
  } catch (e) {
    expect(e).toBeInstanceOf(RadixCacheError)
    expect((e as RadixCacheError).code).toBe(code)
    return e as RadixCacheError
  }
  throw new Error(`expected ${code}`)
}

/** Everything observable about a cache, to check that a refused call changed nothing. */
function snapshot(cache: RadixCache, pool?: PagedAllocator): string {
  return JSON.stringify({
    pages: [...tieredPages(cache)],
    stats: cache.stats(),
    free: pool?.availableSize(),
    hostFree: cache.hostAvailableSize(),
  })
}

describe('host tier: write_back demotion and load-back', () => {
  it('eviction demotes to host, a match reports the host part, loadBack promotes it onto fresh slots', () => {
    const { cache, pool, events, transfers, insert } = tiered({})
    const { lastNode } = insert([1, 2, 3, 4, 5, 6])
    const slots = cache.nodeInfo(lastNode).values!
    expect(cache.evict(6)).toEqual({ evictedTokens: 6, evictedNodes: 1 })
    expect(cache.totalSize()).toBe(0)
    expect(pool.availableSize()).toBe(32)
    expect(cache.hostSize()).toBe(6)
    expect(cache.hostOnlySize()).toBe(6)
    expect(cache.hostEvictableSize()).toBe(6)
    // The copy went device -> host before the device slots were freed.
    expect(transfers).toHaveLength(1)
    expect(transfers[0]!.direction).toBe('deviceToHost')
    expect(Array.from(transfers[0]!.deviceIndices)).toEqual(Array.from(slots))
    expect(transfers[0]!.hostIndices).toHaveLength(6)
    // Events: host stored first, then device removed, page by page, with their medium.
    const tail = events.slice(3).map((e) => `${e.type}:${'medium' in e ? e.medium : ''}`)
    expect(tail).toEqual([
      'BlockStored:CPU_TIER1',
      'BlockStored:CPU_TIER1',
      'BlockStored:CPU_TIER1',
      'BlockRemoved:GPU',
      'BlockRemoved:GPU',
      'BlockRemoved:GPU',
    ])
    const hit = cache.matchPrefix([1, 2, 3, 4, 5, 6, 7])
    expect(hit).toMatchObject({ length: 0, hostLength: 6, loadedTokens: 0 })
    expect(cache.residencyOf(hit.lastHostNode)).toEqual({ deviceTokens: 0, hostTokens: 6 })
    const lb = cache.loadBack(hit.lastHostNode)
    expect(lb.loadedTokens).toBe(6)
    expect(lb.indices).toHaveLength(6)
    expect(transfers[1]!.direction).toBe('hostToDevice')
    expect(Array.from(transfers[1]!.deviceIndices)).toEqual(Array.from(lb.indices))
    expect(cache.matchPrefix([1, 2, 3, 4, 5, 6, 7])).toMatchObject({ length: 6, hostLength: 0 })
    expect(Array.from(cache.matchPrefix([1, 2, 3, 4, 5, 6]).indices)).toEqual(Array.from(lb.indices))
    // The host copy stays: the next eviction frees the device slots without copying again.
    expect(cache.hostSize()).toBe(6)
    cache.evict(6)
    expect(transfers).toHaveLength(2)
    expect(cache.stats()).toMatchObject({ demotedTokens: 12, hostWriteTokens: 6, loadedBackTokens: 6 })
    checkRadixInvariants(cache)
  })

  it('matchPrefix({ loadBack }) loads a host hit above the threshold back and returns all indices', () => {
    const { cache, pool, insert } = tiered({})
    insert([1, 2, 3, 4])
    insert([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    cache.evict(10) // the 10-token tail leaves the device
    const row = new Int32Array(14)
    const hit = cache.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], {
      loadBack: true,
      into: row,
    })
    expect(hit).toMatchObject({ length: 4, hostLength: 10, loadedTokens: 0 }) // 10 is not above 10
    const hit2 = cache.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], {
      loadBack: true,
      into: new Int32Array(16),
    })
    expect(hit2).toMatchObject({ length: 4, hostLength: 10 })
    cache.insert([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], pool.alloc(16)) // 16 > 10? adopts
    checkRadixInvariants(cache)
  })

  it('a match with loadBack that cannot get device slots leaves the hit on host', () => {
    const { cache, pool, insert } = tiered({ pool: 16 })
    insert(Array.from({ length: 12 }, (_, i) => i + 1))
    cache.evict(12)
    const held = insert([90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105])
    cache.incLockRef(held.lastNode) // the device is full and locked
    expect(pool.availableSize()).toBe(0)
    const hit = cache.matchPrefix(
      Array.from({ length: 13 }, (_, i) => i + 1),
      { loadBack: true },
    )
    expect(hit).toMatchObject({ length: 0, hostLength: 12, loadedTokens: 0 })
    checkRadixInvariants(cache)
  })

  it('loadBack respects locks: it evicts only unlocked device pages and never the path it loads', () => {
    const { cache, pool, insert } = tiered({ pool: 20, evictGranularity: 'page' })
    const a = insert([1, 2, 3, 4, 5, 6, 7, 8])
    cache.evict(4) // tail [5..8] to host; [1..4] stays on the device
    const b = insert([20, 21, 22, 23, 24, 25, 26, 27])
    const c = insert([30, 31, 32, 33, 34, 35, 36, 37])
    cache.incLockRef(b.lastNode)
    expect(pool.availableSize()).toBe(0)
    const hit = cache.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(hit).toMatchObject({ length: 4, hostLength: 4 })
    expect(cache.loadBack(hit.lastHostNode).loadedTokens).toBe(4)
    // The locked one survived, the unlocked one [30..] made the room (its tail went to host); the
    // LRU page [1..4] was not evicted: it is on the path being loaded.
    expect(cache.matchPrefix([20, 21, 22, 23, 24, 25, 26, 27, 0]).length).toBe(8)
    expect(cache.matchPrefix([30, 31, 32, 33, 34, 35, 36, 37, 0])).toMatchObject({ length: 4, hostLength: 4 })
    expect(cache.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9])).toMatchObject({ length: 8, hostLength: 0 })
    expect(cache.isValid(a.lastNode)).toBe(true)
    expect(cache.isValid(c.lastNode)).toBe(true) // demoted to host, still in the tree
    checkRadixInvariants(cache)
  })

  it('a locked host-only node is neither host-evicted nor lost, and loads back', () => {
    const { cache, insert } = tiered({})
    insert([1, 2, 3, 4])
    cache.evict(4)
    const hit = cache.matchPrefix([1, 2, 3, 4])
    expect(cache.incLockRef(hit.lastHostNode)).toBe(0) // no device tokens moved
    expect(cache.hostEvictableSize()).toBe(0)
    expect(cache.evictHost(100)).toEqual({ evictedTokens: 0, evictedNodes: 0 })
    cache.loadBack(hit.lastHostNode)
    expect(cache.protectedSize()).toBe(4) // loaded under the caller's lock
    expect(cache.decLockRef(hit.lastHostNode)).toBe(4)
    checkRadixInvariants(cache)
  })

  it('insert adopts host-only pages: they are not "already present", the caller frees only its duplicates', () => {
    const { cache, pool, insert } = tiered({})
    insert([1, 2, 3, 4])
    insert([1, 2, 3, 4, 5, 6, 7, 8])
    cache.evict(4) // [5..8] to host
    const slots = pool.alloc(10)
    const res = cache.insert([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], slots)
    expect(res.prefixLen).toBe(4) // only the device part
    pool.free(slots.subarray(0, 4))
    const hit = cache.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    expect(hit.length).toBe(10)
    expect(Array.from(hit.indices.subarray(4))).toEqual(Array.from(slots.subarray(4)))
    expect(cache.hostSize()).toBe(4) // the adopted page keeps its host copy
    expect(pool.availableSize() + cache.totalSize()).toBe(pool.size)
    checkRadixInvariants(cache)
  })
})

describe('host tier: write policies and host eviction', () => {
  it('write_through copies on insert; eviction then frees the device without copying', () => {
    const { cache, transfers, insert } = tiered({ writePolicy: 'write_through' })
    insert([1, 2, 3, 4])
    expect(cache.hostSize()).toBe(4)
    expect(transfers).toHaveLength(1)
    cache.evict(4)
    expect(transfers).toHaveLength(1)
    expect(cache.hostOnlySize()).toBe(4)
    checkRadixInvariants(cache)
  })

  it('write_through_selective copies a page once it is hit twice; uncopied pages are discarded', () => {
    const { cache, insert } = tiered({ writePolicy: 'write_through_selective' })
    insert([1, 2, 3, 4])
    expect(cache.hostSize()).toBe(0)
    insert([1, 2, 3, 4, 5, 6])
    expect(cache.hostSize()).toBe(4) // [1..4] hit twice; [5, 6] once
    expect(cache.evict(100).evictedTokens).toBe(6)
    expect(cache.stats()).toMatchObject({ demotedTokens: 4, discardedTokens: 2 })
    expect(cache.matchPrefix([1, 2, 3, 4, 5, 6, 7])).toMatchObject({ length: 0, hostLength: 4 })
    checkRadixInvariants(cache)
  })

  it('write_back with a full host: eviction makes room by the host policy, else discards', () => {
    const { cache, insert } = tiered({ host: 8 })
    insert([1, 2, 3, 4])
    insert([5, 6, 7, 8])
    cache.evict(8) // both to host (full)
    insert([9, 10, 11, 12])
    cache.evict(4) // needs 4 host slots: host LRU evicts [1..4]
    expect(cache.matchPrefix([1, 2, 3, 4]).hostLength).toBe(0)
    expect(cache.matchPrefix([5, 6, 7, 8]).hostLength).toBe(4)
    expect(cache.matchPrefix([9, 10, 11, 12]).hostLength).toBe(4)
    expect(cache.stats()).toMatchObject({ hostEvictedTokens: 4, discardedTokens: 0 })
    // A node longer than the whole host tier cannot be demoted: it is discarded.
    insert(Array.from({ length: 10 }, (_, i) => 100 + i))
    cache.evict(10)
    expect(cache.stats().discardedTokens).toBe(10)
    checkRadixInvariants(cache)
  })

  it('the host tier evicts by its own policy, independent of the device', () => {
    for (const [policy, first] of [
      ['lru', 1],
      ['mru', 5],
    ] as const) {
      const { cache, insert } = tiered({ host: 12, hostEvictionPolicy: policy, evictionPolicy: 'fifo' })
      insert([1, 2, 3, 4])
      insert([5, 6, 7, 8])
      insert([9, 10, 11, 12])
      cache.evict(12)
      cache.matchPrefix([5, 6, 7, 8]) // refreshes [5..8] on the host
      cache.evictHost(1)
      const gone = [1, 5, 9].filter((t) => cache.matchPrefix([t, t + 1, t + 2, t + 3]).hostLength === 0)
      expect([policy, gone]).toEqual([policy, [first]])
      checkRadixInvariants(cache)
    }
  })

  it('a device leaf the host cannot take is discarded with its host-only subtree, which no match could reach', () => {
    const { cache, events, insert } = tiered({ host: 8, evictGranularity: 'page' })
    insert(Array.from({ length: 12 }, (_, i) => i + 1))
    cache.evict(2) // [11, 12] to host; [1..10] stays on the device without a copy
    expect(cache.matchPrefix(Array.from({ length: 12 }, (_, i) => i + 1))).toMatchObject({
      length: 10,
      hostLength: 2,
    })
    const before = events.length
    expect(cache.evict(100).evictedTokens).toBe(10) // 10 tokens never fit in 8 host slots
    expect(cache.stats()).toMatchObject({ discardedTokens: 10, hostEvictedTokens: 2 })
    expect(cache.matchPrefix(Array.from({ length: 12 }, (_, i) => i + 1))).toMatchObject({
      length: 0,
      hostLength: 0,
    })
    expect(cache.hostSize()).toBe(0)
    const removed = events.slice(before).map((e) => `${e.type}:${'medium' in e ? e.medium : ''}`)
    expect(removed).toEqual(['BlockRemoved:CPU_TIER1', ...Array(5).fill('BlockRemoved:GPU')])
    checkRadixInvariants(cache)
  })

  it('page-granular eviction demotes exactly the asked tail', () => {
    const { cache, insert } = tiered({ evictGranularity: 'page' })
    insert([1, 2, 3, 4, 5, 6, 7, 8])
    expect(cache.evict(3)).toEqual({ evictedTokens: 4, evictedNodes: 1 })
    expect(cache.matchPrefix([1, 2, 3, 4, 5, 6, 7, 8])).toMatchObject({ length: 4, hostLength: 4 })
    checkRadixInvariants(cache)
  })
})

describe('host tier: protectHost / releaseHost', () => {
  it('a protected path may leave the device but not the host', () => {
    const { cache, insert } = tiered({})
    const { lastNode } = insert([1, 2, 3, 4])
    expect(cache.protectHost(lastNode)).toBe(4)
    expect(cache.protectHost(lastNode)).toBe(0) // already on host; a second reference
    expect(cache.hostRefOf(lastNode)).toBe(2)
    cache.evict(4)
    expect(cache.hostEvictableSize()).toBe(0)
    expect(cache.evictHost(100).evictedTokens).toBe(0)
    expect(cache.releaseHost(lastNode)).toBe(0)
    expect(cache.releaseHost(lastNode)).toBe(4)
    expect(cache.evictHost(100).evictedTokens).toBe(4)
    checkRadixInvariants(cache)
  })

  it('HOST_OUT_OF_MEMORY: a path larger than the host (after evicting the unprotected) changes nothing', () => {
    const { cache, pool, insert } = tiered({ host: 8 })
    insert([1, 2, 3, 4])
    cache.evict(4)
    const { lastNode } = insert([5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    const before = snapshot(cache, pool)
    const e = expectCode(() => cache.protectHost(lastNode), 'HOST_OUT_OF_MEMORY')
    expect(e.value).toBe(10)
    expect(snapshot(cache, pool)).toBe(before)
    expect(cache.hostRefOf(lastNode)).toBe(0)
    checkRadixInvariants(cache)
  })

  it('HOST_REF_UNDERFLOW: releaseHost without protectHost changes nothing', () => {
    const { cache, pool, insert } = tiered({})
    const { lastNode } = insert([1, 2])
    const before = snapshot(cache, pool)
    expect(expectCode(() => cache.releaseHost(lastNode), 'HOST_REF_UNDERFLOW').value).toBe(lastNode)
    expect(snapshot(cache, pool)).toBe(before)
  })

  it('reset is refused while a path is protected, and clears both tiers otherwise', () => {
    const { cache, pool, insert } = tiered({})
    const { lastNode } = insert([1, 2, 3, 4])
    cache.protectHost(lastNode)
    cache.evict(4)
    expectCode(() => cache.reset(), 'RESET_WHILE_LOCKED')
    cache.releaseHost(lastNode)
    cache.reset()
    expect(cache.hostSize()).toBe(0)
    expect(cache.hostAvailableSize()).toBe(64)
    expect(pool.availableSize()).toBe(32)
    checkRadixInvariants(cache)
  })
})

describe('host tier: errors', () => {
  it('NO_HOST_TIER: host calls on a cache without a host tier change nothing', () => {
    const cache = new RadixCache({ pageSize: 2, trackValues: false })
    const { lastNode } = cache.insert([1, 2])
    for (const call of [
      () => cache.loadBack(lastNode),
      () => cache.protectHost(lastNode),
      () => cache.releaseHost(lastNode),
      () => cache.evictHost(1),
    ]) {
      const before = JSON.stringify(cache.stats())
      expect(expectCode(call, 'NO_HOST_TIER').message).toMatch(/needs a host tier/)
      expect(JSON.stringify(cache.stats())).toBe(before)
    }
    // Options and results that only matter with a tier are harmless without one.
    expect(cache.matchPrefix([1, 2], { loadBack: true })).toMatchObject({
      length: 2,
      hostLength: 0,
      loadedTokens: 0,
    })
    expect(cache.residencyOf(lastNode)).toEqual({ deviceTokens: 2, hostTokens: 0 })
    expect(cache.hostCapacity()).toBe(0)
  })

  it('OUT_OF_MEMORY: loadBack without enough free + evictable device slots changes nothing', () => {
    const { cache, pool, insert } = tiered({ pool: 8 })
    insert([1, 2, 3, 4, 5, 6])
    cache.evict(6)
    const held = insert([7, 8, 9, 10])
    cache.incLockRef(held.lastNode)
    insert([11, 12, 13, 14])
    cache.incLockRef(cache.matchPrefix([11, 12, 13, 14]).lastNode)
    const hit = cache.matchPrefix([1, 2, 3, 4, 5, 6])
    const before = snapshot(cache, pool)
    const e = expectCode(() => cache.loadBack(hit.lastHostNode), 'OUT_OF_MEMORY')
    expect(e.value).toBe(6)
    expect(e.message).toMatch(/6 device slots: 0 free \+ 0 evictable/)
    expect(snapshot(cache, pool)).toBe(before)
  })

  it('INVALID_OPTION: bad host tier options and loadBack with readOnly', () => {
    const pool = new PagedAllocator({ size: 32, pageSize: 2 })
    const bad: [object, RegExp][] = [
      [{ capacity: 64, writePolicy: 'write_around' }, /writePolicy/],
      [{ capacity: 64, evictionPolicy: 'random' }, /evictionPolicy/],
      [{ capacity: 64, writeThroughThreshold: 0 }, /writeThroughThreshold/],
      [{ capacity: 63 }, /capacity/],
      [{ capacity: 64, ratio: 2 }, /not both/],
      [{}, /give a capacity/],
      [{ ratio: 0 }, /ratio/],
      [{ capacity: 64, loadBackThreshold: -1 }, /loadBackThreshold/],
      [{ capacity: 64, hostMedium: '' }, /hostMedium/],
      [{ capacity: 64, onTransfer: 3 }, /onTransfer/],
      [{ capacity: 64, allocator: { free() {} } }, /allocator/],
      [{ capacity: 64, allocator: new PagedAllocator({ size: 32, pageSize: 2 }) }, /fewer than capacity/],
    ]
    for (const [hostTier, msg] of bad) {
      const e = expectCode(
        () => new RadixCache({ pageSize: 2, allocator: pool, hostTier: hostTier as never }),
        'INVALID_OPTION',
      )
      expect(e.message).toMatch(msg)
    }
    // A value-tracking cache needs a device pool that can allocate (loadBack does).
    expectCode(() => new RadixCache({ pageSize: 2, hostTier: { capacity: 8 } }), 'INVALID_OPTION')
    // ratio needs a sized device pool; a length-only cache takes no host allocator.
    expectCode(() => new RadixCache({ trackValues: false, hostTier: { ratio: 2 } }), 'INVALID_OPTION')
    expectCode(
      () =>
        new RadixCache({
          trackValues: false,
          hostTier: { allocator: new PagedAllocator({ size: 8 }) },
        }),
      'INVALID_OPTION',
    )
    const cache = new RadixCache({ pageSize: 2, allocator: pool, hostTier: { ratio: 2 } })
    expect(cache.hostCapacity()).toBe(64)
    expectCode(() => cache.matchPrefix([1, 2], { readOnly: true, loadBack: true }), 'INVALID_OPTION')
    expectCode(() => cache.evictHost(-1), 'INVALID_OPTION')
    expectCode(() => cache.blockHashDump('disk' as never), 'INVALID_OPTION')
  })
})

describe('host tier: inspection and events', () => {
  it('formatTree marks where each node lives', () => {
    const { cache, insert } = tiered({})
    insert([1, 2, 3, 4])
    insert([1, 2, 5, 6])
    cache.protectHost(cache.matchPrefix([1, 2, 5, 6]).lastHostNode)
    cache.evict(2)
    expect(formatTree(cache)).toBe(
      [
        '2 [1,2] r=0 d+h hr=1',
        '  2 [3,4] r=0 h',
        '  2 [5,6] r=0 d+h hr=1',
        '#tokens: 4',
        '#host: 6 (2 host-only)',
      ].join('\n'),
    )
  })

  it('blockHashDump per tier matches the event stream; caches without a tier send no medium', () => {
    const { cache, events, insert } = tiered({})
    insert([1, 2, 3, 4])
    cache.evict(2)
    const device = new Set<bigint>()
    const host = new Set<bigint>()
    for (const e of events) {
      if (e.type === 'AllBlocksCleared') continue
      const set = e.medium === 'GPU' ? device : host
      for (const h of e.blockHashes) e.type === 'BlockStored' ? set.add(h) : set.delete(h)
    }
    expect(new Set(cache.blockHashDump('device').blockHashes)).toEqual(device)
    expect(new Set(cache.blockHashDump('host').blockHashes)).toEqual(host)
    expect(host.size).toBe(2)
    const plain: KvEvent[] = []
    const one = new RadixCache({ pageSize: 2, trackValues: false, onEvent: (e) => plain.push(e) })
    one.insert([1, 2])
    one.evict(2)
    expect(plain.every((e) => !('medium' in e))).toBe(true)
  })
})
