import { bench, describe } from 'vitest'
import { BlockKeys } from '../src/index.js'
import { WORKERS, blockOps, ingestIndex, ingestNaive, traceOrSkip } from './mooncake.js'
import { routedEvents } from './mooncake.js'

// Mooncake conversation trace, routed over 64 workers: each request goes to one worker (hash of its
// first two blocks), whose LRU of 4,096 blocks stores the request's new blocks and evicts
// (BlockStored / BlockRemoved events). ResidencyIndex vs a naive per-worker Set<bigint>, same run.
const trace = traceOrSkip('routed residency benchmark')
const describeTrace = trace === undefined ? describe.skip : describe
let sink = 0

describeTrace('Mooncake conversation trace routed over 64 workers (LRU 4,096 blocks each)', () => {
  const t = trace ?? { ids: [] }
  const events = routedEvents(t, 4096)
  console.log(
    `[kvc-router bench] routed: ${t.ids.length} requests, ${events.length} events, ${blockOps(events)} block ops`,
  )
  const queries = t.ids.map((ids) => ids.map(BigInt))
  const keys = queries.map((q) => BlockKeys.fromHashes(q))
  const plain = new Int32Array(WORKERS)
  const excl = new Int32Array(WORKERS)
  const opts = { iterations: 20, time: 0, warmupIterations: 3, warmupTime: 0 }

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
