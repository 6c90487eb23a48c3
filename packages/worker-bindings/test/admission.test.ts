import { type Server, createServer, request } from 'node:http'
import { ADMIT_HTTP_PATH, type AdmitRequest } from '@kvc/kvc-router'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createAdmissionHandler } from '../src/index.js'
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
