import { Agent, type ClientRequest, request } from 'node:http'
import { connect } from 'node:net'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { useProxy } from './helpers.js'
import { apiError, client, turn } from './tenantHelpers.js'

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in these tests
type Json = any

const KEY = {
  rl: 'sk-limits-requests-0001',
  tk: 'sk-limits-tokens-000002',
  one: 'sk-limits-one-turn-0003',
  free: 'sk-limits-free-00000004',
  hasty: 'sk-limits-hasty-0000005',
}

/** A raw connection: what the server wrote, and when it closed. */
function rawConnection(url: string) {
  const u = new URL(url)
  const socket = connect(Number(u.port), u.hostname)
  let received = ''
  socket.on('data', (b: Buffer) => {
    received += b.toString('utf8')
  })
  socket.on('error', () => {})
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  return { socket, received: () => received, closed }
}

/** Starts a chat request whose body never completes (holding a turn slot), as `key`'s tenant. */
function stalledRequest(url: string, key: string) {
  const c = rawConnection(url)
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'stalled' }], max_tokens: 2 })
  c.socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer ${key}\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`,
  )
  return { ...c, finish: () => c.socket.write(body.slice(10)) }
}

async function limitedError(p: Promise<unknown>) {
  const e = await apiError(p)
  expect(e).toBeInstanceOf(OpenAI.RateLimitError)
  return { status: e.status, retryAfter: e.headers?.get('retry-after'), cause: (e.error as Json)?.kvc?.cause }
}

describe('per-tenant rate limits and concurrency caps', () => {
  let now = 0
  const env = useProxy(
    { prefill: 1, decode: 2 },
    {
      limits: { maxConcurrentTurns: 3 },
      auth: {
        tenants: [
          { id: 'rl', keys: [KEY.rl], limits: { requestsPerSecond: 1, requestBurst: 2 } },
          { id: 'tk', keys: [KEY.tk], limits: { tokensPerSecond: 1_000, tokenBurst: 3_000 } },
          { id: 'one', keys: [KEY.one], limits: { maxConcurrentTurns: 1 } },
          { id: 'free', keys: [KEY.free], admin: true },
        ],
      },
    },
    // The token buckets run on this clock: the test moves it, no real time passes for them.
    { limitsNow: () => now },
  )
  const hi = (n: number) => [{ role: 'user' as const, content: `hello ${n}` }]

  it('requests per second: a burst, then 429 with retry-after until the clock refills the bucket', async () => {
    const rl = client(env.proxy.url, KEY.rl)
    await turn(rl, hi(1))
    await turn(rl, hi(2))
    expect(await limitedError(turn(rl, hi(3)))).toEqual({
      status: 429,
      retryAfter: '1',
      cause: 'rate_limit_requests',
    })
    // Another tenant is not held back.
    await turn(client(env.proxy.url, KEY.free), hi(4))
    now += 1_000
    await turn(rl, hi(5))
    expect((await limitedError(turn(rl, hi(6)))).cause).toBe('rate_limit_requests')
    now += 999
    expect((await limitedError(turn(rl, hi(7)))).retryAfter).toBe('1')
    now += 1
    await turn(rl, hi(8))
  })

  it('tokens per second: prompt plus max_tokens are charged, the unused output given back', async () => {
    const tk = client(env.proxy.url, KEY.tk)
    const messages = [{ role: 'user' as const, content: `count me ${'t'.repeat(850)}` }]
    const ask = async (maxTokens: number, stop?: string) => {
      const { data } = await tk.chat.completions
        .create({
          model: 'm',
          messages,
          max_tokens: maxTokens,
          ...(stop === undefined ? {} : { stop: [stop] }),
        })
        .withResponse()
      return data
    }
    // The model's answer to this prompt, and a stop string that ends it after a few tokens.
    const probe = await ask(40)
    const prompt = probe.usage!.prompt_tokens
    const stop = probe.choices[0]!.message.content!.slice(3, 5)
    let left = 3_000 - (prompt + 40)
    // A request charged exactly what is left; it stops early, so most of its max_tokens comes back.
    const first = await ask(left - prompt, stop)
    const out1 = first.usage!.completion_tokens
    expect(out1).toBeLessThan(10)
    left -= prompt + out1
    // Charged exactly what is left after the refund: refused if the refund had not happened.
    expect(left - prompt).toBeGreaterThan(0)
    const second = await ask(left - prompt, stop)
    left -= prompt + second.usage!.completion_tokens
    const e = await limitedError(ask(8))
    expect(e.cause).toBe('rate_limit_tokens')
    // Until the bucket holds the request's prompt + 8 again, at 1,000 tokens/s.
    expect(Number(e.retryAfter)).toBe(Math.ceil((prompt + 8 - left) / 1_000))
    now += Number(e.retryAfter) * 1_000
    await ask(8)
  })

  it('caps a tenant’s turns in progress and all turns in progress; each answers 429 with retry-after', async () => {
    const held = stalledRequest(env.proxy.url, KEY.one)
    await expect.poll(() => env.proxy.limiter.runningOf('one'), { timeout: 10_000 }).toBe(1)
    expect(await limitedError(turn(client(env.proxy.url, KEY.one), hi(1)))).toEqual({
      status: 429,
      retryAfter: '1',
      cause: 'tenant_concurrency',
    })
    await turn(client(env.proxy.url, KEY.free), hi(2))
    held.finish()
    await expect.poll(() => held.received(), { timeout: 10_000 }).toMatch(/^HTTP\/1\.1 200/)
    held.socket.destroy()
    await expect.poll(() => env.proxy.limiter.runningOf('one'), { timeout: 10_000 }).toBe(0)
    await turn(client(env.proxy.url, KEY.one), hi(3))
    // Three turns in progress over the tenants: the fourth waits for one of them.
    const three = [stalledRequest(env.proxy.url, KEY.free), stalledRequest(env.proxy.url, KEY.free)]
    three.push(stalledRequest(env.proxy.url, KEY.one))
    await expect.poll(() => env.proxy.limiter.running, { timeout: 10_000 }).toBe(3)
    expect(await limitedError(turn(client(env.proxy.url, KEY.free), hi(4)))).toEqual({
      status: 429,
      retryAfter: '1',
      cause: 'global_concurrency',
    })
    for (const s of three) s.socket.destroy()
    await expect.poll(() => env.proxy.limiter.running, { timeout: 10_000 }).toBe(0)
    await turn(client(env.proxy.url, KEY.free), hi(5))
    const m = await (
      await fetch(`${env.proxy.url}/metrics`, { headers: { authorization: `Bearer ${KEY.free}` } })
    ).text()
    for (const [tenant, cause] of [
      ['rl', 'rate_limit_requests'],
      ['tk', 'rate_limit_tokens'],
      ['one', 'tenant_concurrency'],
      ['free', 'global_concurrency'],
    ])
      expect(m).toMatch(new RegExp(`kvc_proxy_limited_total\\{tenant="${tenant}",cause="${cause}"\\} [1-9]`))
  })
})

describe('deadlines and body limits', () => {
  const env = useProxy(
    // Decoding slow enough (about a millisecond a token) for a long answer to outlive a deadline.
    { prefill: 1, decode: 1, decodeOptions: { timing: { scale: 0.1 } } },
    {
      limits: { maxBodyBytes: 65_536 },
      deadlines: { bodyReadMs: 1_000, headersMs: 1_000 },
      auth: {
        tenants: [
          { id: 'hasty', keys: [KEY.hasty], turnDeadlineMs: 1_000 },
          { id: 'free', keys: [KEY.free] },
        ],
      },
    },
  )

  it('ends a turn at its deadline with 504, running or still queued behind its session', async () => {
    const d = env.cluster.decode[0]!
    // The D stalls far longer than the deadline (the margin is wide: a missed deadline answers 200).
    d.faults.inject({ path: '/v1/chat/completions', delayMs: 8_000, times: 2 })
    try {
      const hasty = client(env.proxy.url, KEY.hasty, { 'x-session-id': 'slow' })
      const [running, queued] = await Promise.all([
        apiError(turn(hasty, [{ role: 'user', content: 'stall one' }])),
        apiError(turn(hasty, [{ role: 'user', content: 'stall two' }])),
      ])
      for (const e of [running, queued]) {
        expect(e.status).toBe(504)
        expect(e.code).toBe('deadline_exceeded')
        expect((e.error as Json).kvc.cause).toBe('deadline_exceeded')
      }
    } finally {
      d.faults.clear()
    }
    // The running one ended through the router (counted, no load left behind).
    await expect
      .poll(() => env.decisions.filter((x) => x.cause === 'deadline_exceeded').length, { timeout: 10_000 })
      .toBeGreaterThanOrEqual(1)
    await expect
      .poll(() => env.proxy.gateway.router.cluster.worker('d0').load.turns, { timeout: 10_000 })
      .toBe(0)
    // Other tenants have the default deadline.
    await turn(client(env.proxy.url, KEY.free), [{ role: 'user', content: 'not in a hurry' }])
  })

  it('ends a stream at its deadline with an error event, and aborts the worker’s request', async () => {
    const res = await fetch(`${env.proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY.hasty}` },
      // Seconds of decoding on this D, far past the 1 s deadline.
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'a long story' }],
        max_tokens: 4_000,
        stream: true,
      }),
    })
    expect(res.status).toBe(200)
    const events = (await res.text()).split('\n\n').filter((l) => l.startsWith('data: '))
    expect(events.at(-1)).toBe('data: [DONE]')
    const error = JSON.parse(events.at(-2)!.slice(6))
    expect(error.error).toMatchObject({ code: 'turn_failed', kvc: { cause: 'deadline_exceeded' } })
    expect(events.length).toBeGreaterThan(2) // tokens were streamed before the deadline
    await expect.poll(() => env.cluster.decode[0]!.stats().runningRequests, { timeout: 10_000 }).toBe(0)
  })

  it('answers 408 to a body that does not arrive in time, and closes a connection whose headers do not', async () => {
    const body = stalledRequest(env.proxy.url, KEY.free)
    await body.closed
    expect(body.received()).toMatch(/^HTTP\/1\.1 408/)
    expect(body.received()).toContain('"code":"request_timeout"')
    const headers = rawConnection(env.proxy.url)
    headers.socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n')
    await headers.closed
    expect(headers.received()).not.toMatch(/^HTTP\/1\.1 200/)
  })
})

describe('the body size limit', () => {
  // Wide header and body deadlines: a client may take seconds to build and send a 100 MB body on
  // a busy machine; the 413 must not depend on it.
  const env = useProxy(
    { prefill: 1, decode: 1 },
    {
      limits: { maxBodyBytes: 65_536 },
      deadlines: { bodyReadMs: 120_000, headersMs: 120_000 },
      auth: { tenants: [{ id: 'free', keys: [KEY.free] }] },
    },
  )

  it('answers 413 to an oversized body at every size, 100 MB included, and keeps the connection usable', async () => {
    const c = client(env.proxy.url, KEY.free)
    // 100 MB first, on a fresh connection: building such a body takes the client seconds on a busy
    // machine, longer than an idle kept-alive connection lives (Node's 5 s keepAliveTimeout).
    for (const size of [100_000_000, 1_000_000, 70_000]) {
      const e = await apiError(turn(c, [{ role: 'user', content: 'x'.repeat(size) }]))
      expect(e.status, `${size} bytes: ${e.message}`).toBe(413)
      expect(e.message).toMatch(/exceeds the limit of 65536 bytes/)
    }
    // The answer comes first, the rest of the body is read and dropped: the next request on the same
    // connection is served.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    const send = (payload: string) =>
      new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const u = new URL(env.proxy.url)
        const req: ClientRequest = request(
          {
            host: u.hostname,
            port: u.port,
            method: 'POST',
            path: '/v1/chat/completions',
            agent,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY.free}` },
          },
          (res) => {
            res.resume()
            res.on('end', () => resolve({ status: res.statusCode!, reused: req.reusedSocket }))
          },
        )
        req.on('error', reject)
        req.end(payload)
      })
    try {
      const big = await send(JSON.stringify({ messages: [{ role: 'user', content: 'y'.repeat(200_000) }] }))
      expect(big.status).toBe(413)
      const next = await send(
        JSON.stringify({ messages: [{ role: 'user', content: 'small' }], max_tokens: 2 }),
      )
      expect(next).toEqual({ status: 200, reused: true })
    } finally {
      agent.destroy()
    }
  })
})
