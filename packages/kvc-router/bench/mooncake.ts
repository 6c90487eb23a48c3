import { existsSync, readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { KvEvent } from '@kvc/radix-cache'
import { bench, describe } from 'vitest'
import { BlockKeys, ResidencyIndex } from '../src/index.js'

// Shared by the residency benchmarks: the Mooncake FAST'25 conversation trace (12,031 requests;
// each hash_id is a prefix hash of one 512-token block), event streams for 64 workers built from
// it, and the naive per-worker Set<bigint> implementation they are compared against. The trace is
// read from ../shared/traces beside the repository; its origin, licence and how to fetch it:
// docs/design/traces.md#mooncake-fast25-traces.
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
export const tracePath = resolve(root, '../shared/traces/conversation_trace.jsonl')
export const WORKERS = 64
const BLOCK = 512

export interface Trace {
  ids: number[][]
}

export function loadTrace(): Trace | undefined {
  if (!existsSync(tracePath)) return undefined
  const ids: number[][] = []
  for (const line of readFileSync(tracePath, 'utf8').split('\n')) {
    if (line.trim() === '') continue
    ids.push((JSON.parse(line) as { hash_ids: number[] }).hash_ids)
  }
  return { ids }
}

export interface WorkerEvent {
  readonly worker: number
  readonly event: KvEvent
}

export function replicatedEvents(t: Trace): WorkerEvent[] {
  const out: WorkerEvent[] = []
  const next = new Array<number>(WORKERS).fill(0)
  for (const ids of t.ids) {
    const hashes = ids.map(BigInt)
    for (let w = 0; w < WORKERS; w++) {
      out.push({
        worker: w,
        event: {
          type: 'BlockStored',
          eventId: next[w]!++,
          blockHashes: hashes,
          parentBlockHash: null,
          tokenIds: [],
          blockSize: BLOCK,
          extraKey: null,
        },
      })
    }
  }
  return out
}

export function routedEvents(t: Trace, capacityBlocks: number): WorkerEvent[] {
  const out: WorkerEvent[] = []
  const lru = Array.from({ length: WORKERS }, () => new Map<number, true>())
  const next = new Array<number>(WORKERS).fill(0)
  for (const ids of t.ids) {
    const w = ((ids[0]! * 31 + (ids[1] ?? 0)) >>> 0) % WORKERS
    const cache = lru[w]!
    const fresh: number[] = []
    for (const id of ids) {
      if (cache.has(id)) cache.delete(id)
      else fresh.push(id)
      cache.set(id, true)
    }
    if (fresh.length > 0) {
      const parent = fresh[0] === ids[0] ? null : BigInt(ids[ids.indexOf(fresh[0]!) - 1]!)
      out.push({
        worker: w,
        event: {
          type: 'BlockStored',
          eventId: next[w]!++,
          blockHashes: fresh.map(BigInt),
          parentBlockHash: parent,
          tokenIds: [],
          blockSize: BLOCK,
          extraKey: null,
        },
      })
    }
    const evicted: bigint[] = []
    for (const id of cache.keys()) {
      if (cache.size - evicted.length <= capacityBlocks) break
      evicted.push(BigInt(id))
    }
    for (const h of evicted) cache.delete(Number(h))
    if (evicted.length > 0)
      out.push({
        worker: w,
        event: { type: 'BlockRemoved', eventId: next[w]!++, blockHashes: evicted, extraKey: null } as KvEvent,
      })
  }
  return out
}

export class NaiveSets {
  readonly sets = Array.from({ length: WORKERS }, () => new Set<bigint>())
  readonly last = new Array<number>(WORKERS).fill(-1)
  ingest(w: number, e: KvEvent): void {
    if (e.eventId <= this.last[w]!) throw new Error('out of order')
    this.last[w] = e.eventId
    const s = this.sets[w]!
    if (e.type === 'BlockStored') for (const h of e.blockHashes) s.add(h)
    else if (e.type === 'BlockRemoved') for (const h of e.blockHashes) s.delete(h)
    else s.clear()
  }
  overlapInto(q: readonly bigint[], out: Int32Array): void {
    for (let w = 0; w < WORKERS; w++) {
      const s = this.sets[w]!
      let d = 0
      while (d < q.length && s.has(q[d]!)) d++
      out[w] = d
    }
  }
}

export function ingestIndex(events: readonly WorkerEvent[]): ResidencyIndex {
  const ix = new ResidencyIndex() // default capacity: growth is part of the cost
  for (let w = 0; w < WORKERS; w++) ix.addWorker(`w${w}`)
  const ids = Array.from({ length: WORKERS }, (_, w) => `w${w}`)
  for (const { worker, event } of events) ix.ingest(ids[worker]!, event)
  return ix
}

export function ingestNaive(events: readonly WorkerEvent[]): NaiveSets {
  const n = new NaiveSets()
  for (const { worker, event } of events) n.ingest(worker, event)
  return n
}

/** Block operations (hashes named) in a list of events. */
export function blockOps(ev: readonly WorkerEvent[]): number {
  return ev.reduce(
    (s, { event }) => s + (event.type === 'AllBlocksCleared' ? 0 : event.blockHashes.length),
    0,
  )
}

/** Loads the trace, or prints a visible skip message and returns undefined. */
export function traceOrSkip(what: string): Trace | undefined {
  const t = loadTrace()
  if (t === undefined)
    console.warn(
      `[kvc-router bench] SKIPPED ${what}: ${tracePath} not found (how to fetch it: docs/design/traces.md)`,
    )
  return t
}

let sink = 0

/**
 * One residency benchmark over an event stream built from the trace: ingest (ResidencyIndex vs
 * the naive per-worker sets), then overlap queries, one per trace request. Skipped, with a
 * message, when the trace is absent.
 */
export function residencyBench(o: {
  /** Short name, in the log line and the skip message. */
  readonly name: string
  readonly title: string
  readonly events: (t: Trace) => WorkerEvent[]
  /** Ingest runs (and warm-up runs) per measurement. */
  readonly iterations: number
  readonly warmupIterations: number
}): void {
  const trace = traceOrSkip(`${o.name} residency benchmark`)
  const describeTrace = trace === undefined ? describe.skip : describe
  describeTrace(o.title, () => {
    const t = trace ?? { ids: [] }
    const events = o.events(t)
    console.log(
      `[kvc-router bench] ${o.name}: ${t.ids.length} requests, ${events.length} events, ${blockOps(events)} block ops`,
    )
    const queries = t.ids.map((ids) => ids.map(BigInt))
    const keys = queries.map((q) => BlockKeys.fromHashes(q))
    const plain = new Int32Array(WORKERS)
    const excl = new Int32Array(WORKERS)
    const opts = { iterations: o.iterations, time: 0, warmupIterations: o.warmupIterations, warmupTime: 0 }

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
}

export { sink }
