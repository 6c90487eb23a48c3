import { ResidencyIndex } from '@kvc/kvc-router'
import { type KvEvent, PagedAllocator, RadixCache } from '@kvc/radix-cache'
import { encode } from '@msgpack/msgpack'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  KvEventPublisher,
  KvEventSubscriber,
  type ReceivedKvBatch,
  type WireKvEvent,
  decodeKvEventBatch,
  encodeKvEventBatch,
  fromRadixKvEvent,
  kvEventTier,
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

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex')

// Golden payloads in the documented wire formats of tiered caches:
// - SGLang HiCache (msgspec array_like, omit_defaults, tag): `medium` after lora_id; a demotion
//   is BlockStored(CPU_TIER1) then BlockRemoved(GPU); load-back BlockStored(GPU); the L3 write
//   BlockStored(CPU_TIER2); host eviction BlockRemoved(CPU_TIER1).
// - vLLM's OffloadingConnector: BlockStored(parent None, token_ids [], block_size 0 in newer
//   versions, medium "CPU") / BlockRemoved(medium "CPU"), as tagged maps, or positional arrays
//   with the later fields (extra_keys, group_idx, kv_cache_spec_kind...) as llm-d decodes them.
// - Dynamo / Mooncake envelopes carrying `storage_tier`.
describe('tier and storage KV events: golden payloads', () => {
  it('SGLang HiCache tier transitions (array layout)', () => {
    const h = -6_917_529_027_641_081_856n // hash_str_to_int64 values are signed int64
    const parent = 1_234_567n
    const page = [11, 12, 13, 14]
    const payload = encode(
      [
        1_770_000_000.25,
        [
          ['BlockStored', [h], parent, page, 4, null, 'CPU_TIER1'], // write_backup (demotion)
          ['BlockRemoved', [h], 'GPU'], // the device copy freed
          ['BlockStored', [h], parent, page, 4, null, 'GPU'], // load_back
          ['BlockStored', [h], parent, page, 4, null, 'CPU_TIER2'], // write_backup_storage (L3)
          ['BlockRemoved', [h], 'CPU_TIER1'], // evict_host
        ],
      ],
      { useBigInt64: true },
    )
    const b = decodeKvEventBatch(payload)
    expect(b.dataParallelRank).toBeNull()
    expect(b.events.map((e) => [e.type, 'medium' in e ? e.medium : null])).toEqual([
      ['BlockStored', 'CPU_TIER1'],
      ['BlockRemoved', 'GPU'],
      ['BlockStored', 'GPU'],
      ['BlockStored', 'CPU_TIER2'],
      ['BlockRemoved', 'CPU_TIER1'],
    ])
    expect(b.events.map((e) => ('medium' in e ? kvEventTier(e.medium) : 'all'))).toEqual([
      'host',
      'device',
      'device',
      'disk',
      'host',
    ])
    expect(b.events[0]).toEqual({
      type: 'BlockStored',
      blockHashes: [h],
      parentBlockHash: parent,
      tokenIds: page,
      blockSize: 4,
      loraId: null,
      medium: 'CPU_TIER1',
      loraName: null,
    })
    // Our encoder writes the same shape, byte for byte.
    const ours = encodeKvEventBatch({ ts: 1.5, events: [b.events[0]!, b.events[1]!], dataParallelRank: null })
    expect(hex(ours)).toBe(
      hex(
        encode(
          [
            1.5,
            [
              ['BlockStored', [h], parent, page, 4, null, 'CPU_TIER1'],
              ['BlockRemoved', [h], 'GPU'],
            ],
          ],
          { useBigInt64: true },
        ),
      ),
    )
    expect(hex(ours)).toBe(
      '92cb3ff80000000000009297ab426c6f636b53746f72656491d3a000000000000000cf000000000012d687940b0c0d0e04c0a94350555f544945523193ac426c6f636b52656d6f76656491d3a000000000000000a3475055',
    )
  })

  it("vLLM's offloading connector (tagged maps): byte-string hashes, no tokens, block_size 0", () => {
    const key = new Uint8Array(32)
    key[30] = 0x01
    key[31] = 0x02
    const payload = encode({
      ts: 12.5,
      events: [
        {
          type: 'BlockStored',
          block_hashes: [key],
          parent_block_hash: null,
          token_ids: [],
          block_size: 0,
          lora_id: null,
          medium: 'CPU',
          lora_name: null,
          extra_keys: null,
          group_idx: 0,
        },
        { type: 'BlockRemoved', block_hashes: [key], medium: 'CPU', group_idx: 0 },
        {
          type: 'BlockStored',
          block_hashes: [7],
          parent_block_hash: null,
          token_ids: [1, 2],
          block_size: 2,
          medium: 'GPU',
        },
      ],
      data_parallel_rank: 3,
    })
    const b = decodeKvEventBatch(payload)
    expect(b.dataParallelRank).toBe(3)
    expect(b.events[0]).toEqual({
      type: 'BlockStored',
      blockHashes: [0x0102n],
      parentBlockHash: null,
      tokenIds: [],
      blockSize: 0,
      loraId: null,
      medium: 'CPU',
      loraName: null,
    })
    expect(b.events[1]).toEqual({ type: 'BlockRemoved', blockHashes: [0x0102n], medium: 'CPU' })
    expect(kvEventTier('CPU')).toBe('host')
    // A radix-cache view of the batch keeps the medium.
    const radix = toRadixKvEvents(b, 10)
    expect(radix.map((e) => ('medium' in e ? e.medium : undefined))).toEqual(['CPU', 'CPU', 'GPU'])
  })

  it('vLLM positional arrays with the later fields, as llm-d decodes them', () => {
    const payload = encode([
      3.0,
      [
        ['BlockStored', [42], null, [], 0, null, 'CPU', null, null, 0, 'full_attention', null],
        ['BlockRemoved', [42], 'CPU', 0],
      ],
      0,
    ])
    const b = decodeKvEventBatch(payload)
    expect(b.events).toEqual([
      {
        type: 'BlockStored',
        blockHashes: [42n],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 0,
        loraId: null,
        medium: 'CPU',
        loraName: null,
      },
      { type: 'BlockRemoved', blockHashes: [42n], medium: 'CPU' },
    ])
  })

  it('Dynamo / Mooncake envelopes with a storage_tier', () => {
    const b = decodeKvEventBatch(
      encode({
        ts: 1,
        events: [
          {
            event_type: 'stored',
            seq_hashes: [5],
            parent_hash: null,
            token_ids: [],
            block_size: 16,
            storage_tier: 'host_pinned',
          },
          { event_type: 'removed', seq_hashes: [5], storage_tier: 'disk' },
        ],
      }),
    )
    expect(b.events.map((e) => ('medium' in e ? [e.medium, kvEventTier(e.medium)] : []))).toEqual([
      ['host_pinned', 'host'],
      ['disk', 'disk'],
    ])
  })

  it('the medium table: Dynamo strings, case-insensitive, unknown is undefined', () => {
    const cases: [string | null, string | undefined][] = [
      [null, 'device'],
      ['GPU', 'device'],
      ['device', 'device'],
      ['CPU', 'host'],
      ['CPU_PINNED', 'host'],
      ['CPU_TIER1', 'host'],
      ['CPU_TIER2', 'disk'],
      ['NVME', 'disk'],
      ['storage', 'disk'],
      ['REMOTE', 'external'],
      ['SHARED', 'external'],
      ['tape', undefined],
    ]
    for (const [m, tier] of cases) expect([m, kvEventTier(m)]).toEqual([m, tier])
  })

  it('refuses a block_size of 0 with token ids, and a non-string medium', () => {
    for (const bad of [
      encode([1, [['BlockStored', [1], null, [1, 2], 0, null, 'CPU']]]),
      encode([1, [['BlockRemoved', [1], 7]]]),
    ]) {
      expect(() => decodeKvEventBatch(bad)).toThrow(expect.objectContaining({ code: 'KV_EVENT_DECODE' }))
    }
  })
})

describe('residencyFeeder per tier', () => {
  const stored = (h: bigint, medium: string | null): WireKvEvent => ({
    type: 'BlockStored',
    blockHashes: [h],
    parentBlockHash: null,
    tokenIds: [],
    blockSize: 4,
    loraId: null,
    medium,
    loraName: null,
  })
  const removed = (h: bigint, medium: string | null): WireKvEvent => ({
    type: 'BlockRemoved',
    blockHashes: [h],
    medium,
  })
  const msg = (seq: bigint, ...events: WireKvEvent[]): ReceivedKvBatch => ({
    topic: '',
    seq,
    batch: { ts: 0, events, dataParallelRank: null },
    replayed: false,
  })

  it('feeds device events by default and one tier per feeder, with contiguous event ids each', () => {
    const device: KvEvent[] = []
    const host: KvEvent[] = []
    const skipped: string[] = []
    const feedDevice = residencyFeeder({ ingest: (_, e) => device.push(e) }, 'd0', 0, {
      onSkipped: (e, tier) => skipped.push(`${e.type}:${String(tier)}`),
    })
    const feedHost = residencyFeeder({ ingest: (_, e) => host.push(e) }, 'd0', 0, { tiers: ['host'] })
    const feed = (m: ReceivedKvBatch) => {
      feedDevice(m)
      feedHost(m)
    }
    // Insert on the GPU, demote (host stored, GPU removed), load back, evict from the host.
    feed(msg(0n, stored(1n, 'GPU'), stored(1n, 'CPU_TIER1'), removed(1n, 'GPU')))
    feed(
      msg(1n, stored(1n, 'GPU'), removed(1n, 'CPU_TIER1'), stored(2n, 'tape'), { type: 'AllBlocksCleared' }),
    )
    expect(device.map((e) => [e.eventId, e.type])).toEqual([
      [0, 'BlockStored'],
      [1, 'BlockRemoved'],
      [2, 'BlockStored'],
      [3, 'AllBlocksCleared'],
    ])
    expect(host.map((e) => [e.eventId, e.type])).toEqual([
      [0, 'BlockStored'],
      [1, 'BlockRemoved'],
      [2, 'AllBlocksCleared'],
    ])
    expect(skipped).toEqual(['BlockStored:host', 'BlockRemoved:host', 'BlockStored:undefined'])
    expect(() => residencyFeeder({ ingest: () => {} }, 'd0', 0, { tiers: ['gpu' as never] })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
  })

  it("a radix cache with a host tier, published: the router's index follows the device tier only", () => {
    const pool = new PagedAllocator({ size: 32, pageSize: 4 })
    const events: KvEvent[] = []
    const cache = new RadixCache({
      pageSize: 4,
      allocator: pool,
      onEvent: (e) => events.push(e),
      hostTier: { capacity: 64 },
    })
    const put = (t: number[]) => {
      const s = pool.alloc(t.length)
      const r = cache.insert(t, s)
      if (r.prefixLen > 0) pool.free(s.subarray(0, r.prefixLen))
    }
    put([1, 2, 3, 4, 5, 6, 7, 8])
    put([9, 10, 11, 12])
    cache.evict(8) // demotes [1..8]
    cache.loadBack(cache.matchPrefix([1, 2, 3, 4]).lastHostNode) // [1..4] back (split)
    const index = new ResidencyIndex()
    index.addWorker('d0')
    const hostIndex = new ResidencyIndex({ tier: 'host' })
    hostIndex.addWorker('d0')
    const wire = decodeKvEventBatch(
      encodeKvEventBatch({ ts: 0, events: events.map((e) => fromRadixKvEvent(e)), dataParallelRank: null }),
    )
    residencyFeeder(index, 'd0')(msg(0n, ...wire.events))
    residencyFeeder(hostIndex, 'd0', 0, { tiers: ['host'] })(msg(0n, ...wire.events))
    // (the index keeps hashes as unsigned 64-bit values)
    const sorted = (xs: bigint[]) => xs.map((x) => BigInt.asUintN(64, x)).sort((a, b) => (a < b ? -1 : 1))
    expect(sorted(index.workerBlocks('d0'))).toEqual(sorted(cache.blockHashDump('device').blockHashes))
    expect(sorted(hostIndex.workerBlocks('d0'))).toEqual(sorted(cache.blockHashDump('host').blockHashes))
    expect(index.workerStatus('d0').needsResync).toBe(false)
  })
})

describe('KvEventSubscriber counts events per tier', () => {
  it('eventsByTier', async () => {
    const pub = new KvEventPublisher()
    const { endpoint } = await pub.bind()
    const got: ReceivedKvBatch[] = []
    const sub = new KvEventSubscriber({ endpoint, onBatch: (m) => void got.push(m) })
    await sub.start()
    try {
      const batch = {
        ts: 0,
        dataParallelRank: null,
        events: [
          { type: 'BlockRemoved' as const, blockHashes: [1n], medium: 'GPU' },
          { type: 'BlockRemoved' as const, blockHashes: [1n], medium: 'CPU_TIER1' },
          { type: 'BlockRemoved' as const, blockHashes: [1n], medium: 'CPU_TIER2' },
          { type: 'BlockRemoved' as const, blockHashes: [1n], medium: 'wat' },
          { type: 'AllBlocksCleared' as const },
        ],
      }
      for (let tries = 0; got.length === 0 && tries < 300; tries++) {
        await pub.publish(batch)
        await new Promise((r) => setTimeout(r, 10))
      }
      const n = got.length
      expect(n).toBeGreaterThan(0)
      expect(sub.stats.eventsByTier).toEqual({ device: n, host: n, disk: n, external: 0, unknown: n })
    } finally {
      await sub.close()
      await pub.close()
    }
  })
})
