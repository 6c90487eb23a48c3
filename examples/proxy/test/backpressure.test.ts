import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { describe, expect, it } from 'vitest'
import { resolveConfig } from '../src/config.js'
import type { DecisionLine } from '../src/decisionLog.js'
import { createProxy } from '../src/server.js'
import { Conversation, startCluster, startProxy, testProxyConfig, useProxy } from './helpers.js'

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

describe('pending-seed slots', () => {
  it('a seed that ends wakes the turn first in line for its slot instead of leaving it to its backoff', async () => {
    const baseline = handleCounts()
    const cluster = await startCluster({ prefill: 1, decode: 1, scale: 0.02 })
    const decisions: DecisionLine[] = []
    // One seed at a time on d0, and every backoff ≈ 20 s (jitter pinned near its top): a turn
    // turned away by the budget would wait 20 s unless the ending seed wakes it.
    const proxy = await createProxy(
      resolveConfig({
        ...testProxyConfig(cluster),
        router: { pendingSeedsPerD: 1, backoffBaseMs: 20_000, backoffCapMs: 20_000, admissionTimeoutMs: 500 },
      }),
      { random: () => 0.999, onDecision: (l) => decisions.push(l) },
    )
    try {
      const results = await Promise.all(
        ['a', 'b', 'c'].map((id) =>
          new Conversation(`slot-${id}`, `Agent ${id}: ${'read the repository layout. '.repeat(2_000)}`).turn(
            proxy.url,
            'start',
          ),
        ),
      )
      expect(results.map((r) => r.status)).toEqual([200, 200, 200])
      // Turns waited in line for d0’s slot (first turns over τ_append seed through p0)...
      const waited = decisions.filter((d) => (d.steps as { kind: string }[]).some((x) => x.kind === 'wait'))
      expect(waited.length).toBeGreaterThanOrEqual(1)
      // ...and were woken when the seed before them ended, not by their 20 s backoff: the
      // test's own time limit (15 s) is below the backoff.
    } finally {
      await proxy.close()
      await cluster.close()
    }
    expect(await leakedSince(baseline)).toEqual({})
  }, 15_000)
})
