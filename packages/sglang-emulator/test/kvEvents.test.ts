import { ResidencyIndex } from '@kvc/kvc-router'
import { type KvEventGap, KvEventSubscriber, SglangClient, residencyFeeder } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createSglangEmulator } from '../src/index.js'

let baseline: Record<string, number>
beforeAll(() => {
  baseline = handleCounts()
})
afterAll(async () => {
  expect(await leakedSince(baseline)).toEqual({})
})

async function until(cond: () => boolean, ms = 3_000): Promise<void> {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not reached')
    await new Promise((r) => setTimeout(r, 5))
  }
}

describe('the emulator publishes its cache’s KV events over ZeroMQ', () => {
  it('the emulator publishes its real radix cache changes; residencyFeeder numbers events for a sink', async () => {
    const emu = await createSglangEmulator({
      capacityTokens: 256,
      pageSize: 4,
      timing: { scale: 0 },
      kvEvents: { encoding: 'map' },
    })
    const ingested: string[] = []
    const gaps: KvEventGap[] = []
    const sub = new KvEventSubscriber({
      endpoint: emu.kvEventsEndpoint!,
      replayEndpoint: emu.kvReplayEndpoint!,
      startSeq: 0n,
      onBatch: residencyFeeder({ ingest: (w, e) => ingested.push(`${w}:${e.eventId}:${e.type}`) }, 'd0'),
      onGap: (g) => gaps.push(g),
    })
    await sub.start()
    try {
      const c = new SglangClient({ baseURL: emu.url })
      await c.generate({ text: 'sixteen tokens!!', sampling_params: { max_new_tokens: 1 } })
      emu.faults.dropKvEvents(1)
      await c.generate({ text: 'another sixteen!', sampling_params: { max_new_tokens: 1 } })
      await c.generate({ text: 'third prompt....', sampling_params: { max_new_tokens: 1 } })
      await c.flushCache()
      await until(() => ingested.some((s) => s.endsWith('AllBlocksCleared')))
      expect(ingested.filter((s) => s.endsWith('BlockStored')).length).toBeGreaterThanOrEqual(12)
      // Events are numbered consecutively from 0, whatever arrived live or by replay.
      expect(ingested.map((s) => Number(s.split(':')[1]))).toEqual(ingested.map((_, i) => i))
      expect(gaps.every((g) => g.recovered)).toBe(true)
    } finally {
      await sub.close()
      await emu.close()
    }
  })

  it("feeds kvc-router's ResidencyIndex from a live emulator: residency follows the worker's cache", async () => {
    const emu = await createSglangEmulator({ capacityTokens: 256, pageSize: 4, timing: { scale: 0 } })
    const index = new ResidencyIndex()
    index.addWorker('d0')
    const sub = new KvEventSubscriber({
      endpoint: emu.kvEventsEndpoint!,
      replayEndpoint: emu.kvReplayEndpoint!,
      startSeq: 0n,
      onBatch: residencyFeeder(index, 'd0'),
    })
    await sub.start()
    try {
      const c = new SglangClient({ baseURL: emu.url })
      await c.generate({ text: 'residency of this prompt', sampling_params: { max_new_tokens: 1 } })
      const expected = emu.stats().treeTokens / 4
      await until(() => index.workerBlocks('d0').length === expected)
      expect(expected).toBeGreaterThan(0)
      await c.flushCache()
      await until(() => index.workerBlocks('d0').length === 0)
    } finally {
      await sub.close()
      await emu.close()
    }
  })
})
