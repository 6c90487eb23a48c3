import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { computeTraceStats, generateAgenticWorkload, type Workload } from '../src/index.js'

// computeTraceStats takes the chained page keys of a prompt's first pages from an earlier prompt
// that is a view of the same buffer at the same offset (a session's prompts over its token
// stream). Property: its page counts equal a walk that hashes every prompt from its start.

function naive(w: Workload, ps: number): { total: number; hits: number; distinct: number } {
  const seen = new Set<string>()
  let total = 0
  let hits = 0
  for (let i = 0; i < w.turns.length; i++) {
    const tok = w.promptTokens(i)
    const pages = Math.floor(tok.length / ps)
    let h1 = 0x811c9dc5
    let h2 = 0x01000193
    let prefix = true
    for (let p = 0; p < pages; p++) {
      for (let j = p * ps; j < (p + 1) * ps; j++) {
        h1 = Math.imul(h1 ^ tok[j]!, 0x01000193)
        h2 = Math.imul(h2 ^ tok[j]!, 0x5bd1e995) ^ (h2 >>> 15)
      }
      const key = `${h1},${h2 & 0x1fffff}`
      if (prefix && seen.has(key)) hits++
      else {
        prefix = false
        seen.add(key)
      }
    }
    total += pages
  }
  return { total, hits, distinct: seen.size }
}

/** A workload whose prompts are views of a few shared buffers (at offset 0 or not) or copies. */
function viewWorkload(
  specs: readonly { buf: number; len: number; copy: boolean; offset: number }[],
): Workload {
  const base = generateAgenticWorkload({ seed: 1, sessions: 2 })
  const bufs = [0, 1, 2].map((b) =>
    Uint32Array.from({ length: 300 }, (_, i) => (i * 7 + b * (i > 40 ? 1 : 0)) % 11),
  )
  const prompts = specs.map((s) => {
    const v = bufs[s.buf]!.subarray(s.offset, s.offset + s.len)
    return s.copy ? v.slice() : v
  })
  const turns = specs.map((_, i) => ({ ...base.turns[0]!, id: i, inputLength: prompts[i]!.length }))
  return { ...base, turns, promptTokens: (i: number) => prompts[i]! }
}

describe('computeTraceStats', () => {
  it('counts the pages of a walk that hashes every prompt from its start', () => {
    const spec = fc.record({
      buf: fc.integer({ min: 0, max: 2 }),
      len: fc.integer({ min: 0, max: 200 }),
      copy: fc.boolean(),
      offset: fc.constantFrom(0, 0, 0, 4, 8),
    })
    fc.assert(
      fc.property(fc.array(spec, { maxLength: 30 }), fc.constantFrom(1, 4, 16), (specs, ps) => {
        const w = viewWorkload(specs)
        const s = computeTraceStats(w, ps)
        const want = naive(w, ps)
        expect(s.totalPages).toBe(want.total)
        expect(s.distinctPages).toBe(want.distinct)
        expect(s.idealHitRatioPages).toBe(want.total === 0 ? 0 : want.hits / want.total)
      }),
      { numRuns: 200 },
    )
  })

  it('the built-in workload (prompts over session streams) on two seeds', () => {
    for (const seed of [1, 2]) {
      const w = generateAgenticWorkload({ seed, sessions: 6 })
      const s = computeTraceStats(w, 16)
      const want = naive(w, 16)
      expect(s.totalPages).toBe(want.total)
      expect(s.distinctPages).toBe(want.distinct)
      expect(s.idealHitRatioPages).toBe(want.hits / want.total)
    }
  })
})
