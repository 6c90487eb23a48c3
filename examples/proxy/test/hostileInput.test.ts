import * as diagnostics from 'node:diagnostics_channel'
import { type IncomingMessage, type ServerResponse, request } from 'node:http'
import { describe, expect, it } from 'vitest'
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { WorkerBindingsError } from '@kvc/worker-bindings'
import { resolveConfig } from '../src/config.js'
import { Gateway, type TurnTransport, classifyUpstreamError } from '../src/gateway.js'
import { type LooseAnswer, postRaw, useProxy } from './helpers.js'

/** POSTs `body` to the proxy's chat endpoint, as session `session` when given. */
function post(url: string, body: string, session?: string): Promise<LooseAnswer> {
  return postRaw(`${url}/v1/chat/completions`, body, session === undefined ? {} : { 'x-session-id': session })
}

async function metric(url: string, re: RegExp): Promise<number> {
  const m = await (await fetch(`${url}/metrics`)).text()
  return [...m.matchAll(re)].reduce((a, x) => a + Number(x[1]), 0)
}

describe('requests no retry can help are refused at once, without charging any worker', () => {
  // D workers of 65,536 tokens, as in the attack; prompts up to 131,072 tokens are accepted.
  const env = useProxy(
    { prefill: 1, decode: 2, decodeCapacityTokens: 65_536 },
    { limits: { maxBodyBytes: 8 << 20 } },
  )

  it('a body nesting 200,000 arrays is refused at parse time (400, naming limits.maxJsonDepth)', async () => {
    const deep = `${'['.repeat(200_000)}${']'.repeat(200_000)}`
    const body = `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"extra":${deep}}`
    expect(body.length).toBeGreaterThan(400_000)
    const r = await post(env.proxy.url, body, 'deep')
    expect(r.status).toBe(400)
    expect(r.json.error.message).toMatch(/deeper than the limit of 64 levels \(limits\.maxJsonDepth\)/)
    expect(r.json.error.type).toBe('invalid_request_error')
    // Never dispatched: no attempt, no worker error, nothing in the decision log.
    expect(env.decisions.filter((d) => d.sessionId === 'deep')).toEqual([])
    expect(await metric(env.proxy.url, /^kvc_proxy_sends_total\{[^}]*result="worker_error"\} (\d+)$/gm)).toBe(
      0,
    )
    // Nesting within the limit is served.
    const ok = await post(
      env.proxy.url,
      `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"extra":${'['.repeat(20)}${']'.repeat(20)}}`,
      'shallow',
    )
    expect(ok.status).toBe(200)
    // Brackets inside strings do not count.
    const inString = await post(
      env.proxy.url,
      JSON.stringify({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: '['.repeat(1000) }] }),
      'in-string',
    )
    expect(inString.status).toBe(200)
  })

  it('a prompt larger than every D’s capacity gets an immediate 400 naming the limit, not 503 after retries', async () => {
    const content = 'x'.repeat(100_000)
    const admissions = /^kvc_proxy_admissions_total\{[^}]*\} (\d+)$/gm
    const before = await metric(env.proxy.url, admissions)
    const r = await post(
      env.proxy.url,
      JSON.stringify({ model: 'm', max_tokens: 16, messages: [{ role: 'user', content }] }),
      'huge',
    )
    expect(r.status).toBe(400)
    expect(r.json.error.message).toMatch(
      /needs \d+ tokens of KV cache, more than the largest decode worker holds \(65536 tokens\)/,
    )
    expect(env.decisions.filter((d) => d.sessionId === 'huge')).toEqual([])
    expect(await metric(env.proxy.url, admissions)).toBe(before)
    expect(await metric(env.proxy.url, /^kvc_proxy_turns_total\{[^}]*\} (\d+)$/gm)).toBe(env.decisions.length)
    // max_tokens counts: a prompt that fits alone but not with its decode reserve is refused too.
    const r2 = await post(
      env.proxy.url,
      JSON.stringify({
        model: 'm',
        max_tokens: 8_000,
        messages: [{ role: 'user', content: 'y'.repeat(60_000) }],
      }),
      'huge2',
    )
    expect(r2.status).toBe(400)
  })

  it('a prompt over limits.maxPromptChars is refused before tokenizing', async () => {
    // Default: 8 × maxPromptTokens characters.
    const r = await post(
      env.proxy.url,
      JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'z'.repeat(8 * 131_072 + 1) }] }),
      'chars',
    )
    expect(r.status).toBe(400)
    expect(r.json.error.message).toMatch(
      /1048577 characters, more than the limit of 1048576 \(limits\.maxPromptChars\)/,
    )
  })
})

/**
 * Counts, per chat request the proxy serves while `work` runs, the `/health` answers the server
 * finished between the moment the request's body had fully arrived and the moment its own
 * answer finished (from node:http's diagnostics channel, in this process). A request handled in
 * one synchronous run after its body arrived lets none through; one handled in slices lets
 * through some per loop turn it yields. An order of events, not a time.
 */
async function healthAnswersDuring<T>(work: () => Promise<T>): Promise<{ result: T; windows: number[] }> {
  let healthAnswered = 0
  const windows: number[] = []
  const onStart = (msg: unknown): void => {
    const { request, response } = msg as { request: IncomingMessage; response: ServerResponse }
    if (request.url === '/health') {
      response.on('finish', () => healthAnswered++)
      return
    }
    if (request.url !== '/v1/chat/completions') return
    let atEnd = -1
    request.on('end', () => {
      atEnd = healthAnswered
    })
    response.on('finish', () => windows.push(atEnd < 0 ? -1 : healthAnswered - atEnd))
  }
  diagnostics.subscribe('http.server.request.start', onStart)
  try {
    return { result: await work(), windows }
  } finally {
    diagnostics.unsubscribe('http.server.request.start', onStart)
  }
}

/** POSTs pre-encoded bytes with `node:http` (the client does next to no work in this process). */
function postBytes(url: string, body: Buffer, session: string): Promise<LooseAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/v1/chat/completions`,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': body.length,
          'x-session-id': session,
        },
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d: string) => {
          text += d
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

describe('megabyte prompts are tokenized without blocking other requests', () => {
  // Limits raised so that six 4 MB prompts are tokenized (then refused as too many tokens).
  const env = useProxy(
    { prefill: 1, decode: 1 },
    { limits: { maxBodyBytes: 8 << 20, maxPromptChars: 8 << 20, maxPromptTokens: 131_072 } },
  )

  it('/health answers while six 4 MB bodies are tokenized; each body then gets its 400', async () => {
    const content = 'lorem ipsum dolor sit amet '.repeat(150_000)
    const body = Buffer.from(
      JSON.stringify({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content }] }),
    )
    expect(body.length).toBeGreaterThan(4_000_000)
    let healthCount = 0
    let done = false
    const { result, windows } = await healthAnswersDuring(async () => {
      const big = Promise.all(Array.from({ length: 6 }, (_, i) => postBytes(env.proxy.url, body, `big-${i}`)))
      const probes = (async () => {
        while (!done) {
          await (await fetch(`${env.proxy.url}/health`)).text()
          healthCount++
        }
      })()
      const answers = await big
      done = true
      await probes
      return answers
    })
    for (const r of result) {
      expect(r.status).toBe(400)
      expect(r.json.error.message).toMatch(/more than the limit of 131072/)
    }
    // Each body is decoded and tokenized in about 4 MB / 64 KB = 64 slices with a loop turn
    // between two, and /health needs a few turns per round trip: tens of answers per window
    // (none when a body was decoded and tokenized at once, as before the fix, since its whole
    // work then ran in one go after its last byte arrived). Counts of events, not times: the
    // machine's load does not change them much.
    expect(windows).toHaveLength(6)
    for (const w of windows) expect(w).toBeGreaterThanOrEqual(3)
    expect(healthCount).toBeGreaterThan(3)
  })
})

describe('an SDK error no retry can help ends the turn at once', () => {
  it('a body the SDK refuses to serialize is the request’s fault: one attempt, 400, no worker charged', async () => {
    const deep = new WorkerBindingsError('INVALID_ARGUMENT', 'the value cannot be written as JSON: too deep')
    expect(classifyUpstreamError(deep, 'fast')).toMatchObject({ kind: 'client', status: 400 })
    expect(classifyUpstreamError(deep, 'seed')).toMatchObject({ kind: 'client', status: 400 })
    const ds = await Promise.all(
      (['prefill', 'decode', 'decode'] as const).map((role) =>
        createSglangEmulator({ role, capacityTokens: 8_192, timing: { scale: 0 } }),
      ),
    )
    const gw = new Gateway(
      resolveConfig({
        workers: ds.map((d, i) => ({
          id: `w${i}`,
          role: i === 0 ? ('prefill' as const) : ('decode' as const),
          url: d.url,
        })),
        policy: 'round-robin',
        decisionLog: 'off',
        loads: { intervalMs: 0 },
      }),
    )
    try {
      await gw.start()
      let calls = 0
      const transport: TurnTransport = {
        start: async () => {
          calls++
          throw deep
        },
      }
      const r = await gw.runTurn(
        { sessionId: 's', promptTokens: 100, expectedOutputTokens: 8, sloClass: 'interactive' },
        transport,
      )
      expect(r).toMatchObject({ status: 'failed', cause: 'bad_request', upstreamStatus: 400 })
      expect(calls).toBe(1)
      expect(await gw.metrics.text()).not.toMatch(/result="worker_error"/)
      for (const w of gw.workers.all()) expect(gw.workers.health.state(w.url).consecutiveFailures).toBe(0)
    } finally {
      await gw.close()
      await Promise.all(ds.map((d) => d.close()))
    }
  })
})
