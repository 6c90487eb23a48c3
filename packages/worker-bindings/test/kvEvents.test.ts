import { ResidencyIndex } from '@kvc/kvc-router'
import { encode } from '@msgpack/msgpack'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  KvEventPublisher,
  KvEventSubscriber,
  type KvEventBatch,
  type KvEventGap,
  type ReceivedKvBatch,
  decodeKvEventBatch,
  decodeSeq,
  encodeKvEventBatch,
  encodeSeq,
  residencyFeeder,
  toRadixKvEvents,
} from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

let baseline: Record<string, number>
beforeAll(() => {
  baseline = handleCounts()
})
afterAll(async () => {
  expect(await leakedSince(baseline)).toEqual({})
})

const stored = (h: bigint, parent: bigint | null = null): KvEventBatch['events'][number] => ({
  type: 'BlockStored',
  blockHashes: [h],
  parentBlockHash: parent,
  tokenIds: [1, 2, 3, 4],
  blockSize: 4,
  loraId: null,
  medium: null,
  loraName: null,
})

async function until(cond: () => boolean, ms = 3_000): Promise<void> {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not reached')
    await new Promise((r) => setTimeout(r, 5))
  }
}

describe('KV-event codec: array and map encodings, upstream shapes', () => {
  it('decodes the msgspec array layout (SGLang): [ts, [[tag, ...fields]], dp_rank]', () => {
    const payload = encode(
      [
        1767000000.5,
        [
          [
            'BlockStored',
            [-5_000_000_000_000_000_000n, 7],
            null,
            [10, 11, 12, 13, 14, 15, 16, 17],
            4,
            null,
            'GPU',
          ],
          ['BlockRemoved', [7]],
          ['AllBlocksCleared'],
        ],
        2,
      ],
      { useBigInt64: true },
    )
    const b = decodeKvEventBatch(payload)
    expect(b.ts).toBe(1767000000.5)
    expect(b.dataParallelRank).toBe(2)
    expect(b.events[0]).toEqual({
      type: 'BlockStored',
      blockHashes: [-5_000_000_000_000_000_000n, 7n],
      parentBlockHash: null,
      tokenIds: [10, 11, 12, 13, 14, 15, 16, 17],
      blockSize: 4,
      loraId: null,
      medium: 'GPU',
      loraName: null,
    })
    expect(b.events[1]).toEqual({ type: 'BlockRemoved', blockHashes: [7n], medium: null })
    expect(b.events[2]).toEqual({ type: 'AllBlocksCleared' })
  })

  it('decodes the map layout (vLLM without array_like), byte-string hashes and the Mooncake envelope', () => {
    const hashBytes = new Uint8Array(32).fill(0)
    hashBytes[31] = 0x2a
    const payload = encode({
      ts: 1.0,
      events: [
        {
          type: 'BlockStored',
          block_hashes: [hashBytes],
          parent_block_hash: null,
          token_ids: [1, 2],
          block_size: 2,
          lora_id: null,
          medium: 'GPU',
          lora_name: 'lora-a',
        },
        { event_type: 'removed', seq_hashes: [99] },
        {
          event_type: 'stored',
          seq_hashes: [5],
          parent_hash: 4,
          token_ids: [],
          block_size: 16,
          medium: 'cpu',
        },
        { event_type: 'cleared' },
      ],
      data_parallel_rank: null,
    })
    const b = decodeKvEventBatch(payload)
    expect(b.events[0]).toMatchObject({ blockHashes: [42n], loraName: 'lora-a', medium: 'GPU' })
    expect(b.events[1]).toEqual({ type: 'BlockRemoved', blockHashes: [99n], medium: null })
    expect(b.events[2]).toMatchObject({
      type: 'BlockStored',
      blockHashes: [5n],
      parentBlockHash: 4n,
      medium: 'cpu',
    })
    expect(b.events[3]).toEqual({ type: 'AllBlocksCleared' })
  })

  it('round-trips both encodings; malformed payloads fail with KV_EVENT_DECODE', () => {
    const batch: KvEventBatch = {
      ts: 3.25,
      events: [
        stored(2n ** 63n + 5n, 1n),
        { type: 'BlockRemoved', blockHashes: [1n], medium: 'GPU' },
        { type: 'AllBlocksCleared' },
      ],
      dataParallelRank: 1,
    }
    for (const enc of ['array', 'map'] as const)
      expect(decodeKvEventBatch(encodeKvEventBatch(batch, enc))).toEqual(batch)
    for (const bad of [
      new Uint8Array([0xc1]),
      encode('x'),
      encode([1, 'notalist']),
      encode([1, [['Bogus']]]),
      encode([1, [['BlockStored', [1], null, [-1], 4]]]),
    ]) {
      expect(() => decodeKvEventBatch(bad)).toThrow(expect.objectContaining({ code: 'KV_EVENT_DECODE' }))
    }
    expect(decodeSeq(encodeSeq(-1n))).toBe(-1n)
    expect(decodeSeq(new Uint8Array(3))).toBeUndefined()
    expect(toRadixKvEvents(batch, 5).map((e) => e.eventId)).toEqual([5, 6, 7])
  })
})

describe('publisher → subscriber over ZeroMQ: sequence, gaps, replay', () => {
  it('delivers in order; a dropped batch is a gap, filled from the replay socket', async () => {
    const pub = new KvEventPublisher()
    const { endpoint, replayEndpoint } = await pub.bind()
    const got: ReceivedKvBatch[] = []
    const gaps: KvEventGap[] = []
    const sub = new KvEventSubscriber({
      endpoint,
      ...(replayEndpoint === undefined ? {} : { replayEndpoint }),
      startSeq: 0n,
      onBatch: (m) => {
        got.push(m)
      },
      onGap: (g) => gaps.push(g),
    })
    await sub.start()
    try {
      await pub.publish({ ts: 0, events: [stored(1n)], dataParallelRank: null }) // may be lost to the slow joiner
      await pub.publish({ ts: 1, events: [stored(2n)], dataParallelRank: null }, { dropLive: true })
      await pub.publish({ ts: 2, events: [stored(3n)], dataParallelRank: null }, { dropLive: true })
      // Keep publishing until the subscriber is connected and has caught up.
      let ts = 3
      await until(() => {
        if (got.length === 0)
          void pub.publish({ ts: ts++, events: [stored(BigInt(ts))], dataParallelRank: null })
        return got.length >= 4
      })
      expect(got.map((m) => m.seq)).toEqual(got.map((_, i) => BigInt(i)))
      expect(got[1]?.replayed).toBe(true)
      expect(got[2]?.replayed).toBe(true)
      expect(gaps.length).toBeGreaterThanOrEqual(1)
      expect(gaps.every((g) => g.recovered)).toBe(true)
      expect(sub.stats.unrecoveredGaps).toBe(0)
    } finally {
      await sub.close()
      await pub.close()
    }
  })

  it('a gap the publisher no longer buffers is reported unrecovered; no replay endpoint → reported too', async () => {
    const pub = new KvEventPublisher({ bufferSteps: 1 })
    const { endpoint, replayEndpoint } = await pub.bind()
    const got: bigint[] = []
    const gaps: KvEventGap[] = []
    const sub = new KvEventSubscriber({
      endpoint,
      ...(replayEndpoint === undefined ? {} : { replayEndpoint }),
      onBatch: (m) => {
        got.push(m.seq)
      },
      onGap: (g) => gaps.push(g),
    })
    let bareGot = 0
    const bare = new KvEventSubscriber({
      endpoint,
      onBatch: () => {
        bareGot++
      },
      onGap: (g) => gaps.push(g),
    })
    await sub.start()
    await bare.start()
    try {
      await until(() => {
        if (got.length === 0 || bareGot === 0)
          void pub.publish({ ts: 0, events: [stored(1n)], dataParallelRank: null })
        return got.length > 0 && bareGot > 0
      })
      await new Promise((r) => setTimeout(r, 50))
      for (let i = 0; i < 3; i++)
        await pub.publish({ ts: 1, events: [stored(9n)], dataParallelRank: null }, { dropLive: true })
      await pub.publish({ ts: 2, events: [stored(10n)], dataParallelRank: null })
      await until(() => gaps.length >= 2)
      const withReplay = gaps.find((g) => g.reason !== 'no-replay-endpoint')!
      expect(withReplay).toMatchObject({ recovered: false, reason: 'not-buffered', missing: 3 })
      expect(gaps.find((g) => g.reason === 'no-replay-endpoint')).toMatchObject({
        recovered: false,
        missing: 3,
      })
      expect(sub.stats.unrecoveredGaps).toBe(1)
    } finally {
      await Promise.all([sub.close(), bare.close()])
      await pub.close()
    }
  })

  it('residencyFeeder turns unrecovered missing batches into an event-id gap the index flags', () => {
    const index = new ResidencyIndex()
    index.addWorker('d0')
    const feed = residencyFeeder(index, 'd0')
    const stored = (h: bigint, parent: bigint | null) => ({
      type: 'BlockStored' as const,
      blockHashes: [h],
      parentBlockHash: parent,
      tokenIds: [],
      blockSize: 4,
      loraId: null,
      medium: null,
      loraName: null,
    })
    const batch = (...events: ReturnType<typeof stored>[]) => ({ ts: 0, events, dataParallelRank: null })
    feed({ topic: '', seq: 0n, batch: batch(stored(1n, null)), replayed: false })
    feed({ topic: '', seq: 1n, batch: batch(stored(2n, 1n)), replayed: true })
    expect(index.workerStatus('d0')).toMatchObject({ needsResync: false, gaps: 0, lastEventId: 1 })
    // Batches 2 and 3 were lost for good: the next batch's events must not look contiguous.
    feed({ topic: '', seq: 4n, batch: batch(stored(3n, 2n)), replayed: false })
    expect(index.workerStatus('d0')).toMatchObject({ needsResync: true, gaps: 1 })
  })

  it('close is idempotent and calls after close fail with CLOSED', async () => {
    const pub = new KvEventPublisher()
    await pub.bind()
    await pub.close()
    await pub.close()
    await expect(pub.publish({ ts: 0, events: [], dataParallelRank: null })).rejects.toMatchObject({
      code: 'CLOSED',
    })
    const sub = new KvEventSubscriber({ endpoint: 'tcp://127.0.0.1:1', onBatch: () => {} })
    await sub.close()
    await expect(sub.start()).rejects.toMatchObject({ code: 'CLOSED' })
    expect(() => new KvEventSubscriber({ endpoint: 'x', onBatch: 1 as never })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
  })
})
