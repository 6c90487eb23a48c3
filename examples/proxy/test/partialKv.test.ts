import { describe, expect, it } from 'vitest'
import { Conversation, useProxy } from './helpers.js'

describe('a KV transfer cut short through the proxy', () => {
  const env = useProxy({ prefill: 1, decode: 2 })

  it('the D refuses the partial KV, the proxy counts a transfer error and reseeds: the turn completes', async () => {
    env.cluster.prefill[0]!.faults.partialTransfers(1, 0.25)
    // A long first turn: seeded through the P.
    const c = new Conversation('partial-kv', `You are an agent. ${'Read the repository first. '.repeat(600)}`)
    const r = await c.turn(env.proxy.url, 'start')
    expect(r.status, JSON.stringify(r.json)).toBe(200)
    const line = env.decisions.find((d) => d.sessionId === 'partial-kv')!
    const steps = line.steps as { kind: string; detail: string }[]
    expect(steps.some((s) => s.kind === 'seedViaP' && /failed: transfer_error/.test(s.detail))).toBe(true)
    const m = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(m).toMatch(/kvc_proxy_sends_total\{worker="d\d",path="seed",result="transfer_error"\} 1/)
    for (const d of env.cluster.decode) expect(d.stats().balanced).toBe(true)
    // The session is served from its D afterwards.
    expect((await c.turn(env.proxy.url, 'next')).headers.get('x-kvc-path')).toBe('fast')
  })
})
