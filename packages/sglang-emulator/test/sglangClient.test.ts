import { SglangClient, WorkerApiError } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type SglangEmulator, createSglangEmulator, fakeTokenize } from '../src/index.js'

const PAGE = 4
let baseline: Record<string, number>
let emu: SglangEmulator
let client: SglangClient

beforeAll(async () => {
  baseline = handleCounts()
  emu = await createSglangEmulator({
    capacityTokens: 4096,
    pageSize: PAGE,
    timing: { scale: 0 },
    enableCacheReport: true,
  })
  client = new SglangClient({ baseURL: emu.url, timeout: 5_000 })
})

afterAll(async () => {
  await emu.close()
  expect(await leakedSince(baseline)).toEqual({})
})

describe('SglangClient against the emulator', () => {
  it('generate: text, true cached_tokens on a shared prefix, deterministic output', async () => {
    const prefix = 'The quick brown fox jumps over the lazy dog. '
    const a = await client.generate({
      text: `${prefix}One`,
      sampling_params: { max_new_tokens: 6 },
      rid: 'g-a',
    })
    expect(a.meta_info.id).toBe('g-a')
    expect(a.output_ids).toHaveLength(6)
    expect(a.text).toHaveLength(6)
    expect(a.meta_info.finish_reason).toEqual({ type: 'length', length: 6 })
    expect(a.meta_info.prompt_tokens).toBe(fakeTokenize(`${prefix}One`).length)
    expect(a.meta_info.cached_tokens).toBe(0)
    expect(typeof a.meta_info.e2e_latency).toBe('number')
    const b = await client.generate({ text: `${prefix}Two`, sampling_params: { max_new_tokens: 6 } })
    // The shared prefix, page-aligned, is the true hit.
    const shared = fakeTokenize(prefix).length
    expect(b.meta_info.cached_tokens).toBe(Math.floor(shared / PAGE) * PAGE)
    const a2 = await client.generate({ text: `${prefix}One`, sampling_params: { max_new_tokens: 6 } })
    expect(a2.text).toBe(a.text)
    expect(a2.meta_info.cached_tokens).toBeLessThanOrEqual(a2.meta_info.prompt_tokens - 1)
  })

  it('generate: input_ids, stop strings, extra_key namespaces', async () => {
    const ids = fakeTokenize('namespace test prompt here')
    const x = await client.generate({
      input_ids: ids,
      sampling_params: { max_new_tokens: 4 },
      extra_key: 'a',
    })
    const y = await client.generate({
      input_ids: ids,
      sampling_params: { max_new_tokens: 4 },
      extra_key: 'b',
    })
    expect(y.meta_info.cached_tokens).toBe(0) // another namespace never shares KV
    const z = await client.generate({
      input_ids: ids,
      sampling_params: { max_new_tokens: 4 },
      extra_key: 'a',
    })
    expect(z.meta_info.cached_tokens).toBeGreaterThan(0)
    expect(x.text).toBe(z.text)
    const long = await client.generate({ text: 'stop test', sampling_params: { max_new_tokens: 40 } })
    const stopAt = long.text.slice(3, 5)
    const stopped = await client.generate({
      text: 'stop test',
      sampling_params: { max_new_tokens: 40, stop: [stopAt] },
    })
    expect(stopped.meta_info.finish_reason).toEqual({ type: 'stop', matched: stopAt })
    expect(long.text.startsWith(stopped.text)).toBe(true)
    expect(stopped.text.includes(stopAt)).toBe(false)
  })

  it('generateBatch answers one result per item; generate refuses bad input before sending', async () => {
    const out = await client.generateBatch({
      text: ['a b c', 'd e f'],
      sampling_params: { max_new_tokens: 2 },
    })
    expect(out).toHaveLength(2)
    await expect(client.generate({ sampling_params: {} })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })
    await expect(client.generate({ text: 'a', input_ids: [1] })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    })
    await expect(client.generate({ text: ['a', 'b'] })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })
  })

  it('generateStream: cumulative mode gives deltas that add up to the non-streaming text', async () => {
    const req = { text: 'streaming prompt', sampling_params: { max_new_tokens: 8 } }
    const whole = await client.generate(req)
    const stream = await client.generateStream(req)
    let text = ''
    const chunks = []
    for await (const c of stream) {
      text += c.delta
      chunks.push(c)
    }
    expect(text).toBe(whole.text)
    expect(chunks.at(-1)?.finished).toBe(true)
    expect(chunks.at(-1)?.outputIds).toEqual(whole.output_ids)
    expect(chunks.slice(0, -1).every((c) => !c.finished)).toBe(true)
    expect(chunks.at(-1)?.metaInfo.cached_tokens).toBeGreaterThan(0)
    const again = await client.generateStream(req)
    expect((await again.final()).text).toBe(whole.text)
  })

  it('generateStream: incremental mode (--incremental-streaming-output)', async () => {
    const inc = await createSglangEmulator({
      capacityTokens: 1024,
      pageSize: PAGE,
      timing: { scale: 0 },
      incrementalStreamingOutput: true,
    })
    try {
      const c = new SglangClient({ baseURL: inc.url, streamOutput: 'incremental' })
      const req = { text: 'incremental', sampling_params: { max_new_tokens: 7 } }
      const whole = await c.generate(req)
      const s = await c.generateStream(req)
      const chunks = []
      for await (const ch of s) chunks.push(ch)
      expect(chunks.map((x) => x.delta).join('')).toBe(whole.text)
      expect(chunks.every((x) => x.raw.output_ids.length <= 1)).toBe(true) // deltas on the wire
      expect(chunks.at(-1)?.text).toBe(whole.text)
    } finally {
      await inc.close()
    }
  })

  it('chat completions: non-streaming and streaming, multi-turn hits the prefix cache', async () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hello there, assistant!' },
    ]
    const first = await client.chatCompletions({ model: 'kvc-emulator', messages, max_tokens: 5 })
    expect(first.object).toBe('chat.completion')
    expect(first.choices[0]?.finish_reason).toBe('length')
    const reply = first.choices[0]?.message.content as string
    expect(reply).toHaveLength(5)
    const turn2 = [
      ...messages,
      { role: 'assistant', content: reply },
      { role: 'user', content: 'And again?' },
    ]
    const second = await client.chatCompletions({ model: 'kvc-emulator', messages: turn2, max_tokens: 5 })
    // prompt of turn 2 = prompt of turn 1 + reply: everything but the new tail is cached.
    expect(second.usage.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(
      first.usage.prompt_tokens,
    )
    const stream = await client.chatCompletionsStream({
      model: 'kvc-emulator',
      messages,
      max_tokens: 5,
      stream_options: { include_usage: true },
    })
    const collected = await stream.collect()
    expect(collected.content).toBe(reply)
    expect(collected.finishReason).toBe('length')
    expect(collected.usage?.completion_tokens).toBe(5)
    await expect(client.chatCompletions({ model: 'm', messages: [] })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    })
  })

  it('sessions: open (server id and given id), turns extend the session, duplicate open is a 400, close', async () => {
    const generated = await client.openSession()
    expect(generated).toMatch(/^[0-9a-f]{32}$/)
    const sid = await client.openSession({ capacity_of_str_len: 1000, session_id: 'agent-1' })
    expect(sid).toBe('agent-1')
    const dup = await client.openSession({ session_id: 'agent-1' }).catch((e: unknown) => e)
    expect(dup).toBeInstanceOf(WorkerApiError)
    expect((dup as WorkerApiError).status).toBe(400)
    expect((dup as WorkerApiError).serverMessage).toMatch(/same id is still open/)
    const t1 = await client.generate({
      text: 'turn one of the session',
      session_params: { id: sid },
      sampling_params: { max_new_tokens: 4 },
    })
    const t2 = await client.generate({
      text: ' and turn two',
      session_params: { id: sid },
      sampling_params: { max_new_tokens: 4 },
    })
    // turn 2's prompt = turn 1's prompt + output + new text: the session's KV is reused.
    expect(t2.meta_info.prompt_tokens).toBe(
      t1.meta_info.prompt_tokens + 4 + fakeTokenize(' and turn two').length,
    )
    expect(t2.meta_info.cached_tokens).toBeGreaterThanOrEqual(
      Math.floor((t1.meta_info.prompt_tokens + 3) / PAGE) * PAGE,
    )
    expect(emu.sessionCache.getSessionStatus(sid)?.residentTokens).toBeGreaterThan(0)
    await client.closeSession(sid)
    await client.closeSession(generated)
    await client.closeSession('never-opened') // upstream: 200
    expect(emu.sessionCache.hasSession(sid)).toBe(false)
  })

  it('server_info, model_info, get_load, v1/loads, health, metrics', async () => {
    const info = await client.serverInfo()
    expect(info.page_size).toBe(PAGE)
    expect(info.max_total_num_tokens).toBe(4096)
    expect(info.disaggregation_mode).toBe('null')
    const model = await client.modelInfo()
    expect(model.is_generation).toBe(true)
    const load = await client.getLoad()
    expect(load[0]).toMatchObject({ dp_rank: 0, num_reqs: 0, num_waiting_reqs: 0 })
    const loads = await client.loads({ include: ['core', 'disagg', 'queues'] })
    expect(loads.dp_rank_count).toBe(1)
    expect(loads.loads[0]?.max_total_num_tokens).toBe(4096)
    expect(loads.loads[0]?.disaggregation?.mode).toBe('null')
    expect(loads.loads[0]?.memory).toBeUndefined()
    expect((await client.loads({ dpRank: 1 })).loads).toEqual([])
    await client.health()
    await client.healthGenerate()
    expect(await client.isHealthy()).toBe(true)
    const m = await client.metrics()
    expect(m.maxTotalNumTokens).toBe(4096)
    expect(m.promptTokensTotal).toBe(emu.stats().promptTokensTotal)
    expect(m.cachedTokensTotal).toBe(emu.stats().cachedTokensTotal)
    expect(m.numRunningReqs).toBe(0)
    expect(m.timeToFirstToken?.count).toBe(emu.stats().requestsTotal)
  })

  it('server_info / model_info fall back to the older paths (and remember it)', async () => {
    const old = await createSglangEmulator({
      capacityTokens: 512,
      pageSize: PAGE,
      timing: { scale: 0 },
      legacyApi: true,
    })
    try {
      const c = new SglangClient({ baseURL: old.url })
      expect((await c.serverInfo()).page_size).toBe(PAGE)
      expect((await c.serverInfo()).page_size).toBe(PAGE)
      expect((await c.modelInfo()).is_generation).toBe(true)
      await expect(c.loads()).rejects.toMatchObject({ status: 404 })
    } finally {
      await old.close()
    }
  })

  it('flush_cache: resets the tree when idle, refused (400) while a request runs', async () => {
    expect(emu.stats().treeTokens).toBeGreaterThan(0)
    const r = await client.flushCache()
    expect(r.success).toBe(true)
    expect(r.message).toMatch(/^Cache flushed/)
    expect(emu.stats().treeTokens).toBe(0)
    const slow = await createSglangEmulator({
      capacityTokens: 512,
      pageSize: PAGE,
      timing: { scale: 1, decodeStepS: 0.02 },
    })
    try {
      const c = new SglangClient({ baseURL: slow.url })
      const running = c.generate({ text: 'slow one', sampling_params: { max_new_tokens: 10 } })
      await new Promise((res) => setTimeout(res, 40))
      expect((await c.flushCache()).success).toBe(false)
      await running
      expect((await c.flushCache()).success).toBe(true)
    } finally {
      await slow.close()
    }
  })

  it('abortRequest stops a running request (finish_reason abort) and frees its KV', async () => {
    const slow = await createSglangEmulator({
      capacityTokens: 512,
      pageSize: PAGE,
      timing: { scale: 1, decodeStepS: 0.02 },
    })
    try {
      const c = new SglangClient({ baseURL: slow.url })
      const running = c.generate({ text: 'abort me', rid: 'victim', sampling_params: { max_new_tokens: 50 } })
      await new Promise((res) => setTimeout(res, 40))
      await c.abortRequest('victim')
      const out = await running
      expect(out.meta_info.finish_reason?.type).toBe('abort')
      expect(slow.stats()).toMatchObject({ runningRequests: 0, balanced: true, freeTokens: 512 })
    } finally {
      await slow.close()
    }
  })
})
