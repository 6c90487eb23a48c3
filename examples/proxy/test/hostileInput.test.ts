import { request } from 'node:http'
import { describe, expect, it } from 'vitest'
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { WorkerBindingsError } from '@kvc/worker-bindings'
import { resolveConfig } from '../src/config.js'
import { Gateway, type TurnTransport, classifyUpstreamError } from '../src/gateway.js'
import { createTokenizer } from '../src/tokens.js'
import { useProxy } from './helpers.js'

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in these tests
type Json = any

async function post(url: string, body: string, session?: string): Promise<{ status: number; json: Json }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(session === undefined ? {} : { 'x-session-id': session }),
    },
    body,
  })
  const text = await res.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = text
  }
  return { status: res.status, json }
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
 * The longest the event loop went without running a timer while `work` ran (ms), sampled by a
 * 1 ms interval timer.
 */
async function longestStall<T>(work: () => Promise<T>): Promise<{ result: T; stallMs: number }> {
  let last = performance.now()
  let stallMs = 0
  const timer = setInterval(() => {
    const now = performance.now()
    stallMs = Math.max(stallMs, now - last)
    last = now
  }, 1)
  try {
    const result = await work()
    return { result, stallMs }
  } finally {
    clearInterval(timer)
  }
}

/** POSTs pre-encoded bytes with `node:http` (the client does next to no work in this process). */
function postBytes(url: string, body: Buffer, session: string): Promise<{ status: number; json: Json }> {
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
    // Calibration: what decoding and tokenizing one body at once costs on this machine, now.
    const t0 = performance.now()
    const parsed = JSON.parse(body.toString('utf8')) as { messages: { role: string; content: string }[] }
    const n = createTokenizer('emulator').chat(parsed.messages).length
    const once = performance.now() - t0
    expect(n).toBeGreaterThan(4_000_000)
    let healthMax = 0
    let healthCount = 0
    let done = false
    const { result, stallMs } = await longestStall(async () => {
      const big = Promise.all(Array.from({ length: 6 }, (_, i) => postBytes(env.proxy.url, body, `big-${i}`)))
      const probes = (async () => {
        while (!done) {
          const h0 = performance.now()
          const h = await fetch(`${env.proxy.url}/health`)
          await h.text()
          healthMax = Math.max(healthMax, performance.now() - h0)
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
    // Decoding and tokenizing a body at once blocks the event loop for about `once`, and six
    // bodies arriving together for several times that (3.4 s measured before the fix, `once`
    // 1 s). In slices /health waits for a slice, some loop turns and the largest single step
    // (JSON.parse of one body): 0.4-0.5 × `once` measured. The bound, 1.5 × `once`, is wide on
    // both sides, and it scales with the machine's load as `once` does.
    expect(healthMax).toBeLessThan(1.5 * once)
    expect(stallMs).toBeLessThan(2 * once)
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
