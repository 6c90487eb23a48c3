import { DEFAULT_TOPOLOGY_PARAMS, Router } from '@kvc/kvc-router'
import { describe, expect, it } from 'vitest'
import { TopologySampler } from '../src/topology/topologyAdvice.js'
import { useProxy } from './helpers.js'

/** A router over 2 P and 2 D workers of 100K tokens; no timers, the test samples. */
function setup(windowSamples = 4) {
  const router = new Router({
    now: () => 120_000,
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 100_000 },
      { id: 'p1', role: 'prefill', capacityTokens: 100_000 },
      { id: 'd0', role: 'decode', capacityTokens: 100_000 },
      { id: 'd1', role: 'decode', capacityTokens: 100_000 },
    ],
  })
  const sampler = new TopologySampler({
    router: () => router,
    now: () => 120_000,
    windowSamples,
    params: DEFAULT_TOPOLOGY_PARAMS,
  })
  return { router, sampler }
}

describe('TopologySampler (the proxy’s topology advice)', () => {
  it('idle P workers and full D workers: it advises switching a P to D', () => {
    const { router, sampler } = setup()
    for (const d of ['d0', 'd1']) router.cluster.reportCapacity(d, { freeTokens: 4_000, evictableTokens: 0 })
    for (let i = 0; i < 4; i++) sampler.sample()
    const a = sampler.advice()!
    expect(a.samples).toBe(4)
    expect(a.decodePressure).toBeCloseTo(0.96)
    expect(a.prefillUtilization).toBe(0)
    expect(a.switches).toEqual([{ workerId: expect.stringMatching(/^p/), from: 'prefill', to: 'decode' }])
    expect(a).toMatchObject({ prefill: 1, decode: 3 })
    expect(a.workers.map((w) => w.id).sort()).toEqual(['d0', 'd1', 'p0', 'p1'])
  })

  it('busy P workers with a long queue and roomy D workers: it advises switching a D to P', () => {
    const { router, sampler } = setup()
    // 150K prefill tokens in flight on each P: 5 s of queue at 30K tokens/s.
    for (const p of ['p0', 'p1']) router.cluster.store.addLoad(p, { prefillTokens: 150_000 })
    for (let i = 0; i < 4; i++) sampler.sample()
    const a = sampler.advice()!
    expect(a.prefillUtilization).toBe(1)
    expect(a.prefillQueueS).toBeGreaterThan(DEFAULT_TOPOLOGY_PARAMS.prefillQueueHighS)
    expect(a.switches).toEqual([{ workerId: expect.stringMatching(/^d/), from: 'decode', to: 'prefill' }])
  })

  it('utilisation is the busy share of the last window of samples only', () => {
    const { router, sampler } = setup(4)
    router.cluster.store.addLoad('p0', { prefillTokens: 1_000 })
    sampler.sample()
    sampler.sample()
    router.cluster.store.addLoad('p0', { prefillTokens: -1_000 })
    sampler.sample()
    sampler.sample()
    const busy = () => sampler.signals().find((w) => w.id === 'p0')!.prefillBusy
    expect(busy()).toBe(0.5)
    sampler.sample()
    sampler.sample()
    expect(busy()).toBe(0) // the two busy samples left the window
    expect(sampler.samples).toBe(4)
  })

  it('gives no advice without both roles', () => {
    const router = new Router({
      now: () => 0,
      workers: [{ id: 'd0', role: 'decode', capacityTokens: 1_000 }],
    })
    const sampler = new TopologySampler({ router: () => router, now: () => 0, windowSamples: 2 })
    sampler.sample()
    expect(sampler.advice()).toBeUndefined()
    expect(
      new TopologySampler({ router: () => undefined, now: () => 0, windowSamples: 2 }).advice(),
    ).toBeUndefined()
  })
})

describe('GET /topology/advice and the kvc_proxy_topology_* metrics', () => {
  // No sampling timer: the test samples through the gateway's sampler.
  const env = useProxy({ prefill: 1, decode: 2 }, { topology: { sampleIntervalMs: 0, windowSamples: 3 } })

  it('answers the advice with its signals, and the metrics carry it', async () => {
    const sampler = env.proxy.gateway.topology
    sampler.sample()
    const res = await fetch(`${env.proxy.url}/topology/advice`)
    expect(res.status).toBe(200)
    const body = (await res.json()) as Record<string, unknown>
    expect(body).toMatchObject({ samples: 1, switches: expect.any(Array), reason: expect.any(String) })
    expect((body.prefill as number) + (body.decode as number)).toBe(3)
    expect((body.workers as { id: string }[]).map((w) => w.id).sort()).toEqual(['d0', 'd1', 'p0'])
    const metrics = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(metrics).toContain(`kvc_proxy_topology_advised_workers{role="prefill"} ${body.prefill}`)
    expect(metrics).toContain(`kvc_proxy_topology_advised_workers{role="decode"} ${body.decode}`)
    expect(metrics).toMatch(/kvc_proxy_topology_decode_kv_pressure \d/)
    expect((await fetch(`${env.proxy.url}/topology/advice`, { method: 'POST' })).status).toBe(405)
  })
})
