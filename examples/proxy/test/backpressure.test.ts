import { describe, expect, it } from 'vitest'
import { Conversation, startProxy, useProxy } from './helpers.js'

describe('a full D worker', () => {
  // One small D (2,048 tokens) for 16 concurrent sessions of ~450-token prompts: it cannot take
  // them all at once. Decoding is slow enough (≈0.3 ms per token) that turns overlap.
  const env = useProxy({
    prefill: 1,
    decode: 1,
    decodeCapacityTokens: 2_048,
    decodeOptions: { timing: { scale: 0.02 } },
  })

  it('makes turns wait (rejections with pause hints) instead of failing them; every turn completes', async () => {
    const convs = Array.from(
      { length: 16 },
      (_, i) =>
        new Conversation(`busy-${i}`, `Agent ${i}: ${'fix the failing build and report. '.repeat(12)}`),
    )
    const statuses: number[] = []
    await Promise.all(
      convs.map(async (c) => {
        for (let t = 0; t < 3; t++) {
          const r = await c.turn(env.proxy.url, `turn ${t}`, { max_tokens: 32 })
          statuses.push(r.status)
        }
      }),
    )
    expect(statuses).toHaveLength(48)
    expect(statuses.every((s) => s === 200)).toBe(true)
    expect(env.decisions.filter((d) => d.status === 'completed')).toHaveLength(48)

    // Backpressure happened: the D rejected admissions (capacity) with pause hints, turns waited.
    const admits = env.decisions
      .flatMap((d) => d.steps as { kind: string; detail: string }[])
      .filter((s) => s.kind === 'admit')
    expect(admits.some((s) => /^rejected: (capacity|slo_budget)/.test(s.detail))).toBe(true)
    expect(admits.some((s) => /pause \d+ ms/.test(s.detail))).toBe(true)
    const waited = env.decisions.filter((d) => (d.steps as { kind: string }[]).some((s) => s.kind === 'wait'))
    expect(waited.length).toBeGreaterThan(0)
    const metrics = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(metrics).toMatch(
      /kvc_proxy_admissions_total\{worker="d0",result="rejected_(capacity|slo_budget)"\} [1-9]/,
    )
    expect(metrics).toMatch(/kvc_proxy_waits_total\{reason="(all_paused|all_rejecting)"\} [1-9]/)
    expect(metrics).not.toMatch(/outcome="failed"/)
    // The D never ran out of KV: its pool stayed consistent.
    expect(env.cluster.decode[0]!.stats().balanced).toBe(true)
  })

  it('a turn that cannot be admitted within its SLO wait budget fails with 503, a cause and retry-after', async () => {
    // The D admits nothing (draining): the turn waits its budget (shrunk here) and fails, named.
    const short = await startProxy(env.cluster, {
      router: { slo: { interactive: { maxWaitMs: 300, seedShare: 1 } } },
    })
    try {
      env.cluster.decode[0]!.setDraining(true)
      const r = await new Conversation('late', 'Too late.').turn(short.proxy.url, 'anyone?')
      expect(r.status).toBe(503)
      expect(r.headers.get('retry-after')).toBe('1')
      const err = r.json.error as { code: string; kvc: { cause: string } }
      expect(err.code).toBe('turn_failed')
      expect(err.kvc.cause).toBe('all_rejecting')
      expect(short.decisions.at(-1)).toMatchObject({ status: 'failed', cause: 'all_rejecting' })
    } finally {
      env.cluster.decode[0]!.setDraining(false)
      await short.proxy.close()
    }
  })
})
