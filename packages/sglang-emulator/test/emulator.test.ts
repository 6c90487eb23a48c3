import { SglangClient } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  DEFAULT_EMULATOR_TIMING,
  createSglangEmulator,
  fakeChatTemplate,
  fakeDetokenize,
  fakeTokenize,
} from '../src/index.js'

let baseline: Record<string, number>
beforeAll(() => {
  baseline = handleCounts()
})
afterAll(async () => {
  expect(await leakedSince(baseline)).toEqual({})
})

const ids = (n: number, seed: number) =>
  Array.from({ length: n }, (_, i) => ((i * 7919 + seed * 104729) % 250) + 3)

describe('emulator KV pool, sessions and timing', () => {
  it('the pool fills and evicts: old prefixes leave the tree, accounting stays balanced', async () => {
    const emu = await createSglangEmulator({ capacityTokens: 256, pageSize: 4, timing: { scale: 0 } })
    try {
      const c = new SglangClient({ baseURL: emu.url })
      for (let s = 0; s < 8; s++)
        await c.generate({ input_ids: ids(60, s), sampling_params: { max_new_tokens: 4 } })
      const st = emu.stats()
      expect(st.evictedTokensTotal).toBeGreaterThan(0)
      expect(st.treeTokens).toBeLessThanOrEqual(256)
      expect(st.balanced).toBe(true)
      // The first prompt was evicted (LRU): no hit any more; the last one still hits.
      expect(
        (await c.generate({ input_ids: ids(60, 0), sampling_params: { max_new_tokens: 1 } })).meta_info
          .cached_tokens,
      ).toBe(0)
      expect(
        (await c.generate({ input_ids: ids(60, 7), sampling_params: { max_new_tokens: 1 } })).meta_info
          .cached_tokens,
      ).toBeGreaterThan(0)
    } finally {
      await emu.close()
    }
  })

  it('sessions hold KV until the pool needs it: idle sessions are released under pressure', async () => {
    const emu = await createSglangEmulator({ capacityTokens: 256, pageSize: 4, timing: { scale: 0 } })
    try {
      const c = new SglangClient({ baseURL: emu.url })
      await c.generate({ input_ids: ids(100, 1), session_id: 'held', sampling_params: { max_new_tokens: 4 } })
      const held = emu.sessionCache.getSessionStatus('held')!.residentTokens
      expect(held).toBeGreaterThan(0)
      // Plain traffic alone cannot evict a held session's KV while there is room elsewhere...
      await c.generate({ input_ids: ids(60, 2), sampling_params: { max_new_tokens: 4 } })
      expect(emu.sessionCache.getSessionStatus('held')?.residentTokens).toBe(held)
      // ...but a request that needs the room releases the idle session's lock.
      await c.generate({ input_ids: ids(200, 3), sampling_params: { max_new_tokens: 4 } })
      expect(emu.sessionCache.getSessionStatus('held')?.residentTokens ?? 0).toBeLessThan(held)
      expect(emu.stats().balanced).toBe(true)
    } finally {
      await emu.close()
    }
  })

  it('requests that do not fit wait for memory instead of failing; one larger than the pool is a 400', async () => {
    const emu = await createSglangEmulator({
      capacityTokens: 128,
      pageSize: 4,
      timing: { scale: 1, decodeStepS: 0.002, prefillFixedS: 0 },
    })
    try {
      const c = new SglangClient({ baseURL: emu.url })
      const outs = await Promise.all(
        [0, 1, 2].map((s) =>
          c.generate({ input_ids: ids(40, s + 10), sampling_params: { max_new_tokens: 30 } }),
        ),
      )
      expect(outs.every((o) => o.output_ids.length === 30)).toBe(true)
      expect(emu.stats()).toMatchObject({ runningRequests: 0, waitingRequests: 0, balanced: true })
      const big = await c
        .generate({ input_ids: ids(100, 1), sampling_params: { max_new_tokens: 40 } })
        .catch((e: unknown) => e)
      expect(big).toMatchObject({ status: 400 })
    } finally {
      await emu.close()
    }
  })

  it('latencies follow the scaled timing model', async () => {
    const scale = 0.05
    const emu = await createSglangEmulator({ capacityTokens: 8192, pageSize: 4, timing: { scale } })
    try {
      const c = new SglangClient({ baseURL: emu.url })
      const n = 4000
      const out = await c.generate({ input_ids: ids(n, 5), sampling_params: { max_new_tokens: 10 } })
      const t = DEFAULT_EMULATOR_TIMING
      const prefill = (t.prefillFixedS + n / t.prefillTokensPerS + t.prefillQuadraticS * n * (n / 2)) * 1000
      const decode = 9 * t.decodeStepS * 1000
      // Node timers may fire up to ~1 ms early: allow that per timer (one prefill, nine decode steps).
      const early = 1
      expect(out.meta_info.e2e_latency! * 1000).toBeGreaterThanOrEqual(
        (prefill + decode) * scale * 0.9 - 10 * early,
      )
      const m = await c.metrics()
      expect(m.timeToFirstToken!.sum * 1000).toBeGreaterThanOrEqual(prefill * scale * 0.9 - early)
    } finally {
      await emu.close()
    }
  })

  it('fake model: deterministic, byte-level tokenizer, chat template reproduces prompt + output', () => {
    expect(fakeDetokenize(fakeTokenize('héllo 👋'))).toBe('héllo 👋')
    const t1 = fakeChatTemplate([{ role: 'user', content: 'hi' }])
    const t2 = fakeChatTemplate(
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'yo' },
      ],
      false,
    )
    expect(t2.startsWith(`${t1}yo`)).toBe(true)
  })

  it('rejects bad options', async () => {
    await expect(createSglangEmulator({ pageSize: 0 })).rejects.toMatchObject({ code: 'INVALID_OPTION' })
    await expect(createSglangEmulator({ capacityTokens: 2, pageSize: 4 })).rejects.toMatchObject({
      code: 'INVALID_OPTION',
    })
    await expect(createSglangEmulator({ role: 'router' as never })).rejects.toMatchObject({
      code: 'INVALID_OPTION',
    })
    await expect(createSglangEmulator({ timing: { scale: -1 } })).rejects.toMatchObject({
      code: 'INVALID_OPTION',
    })
  })
})
