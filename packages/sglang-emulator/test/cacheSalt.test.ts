import { computeBlockHashes, sglangBlockHasher } from '@kvc/radix-cache'
import { KvEventSubscriber, PdDispatcher, SglangClient, toRadixKvEvents } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type SglangEmulator, createSglangEmulator, fakeChatTemplate, fakeTokenize } from '../src/index.js'

const PAGE = 4
const messages = [
  { role: 'system', content: 'A system prompt long enough to fill several pages of the cache.' },
  { role: 'user', content: 'What is the code?' },
]

/**
 * A cache salt (vLLM's and SGLang's `cache_salt`, SGLang's `extra_key`) is a namespace: two
 * requests of different salts never share KV, on a P, on a D, or in the KV events' block hashes
 * when the hasher seeds chains with the namespace (what a router that isolates tenants needs).
 */
describe('cache salts isolate prefixes in the emulator', () => {
  let baseline: Record<string, number>
  let p: SglangEmulator
  let d: SglangEmulator

  beforeAll(async () => {
    baseline = handleCounts()
    const common = { capacityTokens: 4_096, pageSize: PAGE, timing: { scale: 0 }, enableCacheReport: true }
    p = await createSglangEmulator({ ...common, role: 'prefill', kvEvents: false })
    d = await createSglangEmulator({
      ...common,
      role: 'decode',
      transferTimeoutMs: 2_000,
      kvEvents: { blockHasher: sglangBlockHasher({ namespaceInSeed: true }) },
    })
  })

  afterAll(async () => {
    await Promise.all([p.close(), d.close()])
    expect(await leakedSince(baseline)).toEqual({})
  })

  it('chat completions: cache_salt and extra_key name separate caches', async () => {
    const c = new SglangClient({ baseURL: d.url })
    const ask = (extra: Record<string, string>) =>
      c.chatCompletions({ model: 'm', messages, max_tokens: 2, ...extra } as never)
    const cached = (r: { usage?: { prompt_tokens_details?: { cached_tokens?: number } | null } | null }) =>
      r.usage?.prompt_tokens_details?.cached_tokens ?? 0
    expect(cached(await ask({ cache_salt: 'tenant=a' }))).toBe(0)
    expect(cached(await ask({ cache_salt: 'tenant=a' }))).toBeGreaterThan(0)
    expect(cached(await ask({ cache_salt: 'tenant=b' }))).toBe(0)
    expect(cached(await ask({ extra_key: 'tenant=a' }))).toBeGreaterThan(0) // one namespace, two fields
    expect(cached(await ask({}))).toBe(0)
  })

  it('P/D: the salt holds on both sides of a transfer, and the KV events hash each namespace apart', async () => {
    const events: bigint[][] = []
    const sub = new KvEventSubscriber({
      endpoint: d.kvEventsEndpoint!,
      replayEndpoint: d.kvReplayEndpoint!,
      startSeq: 0n,
      onBatch: ({ batch }) => {
        for (const e of toRadixKvEvents(batch, 0))
          if (e.type === 'BlockStored') events.push([...e.blockHashes])
      },
    })
    await sub.start()
    try {
      const pd = new PdDispatcher({
        prefill: new SglangClient({ baseURL: p.url }),
        decode: new SglangClient({ baseURL: d.url }),
        bootstrapPort: p.bootstrapPort!,
      })
      const text = `Seeded through P: ${fakeChatTemplate(messages)}`
      const seed = (salt: string) =>
        pd.generate({ text, sampling_params: { max_new_tokens: 2 }, cache_salt: salt })
      expect((await seed('tenant=x')).prefill.meta_info.cached_tokens).toBe(0)
      expect((await seed('tenant=x')).prefill.meta_info.cached_tokens).toBeGreaterThan(0)
      expect((await seed('tenant=y')).prefill.meta_info.cached_tokens).toBe(0)
      // The D published the prompt's blocks under each namespace's own chain.
      const tokens = fakeTokenize(text)
      const ns = sglangBlockHasher({ namespaceInSeed: true })
      const x = computeBlockHashes(ns, tokens, PAGE, 'tenant=x')
      const y = computeBlockHashes(ns, tokens, PAGE, 'tenant=y')
      await expect.poll(() => events.flat().includes(y[0]!), { timeout: 5_000 }).toBe(true)
      const published = new Set(events.flat())
      expect(published.has(x[0]!)).toBe(true)
      expect(x[0]).not.toBe(y[0])
      // Without the namespace the same pages hash like upstream SGLang: not among these.
      expect(published.has(computeBlockHashes(ns, tokens, PAGE)[0]!)).toBe(false)
    } finally {
      await sub.close()
    }
  })
})
