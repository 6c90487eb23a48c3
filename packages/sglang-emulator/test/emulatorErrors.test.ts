import { request } from 'node:http'
import { SglangClient } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type SglangEmulator, createSglangEmulator } from '../src/index.js'

let baseline: Record<string, number>
let emu: SglangEmulator

beforeAll(async () => {
  baseline = handleCounts()
  emu = await createSglangEmulator({
    capacityTokens: 2048,
    pageSize: 4,
    timing: { scale: 0 },
    maxBodyBytes: 4096,
    contextLength: 512,
  })
  // Some state to protect: a cached prompt and an open session.
  const c = new SglangClient({ baseURL: emu.url })
  await c.generate({ text: 'state that must not change', sampling_params: { max_new_tokens: 3 } })
  await c.openSession({ session_id: 'live' })
})

afterAll(async () => {
  await emu.close()
  expect(await leakedSince(baseline)).toEqual({})
})

function raw(
  method: string,
  path: string,
  body?: string,
  headers: Record<string, string> = { 'content-type': 'application/json' },
): Promise<{ status: number; json: unknown; text: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(path, emu.url)
    const req = request(u, { method, headers: { ...headers, connection: 'close' } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => {
        text += d
      })
      res.on('end', () => {
        let json: unknown
        try {
          json = JSON.parse(text)
        } catch {
          json = undefined
        }
        resolve({ status: res.statusCode ?? 0, json, text })
      })
    })
    req.on('error', reject)
    if (body !== undefined) req.end(body)
    else req.end()
  })
}

function snapshot(): unknown {
  const s = emu.stats()
  return {
    tree: s.treeTokens,
    free: s.freeTokens,
    evictable: s.evictableTokens,
    sessions: emu.sessionCache.listSessionStatuses(),
    requests: s.requestsTotal,
    balanced: s.balanced,
  }
}

describe('bad input to the emulator: SGLang status and shape, state unchanged', () => {
  it('malformed JSON → 400 ErrorResponse {object, message, type, param, code}', async () => {
    const before = snapshot()
    const r = await raw('POST', '/generate', '{"text": "unterminated')
    expect(r.status).toBe(400)
    expect(r.json).toMatchObject({ object: 'error', type: 'Bad Request', param: null, code: 400 })
    expect((r.json as { message: string }).message).toMatch(/json_invalid|JSON decode error/)
    expect(Object.keys(r.json as object).sort()).toEqual(['code', 'message', 'object', 'param', 'type'])
    const arr = await raw('POST', '/generate', '[1,2]')
    expect(arr.status).toBe(400)
    const empty = await raw('POST', '/generate', '')
    expect(empty.status).toBe(400)
    expect(snapshot()).toEqual(before)
  })

  it('unknown session → 400 {"error":{"message":"Invalid request: session id … does not exist"}}', async () => {
    const before = snapshot()
    const r = await raw('POST', '/generate', JSON.stringify({ text: 'hi', session_params: { id: 'ghost' } }))
    expect(r.status).toBe(400)
    expect(r.json).toEqual({ error: { message: 'Invalid request: session id ghost does not exist' } })
    // Streaming: the abort arrives in the stream (finish_reason abort, status_code 400), then [DONE].
    const s = await raw(
      'POST',
      '/generate',
      JSON.stringify({ text: 'hi', stream: true, session_params: { id: 'ghost' } }),
    )
    expect(s.status).toBe(200)
    expect(s.text).toContain('"type":"abort"')
    expect(s.text).toContain('does not exist')
    expect(s.text.endsWith('data: [DONE]\n\n')).toBe(true)
    expect(snapshot()).toEqual(before)
  })

  it('oversized body → 413 with the ErrorResponse shape', async () => {
    const before = snapshot()
    const r = await raw('POST', '/generate', JSON.stringify({ text: 'x'.repeat(10_000) }))
    expect(r.status).toBe(413)
    expect(r.json).toMatchObject({ object: 'error', code: 413, type: 'Payload Too Large' })
    expect(snapshot()).toEqual(before)
  })

  it('prompt longer than the context → 400 with SGLang message; neither input → 400', async () => {
    const before = snapshot()
    const r = await raw(
      'POST',
      '/generate',
      JSON.stringify({ input_ids: Array.from({ length: 600 }, (_, i) => i + 3) }),
    )
    expect(r.status).toBe(400)
    expect((r.json as { error: { message: string } }).error.message).toBe(
      "The input (600 tokens) is longer than the model's context length (512 tokens).",
    )
    const none = await raw('POST', '/generate', JSON.stringify({ sampling_params: {} }))
    expect(none.status).toBe(400)
    expect(none.json).toEqual({
      error: { message: 'Either text, input_ids or input_embeds should be provided.' },
    })
    const badIds = await raw('POST', '/generate', JSON.stringify({ input_ids: [1, -2] }))
    expect(badIds.status).toBe(400)
    expect(snapshot()).toEqual(before)
  })

  it('unknown path → 404 {"detail":"Not Found"}; wrong method → 405; chat needs JSON content type', async () => {
    const before = snapshot()
    expect(await raw('GET', '/nope')).toMatchObject({ status: 404, json: { detail: 'Not Found' } })
    expect(await raw('GET', '/generate')).toMatchObject({
      status: 405,
      json: { detail: 'Method Not Allowed' },
    })
    const chat = await raw('POST', '/v1/chat/completions', '{"model":"m","messages":[]}', {
      'content-type': 'text/plain',
    })
    expect(chat.status).toBe(400)
    expect(chat.json).toMatchObject({ object: 'error', code: 400 })
    const noMsgs = await raw('POST', '/v1/chat/completions', '{"model":"m"}')
    expect(noMsgs.status).toBe(400)
    expect(snapshot()).toEqual(before)
  })

  it('open_session without capacity_of_str_len → 400 validation error; duplicate id → 400', async () => {
    const before = snapshot()
    const r = await raw('POST', '/open_session', '{}')
    expect(r.status).toBe(400)
    expect(r.json).toMatchObject({ object: 'error', code: 400 })
    const dup = await raw('POST', '/open_session', '{"capacity_of_str_len": 10, "session_id": "live"}')
    expect(dup.status).toBe(400)
    expect(dup.json).toEqual({
      error: { message: 'Failed to open the session. Check if a session with the same id is still open.' },
    })
    expect(snapshot()).toEqual(before)
  })
})
