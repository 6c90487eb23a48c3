import { describe, expect, it } from 'vitest'
import { EndpointHealthTracker, HttpTransport, WorkerBindingsError, stringifyJson } from '../src/index.js'

const deep = (n: number): unknown => {
  let v: unknown = 0
  for (let i = 0; i < n; i++) v = [v]
  return v
}

describe('stringifyJson refuses what cannot be JSON with a typed, non-retryable error', () => {
  it('too deep, circular, or not a JSON value → WorkerBindingsError INVALID_ARGUMENT naming why', () => {
    const cases: [unknown, RegExp][] = [
      [{ extra: deep(200_000) }, /nests arrays or objects too deeply/],
      [
        (() => {
          const o: Record<string, unknown> = {}
          o.self = o
          return o
        })(),
        /circular/i,
      ],
      [undefined, /a undefined is not a JSON value/],
      [() => 1, /a function is not a JSON value/],
    ]
    for (const [value, msg] of cases) {
      let err: unknown
      try {
        stringifyJson(value)
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(WorkerBindingsError)
      expect((err as WorkerBindingsError).code).toBe('INVALID_ARGUMENT')
      expect((err as Error).message).toMatch(msg)
    }
    expect(stringifyJson({ a: deep(50), r: 2n ** 63n })).toContain('9223372036854775808')
  })

  it('a transport call with such a body sends nothing and charges nothing to the endpoint’s health', async () => {
    let sent = 0
    const health = new EndpointHealthTracker({ failureThreshold: 1 })
    const http = new HttpTransport({
      baseURL: 'http://127.0.0.1:1',
      healthTracker: health,
      fetch: async () => {
        sent++
        return new Response('{}')
      },
    })
    await expect(
      http.json({ method: 'POST', path: '/generate', body: { extra: deep(200_000) }, idempotent: true }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })
    expect(sent).toBe(0)
    expect(health.state(http.baseURL)).toMatchObject({ healthy: true, consecutiveFailures: 0 })
  })
})
