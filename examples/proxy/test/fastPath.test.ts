import { describe, expect, it } from 'vitest'
import { Conversation, chat, chatStream, useProxy } from './helpers.js'

const SYSTEM = 'You are a careful coding agent. Follow the repository conventions. '.repeat(48) // ~3.2K tokens

describe('multi-turn sessions reach the fast path', () => {
  // The body's session_id is opted into here (it is off by default) so one test can show it.
  const env = useProxy(
    { prefill: 1, decode: 2 },
    { router: { tauAppend: 2_048 }, session: { sources: ['header', 'session_id', 'prefix-hash'] } },
  )

  it('turn 1 seeds through P (long prompt), later turns go straight to the same D with the history cached', async () => {
    const convs = [0, 1, 2, 3].map((i) => new Conversation(`agent-${i}`, `${SYSTEM} Agent ${i}.`))
    const paths: string[][] = convs.map(() => [])
    const workers: string[][] = convs.map(() => [])
    for (let t = 0; t < 4; t++) {
      const rs = await Promise.all(
        convs.map((c, i) => c.turn(env.proxy.url, `Step ${t} of task ${i}: run the tests.`)),
      )
      rs.forEach((r, i) => {
        expect(r.status, JSON.stringify(r.json)).toBe(200)
        expect(r.content).toHaveLength(8)
        paths[i]!.push(r.headers.get('x-kvc-path')!)
        workers[i]!.push(r.headers.get('x-kvc-worker')!)
        const kvc = r.json.kvc as { path: string; cached_tokens: number; prefill: string | null }
        expect(kvc.path).toBe(r.headers.get('x-kvc-path'))
        if (t === 0) expect(kvc.prefill).toBe('p0')
      })
    }
    for (let i = 0; i < convs.length; i++) {
      expect(paths[i]).toEqual(['seed', 'fast', 'fast', 'fast'])
      expect(new Set(workers[i]).size).toBe(1) // the session stays on its D
    }
    // Sessions spread over both D workers (load-floor bonus and tie-break).
    expect(new Set(workers.map((w) => w[0])).size).toBe(2)
    // One decision line per turn, with the router's explain record.
    expect(env.decisions).toHaveLength(16)
    const fast = env.decisions.filter((d) => d.path === 'fast')
    expect(fast).toHaveLength(12)
    for (const d of fast) {
      const top = (d.routes[0] as { candidates: { worker: string; fast: boolean }[] }).candidates[0]!
      expect(top.worker).toBe(d.worker)
      expect(top.fast).toBe(true)
      expect(d.steps.some((s) => (s as { kind: string }).kind === 'admit')).toBe(true)
    }
  })

  it('the D holds the session: a fast turn finds the previous prompt and output cached on D', async () => {
    const c = new Conversation('cache-check', `${SYSTEM} Cache check.`)
    const r1 = await c.turn(env.proxy.url, 'first')
    const r2 = await c.turn(env.proxy.url, 'second')
    expect(r2.headers.get('x-kvc-path')).toBe('fast')
    const prompt1 = (r1.json.usage as { prompt_tokens: number }).prompt_tokens
    const cached2 = (r2.json.kvc as { cached_tokens: number }).cached_tokens
    // Everything of turn 1 (prompt + 8 output tokens) is reused, up to the page boundary.
    expect(cached2).toBeGreaterThanOrEqual(prompt1 + 8 - 16)
  })

  it('streams SSE (pass-through chunks, usage chunk with the kvc record, [DONE])', async () => {
    const c = new Conversation('streamer', `${SYSTEM} Streaming.`)
    await c.turn(env.proxy.url, 'warm up')
    c.messages.push({ role: 'user', content: 'now stream' })
    const s = await chatStream(env.proxy.url, c.id, c.messages, { stream_options: { include_usage: true } })
    expect(s.status).toBe(200)
    expect(s.headers.get('content-type')).toBe('text/event-stream')
    expect(s.headers.get('x-kvc-path')).toBe('fast')
    expect(s.done).toBe(true)
    expect(s.content).toHaveLength(8)
    const usage = s.events.at(-1) as {
      choices: unknown[]
      usage: { completion_tokens: number }
      kvc: { path: string }
    }
    expect(usage.choices).toEqual([])
    expect(usage.usage.completion_tokens).toBe(8)
    expect(usage.kvc.path).toBe('fast')
    // Without include_usage the client gets no usage chunk.
    c.messages.push({ role: 'assistant', content: s.content }, { role: 'user', content: 'again' })
    const s2 = await chatStream(env.proxy.url, c.id, c.messages)
    expect(s2.events.every((e) => (e as { choices: unknown[] }).choices.length === 1)).toBe(true)
    expect(s2.content).toHaveLength(8)
  })

  it('identifies sessions without a header: by the body’s session_id (opted in), or by the conversation’s opening', async () => {
    // No header: the opening messages (system + first user message) name the session.
    const opening = [
      { role: 'system', content: `${SYSTEM} Hashed.` },
      { role: 'user', content: 'Refactor the parser.' },
    ]
    const a = await chat(env.proxy.url, undefined, opening)
    const b = await chat(env.proxy.url, undefined, [
      ...opening,
      { role: 'assistant', content: a.content },
      { role: 'user', content: 'Now add tests.' },
    ])
    expect(a.headers.get('x-kvc-session')).toMatch(/^h%3A[0-9a-f]{16}$/)
    expect(b.headers.get('x-kvc-session')).toBe(a.headers.get('x-kvc-session'))
    expect(b.headers.get('x-kvc-path')).toBe('fast')
    expect(b.headers.get('x-kvc-worker')).toBe(a.headers.get('x-kvc-worker'))
    // SGLang's top-level session_id field.
    const c = await chat(env.proxy.url, undefined, [{ role: 'user', content: 'tagged' }], {
      session_id: 'tagged-1',
    })
    expect(c.headers.get('x-kvc-session')).toBe('tagged-1')
  })

  it('exposes Prometheus metrics, /health and /ready', async () => {
    const text = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(text).toMatch(/kvc_proxy_turns_total\{outcome="completed",path="fast",cause=""\} \d+/)
    expect(text).toMatch(/kvc_proxy_worker_healthy\{worker="d0",role="decode"\} 1/)
    expect(text).toMatch(/kvc_proxy_admissions_total\{worker="d\d",result="admitted"\} \d+/)
    expect(text).toMatch(/kvc_proxy_ttft_seconds_bucket/)
    // The D workers' KV events reached the residency index.
    expect(text).toMatch(/kvc_proxy_kv_events_total\{worker="d0"\} [1-9]/)
    expect(text).toMatch(/kvc_proxy_http_requests_total\{route="\/v1\/chat\/completions",status="200"\}/)
    expect((await fetch(`${env.proxy.url}/health`)).status).toBe(200)
    const ready = await fetch(`${env.proxy.url}/ready`)
    expect(ready.status).toBe(200)
    expect(((await ready.json()) as { workers: unknown[] }).workers).toHaveLength(3)
  })
})
