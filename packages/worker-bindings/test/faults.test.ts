import { backoffDelayMs } from '@kvc/kvc-router'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_RETRY_POLICY, EndpointHealthTracker, SglangClient, parseRetryAfter } from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

let baseline: Record<string, number>
beforeAll(() => {
  baseline = handleCounts()
})
afterAll(async () => {
  expect(await leakedSince(baseline)).toEqual({})
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
