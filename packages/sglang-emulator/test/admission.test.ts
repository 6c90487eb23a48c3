import { createServer } from 'node:http'
import type { AdmitRequest } from '@kvc/kvc-router'
import { AdmissionClient, SglangClient } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type SglangEmulator, createSglangEmulator } from '../src/index.js'

let baseline: Record<string, number>
beforeAll(() => {
  baseline = handleCounts()
})
afterAll(async () => {
  expect(await leakedSince(baseline)).toEqual({})
})

const base: AdmitRequest = {
  requestId: 'r1',
  sessionId: 's1',
  path: 'fast',
  promptTokens: 100,
  appendTokens: 100,
}
describe('admission RPC against the emulator (answered by kvc-router admit over real state)', () => {
  let emu: SglangEmulator
  beforeAll(async () => {
    emu = await createSglangEmulator({
      role: 'decode',
      capacityTokens: 1024,
      pageSize: 4,
      timing: { scale: 0 },
    })
  })
  afterAll(async () => {
    await emu.close()
  })

  it('admits what fits with a lease, is idempotent by requestId, rejects what does not', async () => {
    const a = new AdmissionClient({ baseURL: emu.url })
    const ok = await a.admit({ ...base, expectedOutputTokens: 100 })
    expect(ok).toMatchObject({ admitted: true, reason: 'ok', residentTokens: 0, needTokens: 200 })
    expect(ok.leaseMs).toBeGreaterThan(0)
    expect(emu.stats().activeLeases).toBe(1)
    const again = await a.admit({ ...base, expectedOutputTokens: 100 })
    expect(again.admitted).toBe(true)
    expect(emu.stats().activeLeases).toBe(1)
    const big = await a.admit({ ...base, requestId: 'r2', promptTokens: 5000, appendTokens: 5000 })
    expect(big).toMatchObject({ admitted: false, reason: 'capacity' })
    const tooLong = await a.admit({ ...base, requestId: 'r3', promptTokens: 9000, appendTokens: 9000 })
    expect(tooLong.reason).toBe('append_too_large')
    emu.setDraining(true)
    expect((await a.admit({ ...base, requestId: 'r4' })).reason).toBe('draining')
    emu.setDraining(false)
    // The lease is consumed when the generate with rid = requestId arrives.
    await new SglangClient({ baseURL: emu.url }).generate({
      text: 'x'.repeat(20),
      rid: 'r1',
      sampling_params: { max_new_tokens: 2 },
    })
    expect(emu.stats().activeLeases).toBe(0)
  })

  it('resident tokens come from the real session cache', async () => {
    const c = new SglangClient({ baseURL: emu.url })
    await c.generate({ text: 'y'.repeat(40), session_id: 'tagged', sampling_params: { max_new_tokens: 4 } })
    const a = new AdmissionClient({ baseURL: emu.url })
    const res = await a.admit({
      ...base,
      requestId: 'r5',
      sessionId: 'tagged',
      promptTokens: 60,
      appendTokens: 10,
    })
    expect(res.residentTokens).toBe(emu.sessionCache.getSessionStatus('tagged')?.residentTokens)
    expect(res.residentTokens).toBeGreaterThan(0)
    await c.closeSession('tagged')
  })

  it('the client refuses an invalid request before sending and an invalid answer after', async () => {
    const a = new AdmissionClient({ baseURL: emu.url })
    await expect(a.admit({ ...base, appendTokens: 200 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' })
    const liar = createServer((_q, r) =>
      r.writeHead(200, { 'content-type': 'application/json' }).end('{"requestId":"r1","admitted":"yes"}'),
    )
    await new Promise<void>((r) => liar.listen(0, '127.0.0.1', () => r()))
    try {
      const bad = new AdmissionClient({
        baseURL: `http://127.0.0.1:${(liar.address() as { port: number }).port}`,
      })
      await expect(bad.admit(base)).rejects.toMatchObject({ code: 'BAD_RESPONSE' })
    } finally {
      liar.closeAllConnections()
      await new Promise((r) => liar.close(r))
    }
  })
})

describe('admission state: one builder with the simulator (kvc-router admitWorkerState)', () => {
  it('idle sessions that share a prefix are releasable for what each frees alone, not their resident tokens', async () => {
    const emu = await createSglangEmulator({
      role: 'decode',
      capacityTokens: 1024,
      pageSize: 4,
      timing: { scale: 0 },
    })
    try {
      const c = new SglangClient({ baseURL: emu.url })
      const shared = Array.from({ length: 200 }, (_, i) => 3 + (i % 50))
      for (const [sid, t] of [
        ['a', 60],
        ['b', 70],
      ] as const) {
        const tail = Array.from({ length: 40 }, () => t)
        await c.generate({
          input_ids: [...shared, ...tail],
          session_id: sid,
          sampling_params: { max_new_tokens: 4 },
        })
      }
      const sc = emu.sessionCache
      const resident = ['a', 'b'].map((s) => sc.getSessionStatus(s)!.residentTokens)
      const alone = ['a', 'b'].map((s) => sc.releasableTokens({ sessionId: s }))
      expect(alone.every((t, i) => t > 0 && t < resident[i]!)).toBe(true)
      const res = await new AdmissionClient({ baseURL: emu.url }).admit({
        requestId: 'c/t0/a0',
        sessionId: 'c',
        path: 'seed',
        promptTokens: 100,
        appendTokens: 100,
      })
      expect(res.admitted).toBe(true)
      // What the answer reports as releasable on demand: each idle session's own tail, summed.
      expect(res.releasableTokens).toBe(alone[0]! + alone[1]!)
      expect(res.releasableTokens).toBeLessThanOrEqual(sc.releasableTokens())
      expect(res.releasableTokens).toBeLessThan(resident[0]! + resident[1]!)
    } finally {
      await emu.close()
    }
  })
})
