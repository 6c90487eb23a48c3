import { request } from 'node:http'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type SglangEmulator, createSglangEmulator } from '../src/index.js'

let baseline: Record<string, number>
let emu: SglangEmulator

beforeAll(async () => {
  baseline = handleCounts()
  emu = await createSglangEmulator({
    capacityTokens: 4096,
    pageSize: 4,
    timing: { scale: 0 },
    contextLength: 1024,
  })
})

afterAll(async () => {
  await emu.close()
  expect(await leakedSince(baseline)).toEqual({})
})

function chat(body: Record<string, unknown>): Promise<{ status: number; json: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request(
      new URL('/v1/chat/completions', emu.url),
      { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close' } },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d: string) => {
          text += d
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }))
      },
    )
    req.on('error', reject)
    req.end(JSON.stringify(body))
  })
}

const hi = [{ role: 'user', content: 'hi' }]

function snapshot(): unknown {
  const s = emu.stats()
  return { tree: s.treeTokens, free: s.freeTokens, requests: s.requestsTotal, balanced: s.balanced }
}

describe('chat request validation: SGLang’s (Pydantic lax mode) coercions, refusals and wording', () => {
  it('coerces what Pydantic coerces: max_tokens "10" and 10.0 are 10', async () => {
    for (const v of ['10', 10.0, ' 10 ']) {
      const r = await chat({ model: 'm', messages: hi, max_tokens: v })
      expect(r.status, JSON.stringify(v)).toBe(200)
      expect((r.json.usage as { completion_tokens: number }).completion_tokens).toBe(10)
    }
    const c = await chat({ model: 'm', messages: hi, max_completion_tokens: '3', max_tokens: 9 })
    expect((c.json.usage as { completion_tokens: number }).completion_tokens).toBe(3)
  })

  it('refuses bad fields with 400, naming each field with Pydantic’s message and type; state unchanged', async () => {
    const before = snapshot()
    const cases: [Record<string, unknown>, RegExp][] = [
      [
        { messages: hi, max_tokens: 2.5 },
        /^1 validation error for ChatCompletionRequest\nmax_tokens\n {2}Input should be a valid integer, got a number with a fractional part \[type=int_from_float, input_value=2\.5, input_type=float\]$/,
      ],
      [
        { messages: hi, max_tokens: 'ten' },
        /max_tokens\n {2}Input should be a valid integer, unable to parse string as an integer \[type=int_parsing, input_value='ten', input_type=str\]/,
      ],
      [
        { messages: 'hi' },
        /^1 validation error for ChatCompletionRequest\nmessages\n {2}Input should be a valid list \[type=list_type, input_value='hi', input_type=str\]$/,
      ],
      [{ model: 'm' }, /messages\n {2}Field required \[type=missing/],
      [
        { messages: [{ role: 'user', content: { text: 'hi' } }] },
        /^2 validation errors for ChatCompletionRequest\nmessages\.0\.content\.str\n {2}Input should be a valid string \[type=string_type, input_value=\{'text': 'hi'\}, input_type=dict\]\nmessages\.0\.content\.list/,
      ],
      [{ messages: [{ content: 'x' }] }, /messages\.0\.role\n {2}Field required/],
      [{ messages: hi, n: 1.5 }, /^1 validation error for ChatCompletionRequest\nn\n/],
      [{ messages: hi, stream: 'yes' }, /stream\n {2}Input should be a valid boolean \[type=bool_type/],
      [
        { messages: 'hi', max_tokens: 2.5 },
        /^2 validation errors for ChatCompletionRequest\nmessages\n.*\nmax_tokens\n/,
      ],
    ]
    for (const [body, msg] of cases) {
      const r = await chat(body)
      expect(r.status, JSON.stringify(body)).toBe(400)
      expect(r.json).toMatchObject({ object: 'error', type: 'Bad Request', param: null, code: 400 })
      expect(r.json.message as string, JSON.stringify(body)).toMatch(msg)
    }
    expect(snapshot()).toEqual(before)
  })

  it('refuses what the emulator does not emulate (n other than 1) and a negative budget, by name', async () => {
    const before = snapshot()
    const n2 = await chat({ messages: hi, n: 2 })
    expect(n2.status).toBe(400)
    expect(JSON.stringify(n2.json)).toContain('n=2 is not supported by the emulator')
    expect((await chat({ messages: hi, n: '1' })).status).toBe(200)
    const neg = await chat({ messages: hi, max_tokens: -1 })
    expect(neg.status).toBe(400)
    expect(JSON.stringify(neg.json)).toContain('max_new_tokens must be at least 0, got -1.')
    expect(snapshot()).toMatchObject({ balanced: true })
    expect((snapshot() as { requests: number }).requests).toBe((before as { requests: number }).requests + 1)
  })
})
