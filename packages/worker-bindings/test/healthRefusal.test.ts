import { type Server, createServer } from 'node:http'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import {
  AdmissionClient,
  ConductorClient,
  DEFAULT_HEALTH_COOLDOWN_MS,
  EndpointHealthTracker,
  type EndpointHealthTrackerOptions,
  MooncakeMasterClient,
  MooncakeMetadataClient,
  PrefillBootstrapClient,
  SglangClient,
  WorkerApiError,
  WorkerBindingsError,
  WorkerBindingsErrorCode,
} from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

/**
 * A local server that counts the requests it receives and answers `status` (a JSON body). While
 * `hold` is set, answers wait for it to resolve (to keep a trial call in flight).
 */
let baseline: Record<string, number>
let server: Server
let url: string
let requests = 0
let status = 200
let hold: Promise<void> | undefined
let clock = 0
const now = (): number => clock

beforeAll(async () => {
  baseline = handleCounts()
  server = createServer((req, res) => {
    requests++
    req.resume()
    req.on('end', () => {
      const answer = (): void => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(status < 300 ? '{"ok":true}' : '{"error":{"message":"down"}}')
      }
      if (hold === undefined) answer()
      else void hold.then(answer)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise((r) => server.close(r))
  expect(await leakedSince(baseline)).toEqual({})
})

beforeEach(() => {
  requests = 0
  status = 200
  hold = undefined
  clock = 1_000
})

/** A tracker on the fake clock, and a client of the counting server that never retries. */
function setup(options: EndpointHealthTrackerOptions = {}): {
  health: EndpointHealthTracker
  client: SglangClient
} {
  const health = new EndpointHealthTracker({ failureThreshold: 2, now, ...options })
  const client = new SglangClient({ baseURL: url, maxRetries: 0, healthTracker: health })
  return { health, client }
}

/** Makes the endpoint unhealthy through two 503 answers, at clock 1,000. */
async function breakIt(client: SglangClient, health: EndpointHealthTracker): Promise<void> {
  status = 503
  for (let i = 0; i < 2; i++) await expect(client.getLoad()).rejects.toBeInstanceOf(WorkerApiError)
  expect(health.isHealthy(url)).toBe(false)
  expect(requests).toBe(2)
}

async function errorOf(p: Promise<unknown>): Promise<WorkerBindingsError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(WorkerBindingsError)
  return err as WorkerBindingsError
}

describe('a health tracker refuses calls to an unhealthy endpoint', () => {
  it('fails fast with ENDPOINT_UNHEALTHY, sends nothing and changes no health state', async () => {
    const { health, client } = setup()
    await breakIt(client, health)
    clock = 1_250
    const before = health.state(url)
    const err = await errorOf(client.getLoad())
    expect(requests).toBe(2)
    expect(err.code).toBe(WorkerBindingsErrorCode.EndpointUnhealthy)
    expect(err.code).toBe('ENDPOINT_UNHEALTHY')
    expect(err).not.toBeInstanceOf(WorkerApiError)
    expect(err.endpoint).toBe(url)
    expect(err.value).toEqual(before)
    expect(err.message).toBe(
      `${url} is unhealthy since 1000 ms on the tracker's clock (250 ms ago), after 2 consecutive failures` +
        ' (last: GET /get_load → HTTP 503: down); the call was not sent:' +
        ' one trial call may go in 4750 ms (cool-down 5000 ms after the last failure)',
    )
    expect(health.state(url)).toEqual(before)
  })

  it('every client given the tracker refuses, streams included', async () => {
    const { health, client } = setup()
    await breakIt(client, health)
    const common = { baseURL: url, maxRetries: 0, healthTracker: health }
    const calls: (() => Promise<unknown>)[] = [
      () => client.generate({ text: 'x' }),
      () => client.generateStream({ text: 'x' }),
      () => client.chatCompletionsStream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      () =>
        new AdmissionClient(common).admit({
          requestId: 'r',
          sessionId: 's',
          path: 'fast',
          promptTokens: 10,
          appendTokens: 2,
        }),
      () => new MooncakeMasterClient(common).health(),
      () => new MooncakeMetadataClient(common).get('k'),
      () => new ConductorClient(common).query({ model: 'm', token_ids: [1, 2, 3], block_size: 64 }),
      () => new PrefillBootstrapClient(common).parallelInfo(),
    ]
    for (const call of calls) expect((await errorOf(call())).code).toBe('ENDPOINT_UNHEALTHY')
    expect(requests).toBe(2)
  })

  it('half-open: after the cool-down exactly one trial call goes through, and its success heals', async () => {
    const changes: boolean[] = []
    const { health, client } = setup({ onChange: (h) => changes.push(h.healthy) })
    await breakIt(client, health)
    clock = 1_000 + DEFAULT_HEALTH_COOLDOWN_MS - 1
    expect((await errorOf(client.getLoad())).code).toBe('ENDPOINT_UNHEALTHY')
    clock++
    status = 200
    let release!: () => void
    hold = new Promise((r) => {
      release = r
    })
    const trial = client.getLoad()
    // While the trial is in flight, every other call is refused.
    const second = await errorOf(client.getLoad())
    expect(second.code).toBe('ENDPOINT_UNHEALTHY')
    expect(second.message).toMatch(/a trial call is in flight$/)
    for (let i = 0; i < 100 && requests < 3; i++) await new Promise((r) => setTimeout(r, 1))
    expect(requests).toBe(3)
    release()
    await expect(trial).resolves.toEqual([{ ok: true }])
    expect(health.state(url)).toMatchObject({
      healthy: true,
      consecutiveFailures: 0,
      unhealthySince: undefined,
    })
    expect(changes).toEqual([false, true])
    hold = undefined
    await client.getLoad()
    await client.getLoad()
    expect(requests).toBe(5)
  })

  it('half-open: a failed trial starts the cool-down again', async () => {
    const { health, client } = setup({ cooldownMs: 100 })
    await breakIt(client, health)
    clock = 1_100
    const trial = await errorOf(client.getLoad())
    expect(trial).toBeInstanceOf(WorkerApiError)
    expect(requests).toBe(3)
    expect(health.state(url)).toMatchObject({ healthy: false, consecutiveFailures: 3, lastFailureAt: 1_100 })
    clock = 1_199
    const refused = await errorOf(client.getLoad())
    expect(refused.code).toBe('ENDPOINT_UNHEALTHY')
    expect(refused.message).toContain('after 3 consecutive failures')
    expect(refused.message).toContain('one trial call may go in 1 ms')
    expect(requests).toBe(3)
    clock = 1_200
    status = 200
    await client.getLoad()
    expect(requests).toBe(4)
    expect(health.isHealthy(url)).toBe(true)
  })

  it('a trial that ends without an outcome (the caller aborted it) gives its slot back', async () => {
    const { health, client } = setup({ cooldownMs: 100 })
    await breakIt(client, health)
    clock = 1_100
    hold = new Promise(() => {}) // the server never answers
    const ac = new AbortController()
    const trial = client.getLoad({ signal: ac.signal })
    for (let i = 0; i < 100 && requests < 3; i++) await new Promise((r) => setTimeout(r, 1))
    ac.abort()
    expect((await errorOf(trial)).code).toBe('ABORTED')
    expect(health.state(url).consecutiveFailures).toBe(2) // an abort is no verdict
    hold = undefined
    status = 200
    await client.getLoad() // the next trial
    expect(requests).toBe(4)
    expect(health.isHealthy(url)).toBe(true)
    server.closeAllConnections() // the aborted request's socket
  })

  it('retries stop once the endpoint turns unhealthy; the call fails with its last error', async () => {
    const health = new EndpointHealthTracker({ failureThreshold: 2, now })
    const client = new SglangClient({
      baseURL: url,
      maxRetries: 5,
      retry: { baseDelayMs: 1, maxDelayMs: 1 },
      healthTracker: health,
    })
    status = 503
    const err = await errorOf(client.getLoad())
    expect(err).toBeInstanceOf(WorkerApiError)
    expect((err as WorkerApiError).status).toBe(503)
    expect(requests).toBe(2)
  })

  it('a retry is not waited for once the endpoint turned unhealthy, nor sent if it turned so during the wait', async () => {
    status = 503
    // The failure that makes it unhealthy is the call's own: it ends without the 60 s backoff.
    const h1 = new EndpointHealthTracker({ failureThreshold: 1, now })
    const slow = new SglangClient({
      baseURL: url,
      maxRetries: 1,
      retry: { baseDelayMs: 60_000, maxDelayMs: 60_000, jitter: 'none' },
      healthTracker: h1,
    })
    const t0 = performance.now()
    expect(((await errorOf(slow.getLoad())) as WorkerApiError).status).toBe(503)
    expect(performance.now() - t0).toBeLessThan(5_000)
    expect(requests).toBe(1)
    // Another client's failure during the backoff makes it unhealthy: the retry is not sent.
    const h2 = new EndpointHealthTracker({ failureThreshold: 2, now })
    const c = new SglangClient({
      baseURL: url,
      maxRetries: 1,
      retry: { baseDelayMs: 100, maxDelayMs: 100, jitter: 'none' },
      healthTracker: h2,
    })
    const p = errorOf(c.getLoad())
    for (let i = 0; i < 100 && requests < 2; i++) await new Promise((r) => setTimeout(r, 1))
    await new Promise((r) => setTimeout(r, 5))
    h2.recordFailure(url, new Error('another client'))
    expect(h2.isHealthy(url)).toBe(false)
    expect(((await p) as WorkerApiError).status).toBe(503)
    expect(requests).toBe(2)
  })

  it('probes are never refused: watch() heals the endpoint, probe() runs a probe loop of your own', async () => {
    const { health, client } = setup({ cooldownMs: Number.POSITIVE_INFINITY })
    await breakIt(client, health)
    clock = 1e12
    expect((await errorOf(client.getLoad())).message).toContain('no trial call is allowed')
    // probe(): sent while unhealthy; its failure is recorded as usual.
    await expect(health.probe(url, () => client.health())).rejects.toBeInstanceOf(WorkerApiError)
    expect(requests).toBe(3)
    expect(health.state(url).consecutiveFailures).toBe(3)
    // Only calls to that endpoint made inside the probe pass; calls outside it are still refused.
    await expect(health.probe('http://127.0.0.1:1', () => client.health())).rejects.toMatchObject({
      code: 'ENDPOINT_UNHEALTHY',
    })
    expect(requests).toBe(3)
    status = 200
    health.watch(url, () => client.health(), 2)
    for (let i = 0; i < 200 && !health.isHealthy(url); i++) await new Promise((r) => setTimeout(r, 2))
    health.close()
    expect(health.isHealthy(url)).toBe(true)
    expect(requests).toBe(4)
    await client.getLoad()
    expect(requests).toBe(5)
  })

  it('refuseWhenUnhealthy: false keeps the old behaviour: every call and retry is sent', async () => {
    const changes: boolean[] = []
    const health = new EndpointHealthTracker({
      failureThreshold: 2,
      now,
      refuseWhenUnhealthy: false,
      onChange: (h) => changes.push(h.healthy),
    })
    expect(health.refuseWhenUnhealthy).toBe(false)
    const client = new SglangClient({
      baseURL: url,
      maxRetries: 3,
      retry: { baseDelayMs: 1, maxDelayMs: 1 },
      healthTracker: health,
    })
    status = 503
    expect(((await errorOf(client.getLoad())) as WorkerApiError).status).toBe(503)
    expect(requests).toBe(4) // the retries went on past the threshold
    expect(health.state(url)).toMatchObject({ healthy: false, consecutiveFailures: 4 })
    expect(health.permitCall(url).trial).toBe(false)
    status = 200
    await client.getLoad()
    expect(requests).toBe(5)
    expect(changes).toEqual([false, true])
    // And without a tracker nothing is refused either.
    status = 503
    const bare = new SglangClient({ baseURL: url, maxRetries: 0 })
    for (let i = 0; i < 4; i++) await expect(bare.getLoad()).rejects.toBeInstanceOf(WorkerApiError)
    expect(requests).toBe(9)
  })

  it('refuses bad options with INVALID_OPTION naming the value', () => {
    const bad: [EndpointHealthTrackerOptions, unknown, string][] = [
      [{ cooldownMs: -1 }, -1, 'cooldownMs must be a number >= 0 (or Infinity), got -1'],
      [{ cooldownMs: Number.NaN }, Number.NaN, 'cooldownMs must be a number >= 0 (or Infinity), got NaN'],
      [{ cooldownMs: '5000' as never }, '5000', 'cooldownMs must be a number >= 0 (or Infinity), got "5000"'],
      [{ refuseWhenUnhealthy: 'no' as never }, 'no', 'refuseWhenUnhealthy must be a boolean, got "no"'],
      [{ refuseWhenUnhealthy: 0 as never }, 0, 'refuseWhenUnhealthy must be a boolean, got 0'],
    ]
    let changes = 0
    for (const [options, value, message] of bad) {
      let err: unknown
      try {
        new EndpointHealthTracker({ ...options, onChange: () => changes++ })
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(WorkerBindingsError)
      expect(err).toMatchObject({ code: 'INVALID_OPTION', message })
      expect(Object.is((err as WorkerBindingsError).value, value)).toBe(true)
    }
    expect(changes).toBe(0)
    // The defaults, and the bounds that are accepted.
    const d = new EndpointHealthTracker()
    expect([d.refuseWhenUnhealthy, d.cooldownMs]).toEqual([true, DEFAULT_HEALTH_COOLDOWN_MS])
    expect(new EndpointHealthTracker({ cooldownMs: 0 }).cooldownMs).toBe(0)
    expect(new EndpointHealthTracker({ cooldownMs: Number.POSITIVE_INFINITY }).cooldownMs).toBe(
      Number.POSITIVE_INFINITY,
    )
  })
})
