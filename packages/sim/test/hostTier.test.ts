import fc from 'fast-check'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  SimError,
  generateAgenticWorkload,
  hostTierFigures,
  loadBackBreakEven,
  loadLmcacheTrace,
  makeCostModel,
  parseHostTier,
  parsePolicySpec,
  renderHtmlReport,
  resolveHostTier,
  runExperiment,
  runSimulation,
  type RunResult,
} from '../src/index.js'
import { loadBackSeconds } from '../src/adapters/router.js'
import { tracePath } from './helpers.js'

describe('--host-tier', () => {
  it('parses none, multiples, token counts, the medium and the write policy', () => {
    expect(parseHostTier('none')).toBeUndefined()
    expect(parseHostTier('2x')).toEqual({ ratio: 2 })
    expect(parseHostTier('0.5x')).toEqual({ ratio: 0.5 })
    expect(parseHostTier('400k')).toEqual({ capacityTokens: 400_000 })
    expect(parseHostTier('1.5M:disk')).toEqual({ capacityTokens: 1_500_000, medium: 'disk' })
    expect(parseHostTier('4x+write_through')).toEqual({ ratio: 4, writePolicy: 'write_through' })
  })
  it('refuses anything else with INVALID_OPTION naming the value', () => {
    for (const bad of ['', 'x', '0x', '-2x', '2y', '2x:tape', 'none:disk', '0']) {
      const err = (() => {
        try {
          parseHostTier(bad)
        } catch (e) {
          return e
        }
      })() as SimError
      expect(err, bad).toBeInstanceOf(SimError)
      expect(err.code).toBe('INVALID_OPTION')
      expect(err.message).toContain('--host-tier')
      expect(err.value).toBe(bad)
    }
  })
  it('is a policy key too (hostTier=2x+disk; none overrides the run’s tier)', () => {
    expect(parsePolicySpec('kvc:hostTier=2x+disk').hostTier).toEqual({ ratio: 2, medium: 'disk' })
    expect(parsePolicySpec('kvc:hostTier=none').hostTier).toBeNull()
    expect(parsePolicySpec('kvc').hostTier).toBeUndefined()
    expect(() => parsePolicySpec('kvc:hostTier=lots')).toThrow(SimError)
  })
})

describe('resolving a tier against the device pool and the cost model', () => {
  it('sizes the tier in whole pages and derives the engine’s load-back threshold from the break-even', () => {
    const t = resolveHostTier({ ratio: 2 }, 200_000, 16, DEFAULT_COST_MODEL, 1)
    expect(t).toMatchObject({ capacityTokens: 400_000, medium: 'host', writePolicy: 'write_back' })
    expect(t.loadBackThreshold).toBe(loadBackBreakEven(DEFAULT_COST_MODEL, 'host') - 1)
    expect(
      resolveHostTier({ capacityTokens: 1_000 }, 200_000, 16, DEFAULT_COST_MODEL, 1).capacityTokens,
    ).toBe(992)
    expect(resolveHostTier({ capacityTokens: 3 }, 200_000, 16, DEFAULT_COST_MODEL, 1).capacityTokens).toBe(16)
    // A slower disk needs a longer hit before a load-back pays.
    const disk = resolveHostTier({ ratio: 1, medium: 'disk' }, 4096, 16, DEFAULT_COST_MODEL, 1)
    expect(disk.loadBackThreshold).toBeGreaterThan(t.loadBackThreshold)
  })
  it('the break-even is the first size at which a load-back beats the cheapest recompute', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 1_000, max: 100_000, noNaN: true }),
        fc.double({ min: 0, max: 1e-8, noNaN: true }),
        fc.double({ min: 0.5, max: 100, noNaN: true }),
        fc.double({ min: 0, max: 0.01, noNaN: true }),
        (tau, gamma, gbps, setup) => {
          const cm = makeCostModel({
            prefillTokensPerS: tau,
            prefillQuadraticS: gamma,
            hostLoadGBps: gbps,
            loadBackSetupS: setup,
          })
          const n = loadBackBreakEven(cm, 'host')
          const pays = (k: number) => loadBackSeconds(cm, k, 'host') < k / tau + (gamma * k * k) / 2
          if (!Number.isFinite(n)) {
            expect(pays(2 ** 20)).toBe(false)
            return
          }
          expect(pays(n)).toBe(true)
          if (n > 1) expect(pays(n - 1)).toBe(false)
          expect(pays(n * 3)).toBe(true)
        },
      ),
      { numRuns: 200 },
    )
  })
  it('refuses a bad tier spec', () => {
    expect(() => resolveHostTier({}, 1_000, 16, DEFAULT_COST_MODEL, 1)).toThrow(/exactly one/)
    expect(() => resolveHostTier({ ratio: 1, capacityTokens: 5 }, 1_000, 16, DEFAULT_COST_MODEL, 1)).toThrow(
      /exactly one/,
    )
    expect(() => resolveHostTier({ ratio: -1 }, 1_000, 16, DEFAULT_COST_MODEL, 1)).toThrow(/ratio/)
    expect(() => resolveHostTier({ ratio: 2 }, Number.POSITIVE_INFINITY, 16, DEFAULT_COST_MODEL, 1)).toThrow(
      /finite device capacity/,
    )
  })
})

describe('a run with a host tier', () => {
  // A KV-constrained cluster: 8 sessions on 1P2D with 80K tokens per worker evict.
  const w = generateAgenticWorkload({ seed: 2, sessions: 8, maxTurnsPerSession: 30 })
  const run = (policy: string, hostTier?: { ratio: number; medium?: 'host' | 'disk' }) =>
    runSimulation({
      workload: w,
      topology: { kind: 'pd', prefill: 1, decode: 2 },
      policy,
      seed: 1,
      costModel: { capacityTokens: 80_000 },
      ...(hostTier === undefined ? {} : { hostTier }),
    })
  let none: ReturnType<typeof run>
  let four: ReturnType<typeof run>
  beforeAll(() => {
    none = run('kvc')
    four = run('kvc', { ratio: 4 })
  })

  it('loads back instead of recomputing, every turn accounted and every pool balanced', () => {
    const f0 = hostTierFigures(none)
    const f4 = hostTierFigures(four)
    expect(four.accounting.balanced).toBe(true)
    expect(four.accounting.poolsBalanced).toBe(true)
    expect(four.accounting.failed).toBe(0)
    expect(f0.loadBacks).toBe(0)
    expect(f4.loadBacks).toBeGreaterThan(0)
    expect(f4.loadedBackTokens).toBeGreaterThan(0)
    // What was loaded back was not recomputed.
    expect(f4.reprefilledTokens).toBeLessThan(f0.reprefilledTokens)
  })
  it('splits the re-prefilled tokens by cause, adding up to the total', () => {
    for (const r of [none, four]) {
      const f = hostTierFigures(r)
      const by = f.reprefilledBy
      expect(by.sameDecodeReseed + by.migration + by.localSeed + by.fastPath).toBe(f.reprefilledTokens)
      expect(f.migrations).toBeLessThanOrEqual(f.reseeds)
      // A migration is a reseed onto another D than the session's previous turn's.
      const moved = r.records.filter((x) => x.turnIndex > 0 && x.path === 'seed' && x.migrated).length
      expect(f.migrations).toBeGreaterThanOrEqual(moved)
    }
  })
  it('a policy’s hostTier=none gives exactly the run without a tier', () => {
    const off = run('kvc:hostTier=none', { ratio: 4 })
    expect(off.records.map((r) => [r.firstTokenMs, r.computedTokens])).toEqual(
      none.records.map((r) => [r.firstTokenMs, r.computedTokens]),
    )
    expect(off.counters.loadBacks).toBe(0)
  })
  it('a disk tier loads back too (timed at the disk’s bandwidth)', () => {
    const disk = run('kvc', { ratio: 4, medium: 'disk' })
    expect(disk.accounting.failed).toBe(0)
    expect(disk.counters.loadBacks).toBeGreaterThan(0)
  })
})

describe('the report of a comparison with a host tier', () => {
  it('sums each policy’s load-backs and averages its tokens per trial, as hostTierFigures counts them', async () => {
    let raw: readonly RunResult[] = []
    const base = {
      workload: { kind: 'agentic' as const, options: { sessions: 8, maxTurnsPerSession: 30 } },
      topology: '1P2D',
      seeds: [1, 2],
      bootstrapResamples: 20,
      costModel: { capacityTokens: 80_000 },
    }
    const r = await runExperiment(
      { ...base, policies: ['kvc', 'kvc:hostTier=4x'] },
      { onResults: (x) => (raw = x) },
    )
    expect(raw).toHaveLength(4)
    for (const [p, summary] of r.policies.entries()) {
      const figs = raw.slice(p * 2, p * 2 + 2).map(hostTierFigures)
      expect(summary.hostTier.loadBacks).toBe(figs[0]!.loadBacks + figs[1]!.loadBacks)
      expect(summary.hostTier.loadedBackTokens).toBe(
        (figs[0]!.loadedBackTokens + figs[1]!.loadedBackTokens) / 2,
      )
      expect(summary.hostTier.reprefilledTokens).toBe(
        (figs[0]!.reprefilledTokens + figs[1]!.reprefilledTokens) / 2,
      )
      expect(summary.hostTier.peerFetchedTokens).toBe(0)
    }
    const [off, on] = r.policies
    expect(off!.hostTier.loadBacks).toBe(0)
    expect(on!.hostTier.loadBacks).toBeGreaterThan(0)
    const html = renderHtmlReport(r)
    const section = html.slice(html.indexOf('<h2>Host tier</h2>'))
    expect(html).toContain('<h2>Host tier</h2>')
    expect(section).toContain(`<td>${on!.hostTier.loadBacks}</td>`)
    // Without a tier anywhere (and no load-back), the report has no host-tier section.
    const plain = await runExperiment({ ...base, policies: ['kvc', 'round-robin'], seeds: [1] })
    expect(renderHtmlReport(plain)).not.toContain('<h2>Host tier</h2>')
  })
})

describe('the LMCache agent trace with a host tier', () => {
  const dir = tracePath('lmcache-agent-trace/miniswe')
  it.skipIf(dir === undefined)('runs with every turn accounted and loads back on a small device pool', () => {
    const workload = loadLmcacheTrace(dir!)
    const r = runSimulation({
      workload,
      topology: { kind: 'pd', prefill: 1, decode: 2 },
      policy: 'kvc',
      seed: 1,
      costModel: { capacityTokens: 60_000 },
      hostTier: { ratio: 2 },
    })
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
    expect(r.counters.loadBacks).toBeGreaterThan(0)
  })
})
