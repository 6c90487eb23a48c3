import {
  type KvEventBatch,
  WorkerBindingsError,
  decodeKvEventBatch,
  encodeKvEventBatch,
} from '@kvc/worker-bindings'
import { encode } from '@msgpack/msgpack'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { fuzzParams, fuzzTimeoutMs, thrownBy } from '../src/fuzzConfig.js'

/** Accepts a decoded batch or a typed KV_EVENT_DECODE; anything else fails the property. */
function decodeOrTyped(bytes: Uint8Array): KvEventBatch | undefined {
  let out: KvEventBatch | undefined
  const e = thrownBy(() => {
    out = decodeKvEventBatch(bytes)
  })
  if (e !== undefined && !(e instanceof WorkerBindingsError && e.code === 'KV_EVENT_DECODE')) throw e
  return out
}

const hash = fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n })
const optString = fc.option(fc.constantFrom('GPU', 'CPU_TIER1', 'cpu', 'disk'), { nil: null })
const event: fc.Arbitrary<KvEventBatch['events'][number]> = fc.oneof(
  fc.record({
    type: fc.constant('BlockStored' as const),
    blockHashes: fc.array(hash, { maxLength: 4 }),
    parentBlockHash: fc.option(hash, { nil: null }),
    tokenIds: fc.array(fc.nat({ max: 200_000 }), { maxLength: 16 }),
    blockSize: fc.integer({ min: 1, max: 64 }),
    loraId: fc.option(fc.nat({ max: 100 }), { nil: null }),
    medium: optString,
    loraName: fc.option(fc.constantFrom('a', 'lora-b'), { nil: null }),
  }),
  fc.record({
    type: fc.constant('BlockRemoved' as const),
    blockHashes: fc.array(hash, { maxLength: 4 }),
    medium: optString,
  }),
  fc.constant({ type: 'AllBlocksCleared' as const }),
)
const batch: fc.Arbitrary<KvEventBatch> = fc.record({
  ts: fc.double({ min: 0, max: 2e9, noNaN: true }),
  events: fc.array(event, { maxLength: 5 }),
  dataParallelRank: fc.option(fc.nat({ max: 7 }), { nil: null }),
})

describe('fuzz: the KV-event batch decoder', () => {
  it(
    'every batch round-trips in both encodings',
    () => {
      fc.assert(
        fc.property(batch, fc.constantFrom('array' as const, 'map' as const), (b, enc) => {
          const got = decodeKvEventBatch(encodeKvEventBatch(b, enc))
          // The map encoding carries loraName; the array one may drop trailing nulls.
          expect(got.events.length).toBe(b.events.length)
          expect(got.ts).toBe(b.ts)
          expect(got.dataParallelRank).toBe(b.dataParallelRank)
          got.events.forEach((e, i) => {
            const want = b.events[i]!
            expect(e.type).toBe(want.type)
            if (e.type !== 'AllBlocksCleared' && want.type !== 'AllBlocksCleared')
              expect(e.blockHashes).toEqual(want.blockHashes)
            if (e.type === 'BlockStored' && want.type === 'BlockStored') {
              expect(e.parentBlockHash).toBe(want.parentBlockHash)
              expect(e.tokenIds).toEqual(want.tokenIds)
              expect(e.blockSize).toBe(want.blockSize)
            }
          })
        }),
        fuzzParams(300, 1811),
      )
    },
    fuzzTimeoutMs(300, 2),
  )

  it(
    'random msgpack values and random bytes: a batch or KV_EVENT_DECODE',
    () => {
      fc.assert(
        fc.property(
          fc.oneof(
            fc.anything({ withBigInt: true, withTypedArray: true, maxDepth: 4 }).map((v) => {
              try {
                return encode(v, { useBigInt64: true })
              } catch {
                return new Uint8Array([0xc1])
              }
            }),
            fc.uint8Array({ maxLength: 256 }),
          ),
          (bytes) => {
            decodeOrTyped(bytes)
          },
        ),
        fuzzParams(400, 1812),
      )
    },
    fuzzTimeoutMs(400, 2),
  )

  it(
    'valid payloads with bytes flipped, cut or shaped like upstream batches: a batch or KV_EVENT_DECODE',
    () => {
      const shapes = fc.oneof(
        fc.tuple(
          fc.double(),
          fc.array(
            fc.array(fc.oneof(fc.string(), fc.integer(), fc.bigInt(), fc.constant(null)), { maxLength: 8 }),
            { maxLength: 3 },
          ),
        ),
        fc.record({
          ts: fc.anything(),
          events: fc.array(fc.dictionary(fc.string(), fc.anything({ maxDepth: 2 })), { maxLength: 3 }),
        }),
      )
      fc.assert(
        fc.property(
          batch,
          fc.constantFrom('array' as const, 'map' as const),
          fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
          fc.nat(),
          shapes,
          (b, enc, flips, cut, shape) => {
            const bytes = encodeKvEventBatch(b, enc).slice()
            for (const [at, v] of flips) if (bytes.length > 0) bytes[at % bytes.length] = v
            decodeOrTyped(bytes)
            decodeOrTyped(bytes.subarray(0, cut % (bytes.length + 1)))
            decodeOrTyped(encode(shape as unknown, { useBigInt64: true }))
          },
        ),
        fuzzParams(400, 1813),
      )
    },
    fuzzTimeoutMs(400, 3),
  )
})
