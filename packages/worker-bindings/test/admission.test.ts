import { type Server, createServer, request } from 'node:http'
import { ADMIT_HTTP_PATH, type AdmitRequest } from '@kvc/kvc-router'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AdmissionClient,
  type SglangEmulator,
  SglangClient,
  createAdmissionHandler,
  createSglangEmulator,
} from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

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

describe('createAdmissionHandler (sidecar): schema validation at the boundary', () => {
  let server: Server
  let url: string
  beforeAll(async () => {
    const handler = createAdmissionHandler({
      maxBodyBytes: 512,
      admit: (r) => {
        if (r.sessionId === 'explode') throw new Error('boom')
        if (r.sessionId === 'garbage') return { requestId: r.requestId } as never
        return {
          requestId: r.requestId,
          admitted: true,
          reason: 'ok',
          residentTokens: 0,
          needTokens: r.appendTokens,
          tokenUsageAfter: 0.1,
          transferQueueDepth: 0,
          retractedQueueDepth: 0,
          recommendedPauseMs: 0,
          leaseMs: 5000,
        }
      },
    })
    server = createServer(async (req, res) => {
      if (!(await handler(req, res))) res.writeHead(404).end()
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise((r) => server.close(r))
  })

  const post = (body: string, path = ADMIT_HTTP_PATH, method = 'POST', type = 'application/json') =>
    new Promise<{
      status: number
      json: { error?: { code: string; message: string; details?: unknown[] } } & Record<string, unknown>
    }>((resolve, reject) => {
      const req = request(
        `${url}${path}`,
        { method, headers: { 'content-type': type, connection: 'close' } },
        (res) => {
          let t = ''
          res.on('data', (d) => {
            t += d
          })
          res.on('end', () => resolve({ status: res.statusCode ?? 0, json: t ? JSON.parse(t) : {} }))
        },
      )
      req.on('error', reject)
      req.end(body)
    })

  it('answers valid requests and chains other paths', async () => {
    const ok = await post(JSON.stringify(base))
    expect(ok.status).toBe(200)
    expect(ok.json.admitted).toBe(true)
    expect((await post('{}', '/other')).status).toBe(404)
  })

  it('maps every bad input to its status and code', async () => {
    expect(await post('{', ADMIT_HTTP_PATH)).toMatchObject({
      status: 400,
      json: { error: { code: 'INVALID_JSON' } },
    })
    const schema = await post(JSON.stringify({ ...base, path: 'teleport', promptTokens: -1 }))
    expect(schema.status).toBe(400)
    expect(schema.json.error?.code).toBe('INVALID_MESSAGE')
    expect(schema.json.error?.details?.length).toBeGreaterThanOrEqual(2)
    const cross = await post(JSON.stringify({ ...base, appendTokens: 101 }))
    expect(cross).toMatchObject({ status: 400, json: { error: { code: 'INVALID_MESSAGE' } } })
    expect((await post(JSON.stringify(base), ADMIT_HTTP_PATH, 'PUT')).status).toBe(405)
    expect((await post(JSON.stringify(base), ADMIT_HTTP_PATH, 'POST', 'text/plain')).status).toBe(415)
    expect((await post(JSON.stringify({ ...base, sessionId: 'x'.repeat(1000) }))).status).toBe(413)
    expect(await post(JSON.stringify({ ...base, sessionId: 'explode' }))).toMatchObject({
      status: 500,
      json: { error: { code: 'ADMIT_FAILED' } },
    })
    expect(await post(JSON.stringify({ ...base, sessionId: 'garbage' }))).toMatchObject({
      status: 500,
      json: { error: { code: 'INVALID_RESPONSE' } },
    })
  })
})
