import { describe, expect, it } from 'vitest'
import { EndpointHealthTracker, HttpTransport, WorkerBindingsError } from '../src/index.js'

const URL0 = 'http://10.0.0.6:30000'
const timeoutError = () => new WorkerBindingsError('TIMEOUT', 'GET /health timed out')

describe('EndpointHealthTracker: slow is not dead', () => {
  it('a timeout while the endpoint answered other calls is slow; silence, refusals and 5xx are failures', () => {
    let now = 1_000
    const t = new EndpointHealthTracker({ failureThreshold: 2, now: () => now })
    // A call starts at 1000; another call to the endpoint succeeds at 1010; the first times out.
    t.recordSuccess(URL0)
    const started = now
    now += 10
    t.recordSuccess(URL0)
    now += 500
    t.recordFailure(URL0, timeoutError(), started)
    t.recordFailure(URL0, timeoutError(), started)
    t.recordFailure(URL0, timeoutError(), started)
    expect(t.state(URL0)).toMatchObject({ healthy: true, consecutiveFailures: 0, slowCalls: 3 })
    // Silence: nothing answered since the calls started.
    const later = now
    now += 500
    t.recordFailure(URL0, timeoutError(), later)
    expect(t.state(URL0)).toMatchObject({ healthy: true, consecutiveFailures: 1 })
    t.recordFailure(URL0, timeoutError(), later)
    expect(t.state(URL0)).toMatchObject({ healthy: false, consecutiveFailures: 2 })
    // A connection refused is a failure whatever answered before; so is a timeout without a start.
    const u = 'http://10.0.0.7:30000'
    t.recordSuccess(u)
    t.recordFailure(u, new WorkerBindingsError('CONNECTION', 'refused'), now - 100)
    t.recordFailure(u, timeoutError())
    expect(t.state(u)).toMatchObject({ healthy: false, slowCalls: 0 })
  })

  it('suggests timeouts that track observed latency per path, between the floor and the cap', () => {
    const t = new EndpointHealthTracker()
    expect(t.suggestTimeout(URL0, '/health', 500, 4_000)).toBe(500)
    for (let i = 0; i < 30; i++) t.recordSuccess(URL0, { latencyMs: 900 + (i % 2) * 100, path: '/health' })
    const l = t.latency(URL0, '/health')!
    expect(l.samples).toBe(30)
    expect(l.meanMs).toBeGreaterThan(900)
    expect(l.meanMs).toBeLessThan(1_000)
    const s = t.suggestTimeout(URL0, '/health', 500, 4_000)
    expect(s).toBeCloseTo(l.meanMs + 4 * l.deviationMs, 6)
    expect(s).toBeGreaterThan(1_000)
    expect(t.suggestTimeout(URL0, '/health', 500, 800)).toBe(800)
    expect(t.suggestTimeout(URL0, '/health', 5_000, 8_000)).toBe(5_000)
    // Other paths keep their own estimate.
    expect(t.suggestTimeout(URL0, '/kvc/v1/admit', 500, 4_000)).toBe(500)
  })
})

describe('HttpTransport maxTimeout: an attempt waits past its timeout while the endpoint answers', () => {
  /** A fetch whose `/slow` answers only when released; every other path answers at once. */
  function fakeFetch() {
    let release: (() => void) | undefined
    const fetch = (input: string, init: RequestInit) =>
      new Promise<Response>((resolve, reject) => {
        init.signal?.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')))
        if (input.endsWith('/slow')) release = () => resolve(new Response('{"ok":true}'))
        else resolve(new Response('{"fast":true}'))
      })
    return { fetch, release: () => release?.() }
  }

  it('slow: another call answers meanwhile, so the call outlives its timeout and succeeds', async () => {
    const health = new EndpointHealthTracker({ failureThreshold: 1 })
    const f = fakeFetch()
    const http = new HttpTransport({ baseURL: URL0, fetch: f.fetch, healthTracker: health, maxRetries: 0 })
    const slow = http.json(
      { method: 'GET', path: '/slow', idempotent: true },
      { timeout: 20, maxTimeout: 60_000 },
    )
    await http.json({ method: 'GET', path: '/fast', idempotent: true })
    // Well past the 20 ms timeout (any delay of a busy machine only makes it later).
    await new Promise((r) => setTimeout(r, 200))
    f.release()
    await expect(slow).resolves.toEqual({ ok: true })
    expect(health.state(http.baseURL)).toMatchObject({ healthy: true, consecutiveFailures: 0 })
  })

  it('dead: nothing answers, so the call times out (TIMEOUT) and counts as a failure', async () => {
    const health = new EndpointHealthTracker({ failureThreshold: 1 })
    const f = fakeFetch()
    const http = new HttpTransport({ baseURL: URL0, fetch: f.fetch, healthTracker: health, maxRetries: 0 })
    const err = await http
      .json({ method: 'GET', path: '/slow', idempotent: true }, { timeout: 20, maxTimeout: 60_000 })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(WorkerBindingsError)
    expect((err as WorkerBindingsError).code).toBe('TIMEOUT')
    expect(health.state(http.baseURL)).toMatchObject({ healthy: false, consecutiveFailures: 1 })
  })

  it('without maxTimeout a timeout is plain, and a late timer gives pending I/O one turn first', async () => {
    const health = new EndpointHealthTracker({ failureThreshold: 5 })
    const f = fakeFetch()
    const http = new HttpTransport({ baseURL: URL0, fetch: f.fetch, healthTracker: health, maxRetries: 0 })
    const slow = http
      .json({ method: 'GET', path: '/slow', idempotent: true }, { timeout: 20 })
      .catch((e: unknown) => e)
    await http.json({ method: 'GET', path: '/fast', idempotent: true })
    expect(await slow).toMatchObject({ code: 'TIMEOUT' })
    // It timed out although the endpoint answered meanwhile: slow, not counted as a failure.
    expect(health.state(http.baseURL)).toMatchObject({ consecutiveFailures: 0, slowCalls: 1 })
  })
})
