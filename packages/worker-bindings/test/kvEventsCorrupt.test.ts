import { BlockKeys, ResidencyIndex } from '@kvc/kvc-router'
import { encode } from '@msgpack/msgpack'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Publisher } from 'zeromq'
import {
  type KvEventBatch,
  KvEventSubscriber,
  WorkerBindingsError,
  decodeKvEventBatch,
  encodeKvEventBatch,
  encodeSeq,
  residencyFeeder,
} from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

let baseline: Record<string, number>
beforeAll(() => {
  baseline = handleCounts()
})
afterAll(async () => {
  expect(await leakedSince(baseline)).toEqual({})
})

const stored = (hashes: bigint[], parent: bigint | null, blockSize = 4): KvEventBatch['events'][number] => ({
  type: 'BlockStored',
  blockHashes: hashes,
  parentBlockHash: parent,
  tokenIds: [],
  blockSize,
  loraId: null,
  medium: null,
  loraName: null,
})
const batch = (...events: KvEventBatch['events']): KvEventBatch => ({ ts: 0, events, dataParallelRank: null })

describe('corrupted KV events: refused by type, the rest applied, the loss flagged', () => {
  it('the decoder refuses hashes that are not exact 64-bit integers', () => {
    const bad = [
      encode([0, [['BlockStored', [2 ** 60], null, [], 4]]]), // a float past 2^53: bits lost
      encode([0, [['BlockStored', ['18446744073709551616'], null, [], 4]]]), // 2^64, as text
      encode([0, [['BlockRemoved', ['0x1ffffffffffffffff']]]]),
      encode([0, [['BlockStored', [1], -(2 ** 64), [], 4]]]),
    ]
    for (const b of bad) {
      let err: unknown
      try {
        decodeKvEventBatch(b)
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(WorkerBindingsError)
      expect((err as WorkerBindingsError).code).toBe('KV_EVENT_DECODE')
    }
    // Both 64-bit spellings are fine.
    expect(
      decodeKvEventBatch(
        encode([0, [['BlockRemoved', [-(2n ** 63n), 2n ** 64n - 1n]]]], { useBigInt64: true }),
      ).events[0],
    ).toMatchObject({
      blockHashes: [-(2n ** 63n), 2n ** 64n - 1n],
    })
  })

  it('residencyFeeder: an event the index refuses is reported and skipped; the batch goes on; the hole flags a resync', () => {
    const index = new ResidencyIndex({ pageSize: 4 })
    index.addWorker('d0')
    const refused: string[] = []
    const feed = residencyFeeder(index, 'd0', 0, {
      onRefused: (err, e) => refused.push(`${e.eventId}:${(err as Error).message}`),
    })
    feed({ topic: '', seq: 0n, batch: batch(stored([1n, 2n], null)), replayed: false })
    // A wrong block size and a hash past 64 bits in the middle of a batch, a good event after them.
    feed({
      topic: '',
      seq: 1n,
      batch: batch(stored([3n], 2n, 8), stored([2n ** 64n + 7n], 2n), stored([3n], 2n)),
      replayed: false,
    })
    expect(refused).toHaveLength(2)
    expect(refused[0]).toMatch(/^1:.*blockSize 8 differs/)
    expect(refused[1]).toMatch(/^2:.*must fit in 64 bits/)
    // The good event after them was applied; the holes in the ids are a gap: resync needed.
    expect(index.overlap(BlockKeys.fromHashes([1n, 2n, 3n]), 'plain').get('d0')).toBe(3)
    expect(index.workerStatus('d0')).toMatchObject({ needsResync: true, lastEventId: 3 })
    // A wrong parent (a block the worker does not hold) is applied but adds no reachable overlap.
    feed({ topic: '', seq: 2n, batch: batch(stored([11n, 12n], 99n)), replayed: false })
    expect(index.workerStatus('d0').orphanStores).toBe(1)
    expect(index.overlap(BlockKeys.fromHashes([10n, 11n, 12n]), 'plain').get('d0')).toBe(0)
    // Without onRefused the refusal is thrown (to the subscriber's onError), as before.
    const strict = residencyFeeder(index, 'd0', 100)
    expect(() =>
      strict({ topic: '', seq: 0n, batch: batch(stored([2n ** 64n], null)), replayed: false }),
    ).toThrow(/must fit in 64 bits/)
  })

  it('a live subscriber fed garbage, short frames, out-of-order and duplicate batches: only valid batches reach the index, in order, losses flagged', async () => {
    const pub = new Publisher({ linger: 0 })
    await pub.bind('tcp://127.0.0.1:*')
    const endpoint = pub.lastEndpoint!
    const index = new ResidencyIndex({ pageSize: 4 })
    index.addWorker('d0')
    const errors: unknown[] = []
    const refused: number[] = []
    const feed = residencyFeeder(index, 'd0', 0, { onRefused: (_err, e) => refused.push(e.eventId) })
    const seqs: bigint[] = []
    const sub = new KvEventSubscriber({
      endpoint,
      onBatch: (m) => {
        seqs.push(m.seq)
        feed(m)
      },
      onError: (e) => errors.push(e),
    })
    await sub.start()
    const send = (seq: bigint, payload: Uint8Array | Buffer) => pub.send(['kv', encodeSeq(seq), payload])
    try {
      // The slow joiner: send the first batch until the subscriber has it.
      const first = encodeKvEventBatch(batch(stored([1n], null)))
      for (let tries = 0; seqs.length === 0 && tries < 500; tries++) {
        await send(0n, first)
        await new Promise((r) => setTimeout(r, 20))
      }
      expect(seqs).toEqual([0n])
      await send(0n, first) // duplicate
      await pub.send(['kv', Buffer.alloc(3), first]) // a sequence frame that is not 8 bytes
      await pub.send(['kv']) // too few frames
      await send(1n, Buffer.from([0xc1, 0xff, 0x00])) // garbage payload
      await send(2n, encodeKvEventBatch(batch(stored([2n], 1n)))) // fine
      await send(4n, encodeKvEventBatch(batch(stored([3n], 2n)))) // 3 never comes (no replay socket)
      await send(3n, encodeKvEventBatch(batch(stored([99n], 2n)))) // late: dropped
      await send(5n, encode([0, [['BlockStored', [2 ** 60], 3, [], 4]]])) // an inexact hash
      await send(6n, encodeKvEventBatch(batch(stored([4n], 3n)))) // fine
      for (let tries = 0; !seqs.includes(6n) && tries < 1_000; tries++)
        await new Promise((r) => setTimeout(r, 10))
      expect(seqs).toEqual([0n, 2n, 4n, 6n])
      const st = sub.stats
      expect(st.duplicates).toBe(2) // the repeated 0 and the late 3
      expect(st.decodeErrors).toBe(4) // short seq frame, too few frames, garbage, inexact hash
      expect(st.unrecoveredGaps).toBe(1)
      expect(errors.every((e) => e instanceof WorkerBindingsError)).toBe(true)
      expect(refused).toEqual([])
      // Every valid block is in the index; the lost and corrupt batches left id gaps: resync.
      expect(index.overlap(BlockKeys.fromHashes([1n, 2n, 3n, 4n]), 'plain').get('d0')).toBe(4)
      expect(index.overlap(BlockKeys.fromHashes([1n, 2n, 99n]), 'plain').get('d0')).toBe(2)
      expect(index.workerStatus('d0').needsResync).toBe(true)
    } finally {
      await sub.close()
      pub.close()
    }
  })
})
