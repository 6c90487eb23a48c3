import { createServer } from 'node:http'
import {
  PdDispatcher,
  PrefillBootstrapClient,
  SglangClient,
  WorkerApiError,
  isBootstrapRoom,
} from '@kvc/worker-bindings'
import { handleCounts, leakedSince, upstreamFixtures } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type SglangEmulator, createSglangEmulator } from '../src/index.js'

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
