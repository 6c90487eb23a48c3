import { bench, describe } from 'vitest'
import { BlockKeys } from '../src/index.js'
import { WORKERS, blockOps, ingestIndex, ingestNaive, traceOrSkip } from './mooncake.js'
import { replicatedEvents } from './mooncake.js'

// Mooncake conversation trace replicated across 64 workers (Dynamo's worker duplication): every
// worker receives the whole trace as KV events, so every block ends up held by all 64 workers (the
// worst case for holder masks, and for exclusive overlap every block is boilerplate).
// ResidencyIndex vs a naive per-worker Set<bigint>, same run.
const trace = traceOrSkip('replicated residency benchmark')
const describeTrace = trace === undefined ? describe.skip : describe
let sink = 0

describeTrace('Mooncake conversation trace replicated across 64 workers', () => {
  const t = trace ?? { ids: [] }
  const events = replicatedEvents(t)
  console.log(
    `[kvc-router bench] replicated: ${t.ids.length} requests, ${events.length} events, ${blockOps(events)} block ops`,
  )
  const queries = t.ids.map((ids) => ids.map(BigInt))
  const keys = queries.map((q) => BlockKeys.fromHashes(q))
  const plain = new Int32Array(WORKERS)
  const excl = new Int32Array(WORKERS)
  const opts = { iterations: 3, time: 0, warmupIterations: 1, warmupTime: 0 }

  describe('ingest (events/s = events × hz)', () => {
    bench(
      'ResidencyIndex',
      () => {
        sink ^= ingestIndex(events).blockCount
      },
      opts,
    )
    bench(
      'naive per-worker Set<bigint>',
      () => {
        sink ^= ingestNaive(events).sets[0]!.size
      },
      opts,
    )
  })

  const index = ingestIndex(events)
  const naive = ingestNaive(events)
  let qi = 0
  const n = Math.max(1, queries.length)
  describe('overlap, one query per trace request', () => {
    bench('ResidencyIndex.overlapInto (plain + exclusive)', () => {
      sink ^= index.overlapInto(keys[qi++ % n]!, plain, excl)
    })
    bench('naive per-worker Set<bigint>', () => {
      naive.overlapInto(queries[qi++ % n]!, plain)
      sink ^= plain[0]!
    })
  })
})

export { sink }
