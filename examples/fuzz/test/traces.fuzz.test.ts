import { SimError, parseAzureTrace, parseLmcacheTrace, parseMooncakeTrace } from '@kvc/sim'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { fuzzParams, fuzzTimeoutMs, thrownBy } from '../src/fuzzConfig.js'

type Parser = (text: string) => { turns: readonly unknown[] }
const PARSERS: Record<string, Parser> = {
  mooncake: (t) => parseMooncakeTrace(t, 'fuzz.jsonl', { traceBlockTokens: 16 }),
  azure: (t) => parseAzureTrace(t, 'fuzz.csv'),
  lmcache: (t) => parseLmcacheTrace([['fuzz.jsonl', t]]),
}

/** A workload or a `SimError` naming the file: anything else fails the property. */
function parseOrTyped(parse: Parser, text: string): number | undefined {
  let n: number | undefined
  const e = thrownBy(() => {
    n = parse(text).turns.length
  })
  if (e !== undefined) {
    if (!(e instanceof SimError)) throw e
    expect(['INVALID_TRACE', 'INVALID_OPTION']).toContain(e.code)
    // A problem on a line names the file and the line.
    if (e.location !== undefined) expect(e.message).toContain(`${e.location.file}:${e.location.line}`)
  }
  return n
}

const num = () =>
  fc.oneof(
    fc.nat({ max: 100_000 }),
    fc.double(),
    fc.constantFrom('1e400', '-0', 'NaN', '"7"', 'null', '[]', '{}'),
  )
const mooncakeLine = fc
  .record({ ts: num(), input: num(), output: num(), ids: fc.array(num(), { maxLength: 6 }) })
  .map(
    (r) =>
      `{"timestamp": ${r.ts}, "input_length": ${r.input}, "output_length": ${r.output}, "hash_ids": [${r.ids.join(', ')}]}`,
  )
const validMooncake = fc
  .array(
    fc.tuple(
      fc.nat({ max: 1_000_000 }),
      fc.array(fc.nat({ max: 500 }), { minLength: 1, maxLength: 5 }),
      fc.nat({ max: 64 }),
    ),
    {
      minLength: 1,
      maxLength: 12,
    },
  )
  .map((rows) =>
    rows
      .map(([ts, ids, out]) =>
        JSON.stringify({ timestamp: ts, input_length: ids.length * 16, output_length: out, hash_ids: ids }),
      )
      .join('\n'),
  )
const azureLine = fc
  .tuple(fc.string({ maxLength: 30 }), num(), num())
  .map(([t, a, b]) => `${t.replace(/[\n,]/g, ' ')},${a},${b}`)
const lmcacheLine = fc
  .record({
    ts: num(),
    input: fc.oneof(fc.string({ maxLength: 40 }), num()),
    output: fc.oneof(fc.string({ maxLength: 20 }), num()),
    sid: fc.oneof(fc.constant('"s"'), num()),
  })
  .map(
    (r) =>
      `{"timestamp": ${r.ts}, "input": ${typeof r.input === 'string' ? JSON.stringify(r.input) : r.input}, "output": ${typeof r.output === 'string' ? JSON.stringify(r.output) : r.output}, "session_id": ${r.sid}}`,
  )

describe('fuzz: the trace loaders', () => {
  it(
    'random text to every loader: a workload or a typed SimError (naming the file and line of a bad line)',
    () => {
      fc.assert(
        fc.property(fc.constantFrom(...Object.keys(PARSERS)), fc.string({ maxLength: 400 }), (kind, text) => {
          parseOrTyped(PARSERS[kind]!, text)
        }),
        fuzzParams(400, 1821),
      )
    },
    fuzzTimeoutMs(400, 3),
  )

  it(
    'lines shaped like each format with odd values (1e400, NaN, strings, nesting): a workload or a SimError',
    () => {
      fc.assert(
        fc.property(
          fc.array(mooncakeLine, { maxLength: 6 }),
          fc.array(azureLine, { maxLength: 6 }),
          fc.array(lmcacheLine, { maxLength: 6 }),
          (m, a, l) => {
            parseOrTyped(PARSERS.mooncake!, m.join('\n'))
            parseOrTyped(PARSERS.azure!, ['TIMESTAMP,ContextTokens,GeneratedTokens', ...a].join('\n'))
            parseOrTyped(PARSERS.lmcache!, l.join('\n'))
          },
        ),
        fuzzParams(300, 1822),
      )
    },
    fuzzTimeoutMs(300, 5),
  )

  it(
    'a valid Mooncake trace parses to one turn per line; cut or with characters changed it stays typed',
    () => {
      fc.assert(
        fc.property(
          validMooncake,
          fc.nat(),
          fc.array(fc.tuple(fc.nat(), fc.string({ minLength: 1, maxLength: 1 })), { maxLength: 3 }),
          (text, cut, edits) => {
            expect(parseOrTyped(PARSERS.mooncake!, text)).toBe(text.split('\n').length)
            parseOrTyped(PARSERS.mooncake!, text.slice(0, cut % (text.length + 1)))
            const chars = [...text]
            for (const [at, c] of edits) chars[at % chars.length] = c
            parseOrTyped(PARSERS.mooncake!, chars.join(''))
          },
        ),
        fuzzParams(300, 1823),
      )
    },
    fuzzTimeoutMs(300, 5),
  )
})
