import { type Server, createServer } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  ConductorClient,
  MooncakeMasterClient,
  MooncakeMetadataClient,
  PrefillBootstrapClient,
  SglangClient,
  WorkerApiError,
  WorkerBindingsError,
  extractServerMessage,
  histogramOf,
  mooncakeRpcMetaKey,
  mooncakeSegmentKey,
  parsePrometheusText,
  toSglangMetrics,
} from '../src/index.js'
import { upstreamFixtures as fx, handleCounts, leakedSince } from '../src/testing/index.js'

/** A server that answers recorded upstream payloads and records what it was asked. */
interface Recorded {
  method: string
  url: string
  body: string
}
type Route = (req: Recorded) => { status?: number; body: string; type?: string } | undefined

let baseline: Record<string, number>
let server: Server
let url: string
const seen: Recorded[] = []
let route: Route = () => undefined

beforeAll(async () => {
  baseline = handleCounts()
  server = createServer((req, res) => {
    let body = ''
    req.on('data', (d) => {
      body += d
    })
    req.on('end', () => {
      const r: Recorded = { method: req.method ?? '', url: req.url ?? '', body }
      seen.push(r)
      const out = route(r) ?? { status: 404, body: '{"detail":"Not Found"}' }
      res.writeHead(out.status ?? 200, { 'content-type': out.type ?? 'application/json' }).end(out.body)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise((r) => server.close(r))
  expect(await leakedSince(baseline)).toEqual({})
})

function streamOf(text: string, chunk = 7): Route {
  return () => ({ body: text, type: 'text/event-stream', ...(chunk ? {} : {}) })
}

describe('SGLang client on recorded upstream payloads', () => {
  it('generate: every documented meta_info field is read', async () => {
    route = (r) => (r.url === '/generate' ? { body: fx.sglang.generate } : undefined)
    const out = await new SglangClient({ baseURL: url }).generate({ text: 'The capital of France is' })
    expect(Object.keys(out).sort()).toEqual(['meta_info', 'output_ids', 'text'])
    expect(out.meta_info).toMatchObject({
      id: '5f1c9f2a',
      finish_reason: { type: 'length', length: 4 },
      prompt_tokens: 128,
      completion_tokens: 4,
      cached_tokens: 96,
      weight_version: 'default',
    })
    expect(out.meta_info.e2e_latency).toBeCloseTo(0.0731)
    expect(JSON.parse(seen.at(-1)!.body)).toMatchObject({ text: 'The capital of France is', stream: false })
  })

  it('streams: cumulative and incremental recordings normalize to the same chunks; error chunk → STREAM_ERROR', async () => {
    const read = async (text: string, mode: 'cumulative' | 'incremental') => {
      route = streamOf(text)
      const s = await new SglangClient({ baseURL: url, streamOutput: mode }).generateStream({ text: 'x' })
      const out = []
      for await (const c of s) out.push({ text: c.text, delta: c.delta, ids: c.outputIds, fin: c.finished })
      return out
    }
    const a = await read(fx.sglang.generateStreamCumulative, 'cumulative')
    const b = await read(fx.sglang.generateStreamIncremental, 'incremental')
    expect(a).toEqual(b)
    expect(a.map((c) => c.delta)).toEqual([' Paris', '.', ' It'])
    expect(a.at(-1)).toMatchObject({ text: ' Paris. It', ids: [12366, 13, 1084], fin: true })
    route = streamOf(fx.sglang.generateStreamError)
    const s = await new SglangClient({ baseURL: url }).generateStream({ text: 'x' })
    const err = await s.final().catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'STREAM_ERROR' })
    expect((err as Error).message).toContain("longer than the model's context length")
  })

  it('error bodies in all three shapes give the server message', async () => {
    for (const [body, status, msg] of [
      [fx.sglang.errorUnknownSession, 400, 'Invalid request: session id s-404 does not exist'],
      [fx.sglang.errorValidation, 400, 'json_invalid'],
      [fx.sglang.errorFastapi422, 422, 'Field required'],
    ] as const) {
      route = () => ({ status, body })
      const e = (await new SglangClient({ baseURL: url })
        .generate({ text: 'x' })
        .catch((x: unknown) => x)) as WorkerApiError
      expect(e).toBeInstanceOf(WorkerApiError)
      expect(e.status).toBe(status)
      expect(e.serverMessage).toContain(msg)
      expect(e.body).toBe(body)
    }
    expect(extractServerMessage({ error_message: 'OBJECT_NOT_FOUND' })).toBe('OBJECT_NOT_FOUND')
    expect(extractServerMessage(42)).toBeUndefined()
  })

  it('sessions, chat, loads, server info, metrics: recorded shapes', async () => {
    const c = new SglangClient({ baseURL: url })
    route = (r) => {
      switch (r.url.split('?')[0]) {
        case '/open_session':
          return { body: fx.sglang.openSession }
        case '/v1/chat/completions':
          return JSON.parse(r.body).stream
            ? { body: fx.sglang.chatStream, type: 'text/event-stream' }
            : { body: fx.sglang.chatCompletion }
        case '/get_load':
          return { body: fx.sglang.getLoad }
        case '/v1/loads':
          return { body: fx.sglang.v1Loads }
        case '/get_server_info':
          return { body: fx.sglang.serverInfo }
        case '/metrics':
          return { body: fx.sglang.metrics, type: 'text/plain; version=0.0.4' }
        default:
          return undefined
      }
    }
    expect(await c.openSession({ session_id: 'x' })).toBe('3f0c2b1e9d8a4c7fb6e5d4c3b2a19080')
    expect(JSON.parse(seen.at(-1)!.body)).toEqual({ capacity_of_str_len: 65536, session_id: 'x' })
    const chat = await c.chatCompletions({ model: 'qwen3', messages: [{ role: 'user', content: 'hi' }] })
    expect(chat.usage.prompt_tokens_details?.cached_tokens).toBe(16)
    expect(chat.choices[0]?.matched_stop).toBe(151645)
    const streamed = await (
      await c.chatCompletionsStream({ model: 'qwen3', messages: [{ role: 'user', content: 'hi' }] })
    ).collect()
    expect(streamed).toEqual({
      content: 'Hello!',
      finishReason: 'stop',
      usage: { prompt_tokens: 20, total_tokens: 23, completion_tokens: 3 },
    })
    expect(await c.getLoad()).toEqual([{ dp_rank: 0, num_reqs: 3, num_waiting_reqs: 1, num_tokens: 20480 }])
    const loads = await c.loads({ include: ['all'] })
    expect(seen.at(-1)?.url).toBe('/v1/loads?include=all&format=json')
    const l = loads.loads[0]!
    for (const k of [
      'num_running_reqs',
      'num_waiting_reqs',
      'num_total_reqs',
      'num_used_tokens',
      'num_total_tokens',
      'max_total_num_tokens',
      'token_usage',
      'gen_throughput',
      'cache_hit_rate',
      'utilization',
      'max_running_requests',
    ] as const) {
      expect(typeof l[k]).toBe('number')
    }
    expect(l.disaggregation?.decode_transfer_queue_reqs).toBe(2)
    expect(l.queues).toEqual({ waiting: 1, grammar: 0, paused: 0, retracted: 0 })
    expect(loads.aggregate.total_reqs).toBe(4)
    // /server_info is not served by this (older) server: the client falls back.
    expect((await c.serverInfo()).page_size).toBe(64)
    const m = await c.metrics()
    expect(m).toMatchObject({
      numRunningReqs: 3,
      tokenUsage: 0.1024,
      cacheHitRate: 0.62,
      promptTokensTotal: 1048576,
      cachedTokensTotal: 650000,
    })
    expect(m.timeToFirstToken).toEqual({
      buckets: [
        { le: 0.1, count: 10 },
        { le: 0.5, count: 18 },
        { le: Infinity, count: 20 },
      ],
      sum: 3.5,
      count: 20,
    })
    expect(m.evictedTokensTotal).toBeUndefined()
  })
})

describe('Prometheus text parser', () => {
  it('reads types, help, escapes, special values, timestamps, OpenMetrics suffixes and EOF', () => {
    const fams = parsePrometheusText(
      [
        '# HELP a A counter\\nwith newline',
        '# TYPE a counter',
        'a_total{path="/x\\"y\\\\z",code="200"} 3 1700000000000',
        'a_created 1.7e9',
        '# a plain comment',
        'b NaN',
        'c{} +Inf',
        'd -Inf',
        'e 1e-3 # {trace_id="x"} 1.0',
        '# TYPE h histogram',
        'h_bucket{le="1"} 1',
        'h_bucket{le="+Inf"} 2',
        'h_sum 3',
        'h_count 2',
        '# EOF',
        'ignored 1',
      ].join('\n'),
    )
    const a = fams.find((f) => f.name === 'a')!
    expect(a.type).toBe('counter')
    expect(a.help).toBe('A counter\nwith newline')
    expect(a.samples[0]).toEqual({
      name: 'a_total',
      labels: { path: '/x"y\\z', code: '200' },
      value: 3,
      timestamp: 1700000000000,
    })
    expect(a.samples).toHaveLength(2)
    expect(fams.find((f) => f.name === 'b')?.samples[0]?.value).toBeNaN()
    expect(fams.find((f) => f.name === 'c')?.samples[0]?.value).toBe(Infinity)
    expect(fams.find((f) => f.name === 'd')?.samples[0]?.value).toBe(-Infinity)
    expect(fams.find((f) => f.name === 'e')?.samples[0]?.value).toBe(0.001)
    expect(histogramOf(fams.find((f) => f.name === 'h')!)).toEqual({
      buckets: [
        { le: 1, count: 1 },
        { le: Infinity, count: 2 },
      ],
      sum: 3,
      count: 2,
    })
    expect(fams.some((f) => f.name === 'ignored')).toBe(false)
    expect(toSglangMetrics(parsePrometheusText('sglang_num_running_reqs 2\n')).numRunningReqs).toBe(2)
  })

  it('refuses malformed lines with BAD_RESPONSE', () => {
    for (const bad of [
      'x{a="1"',
      'x{a=1} 2',
      'x{a="\\q"} 1',
      'x abc',
      '1x 2',
      'x 1 2 3',
      '# TYPE x bogus',
      'x{="a"} 1',
    ]) {
      expect(() => parsePrometheusText(bad)).toThrow(expect.objectContaining({ code: 'BAD_RESPONSE' }))
    }
  })
})

describe('an answer that is not JSON is a typed error, never a bare SyntaxError', () => {
  it('Mooncake query_key and the bootstrap server’s /route: BAD_RESPONSE naming the endpoint and the text', async () => {
    route = (r) =>
      r.url.startsWith('/query_key') || r.url.startsWith('/route')
        ? { body: '<html>proxy error</html>', type: 'text/html' }
        : undefined
    const errors = [
      await new MooncakeMasterClient({ baseURL: url }).queryKey('k1').catch((e: unknown) => e),
      await new PrefillBootstrapClient({ baseURL: url })
        .rankAddress({ dpRank: 0, tpRank: 0 })
        .catch((e: unknown) => e),
      await new PrefillBootstrapClient({ baseURL: url })
        .rankAddressLegacy({ engineRank: 0, targetDpGroup: 0 })
        .catch((e: unknown) => e),
    ]
    for (const e of errors) {
      expect(e).toBeInstanceOf(WorkerBindingsError)
      expect(e).toMatchObject({ code: 'BAD_RESPONSE', value: '<html>proxy error</html>', endpoint: url })
    }
    // A 404 is still an absent key / rank, whatever its body.
    route = () => ({ status: 404, body: 'not found', type: 'text/plain' })
    expect(await new MooncakeMasterClient({ baseURL: url }).queryKey('k1')).toBeUndefined()
    expect(
      await new PrefillBootstrapClient({ baseURL: url }).rankAddress({ dpRank: 0, tpRank: 0 }),
    ).toBeUndefined()
  })
})

describe('Mooncake clients on recorded payloads', () => {
  it('metadata server: GET/PUT/DELETE /metadata?key=, 404 as undefined, key helpers', async () => {
    const store = new Map<string, string>()
    route = (r) => {
      const u = new URL(r.url, 'http://x')
      if (u.pathname !== '/metadata') return undefined
      const key = u.searchParams.get('key')
      if (!key) return { status: 400, body: 'Missing key parameter', type: 'text/plain' }
      if (r.method === 'GET')
        return store.has(key)
          ? { body: store.get(key)! }
          : { status: 404, body: 'metadata not found', type: 'text/plain' }
      if (r.method === 'PUT') {
        if (key.includes('rpc_meta') && store.has(key) && store.get(key) !== r.body) {
          return { status: 400, body: 'Duplicate rpc_meta key not allowed', type: 'text/plain' }
        }
        store.set(key, r.body)
        return { body: 'metadata updated', type: 'text/plain' }
      }
      if (r.method === 'DELETE')
        return store.delete(key)
          ? { body: 'metadata deleted', type: 'text/plain' }
          : { status: 404, body: 'metadata not found', type: 'text/plain' }
      return { status: 405, body: '' }
    }
    const meta = new MooncakeMetadataClient({ baseURL: `${url}/metadata` })
    const key = mooncakeRpcMetaKey('node-1')
    expect(key).toBe('mooncake/rpc_meta/node-1')
    expect(mooncakeSegmentKey('10.0.0.5:15002', 'c1')).toBe('mooncake/c1/ram/10.0.0.5:15002')
    expect(mooncakeSegmentKey('nvmeof/x')).toBe('mooncake/nvmeof/x')
    expect(await meta.get(key)).toBeUndefined()
    await meta.put(key, { ip_or_host_name: '10.0.0.5', rpc_port: 15002 })
    expect(seen.at(-1)?.url).toBe('/metadata?key=mooncake%2Frpc_meta%2Fnode-1')
    expect(await meta.getJson(key)).toEqual({ ip_or_host_name: '10.0.0.5', rpc_port: 15002 })
    await expect(meta.put(key, { ip_or_host_name: 'other', rpc_port: 1 })).rejects.toMatchObject({
      status: 400,
    })
    expect(await meta.delete(key)).toBe(true)
    expect(await meta.delete(key)).toBe(false)
    await expect(meta.get('')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })
  })

  it('master admin: health, metrics, query_key (hit and -704 miss), batch_query_keys, segments', async () => {
    route = (r) => {
      const u = new URL(r.url, 'http://x')
      switch (u.pathname) {
        case '/health':
          return { body: 'OK', type: 'text/plain' }
        case '/metrics':
          return { body: '# TYPE master_key_count gauge\nmaster_key_count 12\n', type: 'text/plain' }
        case '/query_key':
          return u.searchParams.get('key') === 'k1'
            ? { body: fx.mooncake.queryKey }
            : { status: 404, body: fx.mooncake.queryKeyMissing }
        case '/batch_query_keys':
          return { body: fx.mooncake.batchQueryKeys }
        case '/get_segments_detail':
          return { body: fx.mooncake.segmentsDetail }
        case '/get_all_keys':
          return { body: 'k1\nk2\n', type: 'text/plain' }
        default:
          return undefined
      }
    }
    const m = new MooncakeMasterClient({ baseURL: url })
    expect(await m.health()).toBe(true)
    expect((await m.metrics())[0]?.samples[0]?.value).toBe(12)
    expect((await m.queryKey('k1'))?.[0]).toEqual({
      size_: 65536,
      buffer_address_: 139872012345344,
      protocol_: 'rdma',
      transport_endpoint_: '10.0.0.5:15002',
    })
    expect(await m.queryKey('nope')).toBeUndefined()
    const batch = await m.batchQueryKeys(['a', 'b'])
    expect(seen.at(-1)?.url).toBe('/batch_query_keys?keys=a%2Cb')
    expect(batch.a?.ok).toBe(true)
    expect(batch.b?.ok).toBe(false)
    const segs = await m.getSegmentsDetail()
    expect(segs[0]).toMatchObject({ segment_name: '10.0.0.5:15002', allocator_capacity_bytes: 3355443200 })
    expect(await m.getAllKeys()).toEqual(['k1', 'k2'])
  })

  it('Conductor: register, query, query_by_hash (exact 64-bit hashes), unregister', async () => {
    route = (r) => {
      switch (r.url) {
        case '/register':
          return { body: fx.mooncake.register }
        case '/query':
        case '/query_by_hash':
          return { body: fx.mooncake.query }
        case '/unregister':
          return { body: fx.mooncake.unregister }
        default:
          return undefined
      }
    }
    const c = new ConductorClient({ baseURL: url })
    const reg = await c.register({
      endpoint: 'tcp://10.0.0.6:5557',
      type: 'SGLang',
      modelname: 'qwen3',
      instance_id: 'd0',
      block_size: 64,
      dp_rank: 0,
    })
    expect(reg).toEqual({ status: 'registered successfully', instance_id: 'd0' })
    const q = await c.query({ model: 'qwen3', token_ids: [1, 2, 3], block_size: 64 })
    expect(q.default?.d0).toEqual({ longest_matched: 1024, GPU: 16, CPU: 0, DISK: 0, DP: { '0': 16 } })
    await c.queryByHash({ model: 'qwen3', seq_hashes: [18446744073709551615n], block_size: 64 })
    expect(seen.at(-1)?.body).toContain('"seq_hashes":[18446744073709551615]')
    expect(
      (await c.unregister({ type: 'SGLang', modelname: 'qwen3', instance_id: 'd0', dp_rank: 0 }))
        .removed_instances,
    ).toEqual(['d0|default|0'])
  })
})
