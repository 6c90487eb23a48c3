import { createServer } from 'node:net'
import { backoffDelayMs } from '@kvc/kvc-router'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AdmissionClient,
  DEFAULT_RETRY_POLICY,
  EndpointHealthTracker,
  type SglangEmulator,
  SglangClient,
  WorkerApiError,
  WorkerBindingsError,
  createSglangEmulator,
  parseRetryAfter,
} from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

const fastRetry = { baseDelayMs: 1, maxDelayMs: 5 }
let baseline: Record<string, number>
let emu: SglangEmulator

beforeAll(async () => {
  baseline = handleCounts()
  emu = await createSglangEmulator({ capacityTokens: 1024, pageSize: 4, timing: { scale: 0 } })
})

afterAll(async () => {
  await emu.close()
  expect(await leakedSince(baseline)).toEqual({})
})

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer()
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

describe('transport faults', () => {
  it('connection refused: CONNECTION after the retries of an idempotent call; health turns unhealthy', async () => {
    const port = await freePort()
    const health = new EndpointHealthTracker({ failureThreshold: 3 })
    let calls = 0
    const c = new SglangClient({
      baseURL: `http://127.0.0.1:${port}`,
      maxRetries: 2,
      retry: fastRetry,
      healthTracker: health,
      fetch: (u, i) => {
        calls++
        return fetch(u, i)
      },
    })
    const err = await c.getLoad().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(WorkerBindingsError)
    expect((err as WorkerBindingsError).code).toBe('CONNECTION')
    expect((err as WorkerBindingsError).cause).toBeDefined()
    expect(calls).toBe(3)
    expect(health.isHealthy(c.baseURL)).toBe(false)
    expect(health.state(c.baseURL).consecutiveFailures).toBe(3)
  })

  it('a non-idempotent generate is never retried', async () => {
    const port = await freePort()
    let calls = 0
    const c = new SglangClient({
      baseURL: `http://127.0.0.1:${port}`,
      maxRetries: 5,
      retry: fastRetry,
      fetch: (u, i) => {
        calls++
        return fetch(u, i)
      },
    })
    await expect(c.generate({ text: 'x' })).rejects.toMatchObject({ code: 'CONNECTION' })
    expect(calls).toBe(1)
    emu.faults.inject({ path: '/generate', status: 503, times: 1 })
    const e = await new SglangClient({ baseURL: emu.url, maxRetries: 5, retry: fastRetry })
      .generate({ text: 'x', sampling_params: { max_new_tokens: 1 } })
      .catch((x: unknown) => x)
    expect(e).toBeInstanceOf(WorkerApiError)
    expect((e as WorkerApiError).status).toBe(503)
  })

  it('slow server: TIMEOUT (per attempt), then success once the server is fast again', async () => {
    emu.faults.inject({ path: '/get_load', delayMs: 1_500, times: 2 })
    const c = new SglangClient({ baseURL: emu.url, timeout: 300, maxRetries: 1, retry: fastRetry })
    const err = await c.getLoad().catch((e: unknown) => e)
    expect((err as WorkerBindingsError).code).toBe('TIMEOUT')
    expect((await c.getLoad())[0]?.dp_rank).toBe(0)
  })

  it('5xx then success: retried with backoff, health recovers', async () => {
    const changes: boolean[] = []
    // A record-only tracker: one that refuses calls would stop the retries once unhealthy.
    const health = new EndpointHealthTracker({
      failureThreshold: 2,
      refuseWhenUnhealthy: false,
      onChange: (h) => changes.push(h.healthy),
    })
    // modelInfo() asks /model_info first (the newer path).
    emu.faults.inject({ path: '/model_info', status: 500, times: 2 })
    const c = new SglangClient({ baseURL: emu.url, maxRetries: 2, retry: fastRetry, healthTracker: health })
    const info = await c.modelInfo()
    expect(info.is_generation).toBe(true)
    expect(changes).toEqual([false, true])
    expect(health.state(c.baseURL).consecutiveFailures).toBe(0)
  })

  it('429 with retry-after: waits what the server asked, then succeeds', async () => {
    emu.faults.inject({ path: '/get_load', status: 429, retryAfter: '0.2', times: 1 })
    const c = new SglangClient({ baseURL: emu.url, maxRetries: 1, retry: { baseDelayMs: 1 } })
    const t0 = performance.now()
    await c.getLoad()
    expect(performance.now() - t0).toBeGreaterThanOrEqual(190)
    // A retry-after beyond maxRetryAfterMs is not waited for.
    emu.faults.inject({ path: '/get_load', status: 429, retryAfter: '120', times: 1 })
    const e = await new SglangClient({ baseURL: emu.url, maxRetries: 3 }).getLoad().catch((x: unknown) => x)
    expect((e as WorkerApiError).status).toBe(429)
    expect((e as WorkerApiError).retryAfterMs).toBe(120_000)
  })

  it('the admission client retries a 503 and a timeout (admission is idempotent by requestId)', async () => {
    emu.faults.inject({ path: '/kvc/v1/admit', status: 503, times: 1 })
    emu.faults.inject({ path: '/kvc/v1/admit', delayMs: 1_500, times: 1 })
    const a = new AdmissionClient({ baseURL: emu.url, timeout: 400, retry: { baseDelayMs: 1 } })
    const res = await a.admit({
      requestId: 'r-1',
      sessionId: 's-1',
      path: 'seed',
      promptTokens: 100,
      appendTokens: 100,
    })
    expect(res.admitted).toBe(true)
  })

  it('abort mid-stream: ABORTED, the server frees the request, nothing leaks', async () => {
    const slow = await createSglangEmulator({
      capacityTokens: 1024,
      pageSize: 4,
      timing: { scale: 1, decodeStepMs: 10 },
    })
    try {
      const c = new SglangClient({ baseURL: slow.url })
      const ac = new AbortController()
      const stream = await c.generateStream(
        { text: 'abort mid stream', sampling_params: { max_new_tokens: 200 } },
        { signal: ac.signal },
      )
      let n = 0
      const err = await (async () => {
        for await (const _ of stream) if (++n === 3) ac.abort()
      })().catch((e: unknown) => e)
      expect((err as WorkerBindingsError).code).toBe('ABORTED')
      // The emulator sees the disconnect and aborts the request: its KV goes back.
      for (let i = 0; i < 50 && slow.stats().runningRequests > 0; i++)
        await new Promise((r) => setTimeout(r, 10))
      expect(slow.stats()).toMatchObject({ runningRequests: 0, balanced: true, freeTokens: 1024 })
      // Breaking out of the loop closes the stream too.
      const s2 = await c.generateStream({ text: 'break out', sampling_params: { max_new_tokens: 200 } })
      for await (const _ of s2) break
      for (let i = 0; i < 50 && slow.stats().runningRequests > 0; i++)
        await new Promise((r) => setTimeout(r, 10))
      expect(slow.stats().runningRequests).toBe(0)
    } finally {
      await slow.close()
    }
  })

  it('an abort during the retry wait ends the call at once', async () => {
    emu.faults.inject({ path: '/get_load', status: 503, times: 1 })
    const c = new SglangClient({
      baseURL: emu.url,
      maxRetries: 3,
      retry: { baseDelayMs: 10_000, jitter: 'none' },
    })
    const ac = new AbortController()
    const p = c.getLoad({ signal: ac.signal })
    setTimeout(() => ac.abort(), 50)
    const t0 = performance.now()
    await expect(p).rejects.toMatchObject({ code: 'ABORTED' })
    expect(performance.now() - t0).toBeLessThan(2_000)
    emu.faults.clear()
  })

  it('stream idle timeout: a stalled stream fails with TIMEOUT instead of hanging', async () => {
    const slow = await createSglangEmulator({
      capacityTokens: 1024,
      pageSize: 4,
      timing: { scale: 1, decodeStepMs: 400 },
    })
    try {
      const c = new SglangClient({ baseURL: slow.url, timeout: 100 })
      const s = await c.generateStream({ text: 'stall', sampling_params: { max_new_tokens: 5 } })
      const err = await (async () => {
        for await (const _ of s) {
          // wait for the next chunk
        }
      })().catch((e: unknown) => e)
      expect((err as WorkerBindingsError).code).toBe('TIMEOUT')
    } finally {
      await slow.close()
    }
  })
})

describe('retry helpers and options', () => {
  it('backoff and retry-after parsing', () => {
    // The transport's delays: kvc-router's backoff over the resolved retry policy.
    const none = { ...DEFAULT_RETRY_POLICY, jitter: 'none' } as const
    expect(backoffDelayMs(0, none, Math.random)).toBe(500)
    expect(backoffDelayMs(3, none, Math.random)).toBe(4000)
    expect(backoffDelayMs(20, none, Math.random)).toBe(8000)
    expect(backoffDelayMs(1, DEFAULT_RETRY_POLICY, () => 0.999)).toBeGreaterThan(750)
    expect(backoffDelayMs(1, { ...DEFAULT_RETRY_POLICY, jitter: 'full' }, () => 0.5)).toBe(500)
    expect(parseRetryAfter({ 'retry-after': '3' })).toBe(3000)
    expect(parseRetryAfter({ 'retry-after-ms': '25', 'retry-after': '3' })).toBe(25)
    expect(parseRetryAfter({ 'retry-after': new Date(10_000).toUTCString() }, () => 4_000)).toBe(6000)
    expect(parseRetryAfter({ 'retry-after': 'soon' })).toBeUndefined()
  })

  it('refuses bad options', () => {
    expect(() => new SglangClient({ baseURL: 'not a url' })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
    expect(() => new SglangClient({ baseURL: 'ftp://x' })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
    expect(() => new SglangClient({ baseURL: 'http://x', timeout: -1 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
    expect(() => new SglangClient({ baseURL: 'http://x', maxRetries: 1.5 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
  })

  it('health tracker: a watch probe that answers false (client.isHealthy()) counts as a failure', async () => {
    const h = new EndpointHealthTracker({ failureThreshold: 1 })
    h.recordFailure('e', new Error('down'))
    let answers = 0
    h.watch('e', async () => ++answers >= 3, 5) // false, false, then true
    for (let i = 0; i < 200 && !h.isHealthy('e'); i++) await new Promise((r) => setTimeout(r, 5))
    expect(h.isHealthy('e')).toBe(true)
    expect(answers).toBe(3)
    h.close()
  })

  it('health tracker: threshold, recovery by probe, onChange, close', async () => {
    const changes: boolean[] = []
    const h = new EndpointHealthTracker({ failureThreshold: 2, onChange: (s) => changes.push(s.healthy) })
    h.recordFailure('e', new Error('x'))
    expect(h.isHealthy('e')).toBe(true)
    h.recordFailure('e', new Error('y'))
    expect(h.isHealthy('e')).toBe(false)
    expect(h.state('e').lastError).toBe('y')
    let probes = 0
    h.watch(
      'e',
      async () => {
        probes++
        if (probes < 2) throw new Error('still down')
      },
      5,
    )
    for (let i = 0; i < 100 && !h.isHealthy('e'); i++) await new Promise((r) => setTimeout(r, 5))
    expect(h.isHealthy('e')).toBe(true)
    expect(changes).toEqual([false, true])
    h.close()
    expect(() => new EndpointHealthTracker({ failureThreshold: 0 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION', value: 0 }),
    )
    expect(() => h.watch('e', async () => true, 0)).toThrow(/intervalMs must be > 0, got 0/)
  })
})
