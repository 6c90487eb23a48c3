import { RadixCache, type KvEvent, sglangBlockHasher } from '@kvc/radix-cache'
import { describe, expect, it } from 'vitest'
import { BlockKeys, type GapReport, ResidencyIndex, RouterError } from '../src/index.js'

const stored = (eventId: number, blockHashes: bigint[], parentBlockHash: bigint | null = null): KvEvent => ({
  type: 'BlockStored',
  eventId,
  blockHashes,
  parentBlockHash,
  tokenIds: [],
  blockSize: 4,
  extraKey: null,
})
// `extraKey` on BlockRemoved is a newer radix-cache field; the cast keeps both versions compiling.
const removed = (eventId: number, blockHashes: bigint[]): KvEvent =>
  ({ type: 'BlockRemoved', eventId, blockHashes, extraKey: null }) as KvEvent

function codeOf(f: () => unknown): string | undefined {
  try {
    f()
  } catch (e) {
    if (e instanceof RouterError) return e.code
    throw e
  }
  return undefined
}

describe('ResidencyIndex overlap', () => {
  it('counts leading blocks per worker and stops at the first missing one', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.addWorker('b')
    ix.ingest('a', stored(0, [1n, 2n, 3n]))
    ix.ingest('b', stored(0, [1n, 3n])) // b lacks block 2: block 3 is unreachable for b
    const q = BlockKeys.fromHashes([1n, 2n, 3n, 4n])
    expect(ix.overlap(q, 'plain')).toEqual(
      new Map([
        ['a', 3],
        ['b', 1],
      ]),
    )
  })

  it('exclusive mode skips blocks held by >= max(2, ceil(theta * workers)) workers but keeps walking', () => {
    const ix = new ResidencyIndex({ thetaShared: 0.5 })
    for (const w of ['a', 'b', 'c', 'd']) ix.addWorker(w)
    // Block 1 (system prompt) on 3 of 4 workers: boilerplate (threshold 2). Block 2 on a only.
    for (const w of ['a', 'b', 'c']) ix.recordStored(w, [1n])
    ix.recordStored('a', [2n, 3n])
    ix.recordStored('b', [2n])
    expect(ix.boilerplateThreshold()).toBe(2)
    const q = BlockKeys.fromHashes([1n, 2n, 3n])
    expect(ix.overlap(q, 'plain')).toEqual(
      new Map([
        ['a', 3],
        ['b', 2],
        ['c', 1],
        ['d', 0],
      ]),
    )
    // 1 and 2 are both held by >= 2 workers: only block 3 is exclusive to a.
    expect(ix.overlap(q, 'exclusive')).toEqual(
      new Map([
        ['a', 1],
        ['b', 0],
        ['c', 0],
        ['d', 0],
      ]),
    )
  })

  it('a block held by one worker is never boilerplate, even with two workers', () => {
    const ix = new ResidencyIndex({ thetaShared: 0.5 })
    ix.addWorker('a')
    ix.addWorker('b')
    ix.recordStored('a', [1n])
    expect(ix.overlap([1n], 'exclusive').get('a')).toBe(1)
  })

  it('treats signed and unsigned spellings of a hash as the same block', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.ingest('a', stored(0, [-2n]))
    expect(ix.overlap([2n ** 64n - 2n], 'plain').get('a')).toBe(1)
    expect(ix.holdersOf(-2n)).toEqual(['a'])
  })

  it('overlapInto writes per slot without allocating and handles more than 32 workers', () => {
    const ix = new ResidencyIndex({ initialBlocks: 2 })
    for (let i = 0; i < 70; i++) ix.addWorker(`w${i}`)
    for (let i = 0; i < 70; i++)
      ix.recordStored(`w${i}`, [100n, BigInt(1000 + i)].slice(0, i % 2 === 0 ? 2 : 1))
    const plain = new Int32Array(ix.slotCount)
    const excl = new Int32Array(ix.slotCount)
    expect(ix.overlapInto(BlockKeys.fromHashes([100n, 1064n]), plain, excl)).toBe(2)
    expect(plain[64]).toBe(2)
    expect(plain[65]).toBe(1)
    expect(plain[3]).toBe(1)
    expect(excl[64]).toBe(1) // 100 is on all 70 workers: boilerplate; 1064 only on w64
    expect(ix.blockCount).toBe(1 + 35)
    expect(codeOf(() => ix.overlapInto(BlockKeys.fromHashes([1n]), new Int32Array(3)))).toBe('INVALID_LENGTH')
  })

  it('frees nodes held by nobody and reuses removed worker slots', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.addWorker('b')
    ix.recordStored('a', [1n, 2n])
    ix.recordStored('b', [1n])
    ix.removeWorker('a')
    expect(ix.blockCount).toBe(1)
    expect(ix.addWorker('c')).toBe(0)
    expect(ix.overlap([1n, 2n], 'plain')).toEqual(
      new Map([
        ['b', 1],
        ['c', 0],
      ]),
    )
  })

  it('agrees with RadixCache events hashed with the same hasher (token queries)', () => {
    const hasher = sglangBlockHasher()
    const ix = new ResidencyIndex({ hasher, pageSize: 4 })
    ix.addWorker('d0')
    const cache = new RadixCache({
      pageSize: 4,
      trackValues: false,
      blockHasher: hasher,
      onEvent: (e) => ix.ingest('d0', e),
    })
    const prompt = Array.from({ length: 18 }, (_, i) => i + 1)
    cache.insert(prompt.slice(0, 12))
    cache.insert([1, 2, 3, 4, 50, 51, 52, 53])
    expect(ix.overlap(prompt, 'plain').get('d0')).toBe(3)
    expect(ix.overlap([1, 2, 3, 4, 50, 51, 52, 53, 9], 'plain').get('d0')).toBe(2)
    cache.evict(100)
    expect(ix.overlap(prompt, 'plain').get('d0')).toBe(0)
    expect(ix.blockCount).toBe(0)
  })
})

describe('ResidencyIndex hash table', () => {
  it('tells apart keys that share a 32-bit half, through growth and removals', () => {
    // 64 keys with the same low half (and 64 with the same high half): probe sequences cross
    // keys that differ in one half only; half of them are stored, then half of those removed.
    const sameLo = Array.from({ length: 64 }, (_, k) => (BigInt(k) << 32n) | 7n)
    const sameHi = Array.from({ length: 64 }, (_, k) => (5n << 32n) | BigInt(k))
    const keys = [...sameLo, ...sameHi]
    const index = new ResidencyIndex({ initialBlocks: 4 })
    index.addWorker('d0')
    const held = new Set<bigint>()
    keys.forEach((h, i) => {
      if (i % 2 === 0) {
        index.recordStored('d0', [h])
        held.add(h)
      }
    })
    keys.forEach((h, i) => {
      if (i % 4 === 0) {
        index.recordRemoved('d0', [h])
        held.delete(h)
      }
    })
    const plain = new Int32Array(1)
    for (const h of keys) {
      index.overlapInto(BlockKeys.fromHashes([h]), plain)
      expect(plain[0], `key ${h}`).toBe(held.has(h) ? 1 : 0)
      expect(index.holdersOf(h)).toEqual(held.has(h) ? ['d0'] : [])
    }
    expect(index.blockCount).toBe(held.size)
  })
})

describe('ResidencyIndex event ids and gaps', () => {
  it('reports a gap once, flags the worker, and applies the event under the default policy', () => {
    const gaps: GapReport[] = []
    const ix = new ResidencyIndex({ onGap: (g) => gaps.push(g) })
    ix.addWorker('a')
    expect(ix.ingest('a', stored(0, [1n]))).toBe('applied')
    expect(ix.ingest('a', stored(4, [2n], 1n))).toBe('gap-applied')
    expect(gaps).toEqual([{ workerId: 'a', expectedEventId: 1, receivedEventId: 4, missing: 3 }])
    expect(ix.recentGaps()).toEqual(gaps)
    expect(ix.workerStatus('a')).toMatchObject({ lastEventId: 4, needsResync: true, gaps: 1, blocks: 2 })
    ix.resync('a', [1n, 2n, 3n], 10)
    expect(ix.workerStatus('a')).toMatchObject({ lastEventId: 10, needsResync: false, blocks: 3 })
    expect(ix.ingest('a', stored(11, [4n]))).toBe('applied')
  })

  it('under gapPolicy hold refuses events after a gap until the missing ids are replayed', () => {
    const ix = new ResidencyIndex({ gapPolicy: 'hold' })
    ix.addWorker('a')
    ix.ingest('a', stored(0, [1n]))
    expect(ix.ingest('a', stored(2, [3n]))).toBe('gap-held')
    expect(ix.workerStatus('a')).toMatchObject({ lastEventId: 0, needsResync: true, blocks: 1 })
    expect(ix.ingest('a', stored(1, [2n]))).toBe('applied')
    expect(ix.workerStatus('a').needsResync).toBe(false)
    expect(ix.ingest('a', stored(2, [3n]))).toBe('applied')
    expect(ix.overlap([1n, 2n, 3n], 'plain').get('a')).toBe(3)
  })

  it('an index holds one tier: events of another medium keep the ids whole and change nothing', () => {
    const device = new ResidencyIndex()
    const host = new ResidencyIndex({ tier: 'host' })
    for (const ix of [device, host]) {
      ix.addWorker('a')
      expect(ix.ingest('a', stored(0, [1n]))).toBe('applied')
      const onHost: KvEvent = {
        ...(stored(1, [2n], 1n) as KvEvent & { type: 'BlockStored' }),
        medium: 'CPU_TIER1',
      }
      expect(ix.ingest('a', onHost)).toBe('applied')
      expect(ix.ingest('a', { type: 'BlockRemoved', eventId: 2, blockHashes: [1n] })).toBe('applied')
    }
    expect(device.workerBlocks('a')).toEqual([])
    expect(device.workerStatus('a')).toMatchObject({ lastEventId: 2, needsResync: false })
    expect(host.workerBlocks('a')).toEqual([2n])
    expect(host.workerStatus('a')).toMatchObject({ lastEventId: 2, needsResync: false })
    expect(() => new ResidencyIndex({ tier: 'tape' as 'host' })).toThrow(/tier must be/)
  })

  it('AllBlocksCleared drops the worker and clears the resync flag', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.ingest('a', stored(0, [1n]))
    ix.ingest('a', stored(5, [2n]))
    ix.ingest('a', { type: 'AllBlocksCleared', eventId: 6 })
    expect(ix.workerStatus('a')).toMatchObject({ blocks: 0, needsResync: false })
    expect(ix.blockCount).toBe(0)
  })

  it('refuses an out-of-order or repeated event id with no state change, or skips it with dedupe', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.ingest('a', stored(0, [1n]))
    ix.ingest('a', stored(1, [2n], 1n))
    expect(codeOf(() => ix.ingest('a', removed(1, [1n])))).toBe('EVENT_OUT_OF_ORDER')
    expect(codeOf(() => ix.ingest('a', removed(0, [1n])))).toBe('EVENT_OUT_OF_ORDER')
    expect(ix.workerStatus('a')).toMatchObject({ lastEventId: 1, blocks: 2 })
    const dd = new ResidencyIndex({ dedupe: true })
    dd.addWorker('a')
    dd.ingest('a', stored(0, [1n]))
    expect(dd.ingest('a', removed(0, [1n]))).toBe('duplicate')
    expect(dd.workerStatus('a')).toMatchObject({ duplicatesSkipped: 1, blocks: 1 })
  })

  it('starts from the lastEventId given at registration', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a', { lastEventId: 41 })
    expect(ix.ingest('a', stored(42, [1n]))).toBe('applied')
  })

  it('stores a block whose parent is unknown, counts it, and matches it only once its prefix is held', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.ingest('a', stored(0, [3n, 4n], 2n)) // parent 2 never stored
    expect(ix.workerStatus('a').orphanStores).toBe(1)
    expect(ix.overlap([1n, 2n, 3n, 4n], 'plain').get('a')).toBe(0)
    ix.ingest('a', stored(1, [1n, 2n]))
    expect(ix.overlap([1n, 2n, 3n, 4n], 'plain').get('a')).toBe(4)
    ix.ingest('a', stored(2, [5n], 4n)) // known parent: not an orphan
    expect(ix.workerStatus('a').orphanStores).toBe(1)
  })

  it('counts removals of blocks the worker does not hold and ignores them', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    ix.ingest('a', removed(0, [9n]))
    expect(ix.workerStatus('a')).toMatchObject({ unknownRemovals: 1, blocks: 0, lastEventId: 0 })
  })

  it('refuses malformed events and block-size mismatches before changing anything', () => {
    const ix = new ResidencyIndex({ pageSize: 4 })
    ix.addWorker('a')
    const bad = [
      {
        type: 'BlockStored',
        eventId: 0,
        blockHashes: [1n, 2],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 4,
        extraKey: null,
      },
      {
        type: 'BlockStored',
        eventId: 0,
        blockHashes: [1n],
        parentBlockHash: 3,
        tokenIds: [],
        blockSize: 4,
        extraKey: null,
      },
      {
        type: 'BlockStored',
        eventId: 0,
        blockHashes: [1n],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 8,
        extraKey: null,
      },
      {
        type: 'BlockStored',
        eventId: -1,
        blockHashes: [1n],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 4,
        extraKey: null,
      },
      { type: 'Nope', eventId: 0 },
      null,
    ]
    for (const e of bad) expect(codeOf(() => ix.ingest('a', e as unknown as KvEvent))).toBe('INVALID_MESSAGE')
    expect(ix.workerStatus('a')).toMatchObject({ lastEventId: -1, blocks: 0, eventsApplied: 0 })
    expect(codeOf(() => ix.ingest('zz', stored(0, [1n])))).toBe('UNKNOWN_WORKER')
    expect(codeOf(() => ix.addWorker('a'))).toBe('DUPLICATE_WORKER')
  })

  it('takes block hashes in [-2^63, 2^64) and refuses the first ones outside, changing nothing', () => {
    const ix = new ResidencyIndex()
    ix.addWorker('a')
    for (const h of [-(2n ** 63n) - 1n, 2n ** 64n, -(2n ** 64n), 2n ** 65n + 3n]) {
      expect(codeOf(() => ix.ingest('a', stored(0, [1n, h])))).toBe('INVALID_MESSAGE')
      expect(codeOf(() => ix.ingest('a', removed(0, [h])))).toBe('INVALID_MESSAGE')
    }
    expect(ix.workerStatus('a')).toMatchObject({ lastEventId: -1, blocks: 0, eventsApplied: 0 })
    const edges = [-(2n ** 63n), 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n, -1n, 0n]
    expect(ix.ingest('a', stored(0, edges))).toBe('applied')
    expect(ix.workerStatus('a').blocks).toBe(4) // -2^63 and 2^63, -1 and 2^64 - 1: the same blocks
    expect(ix.ingest('a', removed(1, edges))).toBe('applied')
    expect(ix.workerStatus('a').blocks).toBe(0)
  })
})

describe('BlockKeys', () => {
  it('round-trips hashes and small ids', () => {
    const k = BlockKeys.fromHashes([0n, 1n, 2n ** 63n, -1n])
    expect([0, 1, 2, 3].map((i) => k.hashAt(i))).toEqual([0n, 1n, 2n ** 63n, 2n ** 64n - 1n])
    expect(BlockKeys.fromIds([5, 2 ** 40]).hashAt(1)).toBe(2n ** 40n)
    k.truncate(2)
    expect(k.length).toBe(2)
    expect(codeOf(() => k.hashAt(2))).toBe('INVALID_LENGTH')
    expect(codeOf(() => BlockKeys.fromIds([-1]))).toBe('INVALID_MESSAGE')
  })
})
