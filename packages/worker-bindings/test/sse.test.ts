import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  SseDecoder,
  type SseEvent,
  WorkerBindingsError,
  jsonEventStream,
  parseSseStream,
} from '../src/index.js'
import { chunkings, collect, fromChunks, splitAt } from '../src/testing/index.js'

const enc = new TextEncoder()

function decodeAll(chunks: readonly Uint8Array[]): SseEvent[] {
  const d = new SseDecoder()
  const out: SseEvent[] = []
  for (const c of chunks) out.push(...d.push(c))
  out.push(...d.end())
  return out
}

const eventArb = fc.record({
  event: fc.option(fc.stringMatching(/^[a-z]{1,8}$/), { nil: undefined }),
  data: fc.array(
    fc.string({ unit: 'grapheme', maxLength: 20 }).filter((s) => !/[\r\n]/.test(s)),
    {
      minLength: 1,
      maxLength: 3,
    },
  ),
  id: fc.option(fc.stringMatching(/^[a-z0-9]{1,6}$/), { nil: undefined }),
  comment: fc.boolean(),
})
// Line ends: mixed LF / CRLF, or CR alone (a CR followed by an LF line end would read as one CRLF).
const eolsArb = fc.oneof(
  fc.array(fc.constantFrom('\n', '\r\n'), { minLength: 1, maxLength: 4 }),
  fc.constant(['\r']),
)

function serialize(
  events: readonly {
    event?: string | undefined
    data: string[]
    id?: string | undefined
    comment: boolean
  }[],
  eols: readonly string[],
): string {
  let s = ''
  let k = 0
  const eol = (): string => eols[k++ % eols.length]!
  for (const e of events) {
    if (e.comment) s += `: keep-alive${eol()}`
    if (e.event !== undefined) s += `event: ${e.event}${eol()}`
    if (e.id !== undefined) s += `id:${e.id}${eol()}`
    for (const line of e.data) s += `data: ${line}${eol()}`
    s += eol()
  }
  return s
}

describe('SseDecoder', () => {
  it('decodes fields, comments, multi-line data and the BOM', () => {
    const text = '\uFEFF: hi\nevent: add\nid: 7\nretry: 100\ndata: a\ndata:b\n\ndata\n\nfoo: bar\n\n'
    const evs = decodeAll([enc.encode(text)])
    expect(evs).toEqual([
      { event: 'add', data: 'a\nb', id: '7', retry: 100 },
      { event: 'message', data: '', id: '7', retry: undefined },
    ])
  })

  it('any split of a valid stream gives the same events (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.array(eventArb, { minLength: 1, maxLength: 6 }),
        eolsArb,
        fc.integer(),
        (events, eols, seed) => {
          const bytes = enc.encode(serialize(events, eols))
          const whole = decodeAll([bytes])
          const expected = events.map((e) => e.data.join('\n'))
          expect(whole.map((e) => e.data)).toEqual(expected)
          fc.assert(
            fc.property(chunkings(bytes), (chunks) => {
              expect(decodeAll(chunks)).toEqual(whole)
            }),
            { numRuns: 20, seed },
          )
        },
      ),
      { numRuns: 100 },
    )
  })

  it('1-byte chunks across multi-byte characters and CRLF', () => {
    const bytes = enc.encode('data: héllo wörld 🎉\r\n\r\ndata: [DONE]\r\n\r\n')
    const evs = decodeAll(
      splitAt(
        bytes,
        Array.from({ length: bytes.length }, (_, i) => i),
      ),
    )
    expect(evs.map((e) => e.data)).toEqual(['héllo wörld 🎉', '[DONE]'])
  })

  it('malformed streams give a typed error, never a hang (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          // truncated mid-event
          fc
            .string({ maxLength: 30 })
            .map((s) => enc.encode(`data: {"a":1}\n\ndata: ${s.replace(/[\r\n]/g, '')}`)),
          // invalid UTF-8
          fc.uint8Array({ minLength: 1, maxLength: 8 }).map((b) => {
            const out = new Uint8Array(b.length + 8)
            out.set(enc.encode('data: '))
            out.set([0xc3, 0x28], 6) // an invalid 2-byte sequence
            out.set(b.subarray(0, b.length), 8)
            return out
          }),
          // a stream that ends inside a UTF-8 character
          fc.constant(enc.encode('data: é\n\n').subarray(0, 7)),
        ),
        fc.integer(),
        async (bytes, seed) => {
          const chunks = fc.sample(chunkings(bytes), { numRuns: 1, seed })[0]!
          const err = await collect(parseSseStream(fromChunks(chunks))).then(
            () => undefined,
            (e: unknown) => e,
          )
          expect(err).toBeInstanceOf(WorkerBindingsError)
          expect(['SSE_PARSE', 'SSE_TRUNCATED']).toContain((err as WorkerBindingsError).code)
        },
      ),
      { numRuns: 200 },
    )
  })

  it('refuses an over-long line and further input after an error', () => {
    const d = new SseDecoder({ maxLineLength: 8 })
    expect(() => d.push(enc.encode('data: 0123456789'))).toThrow(
      expect.objectContaining({ code: 'SSE_PARSE' }),
    )
    expect(() => d.push(enc.encode('\n'))).toThrow(expect.objectContaining({ code: 'SSE_PARSE' }))
    expect(() => new SseDecoder({ maxLineLength: 0 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    )
  })
})

describe('jsonEventStream', () => {
  it('stops at [DONE], reports server errors, non-JSON data and a missing [DONE]', async () => {
    const ok = await collect(
      jsonEventStream(fromChunks([enc.encode('data: {"n":1}\n\ndata: [DONE]\n\ndata: {"n":2}\n\n')])),
    )
    expect(ok).toEqual([{ n: 1 }])
    const codeOf = (s: string): Promise<string> =>
      collect(jsonEventStream(fromChunks([enc.encode(s)]))).then(
        () => 'none',
        (e: WorkerBindingsError) => e.code,
      )
    expect(await codeOf('data: {"error":{"message":"boom"}}\n\ndata: [DONE]\n\n')).toBe('STREAM_ERROR')
    expect(await codeOf('data: {"object":"error","message":"boom"}\n\n')).toBe('STREAM_ERROR')
    expect(await codeOf('data: not json\n\n')).toBe('SSE_PARSE')
    expect(await codeOf('data: {"n":1}\n\n')).toBe('SSE_TRUNCATED')
  })
})
