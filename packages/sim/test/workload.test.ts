import { describe, expect, it } from 'vitest'
import {
  computeTraceStats,
  DEFAULT_GAP_QUANTILES,
  generateAgenticWorkload,
  loadLmcacheTrace,
  parseAzureTrace,
  parseLmcacheTrace,
  parseMooncakeTrace,
  runExperiment,
  SCENARIOS,
  SimError,
  scenarioByName,
  sampleQuantiles,
  tokenizeText,
} from '../src/index.js'
import { tracePath } from './helpers.js'

describe('built-in agentic workload (calibrated to the research prototype’s SWE-bench trace)', () => {
  const w = generateAgenticWorkload({ seed: 1 })
  it('has 52 sessions and about 4,449 requests', () => {
    expect(w.sessions).toBe(52)
    expect(w.turns.length).toBeGreaterThan(4_449 * 0.85)
    expect(w.turns.length).toBeLessThan(4_449 * 1.15)
  })
  it('draws think times with the prototype’s p10/p50/p90/p99 = 1.6/2.5/7.8/25.1 s', () => {
    const s = computeTraceStats(w)
    const gaps = w.turns
      .filter((t) => t.turnIndex > 0)
      .map((t) => t.thinkMs / 1000)
      .sort((a, b) => a - b)
    const q = (p: number) => gaps[Math.floor(p * (gaps.length - 1))]!
    expect(q(0.1)).toBeCloseTo(1.6, 0)
    expect(Math.abs(q(0.5) - 2.5) / 2.5).toBeLessThan(0.1)
    expect(Math.abs(q(0.9) - 7.8) / 7.8).toBeLessThan(0.1)
    expect(Math.abs(q(0.99) - 25.1) / 25.1).toBeLessThan(0.3)
    expect(s.thinkS?.p50).toBeCloseTo(q(0.5), 0)
    expect(sampleQuantiles(DEFAULT_GAP_QUANTILES, 0.99)).toBeCloseTo(25.1, 5)
  })
  it('grows sessions to peaks of 30–60K tokens, each prompt extending the previous prompt and output', () => {
    const peaks = new Map<number, number>()
    for (const t of w.turns) peaks.set(t.session, Math.max(peaks.get(t.session) ?? 0, t.inputLength))
    for (const p of peaks.values()) {
      expect(p).toBeGreaterThan(25_000)
      expect(p).toBeLessThanOrEqual(60_000)
    }
    const t1 = w.turns[1]!
    const p0 = w.promptTokens(0)
    const o0 = w.outputTokens(0)!
    const p1 = w.promptTokens(1)
    expect(t1.session).toBe(0)
    expect(Array.from(p1.subarray(0, p0.length))).toEqual(Array.from(p0))
    expect(Array.from(p1.subarray(p0.length, p0.length + o0.length))).toEqual(Array.from(o0))
    expect(p1.length).toBe(p0.length + o0.length + t1.appendTokens)
  })
  it('shares one system prompt across sessions', () => {
    const a = w.promptTokens(0)
    const b = w.promptTokens(w.turns.find((t) => t.session === 1)!.id)
    expect(Array.from(a.subarray(0, 6000))).toEqual(Array.from(b.subarray(0, 6000)))
  })
  it('is deterministic in its seed', () => {
    const again = generateAgenticWorkload({ seed: 1 })
    expect(again.turns).toEqual(w.turns)
    expect(generateAgenticWorkload({ seed: 2 }).turns).not.toEqual(w.turns)
  })
  it('validates options', () => {
    expect(() => generateAgenticWorkload({ seed: 1, sessions: 0 })).toThrow(SimError)
    expect(() => generateAgenticWorkload({ seed: 1, peakInputMin: 10, peakInputMax: 5 })).toThrow(/peakInput/)
  })
})

describe('fixed-shape agentic sessions (turnsPerSession) and the dynamo-agentic scenario', () => {
  const opts = { ...SCENARIOS['dynamo-agentic'].workload, sessions: 30 }
  const w = generateAgenticWorkload({ ...opts, seed: 5 })
  it('gives every session exactly the stated number of turns, in order, prompts extending prompt and output', () => {
    expect(w.sessions).toBe(30)
    expect(w.turns.length).toBe(30 * 20)
    const perSession = new Map<number, number[]>()
    for (const t of w.turns) perSession.set(t.session, [...(perSession.get(t.session) ?? []), t.turnIndex])
    expect(perSession.size).toBe(30)
    for (const idx of perSession.values()) expect(idx).toEqual(Array.from({ length: 20 }, (_, i) => i))
    for (const t of w.turns) {
      if (t.turnIndex === 0) continue
      const prev = w.turns[t.id - 1]!
      const p = w.promptTokens(t.id)
      expect(p.length).toBe(t.inputLength)
      expect(t.inputLength).toBe(prev.inputLength + prev.outputLength + t.appendTokens)
      expect(Array.from(p.subarray(0, prev.inputLength))).toEqual(Array.from(w.promptTokens(prev.id)))
    }
  })
  it('starts every session at time 0, shares the 2,000-token system prompt, outputs of ≈ 225 tokens on average', () => {
    expect(w.turns.filter((t) => t.turnIndex === 0).every((t) => t.arrivalMs === 0)).toBe(true)
    const a = w.promptTokens(0)
    const b = w.promptTokens(w.turns.find((t) => t.session === 7)!.id)
    expect(Array.from(a.subarray(0, 2000))).toEqual(Array.from(b.subarray(0, 2000)))
    expect(a[2000]).not.toBe(b[2000])
    const mean = w.turns.reduce((s, t) => s + t.outputLength, 0) / w.turns.length
    expect(mean).toBeGreaterThan(180)
    expect(mean).toBeLessThan(280)
  })
  it('is deterministic per seed: the same seed gives the same turns and tokens, another seed others', () => {
    const again = generateAgenticWorkload({ ...opts, seed: 5 })
    expect(again.turns).toEqual(w.turns)
    for (const id of [0, 19, 321, 599]) {
      expect(Array.from(again.promptTokens(id))).toEqual(Array.from(w.promptTokens(id)))
      expect(Array.from(again.outputTokens(id)!)).toEqual(Array.from(w.outputTokens(id)!))
    }
    const other = generateAgenticWorkload({ ...opts, seed: 6 })
    expect(other.turns.length).toBe(600)
    expect(other.turns).not.toEqual(w.turns)
  })
  it('does not end a session at its peak when the turn count is fixed, and validates the count', () => {
    const long = generateAgenticWorkload({ seed: 1, sessions: 2, turnsPerSession: 500, peakInputMax: 30_000 })
    expect(long.turns.length).toBe(1000)
    expect(() => generateAgenticWorkload({ seed: 1, turnsPerSession: 0 })).toThrow(/turnsPerSession/)
    expect(() => generateAgenticWorkload({ seed: 1, turnsPerSession: 2.5 })).toThrow(SimError)
  })
  it('names the scenario settings and refuses an unknown scenario', () => {
    const s = scenarioByName('dynamo-agentic')
    expect([s.workload.sessions, s.workload.turnsPerSession, s.capacityTokens, s.pageSize]).toEqual([
      2200,
      20,
      16_384 * 64,
      64,
    ])
    expect(s.maxConcurrentSessions).toBe(1024)
    expect(() => scenarioByName('toString')).toThrow(/unknown scenario "toString"/)
  })
})

describe('Mooncake loader', () => {
  const line = (o: unknown) => JSON.stringify(o)
  it('expands hash ids into deterministic pages and ends prompts with a generation token', () => {
    const w = parseMooncakeTrace(
      `${line({ timestamp: 0, input_length: 600, output_length: 5, hash_ids: [0, 1] })}\n${line({ timestamp: 9, input_length: 100, output_length: 0, hash_ids: [0] })}\n`,
      'x.jsonl',
    )
    expect(w.turns.map((t) => t.inputLength)).toEqual([600, 100])
    expect(w.turns[1]!.outputLength).toBe(1)
    expect(w.turns[1]!.arrivalMs).toBe(9)
    const a = w.promptTokens(0)
    const b = w.promptTokens(1)
    expect(a.length).toBe(1025)
    expect(Array.from(a.subarray(0, 512))).toEqual(Array.from(b.subarray(0, 512)))
    expect(a[1024]).not.toBe(b[512])
    expect(w.turns[1]!.reuseFraction).toBe(1)
  })
  const bad: [string, string, RegExp][] = [
    ['{"timestamp": 0, "input_length": 10', '(json)', /x\.jsonl:2: field "\(json\)"/],
    [
      line({ timestamp: -1, input_length: 10, output_length: 1, hash_ids: [0] }),
      'timestamp',
      /x\.jsonl:2: field "timestamp"/,
    ],
    [
      line({ timestamp: 0, input_length: 0, output_length: 1, hash_ids: [] }),
      'input_length',
      /field "input_length"/,
    ],
    [
      line({ timestamp: 0, input_length: 10, output_length: 'a', hash_ids: [0] }),
      'output_length',
      /field "output_length"/,
    ],
    [
      line({ timestamp: 0, input_length: 1000, output_length: 1, hash_ids: [0] }),
      'hash_ids',
      /has 1 ids but input_length 1000 needs/,
    ],
    [
      line({ timestamp: 0, input_length: 10, output_length: 1, hash_ids: [-3] }),
      'hash_ids[0]',
      /field "hash_ids\[0\]"/,
    ],
  ]
  for (const [text, field, re] of bad) {
    it(`names file, line and field on bad ${field}`, () => {
      const good = line({ timestamp: 0, input_length: 10, output_length: 1, hash_ids: [0] })
      try {
        parseMooncakeTrace(`${good}\n${text}\n`, 'x.jsonl')
        expect.unreachable()
      } catch (err) {
        expect(err).toBeInstanceOf(SimError)
        const e = err as SimError
        expect(e.code).toBe('INVALID_TRACE')
        expect(e.message).toMatch(re)
        expect(e.location).toEqual({ file: 'x.jsonl', line: 2, field })
      }
    })
  }
  it('refuses an empty trace', () => {
    expect(() => parseMooncakeTrace('\n\n', 'e.jsonl')).toThrow(/no requests/)
  })
})

describe('LMCache loader', () => {
  const call = (ts: number, input: string, output = 'ok', sid = 'a') =>
    JSON.stringify({ timestamp: ts, input, output, session_id: sid })
  it('sorts calls by timestamp, keeps sessions apart and skips empty inputs', () => {
    const w = parseLmcacheTrace(
      [
        [
          'a.jsonl',
          `${call(3_000_000, 'hello world again')}\n${call(1_000_000, 'hello world')}\n${call(2_000_000, '')}\n`,
        ],
        ['b.jsonl', `${call(5, 'other', 'x', 'b')}\n`],
        ['c.jsonl', ''],
      ],
      { sessionSpacingS: 1 },
    )
    expect(w.sessions).toBe(2)
    expect(w.sessionLabels).toEqual(['b', 'a'])
    const a = w.turns.filter((t) => t.session === 1)
    expect(a.map((t) => t.arrivalMs)).toEqual([1000, 3000])
    expect(a[1]!.reuseFraction).toBeGreaterThan(0.5)
    expect(w.notes.join(' ')).toMatch(/1 calls with an empty input/)
    expect(w.notes.join(' ')).toMatch(/1 empty session files/)
  })
  it('names file, line and field on bad data', () => {
    expect(() => parseLmcacheTrace([['s.jsonl', `${call(1, 'x')}\n{"timestamp": 2, "input": 5}\n`]])).toThrow(
      /s\.jsonl:2: field "input"/,
    )
    expect(() => parseLmcacheTrace([['s.jsonl', `${call(1, 'x')}\n${call(2, 'y', 'o', 'zz')}\n`]])).toThrow(
      /s\.jsonl:2: field "session_id"/,
    )
  })
  it('tokenizes deterministically and prefix-stably', () => {
    const a = tokenizeText('def foo(bar): return bar + 1')
    const b = tokenizeText('def foo(bar): return bar + 1 # and more')
    expect(Array.from(b.subarray(0, a.length))).toEqual(Array.from(a))
    expect(tokenizeText('é', 'bytes').length).toBe(2)
  })
  const dir = tracePath('lmcache-agent-trace/miniswe')
  it.skipIf(dir === undefined)('loads the real miniswe sessions (20 sessions, 402 calls)', () => {
    const w = loadLmcacheTrace(dir!)
    expect(w.sessions).toBe(20)
    expect(w.turns.length).toBe(402)
    // docs/design/traces.md#lmcache-agent-traces: 93.6% char-level ideal prefix reuse; the piece tokenizer lands close.
    expect(computeTraceStats(w).idealHitRatioTokens).toBeGreaterThan(0.85)
  })
})

describe('Azure loader', () => {
  it('parses lengths and arrival times, with unique tokens per request', () => {
    const w = parseAzureTrace(
      'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,0\n',
      'a.csv',
    )
    expect(w.turns.map((t) => t.inputLength)).toEqual([374, 396])
    expect(w.turns[1]!.arrivalMs).toBeCloseTo(4314.579, 3)
    expect(w.promptTokens(0)[0]).not.toBe(w.promptTokens(1)[0])
  })
  it('names file, line and column on bad data', () => {
    expect(() => parseAzureTrace('TIMESTAMP,Context,Generated\n', 'a.csv')).toThrow(
      /a\.csv:1: field "\(header\)"/,
    )
    expect(() =>
      parseAzureTrace('TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n', 'a.csv'),
    ).toThrow(/a\.csv:2: field "TIMESTAMP"/)
    expect(() =>
      parseAzureTrace('TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,0,1\n', 'a.csv'),
    ).toThrow(/a\.csv:2: field "ContextTokens"/)
    expect(() =>
      parseAzureTrace('TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5\n', 'a.csv'),
    ).toThrow(/a\.csv:2: field "\(row\)"/)
  })
})

describe('the workload statistics of an experiment', () => {
  it('count pages of the page size the runs used (--page-size), not the default 16', async () => {
    const options = { sessions: 3, maxTurnsPerSession: 4 }
    const w = generateAgenticWorkload({ seed: 1, ...options })
    const r = await runExperiment({
      workload: { kind: 'agentic', options },
      topology: '1P1D',
      policies: ['kvc'],
      seeds: [1],
      pageSize: 64,
      bootstrapResamples: 10,
    })
    const at64 = computeTraceStats(w, 64)
    expect(computeTraceStats(w, 16).totalPages).not.toBe(at64.totalPages)
    expect(r.config.pageSize).toBe(64)
    expect(r.config.workload.totalPages).toBe(at64.totalPages)
    expect(r.config.workload.idealHitRatioPages).toBe(at64.idealHitRatioPages)
  })
})
