import { type Server, createServer, request } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  BodyTooLargeError,
  WorkerBindingsError,
  mediaType,
  readBody,
  sendJson,
  sendText,
} from '../src/index.js'
import { handleCounts, leakedSince } from '../src/testing/index.js'

let baseline: Record<string, number>
let server: Server
let url: string
const seen: unknown[] = []

beforeAll(async () => {
  baseline = handleCounts()
  server = createServer(async (req, res) => {
    try {
      const body = await readBody(req, 16)
      if (mediaType(req) === 'text/plain') sendText(res, 200, body.toUpperCase())
      else sendJson(res, 200, { got: body })
    } catch (err) {
      seen.push(err)
      sendJson(res, 413, { error: { message: (err as Error).message } })
    }
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise((r) => server.close(r))
  expect(await leakedSince(baseline)).toEqual({})
})

function post(body: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (text += c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
    })
    req.on('error', reject)
    // Written in pieces: no content-length, so the limit is enforced while reading.
    for (let i = 0; i < body.length; i += 5) req.write(body.slice(i, i + 5))
    req.end()
  })
}

describe('server helpers (readBody, sendJson, sendText, mediaType)', () => {
  it('reads a body within the limit and answers JSON or text', async () => {
    expect(await post('héllo', { 'content-type': 'application/json' })).toEqual({
      status: 200,
      text: '{"got":"héllo"}',
    })
    expect(await post('abc', { 'content-type': 'Text/Plain; charset=utf-8' })).toEqual({
      status: 200,
      text: 'ABC',
    })
  })

  it('refuses a body above the limit, declared or streamed, with BODY_TOO_LARGE; the answer still goes out', async () => {
    seen.length = 0
    expect((await post('x'.repeat(40), {})).status).toBe(413)
    expect((await post('x'.repeat(40), { 'content-length': '40' })).status).toBe(413)
    expect(seen).toHaveLength(2)
    for (const err of seen) {
      expect(err).toBeInstanceOf(BodyTooLargeError)
      expect(err).toBeInstanceOf(WorkerBindingsError)
      expect(err).toMatchObject({ code: 'BODY_TOO_LARGE', value: 16, limit: 16 })
    }
  })
})
