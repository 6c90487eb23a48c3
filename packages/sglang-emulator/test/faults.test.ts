import { createServer } from 'node:net'
import {
  AdmissionClient,
  EndpointHealthTracker,
  SglangClient,
  WorkerApiError,
  WorkerBindingsError,
} from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { type SglangEmulator, createSglangEmulator } from '../src/index.js'

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
    // Stalls far past a wide timeout: the fast call after them must not time out on a busy machine.
    emu.faults.inject({ path: '/get_load', delayMs: 8_000, times: 2 })
    const c = new SglangClient({ baseURL: emu.url, timeout: 2_000, maxRetries: 1, retry: fastRetry })
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
    // The wait the client schedules (not the wall clock): retry-after 0.2 s, not the 1 ms backoff.
    const timeout = vi.spyOn(globalThis, 'setTimeout')
    try {
      await c.getLoad()
      expect(timeout.mock.calls.map((call) => call[1])).toContain(200)
    } finally {
      timeout.mockRestore()
    }
    // A retry-after beyond maxRetryAfterMs is not waited for.
    emu.faults.inject({ path: '/get_load', status: 429, retryAfter: '120', times: 1 })
    const e = await new SglangClient({ baseURL: emu.url, maxRetries: 3 }).getLoad().catch((x: unknown) => x)
    expect((e as WorkerApiError).status).toBe(429)
    expect((e as WorkerApiError).retryAfterMs).toBe(120_000)
  })

  it('the admission client retries a 503 and a timeout (admission is idempotent by requestId)', async () => {
    emu.faults.inject({ path: '/kvc/v1/admit', status: 503, times: 1 })
    // The stalled answer comes long after the timeout, and the timeout is wide: a busy machine
    // must not make the good retry time out too.
    emu.faults.inject({ path: '/kvc/v1/admit', delayMs: 8_000, times: 1 })
    const a = new AdmissionClient({ baseURL: emu.url, timeout: 2_000, retry: { baseDelayMs: 1 } })
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
      timing: { scale: 1, decodeStepS: 0.01 },
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
    // Ends with ABORTED, not after the 10 s backoff: the test's own timeout (below it) is the guard.
    await expect(p).rejects.toMatchObject({ code: 'ABORTED' })
    emu.faults.clear()
  })

  it('stream idle timeout: a stalled stream fails with TIMEOUT instead of hanging', async () => {
    const slow = await createSglangEmulator({
      capacityTokens: 1024,
      pageSize: 4,
      timing: { scale: 1, decodeStepS: 0.4 },
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
