import { describe, expect, it } from 'vitest'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { Conversation, type LooseAnswer, postRaw, startCluster, startProxy, useProxy } from './helpers.js'

const post = postRaw

describe('malformed and oversized requests', () => {
  const env = useProxy(
    { prefill: 1, decode: 2, decodeOptions: { contextLength: 8_192 } },
    {
      limits: { maxBodyBytes: 65_536, maxPromptTokens: 6_000, maxMaxTokens: 4_096 },
    },
  )

  it('get 4xx with an OpenAI error body, change nothing, and do not disturb the sessions running beside them', async () => {
    const chatUrl = `${env.proxy.url}/v1/chat/completions`
    const msgs = [{ role: 'user', content: 'hi' }]
    const ok = (extra: Record<string, unknown> = {}) =>
      JSON.stringify({ model: 'm', messages: msgs, max_tokens: 4, ...extra })
    const bad: [string, () => Promise<LooseAnswer>, number][] = [
      ['invalid JSON', () => post(chatUrl, '{"messages": [ '), 400],
      ['not an object', () => post(chatUrl, '[1, 2]'), 400],
      ['wrong content type', () => post(chatUrl, ok(), { 'content-type': 'text/plain' }), 415],
      ['body over the limit', () => post(chatUrl, ok({ pad: 'x'.repeat(100_000) })), 413],
      ['no messages', () => post(chatUrl, JSON.stringify({ model: 'm' })), 400],
      ['empty messages', () => post(chatUrl, JSON.stringify({ messages: [] })), 400],
      [
        'bad role',
        () => post(chatUrl, JSON.stringify({ messages: [{ role: 'wizard', content: 'x' }] })),
        400,
      ],
      ['bad content', () => post(chatUrl, JSON.stringify({ messages: [{ role: 'user', content: 7 }] })), 400],
      ['negative max_tokens', () => post(chatUrl, ok({ max_tokens: -1 })), 400],
      ['max_tokens over the limit', () => post(chatUrl, ok({ max_tokens: 1e6 })), 400],
      ['n > 1', () => post(chatUrl, ok({ n: 3 })), 400],
      ['stream not a boolean', () => post(chatUrl, ok({ stream: 'yes' })), 400],
      ['bad SLO class', () => post(chatUrl, ok(), { 'x-kvc-slo-class': 'vip' }), 400],
      ['session id too long', () => post(chatUrl, ok(), { 'x-session-id': 's'.repeat(300) }), 400],
      [
        'prompt over the token limit',
        () => post(chatUrl, JSON.stringify({ messages: [{ role: 'user', content: 'y'.repeat(7_000) }] })),
        400,
      ],
      [
        'batched completion prompt',
        () => post(`${env.proxy.url}/v1/completions`, JSON.stringify({ prompt: ['a', 'b'], max_tokens: 2 })),
        400,
      ],
      [
        'token id out of range',
        () => post(`${env.proxy.url}/v1/completions`, JSON.stringify({ prompt: [1, -2, 3], max_tokens: 2 })),
        400,
      ],
      [
        'unsupported logprobs',
        () => post(`${env.proxy.url}/v1/completions`, JSON.stringify({ prompt: 'a', logprobs: 2 })),
        400,
      ],
      [
        'the worker refuses it (context length)',
        () =>
          post(
            chatUrl,
            JSON.stringify({ messages: [{ role: 'user', content: 'z'.repeat(5_000) }], max_tokens: 4_000 }),
          ),
        400,
      ],
      [
        'wrong method',
        async () => {
          const r = await fetch(chatUrl)
          return { status: r.status, json: await r.json() }
        },
        405,
      ],
      ['unknown path', () => post(`${env.proxy.url}/v1/embeddings`, ok()), 404],
    ]
    const background = Array.from(
      { length: 4 },
      (_, i) => new Conversation(`bg-${i}`, `Background agent ${i}.`),
    )
    const runBackground = Promise.all(
      background.map(async (c) => {
        const out: { status: number; path: string | null }[] = []
        for (let t = 0; t < 4; t++) {
          const r = await c.turn(env.proxy.url, `background step ${t}`)
          out.push({ status: r.status, path: r.headers.get('x-kvc-path') })
        }
        return out
      }),
    )
    const answers = await Promise.all(
      bad.map(async ([name, send, want]) => ({ name, want, ...(await send()) })),
    )
    for (const a of answers) {
      expect(a.status, `${a.name}: ${JSON.stringify(a.json)}`).toBe(a.want)
      expect(typeof a.json.error?.message, a.name).toBe('string')
    }
    expect(answers.find((a) => a.name.startsWith('the worker'))!.json.error.message).toMatch(/context length/)
    const bg = await runBackground
    for (const s of bg) {
      expect(s.map((x) => x.status)).toEqual([200, 200, 200, 200])
      expect(s.slice(1).every((x) => x.path === 'fast')).toBe(true)
    }
    // Only the request the worker refused reached the router (and ended as bad_request); the rest
    // were refused before any routing.
    const failed = env.decisions.filter((d) => d.status === 'failed')
    expect(failed).toHaveLength(1)
    expect(failed[0]!.cause).toBe('bad_request')
    expect(env.proxy.gateway.router.cluster.store.bindingCount()).toBe(4)
    const m = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(m).toMatch(/kvc_proxy_http_requests_total\{route="\/v1\/chat\/completions",status="413"\} 1/)
    expect(m).toMatch(/kvc_proxy_http_requests_total\{route="other",status="404"\} 1/)
  })

  it('ignores bootstrap fields sent by a client (they are the proxy’s to set)', async () => {
    const r = await post(
      `${env.proxy.url}/v1/chat/completions`,
      JSON.stringify({
        messages: [{ role: 'user', content: 'fake bootstrap' }],
        max_tokens: 3,
        bootstrap_host: '2.2.2.2',
        bootstrap_room: 0,
      }),
      { 'x-session-id': 'sneaky' },
    )
    expect(r.status).toBe(200)
    expect(r.json.choices[0].message.content).toHaveLength(3)
  })

  it('completions: text and token-id prompts, non-streaming and streaming', async () => {
    const url = `${env.proxy.url}/v1/completions`
    const a = await post(url, JSON.stringify({ prompt: 'Once upon a time', max_tokens: 5 }), {
      'x-session-id': 'c1',
    })
    expect(a.status).toBe(200)
    expect(a.json).toMatchObject({ object: 'text_completion', usage: { completion_tokens: 5 } })
    expect(a.json.choices[0].text).toHaveLength(5)
    const ids = Array.from({ length: 40 }, (_, i) => 100 + i)
    const b = await post(url, JSON.stringify({ prompt: ids, max_tokens: 4 }), { 'x-session-id': 'c2' })
    expect(b.status).toBe(200)
    expect(b.json.kvc.output_ids).toHaveLength(4)
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': 'c2' },
      body: JSON.stringify({
        prompt: [...ids, ...b.json.kvc.output_ids, 7, 8, 9],
        max_tokens: 6,
        stream: true,
        stream_options: { include_usage: true },
      }),
    })
    expect(res.headers.get('x-kvc-path')).toBe('fast')
    const events = (await res.text())
      .split('\n\n')
      .filter((l) => l.startsWith('data: ') && !l.includes('[DONE]'))
      .map((l) => JSON.parse(l.slice(6)))
    const text = events.map((e) => e.choices[0]?.text ?? '').join('')
    expect(text).toHaveLength(6)
    const last = events.at(-1)
    expect(last.usage).toMatchObject({ completion_tokens: 6 })
    expect(last.kvc.output_ids).toHaveLength(6)
    // Turn 2 found turn 1 (prompt + output) cached on its D.
    expect(last.kvc.cached_tokens).toBeGreaterThanOrEqual(32)
  })
})

describe('too many queued turns of one session', () => {
  it('answers 429 beyond session.maxQueuedTurns; a client leaving mid-stream aborts its worker request', async () => {
    const baseline = handleCounts()
    const cluster = await startCluster({ prefill: 1, decode: 1, decodeOptions: { timing: { scale: 0.1 } } })
    const { proxy, decisions } = await startProxy(cluster, { session: { maxQueuedTurns: 1 } })
    try {
      const send = () =>
        post(
          `${proxy.url}/v1/chat/completions`,
          JSON.stringify({ messages: [{ role: 'user', content: 'go' }], max_tokens: 100 }),
          {
            'x-session-id': 'hot',
          },
        )
      const first = send()
      await new Promise((r) => setTimeout(r, 50)) // the first turn is running
      const rest = await Promise.all([send(), send(), send()])
      const statuses = [(await first).status, ...rest.map((r) => r.status)].sort()
      expect(statuses).toEqual([200, 200, 429, 429])
      const busy = rest.find((r) => r.status === 429)!
      expect(busy.json.error.code).toBe('session_busy')

      // A client that goes away mid-stream: the worker's request is aborted too, and the turn is
      // counted (client_closed) without touching other sessions.
      const ctl = new AbortController()
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': 'leaver' },
        body: JSON.stringify({
          messages: [{ role: 'user', content: 'long answer please' }],
          max_tokens: 2_000,
          stream: true,
        }),
        signal: ctl.signal,
      })
      const reader = res.body!.getReader()
      await reader.read()
      ctl.abort()
      await reader.read().catch(() => {})
      await expect
        .poll(() => decisions.find((d) => d.sessionId === 'leaver')?.cause, { timeout: 3_000 })
        .toBe('client_closed')
      await expect.poll(() => cluster.decode[0]!.stats().runningRequests, { timeout: 3_000 }).toBe(0)
      const after = await send()
      expect(after.status).toBe(200)
    } finally {
      await proxy.close()
      await cluster.close()
    }
    expect(await leakedSince(baseline)).toEqual({})
  })
})
