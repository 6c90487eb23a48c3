import { ProxyError, decodeJsonBody, parseChat, parseCompletion, resolveConfig } from '@kvc/example-proxy'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { fuzzParams, fuzzTimeoutMs, thrownBy } from '../src/fuzzConfig.js'

const config = resolveConfig({ workers: [{ id: 'd0', role: 'decode', url: 'http://127.0.0.1:1' }] })
const MAX_DEPTH = 8

/** Nesting depth of a parsed JSON value (arrays and objects), iteratively. */
function depthOf(v: unknown): number {
  let max = 0
  const stack: [unknown, number][] = [[v, 0]]
  while (stack.length > 0) {
    const [x, d] = stack.pop()!
    if (typeof x !== 'object' || x === null) continue
    max = Math.max(max, d + 1)
    for (const c of Array.isArray(x) ? x : Object.values(x)) stack.push([c, d + 1])
  }
  return max
}

async function decodeOrTyped(text: string): Promise<{ ok: true; value: unknown } | { ok: false }> {
  try {
    return { ok: true, value: await decodeJsonBody([Buffer.from(text)], Buffer.byteLength(text), MAX_DEPTH) }
  } catch (e) {
    if (!(e instanceof ProxyError) || e.status !== 400) throw e
    return { ok: false }
  }
}

const jsonText = fc.oneof(
  fc.json({ maxDepth: 12 }),
  fc.string({ maxLength: 80 }),
  fc.nat({ max: 40 }).map((n) => `${'['.repeat(n)}${']'.repeat(n)}`),
  fc.nat({ max: 40 }).map((n) => `{"a":${'{"b":'.repeat(n)}1${'}'.repeat(n)}}`),
  fc.json({ maxDepth: 6 }).map((s) => `["\\\\\\"[[[[[[[[", ${s}]`),
)

describe('fuzz: the proxy’s request decoding and parsing', () => {
  it(
    'body decoding agrees with JSON.parse within the depth limit, and refuses (400) what is deeper or not JSON',
    async () => {
      await fc.assert(
        fc.asyncProperty(jsonText, async (text) => {
          const got = await decodeOrTyped(text)
          let parsed: unknown
          const bad = thrownBy(() => {
            parsed = JSON.parse(text)
          })
          if (bad !== undefined) expect(got.ok).toBe(false)
          else if (depthOf(parsed) > MAX_DEPTH) expect(got.ok).toBe(false)
          else expect(got).toEqual({ ok: true, value: parsed })
        }),
        fuzzParams(400, 1831),
      )
    },
    fuzzTimeoutMs(400, 3),
  )

  it(
    'chat and completion bodies of any shape: a parsed request or a 4xx ProxyError',
    () => {
      const message = fc.oneof(
        fc.record(
          {
            role: fc.constantFrom('user', 'system', 'assistant', 'tool', 'wizard', 7),
            content: fc.oneof(fc.string(), fc.anything({ maxDepth: 2 })),
          },
          { requiredKeys: [] },
        ),
        fc.anything({ maxDepth: 2 }),
      )
      const body = fc.record(
        {
          model: fc.oneof(fc.string(), fc.integer()),
          messages: fc.oneof(fc.array(message, { maxLength: 4 }), fc.anything({ maxDepth: 2 })),
          prompt: fc.oneof(
            fc.string(),
            fc.array(fc.oneof(fc.nat(), fc.integer(), fc.double()), { maxLength: 6 }),
            fc.anything({ maxDepth: 2 }),
          ),
          max_tokens: fc.oneof(fc.integer(), fc.double(), fc.string(), fc.constant(null)),
          max_completion_tokens: fc.oneof(fc.integer(), fc.constant(undefined)),
          stream: fc.oneof(fc.boolean(), fc.anything({ maxDepth: 1 })),
          stream_options: fc.anything({ maxDepth: 2 }),
          n: fc.oneof(fc.constant(1), fc.integer(), fc.anything({ maxDepth: 1 })),
          echo: fc.anything({ maxDepth: 1 }),
          kvc_slo_class: fc.oneof(fc.constantFrom('interactive', 'batch', 'background'), fc.string()),
        },
        { requiredKeys: [] },
      )
      fc.assert(
        fc.property(body, fc.option(fc.constantFrom('interactive', 'vip'), { nil: undefined }), (b, slo) => {
          for (const parse of [parseChat, parseCompletion]) {
            const e = thrownBy(() => parse(b as Record<string, unknown>, slo, config))
            if (e === undefined) continue
            if (!(e instanceof ProxyError)) throw e
            expect(e.status).toBeGreaterThanOrEqual(400)
            expect(e.status).toBeLessThan(500)
          }
        }),
        fuzzParams(400, 1832),
      )
    },
    fuzzTimeoutMs(400, 2),
  )

  it('a large body (decoded in steps) gets the same answers as a small one', async () => {
    const big = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(400_000) }], extra: [[[1]]] })
    expect(await decodeOrTyped(big)).toEqual({ ok: true, value: JSON.parse(big) })
    expect(await decodeOrTyped(`${big.slice(0, -1)}, "deep": ${'['.repeat(20)}${']'.repeat(20)}}`)).toEqual({
      ok: false,
    })
    expect(await decodeOrTyped(`${big.slice(0, -2)}`)).toEqual({ ok: false })
  })
})
