import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { parseMooncakeTrace, type TurnSpec } from '../src/index.js'

// parseMooncakeTrace keeps its records in typed columns and counts repeated blocks with a bitmap
// (a `Set` for ids too large for one). Property: its turns and prompts equal a reference that
// parses every line into an object, counts repeats with a `Set` and sorts the objects.

interface Rec {
  readonly timestamp: number
  readonly input_length: number
  readonly output_length: number
  readonly hash_ids: readonly number[]
}

function reference(text: string, block: number, perBlock: number) {
  const rows: (Rec & { i: number })[] = []
  for (const l of text.split('\n')) {
    const s = l.endsWith('\r') ? l.slice(0, -1) : l
    if (s.trim() === '') continue
    rows.push({ ...(JSON.parse(s) as Rec), i: rows.length })
  }
  rows.sort((a, b) => a.timestamp - b.timestamp || a.i - b.i)
  const seen = new Set<number>()
  const t0 = rows[0]!.timestamp
  const turns: TurnSpec[] = []
  const prompts: number[][] = []
  for (const r of rows) {
    let repeated = 0
    for (const id of r.hash_ids) {
      if (seen.has(id)) repeated++
      else seen.add(id)
    }
    turns.push({
      id: turns.length,
      session: -1,
      turnIndex: 0,
      arrivalMs: r.timestamp - t0,
      thinkMs: 0,
      inputLength: r.input_length,
      outputLength: Math.max(1, r.output_length),
      appendTokens: r.input_length,
      reuseFraction: Math.min(r.input_length, repeated * block) / r.input_length,
    })
    prompts.push([
      ...r.hash_ids.flatMap((id) => Array.from({ length: perBlock }, (_, t) => id * perBlock + t)),
      0xf0000000 + ((turns.length - 1) % 0x0fffffff),
    ])
  }
  return { turns, prompts }
}

const BLOCK = 8

const record = (ids: fc.Arbitrary<number>): fc.Arbitrary<Rec> =>
  fc
    .record({
      timestamp: fc.oneof(fc.integer({ min: 0, max: 20 }), fc.double({ min: 0, max: 1e6, noNaN: true })),
      blocks: fc.array(ids, { minLength: 1, maxLength: 6 }),
      tail: fc.integer({ min: 0, max: BLOCK - 1 }),
      output_length: fc.integer({ min: 0, max: 50 }),
    })
    .map(({ timestamp, blocks, tail, output_length }) => ({
      timestamp,
      input_length: (blocks.length - 1) * BLOCK + tail + 1,
      output_length,
      hash_ids: blocks,
    }))

describe('Mooncake parser (typed columns, bitmap of seen blocks)', () => {
  it('gives the turns and prompts of parsing every line into an object (property)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(
            // Dense ids (the bitmap) and, sometimes, ids past the bitmap's range (the Set).
            record(
              fc.oneof(
                { weight: 5, arbitrary: fc.integer({ min: 0, max: 40 }) },
                { weight: 1, arbitrary: fc.integer({ min: 2 ** 26, max: 2 ** 26 + 3 }) },
              ),
            ),
            fc.constantFrom('\n', '\r\n', '\n\n', '\n  \n'),
          ),
          { minLength: 1, maxLength: 40 },
        ),
        fc.constantFrom('token', 'block') as fc.Arbitrary<'token' | 'block'>,
        (lines, granularity) => {
          const text = lines.map(([r, end]) => JSON.stringify(r) + end).join('')
          const w = parseMooncakeTrace(text, 't.jsonl', { traceBlockTokens: BLOCK, granularity })
          const ref = reference(text, BLOCK, granularity === 'block' ? 2 : BLOCK)
          expect(w.turns).toEqual(ref.turns)
          ref.prompts.forEach((p, i) => {
            expect([...w.promptTokens(i)]).toEqual(p)
          })
        },
      ),
      { numRuns: 150 },
    )
  })
})
