import { BlockKeys } from '@kvc/kvc-router'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { SessionBlockKeys } from '../src/cluster/sessionBlockKeys.js'
import {
  KvGeometry,
  SimError,
  autoGranularity,
  computeTraceStats,
  parseMooncakeTrace,
  runSimulation,
  simBlockHasher,
} from '../src/index.js'

describe('KvGeometry', () => {
  it('is the identity at token level', () => {
    const g = new KvGeometry(16)
    expect([
      g.tokenLevel,
      g.pageUnits,
      g.units(37),
      g.tokens(48),
      g.promptTokens(37),
      g.wholeUnits(64),
    ]).toEqual([true, 16, 37, 48, 37, 64])
  })

  it('counts two units per full block and one per partial block, and pages fill as tokens do', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(2, 8, 512),
        fc.integer({ min: 1, max: 4 }),
        fc.nat(40),
        fc.nat(5000),
        (block, blocksPerPage, nb, out) => {
          const page = block * blocksPerPage
          const g = new KvGeometry(page, block)
          const u = g.units(nb * block + 1) // a prompt of nb blocks and the computed token
          expect(u).toBe(2 * nb + 1)
          expect(g.promptTokens(u)).toBe(nb * block + 1)
          // After the decode steps, as many pages as the tokens take, as many full ones as the tree keeps.
          const committed = nb * block + out // prompt + output - 1
          const units = u + g.units(out) - 1
          const pu = g.pageUnits
          expect(Math.ceil(units / pu)).toBe(Math.ceil(committed / page))
          expect(Math.floor(units / pu)).toBe(Math.floor(committed / page))
          // Any token count: the units that hold it fill the same number of pages.
          expect(Math.ceil(g.units(committed + 1) / pu)).toBe(Math.ceil((committed + 1) / page))
          expect(g.tokens(2 * nb)).toBe(nb * block)
        },
      ),
      { numRuns: 300, seed: 3 },
    )
  })

  it('refuses pages that are not whole blocks and odd blocks', () => {
    expect(() => new KvGeometry(256, 512)).toThrow(SimError)
    expect(() => new KvGeometry(512, 3)).toThrow(SimError)
  })

  it('auto picks block for a Mooncake trace whose pages are whole blocks, without the D→P sync', () => {
    expect(autoGranularity({ format: 'mooncake' })).toBe('block')
    expect(autoGranularity({ format: 'mooncake', pageSize: 1024 })).toBe('block')
    expect(autoGranularity({ format: 'mooncake', pageSize: 16 })).toBe('token')
    expect(autoGranularity({ format: 'mooncake', sync: true })).toBe('token')
    expect(autoGranularity({ format: 'lmcache' })).toBe('token')
  })
})

describe('SessionBlockKeys', () => {
  it("gives simBlockHasher's keys of every prompt of a session, reusing the shared pages", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(1, 2, 16),
        fc.array(fc.tuple(fc.nat(2), fc.nat(1000), fc.array(fc.nat(50), { maxLength: 60 })), {
          minLength: 1,
          maxLength: 12,
        }),
        (ps, steps) => {
          const k = new SessionBlockKeys(ps)
          const last = new Map<number, number[]>()
          // Per session, a token stream its prompts are views of while each extends the last.
          const streams = new Map<number, Uint32Array>()
          const given: [BlockKeys, number[], number[]][] = []
          for (const [session, cut, append] of steps) {
            const prev = last.get(session) ?? []
            const kept = cut % (prev.length + 1)
            const prompt = [...prev.slice(0, kept), ...append]
            last.set(session, prompt)
            let tokens: Uint32Array = Uint32Array.from(prompt)
            if (kept === prev.length && (session + cut) % 2 === 0) {
              // On the session's stream (its earlier tokens are never rewritten): a view of it.
              let stream = streams.get(session) ?? Uint32Array.from(prev)
              if (stream.length < prompt.length) {
                const grown = new Uint32Array(prompt.length + 8)
                grown.set(stream.subarray(0, prev.length))
                stream = grown
              }
              stream.set(append, prev.length)
              streams.set(session, stream)
              tokens = stream.subarray(0, prompt.length)
            } else streams.delete(session)
            const got = k.keysFor(session - 1, tokens) // session -1: none kept
            const want = BlockKeys.fromTokens(simBlockHasher, prompt, ps)
            expect(got.length).toBe(want.length)
            expect(got.hi.length).toBeGreaterThanOrEqual(got.length)
            given.push([
              got,
              Array.from(want.hi.subarray(0, want.length)),
              Array.from(want.lo.subarray(0, want.length)),
            ])
            // Keys given before never change (later turns' keys share their buffers).
            for (const [g, hi, lo] of given) {
              expect(Array.from(g.hi.subarray(0, g.length))).toEqual(hi)
              expect(Array.from(g.lo.subarray(0, g.length))).toEqual(lo)
            }
          }
        },
      ),
      { numRuns: 200, seed: 5 },
    )
  })
})

/** A small Mooncake trace: shared and private blocks, outputs around the block size. */
function smallTrace(requests: number, block: number, seed: number): string {
  let x = seed
  const rnd = (n: number) => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0
    return (x >>> 8) % n
  }
  const lines: string[] = []
  for (let i = 0; i < requests; i++) {
    const nb = 1 + rnd(12)
    const ids = Array.from({ length: nb }, (_, j) => (j < 3 && rnd(3) > 0 ? j : 100 + i * 20 + j))
    const input = (nb - 1) * block + 1 + rnd(block)
    lines.push(
      JSON.stringify({
        timestamp: i * 40,
        input_length: input,
        output_length: rnd(3 * block),
        hash_ids: ids,
      }),
    )
  }
  return `${lines.join('\n')}\n`
}

describe('block granularity: the same run as token level, hundreds of times fewer units', () => {
  const block = 64
  const text = smallTrace(400, block, 11)
  const load = (granularity: 'token' | 'block') =>
    parseMooncakeTrace(text, 'small.jsonl', { traceBlockTokens: block, granularity })
  const run = (granularity: 'token' | 'block', policy: string, capacityTokens: number) => {
    const {
      wallMs: _w,
      peakRssMB: _r,
      ...r
    } = runSimulation({
      workload: load(granularity),
      topology: { kind: 'pd', prefill: 1, decode: 3 },
      policy,
      seed: 2,
      costModel: { capacityTokens },
    })
    return r
  }

  it('a block prompt is two units per block and one for the computed token', () => {
    const t = load('token')
    const b = load('block')
    expect(b.blockTokens).toBe(block)
    expect(t.blockTokens).toBeUndefined()
    expect(b.promptTokens(0).length).toBe((2 * (t.promptTokens(0).length - 1)) / block + 1)
    expect(computeTraceStats(b)).toEqual(computeTraceStats(t))
  })

  for (const policy of ['kvc', 'round-robin']) {
    for (const capacity of [2_000, 6_000]) {
      it(`${policy}, ${capacity} tokens per worker: identical records, counters, usage and evictions`, () => {
        const t = run('token', policy, capacity)
        const b = run('block', policy, capacity)
        // Under pressure (evictions happened) and without (the larger capacity).
        if (capacity === 2_000) expect(t.evictions.some((e) => e.evictions > 0)).toBe(true)
        expect(b).toEqual(t)
      })
    }
  }

  it('refuses block granularity with pages that split a block, and the D→P sync', () => {
    expect(() =>
      runSimulation({
        workload: load('block'),
        topology: { kind: 'pd', prefill: 1, decode: 1 },
        policy: 'kvc',
        seed: 1,
        pageSize: 32,
      }),
    ).toThrow(/whole blocks/)
    expect(() =>
      runSimulation({
        workload: load('block'),
        topology: { kind: 'pd', prefill: 1, decode: 1 },
        policy: 'kvc:sync=on',
        seed: 1,
      }),
    ).toThrow(/token granularity/)
  })
})
