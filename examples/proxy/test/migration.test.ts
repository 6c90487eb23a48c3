import { describe, expect, it } from 'vitest'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { Conversation, startCluster, startProxy, useProxy } from './helpers.js'

describe('a killed D worker', () => {
  const env = useProxy({ prefill: 1, decode: 2 })

  it("moves the dead D's sessions to the surviving D (reseeded through P), then serves them on the fast path there", async () => {
    const convs = Array.from(
      { length: 8 },
      (_, i) => new Conversation(`s${i}`, `Agent ${i} works on repo ${i}.`),
    )
    const home = new Map<string, string>()
    for (let t = 0; t < 2; t++) {
      for (const r of await Promise.all(convs.map((c) => c.turn(env.proxy.url, `step ${t}`)))) {
        expect(r.status).toBe(200)
        home.set(r.headers.get('x-kvc-session')!, r.headers.get('x-kvc-worker')!)
      }
    }
    const onD1 = convs.filter((c) => home.get(c.id) === 'd1')
    const onD0 = convs.filter((c) => home.get(c.id) === 'd0')
    expect(onD1.length).toBeGreaterThan(0)
    expect(onD0.length).toBeGreaterThan(0)

    await env.cluster.decode[1]!.close() // d1 dies between turns: no answer, connections refused
    const after = await Promise.all(convs.map((c) => c.turn(env.proxy.url, 'step after the crash')))
    for (const [i, r] of after.entries()) {
      expect(r.status, JSON.stringify(r.json)).toBe(200)
      expect(r.headers.get('x-kvc-worker')).toBe('d0')
      if (onD1.includes(convs[i]!)) {
        // Migrated: reseeded through P onto d0, and the response says where it came from.
        expect(r.headers.get('x-kvc-migrated-from')).toBe('d1')
        expect(r.headers.get('x-kvc-path')).toBe('seed')
      } else {
        expect(r.headers.get('x-kvc-path')).toBe('fast')
        expect(r.headers.get('x-kvc-migrated-from')).toBeNull()
      }
    }
    // The next turn of a migrated session is a fast turn on its new D.
    const next = await Promise.all(onD1.map((c) => c.turn(env.proxy.url, 'and again')))
    for (const r of next) {
      expect(r.headers.get('x-kvc-path')).toBe('fast')
      expect(r.headers.get('x-kvc-worker')).toBe('d0')
    }
    // Every turn completed; the decision log names the migration.
    expect(env.decisions.every((d) => d.status === 'completed')).toBe(true)
    expect(env.decisions.filter((d) => d.migratedFrom === 'd1')).toHaveLength(onD1.length)
    const metrics = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(metrics).toContain(`kvc_proxy_migrations_total ${onD1.length}`)
  })

  it('marks the dead D unhealthy, stays ready on the other one', async () => {
    await expect.poll(() => env.proxy.gateway.workers.isHealthy('d1'), { timeout: 3_000 }).toBe(false)
    expect(env.proxy.gateway.router.cluster.healthy('d1')).toBe(false)
    const ready = (await (await fetch(`${env.proxy.url}/ready`)).json()) as {
      ready: boolean
      workers: { id: string; healthy: boolean }[]
    }
    expect(ready.ready).toBe(true)
    expect(ready.workers.find((w) => w.id === 'd1')?.healthy).toBe(false)
    const metrics = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(metrics).toContain('kvc_proxy_worker_healthy{worker="d1",role="decode"} 0')
    // New sessions go to d0 only, without trying d1.
    const fresh = new Conversation('newcomer', 'A new agent.')
    const r = await fresh.turn(env.proxy.url, 'hello')
    expect(r.headers.get('x-kvc-worker')).toBe('d0')
    expect(env.decisions.at(-1)!.steps.some((s) => (s as { worker?: string }).worker === 'd1')).toBe(false)
  })
})

describe('a D worker dying mid-stream', () => {
  it('ends the stream with an error event and counts the turn as failed (stream_interrupted); other sessions go on', async () => {
    const baseline = handleCounts()
    // Slow decode (≈1.5 ms per token) so the stream is still running when the worker dies.
    const cluster = await startCluster({ prefill: 1, decode: 2, decodeOptions: { timing: { scale: 0.1 } } })
    const { proxy, decisions } = await startProxy(cluster)
    try {
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': 'doomed' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'write a lot' }],
          max_tokens: 2_000,
          stream: true,
        }),
      })
      expect(res.status).toBe(200)
      const victim = res.headers.get('x-kvc-worker')!
      const reader = res.body!.getReader()
      const first = await reader.read()
      expect(first.done).toBe(false)
      await cluster.decode[victim === 'd0' ? 0 : 1]!.close()
      let text = new TextDecoder().decode(first.value)
      for (;;) {
        const r = await reader.read()
        if (r.done) break
        text += new TextDecoder().decode(r.value)
      }
      expect(text).toMatch(/"code":"turn_failed"/)
      expect(text.trim().endsWith('data: [DONE]')).toBe(true)
      const line = decisions.find((d) => d.sessionId === 'doomed')!
      expect(line).toMatchObject({ status: 'failed', cause: 'stream_interrupted', worker: victim })
      // Another session is served by the surviving D.
      const other = await new Conversation('survivor', 'Still here.').turn(proxy.url, 'hi')
      expect(other.status).toBe(200)
      expect(other.headers.get('x-kvc-worker')).not.toBe(victim)
      const m = await (await fetch(`${proxy.url}/metrics`)).text()
      expect(m).toMatch(/kvc_proxy_turns_total\{outcome="failed",path="none",cause="stream_interrupted"\} 1/)
    } finally {
      await proxy.close()
      await cluster.close()
    }
    expect(await leakedSince(baseline)).toEqual({})
  })
})
