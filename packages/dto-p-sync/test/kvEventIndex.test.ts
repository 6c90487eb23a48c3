import { RadixCache } from '@kvc/radix-cache'
import { describe, expect, it } from 'vitest'
import { KvEventIndex } from '../src/index.js'
import { hasher } from './fixtures.js'

describe('KvEventIndex', () => {
  it('mirrors a radix cache through its KV events', () => {
    const index = new KvEventIndex({ keepTokens: true })
    const cache = new RadixCache({
      pageSize: 2,
      trackValues: false,
      blockHasher: hasher,
      onEvent: (e) => index.apply(e),
      evictGranularity: 'page',
    })
    cache.insert([1, 2, 3, 4, 5, 6])
    cache.insert([1, 2, 7, 8])
    expect(index.size).toBe(4)
    const [h0, h1] = cache.blockHashesOf(cache.matchPrefix([1, 2, 3, 4], { readOnly: true }).lastNode)
    void h1
    expect(index.get(h0!)).toMatchObject({ parentHash: null, refs: 1 })
    expect(Array.from(index.get(h0!)!.tokens!)).toEqual([1, 2])
    cache.evict(2)
    expect(index.size).toBe(3)
    cache.reset()
    expect(index.size).toBe(0)
    expect(index.consistent).toBe(true)
    expect(index.gaps).toBe(0)
  })

  it('counts the same page stored in two namespaces', () => {
    const index = new KvEventIndex()
    const cache = new RadixCache({
      pageSize: 2,
      trackValues: false,
      blockHasher: hasher,
      onEvent: (e) => index.apply(e),
    })
    cache.insert([1, 2])
    cache.insert([1, 2], undefined, { extraKey: 'x' }) // the test hasher ignores no namespace: same id only if equal
    const ids = new Set<bigint>()
    for (const ns of ['', 'x'])
      ids.add(cache.blockHashesOf(cache.matchPrefix([1, 2], { readOnly: true, extraKey: ns }).lastNode)[0]!)
    for (const id of ids) expect(index.has(id)).toBe(true)
    const e = {
      type: 'BlockStored' as const,
      eventId: 99,
      blockHashes: [5n],
      parentBlockHash: null,
      tokenIds: [1, 2],
      blockSize: 2,
      extraKey: 'a',
    }
    const idx = new KvEventIndex()
    idx.apply(e)
    idx.apply({ ...e, eventId: 100, extraKey: 'b' })
    expect(idx.get(5n)?.refs).toBe(2)
    idx.apply({ type: 'BlockRemoved', eventId: 101, blockHashes: [5n] })
    expect(idx.has(5n)).toBe(true)
    idx.apply({ type: 'BlockRemoved', eventId: 102, blockHashes: [5n] })
    expect(idx.has(5n)).toBe(false)
  })

  it('ignores old events, detects gaps, resyncs from a snapshot', () => {
    const idx = new KvEventIndex()
    const stored = (eventId: number, h: bigint) =>
      idx.apply({
        type: 'BlockStored',
        eventId,
        blockHashes: [h],
        parentBlockHash: null,
        tokenIds: [0],
        blockSize: 1,
        extraKey: null,
      })
    expect(stored(10, 1n)).toBe(true) // the first event sets the baseline
    expect(stored(10, 2n)).toBe(false)
    expect(idx.ignoredEvents).toBe(1)
    expect(stored(11, 3n)).toBe(true)
    expect(idx.consistent).toBe(true)
    expect(stored(13, 4n)).toBe(true)
    expect(idx.consistent).toBe(false)
    expect(idx.gaps).toBe(1)
    expect(idx.forget(4n)).toBe(true)
    const snap = idx.snapshot()
    const other = new KvEventIndex()
    other.resync(snap)
    expect(other.consistent).toBe(true)
    expect(other.lastEventId).toBe(13)
    expect([...snap.blocks.map((b) => b.hash)].sort()).toEqual([1n, 3n])
    expect(other.has(3n)).toBe(true)
    expect(other.apply({ type: 'AllBlocksCleared', eventId: 14 })).toBe(true)
    expect(other.size).toBe(0)
  })
})
