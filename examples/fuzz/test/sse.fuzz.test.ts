import { SseDecoder, type SseEvent, WorkerBindingsError, jsonEventStream } from '@kvc/worker-bindings'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { fuzzParams, fuzzTimeoutMs } from '../src/fuzzConfig.js'

const SSE_CODES = new Set(['SSE_PARSE', 'SSE_TRUNCATED', 'STREAM_ERROR'])

/** Decodes `bytes` cut at `cuts`: the events, or the typed error it failed with. */
function decode(bytes: Uint8Array, cuts: readonly number[]): SseEvent[] | WorkerBindingsError {
  const d = new SseDecoder({ maxLineLength: 4_096 })
  const out: SseEvent[] = []
  try {
    let at = 0
    for (const c of [...cuts.map((x) => x % (bytes.length + 1)).sort((a, b) => a - b), bytes.length]) {
      out.push(...d.push(bytes.subarray(at, Math.max(at, c))))
      at = Math.max(at, c)
    }
    out.push(...d.end())
    return out
  } catch (e) {
    if (e instanceof WorkerBindingsError && SSE_CODES.has(e.code)) return e
    throw e
  }
}

/** A well-formed event stream: its text and the events it holds. */
const wellFormed = fc
  .array(
    fc.record({
      event: fc.option(fc.constantFrom('message', 'update', 'ping'), { nil: undefined }),
      data: fc.array(
        fc.string({ unit: 'grapheme', maxLength: 40 }).map((s) => s.replace(/[\r\n]/g, ' ')),
        {
          minLength: 1,
          maxLength: 3,
        },
      ),
      id: fc.option(fc.stringMatching(/^[a-z0-9]{1,6}$/), { nil: undefined }),
      crlf: fc.boolean(),
    }),
    { maxLength: 8 },
  )
  .map((events) => {
    let text = ': a comment\n'
    for (const e of events) {
      const nl = e.crlf ? '\r\n' : '\n'
      if (e.event !== undefined) text += `event: ${e.event}${nl}`
      if (e.id !== undefined) text += `id: ${e.id}${nl}`
      for (const d of e.data) text += `data: ${d}${nl}`
      text += nl
    }
    return { text, events }
  })

describe('fuzz: the SSE decoder', () => {
  it(
    'random bytes, however chunked: events or a typed SSE error, never another exception',
    () => {
      fc.assert(
        fc.property(
          fc.uint8Array({ maxLength: 512 }),
          fc.array(fc.nat(), { maxLength: 6 }),
          (bytes, cuts) => {
            decode(bytes, cuts)
          },
        ),
        fuzzParams(400, 1801),
      )
    },
    fuzzTimeoutMs(400, 2),
  )

  it(
    'a well-formed stream decodes to the same events whatever the chunk boundaries, and mutations stay typed',
    () => {
      fc.assert(
        fc.property(
          wellFormed,
          fc.array(fc.nat(), { maxLength: 8 }),
          fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 3 }),
          ({ text, events }, cuts, flips) => {
            const bytes = new TextEncoder().encode(text)
            const whole = decode(bytes, [])
            const cut = decode(bytes, cuts)
            expect(whole).not.toBeInstanceOf(Error)
            expect(cut).toEqual(whole)
            const got = whole as SseEvent[]
            expect(got.map((e) => e.data)).toEqual(events.map((e) => e.data.join('\n')))
            expect(got.map((e) => e.event)).toEqual(events.map((e) => e.event ?? 'message'))
            // Flipped bytes: still events or a typed error.
            const m = bytes.slice()
            for (const [at, v] of flips) if (m.length > 0) m[at % m.length] = v
            decode(m, cuts)
          },
        ),
        fuzzParams(300, 1802),
      )
    },
    fuzzTimeoutMs(300, 2),
  )

  it(
    'jsonEventStream: JSON chunks or typed errors (SSE_PARSE for non-JSON data, STREAM_ERROR for an error event)',
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.oneof(
              fc.jsonValue().map((v) => JSON.stringify(v)),
              fc.string({ maxLength: 30 }).map((s) => s.replace(/[\r\n]/g, ' ')),
              fc.constant('{"error":{"message":"boom"}}'),
              fc.constant('[DONE]'),
            ),
            { maxLength: 6 },
          ),
          async (datas) => {
            const text = datas.map((d) => `data: ${d}\n\n`).join('')
            async function* source() {
              yield new TextEncoder().encode(text)
            }
            try {
              for await (const _ of jsonEventStream(source())) {
                // consumed
              }
            } catch (e) {
              if (!(e instanceof WorkerBindingsError) || !SSE_CODES.has(e.code)) throw e
            }
          },
        ),
        fuzzParams(300, 1803),
      )
    },
    fuzzTimeoutMs(300, 2),
  )
})
