import { PdDispatcher, SglangClient, WorkerApiError, WorkerBindingsError } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { describe, expect, it } from 'vitest'
import { createSglangEmulator } from '../src/index.js'

describe('a KV transfer that delivers part of its pages', () => {
  it('the decode worker refuses it (KVTransferError naming what arrived), frees what it allocated, and serves the retry', async () => {
    const baseline = handleCounts()
    const p = await createSglangEmulator({
      role: 'prefill',
      capacityTokens: 4096,
      pageSize: 4,
      timing: { scale: 0 },
    })
    const d = await createSglangEmulator({
      role: 'decode',
      capacityTokens: 4096,
      pageSize: 4,
      timing: { scale: 0 },
      transferTimeoutMs: 5_000,
    })
    try {
      const pd = new PdDispatcher({
        prefill: new SglangClient({ baseURL: p.url, maxRetries: 0 }),
        decode: new SglangClient({ baseURL: d.url, maxRetries: 0 }),
        bootstrapPort: p.bootstrapPort!,
      })
      const req = {
        text: 'a prompt whose KV is cut short on the way',
        sampling_params: { max_new_tokens: 4 },
      }
      const before = d.stats()
      p.faults.partialTransfers(1, 0.5)
      const err = await pd.generate(req).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(WorkerBindingsError)
      const cause = (err as WorkerBindingsError).cause
      expect(cause).toBeInstanceOf(WorkerApiError)
      expect((cause as WorkerApiError).serverMessage).toMatch(
        /^KVTransferError\(bootstrap_room=\d+\): the prefill instance delivered the KV of \d+ of \d+ prompt tokens$/,
      )
      // Nothing of the refused transfer stays on the decode worker.
      const after = d.stats()
      expect(after).toMatchObject({ runningRequests: 0, transferQueueDepth: 0, balanced: true })
      expect(after.treeTokens).toBe(before.treeTokens)
      expect(d.sessionCache.poolAccounting()).toMatchObject({ balanced: true, requestOwned: 0 })
      // The fault is used up: the retry goes through whole.
      const ok = await pd.generate(req)
      expect(ok.decode.output_ids).toHaveLength(4)
      expect(p.stats().balanced && d.stats().balanced).toBe(true)
      expect(() => p.faults.partialTransfers(1, 1)).toThrow(/fraction must be in \[0, 1\)/)
    } finally {
      await Promise.all([p.close(), d.close()])
    }
    expect(await leakedSince(baseline)).toEqual({})
  })
})
