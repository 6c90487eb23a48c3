import { createServer } from 'node:http'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  BOOTSTRAP_ROOM_LIMIT,
  PdDispatcher,
  PrefillBootstrapClient,
  type SglangEmulator,
  SglangClient,
  WorkerApiError,
  batchSizeOf,
  bootstrapHostOf,
  createSglangEmulator,
  generateBootstrapRoom,
  injectBootstrap,
  isBootstrapRoom,
  stringifyJson,
} from '../src/index.js'
import { handleCounts, leakedSince, upstreamFixtures } from '../src/testing/index.js'

describe('bootstrap injection', () => {
  it('rooms lie in [0, 2^63), drawn from 64 random bits with the top bit cleared', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), (u) => {
        const r = generateBootstrapRoom(() => u)
        expect(r >= 0n && r < BOOTSTRAP_ROOM_LIMIT).toBe(true)
        expect(r).toBe(u & (2n ** 63n - 1n))
      }),
    )
    for (let i = 0; i < 100; i++) expect(isBootstrapRoom(generateBootstrapRoom())).toBe(true)
    expect(isBootstrapRoom(-1)).toBe(false)
    expect(isBootstrapRoom(2n ** 63n)).toBe(false)
  })

  it('single requests get scalars, batches per-item lists with distinct rooms; input untouched', () => {
    const req = { text: 'hi', sampling_params: { max_new_tokens: 1 } }
    const one = injectBootstrap(req, { host: '10.0.0.5', port: 8998 })
    expect(one).toMatchObject({ bootstrap_host: '10.0.0.5', bootstrap_port: 8998 })
    expect(typeof one.bootstrap_room).toBe('bigint')
    expect(req).not.toHaveProperty('bootstrap_room')
    const batch = injectBootstrap({ input_ids: [[1], [2], [3]] }, { host: 'p', port: null })
    expect(batch.bootstrap_host).toEqual(['p', 'p', 'p'])
    expect(batch.bootstrap_port).toEqual([null, null, null])
    expect(new Set(batch.bootstrap_room as bigint[]).size).toBe(3)
    expect(batchSizeOf({ messages: [], n: 2 })).toBe(2)
    expect(batchSizeOf({ prompt: ['a', 'b'] })).toBe(2)
    // A room above 2^53 is serialized exactly.
    const body = stringifyJson(injectBootstrap(req, { host: 'h', port: 1, room: 2n ** 63n - 1n }))
    expect(body).toContain('"bootstrap_room":9223372036854775807')
    expect(() => injectBootstrap(req, { host: 'h', port: 1, room: 2n ** 63n })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    )
    expect(() => injectBootstrap({ text: ['a', 'b'] }, { host: 'h', port: 1, room: [1] })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    )
    expect(() => injectBootstrap(req, { host: '', port: 1 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    )
    expect(bootstrapHostOf('http://[::1]:30000')).toBe('::1')
  })
})

describe('P/D against prefill and decode emulators', () => {
  let baseline: Record<string, number>
  let p: SglangEmulator
  let d: SglangEmulator
  let pd: PdDispatcher

  beforeAll(async () => {
    baseline = handleCounts()
    p = await createSglangEmulator({
      role: 'prefill',
      capacityTokens: 2048,
      pageSize: 4,
      timing: { scale: 0 },
    })
    d = await createSglangEmulator({
      role: 'decode',
      capacityTokens: 2048,
      pageSize: 4,
      timing: { scale: 0 },
      transferTimeoutMs: 300,
    })
    pd = new PdDispatcher({
      prefill: new SglangClient({ baseURL: p.url }),
      decode: new SglangClient({ baseURL: d.url }),
      bootstrapPort: p.bootstrapPort!,
    })
  })

  afterAll(async () => {
    await Promise.all([p.close(), d.close()])
    expect(await leakedSince(baseline)).toEqual({})
  })

  it('dual dispatch returns the decode answer; P holds the prompt, D decodes it', async () => {
    const req = { text: 'a prompt for disaggregated serving', sampling_params: { max_new_tokens: 6 } }
    const res = await pd.generate(req)
    expect(res.decode.output_ids).toHaveLength(6)
    expect(res.prefill.output_ids).toHaveLength(1)
    expect(res.prefill.output_ids[0]).toBe(res.decode.output_ids[0])
    expect(isBootstrapRoom(res.bootstrapRoom)).toBe(true)
    expect(p.stats().treeTokens).toBeGreaterThan(0)
    expect(d.stats().treeTokens).toBeGreaterThan(0)
    expect(p.stats().balanced && d.stats().balanced).toBe(true)
  })

  it('streaming dual dispatch yields the decode stream', async () => {
    const req = { text: 'stream me through P and D', sampling_params: { max_new_tokens: 5 } }
    const direct = await pd.generate(req)
    const s = await pd.generateStream(req)
    let text = ''
    for await (const c of s) text += c.delta
    expect(text).toBe(direct.decode.text)
    expect((await s.prefill).output_ids).toHaveLength(1)
  })

  it('chat completions through the pair', async () => {
    const res = await pd.chatCompletions({
      model: 'm',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 3,
    })
    expect(res.decode.choices[0]?.message.content).toHaveLength(3)
  })

  it('a dead prefill fails the pair with PD_DISPATCH naming the failing side', async () => {
    const dead = new PdDispatcher({
      prefill: new SglangClient({ baseURL: 'http://127.0.0.1:1', maxRetries: 0 }),
      decode: new SglangClient({ baseURL: d.url }),
      bootstrapHost: '127.0.0.1',
      bootstrapPort: 1,
    })
    const err = await dead
      .generate({ text: 'x', sampling_params: { max_new_tokens: 2 } })
      .catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'PD_DISPATCH', value: 'prefill' })
    const err2 = await dead
      .generateStream({ text: 'x', sampling_params: { max_new_tokens: 2 } })
      .then(
        async (s) => {
          for await (const _ of s) {
            // drain
          }
        },
        (e: unknown) => {
          throw e
        },
      )
      .catch((e: unknown) => e)
    expect(err2).toMatchObject({ code: 'PD_DISPATCH', value: 'prefill' })
    expect(d.stats()).toMatchObject({ runningRequests: 0, transferQueueDepth: 0, balanced: true })
  })

  it('the decode refuses nothing without a bootstrap room (kvc fast path) unless strict', async () => {
    const dc = new SglangClient({ baseURL: d.url })
    expect(
      (await dc.generate({ text: 'direct to D', sampling_params: { max_new_tokens: 2 } })).output_ids,
    ).toHaveLength(2)
    const pc = new SglangClient({ baseURL: p.url })
    const err = await pc.generate({ text: 'no room' }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(WorkerApiError)
    expect((err as WorkerApiError).serverMessage).toMatch(/without boostrap room id/)
  })

  it('bootstrap server client: parallel info, rank address, health, dp ranks, 503 until ready', async () => {
    const boot = new PrefillBootstrapClient({ baseURL: p.bootstrapUrl! })
    const info = await boot.parallelInfo()
    expect(info).toMatchObject({ page_size: 4, dp_size: 1, attn_tp_size: 1, prefill_http_port: p.port })
    expect(await boot.isReady()).toBe(true)
    expect(await boot.rankAddress({ dpRank: 0, tpRank: 0 })).toEqual({
      rank_ip: '127.0.0.1',
      rank_port: p.port,
    })
    expect(await boot.rankAddress({ dpRank: 3, tpRank: 0 })).toBeUndefined()
    await boot.health()
    await boot.registerDpRank(2n ** 62n, 0)
    await boot.registerDpRank(2n ** 63n - 1n, 1)
    expect(await boot.queryDpRanks([2n ** 62n, 2n ** 63n - 1n, 5])).toEqual({
      [String(2n ** 62n)]: 0,
      '9223372036854775807': 1,
    })
    const p2 = await createSglangEmulator({
      role: 'prefill',
      capacityTokens: 256,
      pageSize: 4,
      timing: { scale: 0 },
      bootstrapRanks: 2,
    })
    try {
      const b2 = new PrefillBootstrapClient({ baseURL: p2.bootstrapUrl!, maxRetries: 0 })
      expect(await b2.isReady()).toBe(false)
      await b2.registerRank({
        attn_tp_size: 2,
        attn_tp_rank: 1,
        attn_cp_size: 1,
        attn_cp_rank: 0,
        attn_dp_size: 1,
        attn_dp_rank: 0,
        pp_size: 1,
        pp_rank: 0,
        system_dp_size: 1,
        system_dp_rank: 0,
        rank_ip: '127.0.0.1',
        rank_port: 17001,
        page_size: 4,
        kv_cache_dtype: 'auto',
      })
      expect(await b2.isReady()).toBe(true)
      expect(await b2.rankAddress({ dpRank: 0, tpRank: 1 })).toEqual({
        rank_ip: '127.0.0.1',
        rank_port: 17001,
      })
    } finally {
      await p2.close()
    }
  })

  it('bootstrap client falls back to the older query on 400', async () => {
    const seen: string[] = []
    const legacy = createServer((req, res) => {
      seen.push(req.url ?? '')
      const u = new URL(req.url ?? '/', 'http://x')
      if (u.searchParams.get('engine_rank') === '-1' && u.searchParams.get('target_dp_group') === '-1') {
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(upstreamFixtures.bootstrap.parallelInfoLegacy)
      } else res.writeHead(400).end('Missing inputs for bootstrap server.')
    })
    await new Promise<void>((r) => legacy.listen(0, '127.0.0.1', () => r()))
    try {
      const boot = new PrefillBootstrapClient({
        baseURL: `http://127.0.0.1:${(legacy.address() as { port: number }).port}`,
      })
      expect(await boot.parallelInfo()).toEqual({ prefill_tp_size: 8, prefill_dp_size: 1 })
      expect(await boot.parallelInfo()).toEqual({ prefill_tp_size: 8, prefill_dp_size: 1 })
      expect(seen.filter((s) => s.includes('prefill_dp_rank'))).toHaveLength(1)
    } finally {
      legacy.closeAllConnections()
      await new Promise((r) => legacy.close(r))
    }
  })
})
