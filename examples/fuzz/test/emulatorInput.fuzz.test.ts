import { Agent, request } from 'node:http'
import { type SglangEmulator, createSglangEmulator } from '@kvc/sglang-emulator'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fuzzParams, fuzzTimeoutMs } from '../src/fuzzConfig.js'

let emu: SglangEmulator
const agent = new Agent({ keepAlive: true, maxSockets: 4 })

beforeAll(async () => {
  // A small context: most bodies that pass validation are refused for their length, the rest
  // generate a few tokens at once (timing scale 0).
  emu = await createSglangEmulator({
    capacityTokens: 4096,
    pageSize: 4,
    timing: { scale: 0 },
    contextLength: 256,
    kvEvents: false,
  })
})
afterAll(async () => {
  agent.destroy()
  await emu.close()
})

function post(path: string, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(path, emu.url),
      { method: 'POST', agent, headers: { 'content-type': 'application/json' } },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d: string) => {
          text += d
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

const small = fc.oneof(
  fc.integer({ min: -5, max: 40 }),
  fc.double(),
  fc.string({ maxLength: 6 }),
  fc.constant(null),
  fc.boolean(),
)
const message = fc.oneof(
  fc.record(
    {
      role: fc.oneof(fc.constantFrom('user', 'system', 'assistant'), small),
      content: fc.oneof(fc.string({ maxLength: 30 }), small, fc.anything({ maxDepth: 2 })),
    },
    { requiredKeys: [] },
  ),
  small,
)
const chatBody = fc.record(
  {
    model: small,
    messages: fc.oneof(fc.array(message, { maxLength: 3 }), small),
    max_tokens: small,
    max_completion_tokens: small,
    n: small,
    stream: fc.oneof(fc.boolean(), small),
    stop: fc.oneof(fc.string({ maxLength: 3 }), small),
    session_id: fc.oneof(fc.string({ maxLength: 5 }), small),
  },
  { requiredKeys: [] },
)
const generateBody = fc.record(
  {
    text: fc.oneof(
      fc.string({ maxLength: 40 }),
      fc.array(fc.string({ maxLength: 10 }), { maxLength: 3 }),
      small,
    ),
    input_ids: fc.oneof(fc.array(fc.integer({ min: -2, max: 300 }), { maxLength: 20 }), small),
    sampling_params: fc.oneof(fc.record({ max_new_tokens: small, stop: small }, { requiredKeys: [] }), small),
    stream: fc.oneof(fc.boolean(), small),
    rid: fc.oneof(fc.string({ maxLength: 8 }), small),
    session_params: fc.oneof(
      fc.record({ id: fc.oneof(fc.string({ maxLength: 5 }), small) }, { requiredKeys: [] }),
      small,
    ),
    bootstrap_room: small,
  },
  { requiredKeys: [] },
)

describe('fuzz: the SGLang emulator’s HTTP input', () => {
  it(
    'every body gets 200 or a 4xx in SGLang’s shape, never a 5xx; the pool balances afterwards',
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(
            chatBody.map((b) => ['/v1/chat/completions', JSON.stringify(b)] as const),
            generateBody.map((b) => ['/generate', JSON.stringify(b)] as const),
            fc.tuple(
              fc.constantFrom('/generate', '/v1/chat/completions'),
              fc.oneof(fc.json({ maxDepth: 4 }), fc.string({ maxLength: 60 })),
            ),
          ),
          async ([path, body]) => {
            const r = await post(path, body)
            expect(r.status < 500, `${path} ${body} → ${r.status} ${r.text.slice(0, 200)}`).toBe(true)
            if (r.status >= 400) expect(() => JSON.parse(r.text)).not.toThrow()
          },
        ),
        fuzzParams(300, 1841),
      )
      const s = emu.stats()
      expect(s.balanced).toBe(true)
      expect(s.runningRequests).toBe(0)
    },
    fuzzTimeoutMs(300, 20),
  )
})
