import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createProxy, resolveConfig } from '@kvc/example-proxy'
import { type ExperimentConfig, type RunResult, computeRunMetrics, runExperiment } from '@kvc/sim'
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { afterAll, describe, expect, it } from 'vitest'
import { main } from '../src/cli.js'
import { replayTask, runReplay } from '../src/replay.js'
import { emulatedTarget, externalTarget } from '../src/targets.js'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'

/** A tiny agentic workload: 4 sessions of up to 4 turns, prompts of 1-3K tokens, short outputs. */
const TINY = {
  sessions: 4,
  maxTurnsPerSession: 4,
  sharedPrefixTokens: 512,
  taskTokensMedian: 300,
  appendMedian: 60,
  appendMax: 400,
  outputMedian: 12,
  outputMax: 24,
  peakInputMin: 2_000,
  peakInputMax: 3_000,
  sessionStartMeanS: 1,
}

const CONFIG: ExperimentConfig = {
  workload: { kind: 'agentic', options: TINY },
  topology: '1P2D',
  policies: ['kvc', 'round-robin'],
  seeds: [1],
  timeScale: 100, // think times ÷ 100
  costModel: { capacityTokens: 32_768 },
  bootstrapResamples: 20,
}
const FAST = { capacityTokens: 32_768, scale: 0.005 }
const ROUTER = { backoffBaseMs: 10, backoffCapMs: 200 }

const dir = mkdtempSync(join(tmpdir(), 'kvc-replay-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('replay against emulators on loopback', () => {
  it('records the simulator’s metrics for every run (direct policy), every turn accounted for', async () => {
    const baseline = handleCounts()
    const { real, simulated } = await runReplay(CONFIG, {
      target: emulatedTarget(FAST),
      via: { kind: 'direct' },
      router: ROUTER,
      compare: true,
    })
    const turns = real.config.workload.requests
    expect(turns).toBeGreaterThanOrEqual(8)
    expect(real.runs).toHaveLength(2)
    for (const run of real.runs) {
      expect(run.accounting).toMatchObject({
        turns,
        completed: turns,
        failed: 0,
        balanced: true,
        poolsBalanced: true,
      })
      expect(run.metrics.turns).toBe(turns)
      expect(run.metrics.prefixHitRatio).toBeGreaterThan(0)
      expect(run.metrics.ttft.p50).toBeGreaterThan(0)
      expect(run.metrics.e2e.p50).toBeGreaterThanOrEqual(run.metrics.ttft.p50)
      expect(run.topology).toBe('1P2D')
    }
    const [kvc, rr] = real.policies
    // kvc serves later turns on the fast path; round-robin seeds every turn through the P.
    expect(kvc!.paths.fast).toBeGreaterThan(turns / 2)
    expect(rr!.paths.seed).toBe(turns)
    expect(real.runs[0]!.counters.admissions).toBeGreaterThanOrEqual(turns)
    expect(real.runs[1]!.counters.admissions).toBe(0)
    expect(real.runs[1]!.counters.transfers).toBe(turns)
    expect(kvc!.usage.length).toBe(2) // KV usage over time of d0 and d1
    expect(kvc!.usage[0]!.timesS.length).toBeGreaterThan(0)
    // The same metrics as the simulator, computed by its own code.
    expect(Object.keys(real.runs[0]!.metrics).sort()).toEqual(Object.keys(simulated!.runs[0]!.metrics).sort())
    expect(Object.keys(real.policies[0]!.estimates).sort()).toEqual(
      Object.keys(simulated!.policies[0]!.estimates).sort(),
    )
    expect(real.strata.turnIndex.length).toBeGreaterThan(0)
    expect(simulated!.runs[0]!.metrics.turns).toBe(turns)
    // Routing and cache outcomes agree with the simulation of the same experiment (latencies do not:
    // the emulators run 200× faster than the calibrated cost model).
    for (const [i, p] of real.policies.entries()) {
      const s = simulated!.policies[i]!
      expect(p.estimates.fast_path_rate.value).toBe(s.estimates.fast_path_rate.value)
      expect(p.estimates.error_rate.value).toBe(s.estimates.error_rate.value)
      expect(Math.abs(p.prefixHitRatio - s.prefixHitRatio)).toBeLessThan(0.15)
    }
    expect(await leakedSince(baseline)).toEqual({})
  })

  it('through the kvc proxy (in process): the proxy’s kvc record gives path, worker and cache hits', async () => {
    const baseline = handleCounts()
    const r = await replayTask(
      {
        index: 0,
        policy: 'kvc',
        seed: 2,
        workload: CONFIG.workload,
        topology: '1P2D',
        timeScale: 100,
        costModel: {},
        faults: [],
      },
      { target: emulatedTarget(FAST), via: { kind: 'proxy' }, router: ROUTER },
    )
    const m = computeRunMetrics(r, 98_304)
    expect(m.failed).toBe(0)
    expect(m.fastPathRate).toBeGreaterThan(0.5)
    expect(r.records.every((x) => x.workerId === 'd0' || x.workerId === 'd1')).toBe(true)
    // Later turns of a session find its history on the D (real output ids spliced into the prompts).
    const later = r.records.filter((x) => x.turnIndex > 0)
    expect(later.length).toBeGreaterThan(0)
    // Everything but the append (and the last partial page) was found cached on the D.
    for (const x of later) expect(x.cachedTokens).toBeGreaterThanOrEqual(x.inputLength - x.appendTokens - 16)
    expect(r.counters.admissions).toBeGreaterThanOrEqual(r.records.length)
    expect(await leakedSince(baseline)).toEqual({})
  })

  it('a trace file through the simulator’s loader, against external workers and a proxy at a URL', async () => {
    const baseline = handleCounts()
    // A Mooncake-format trace: 6 requests sharing block prefixes (64-token blocks, 16-token pages).
    const trace = join(dir, 'tiny.jsonl')
    const rows = [
      [0, [1, 2, 3]],
      [300, [1, 2, 4]],
      [600, [1, 2, 3, 5]],
      [900, [6, 7]],
      [1200, [1, 2, 3, 5, 8]],
      [1500, [6, 7, 9]],
    ] as const
    writeFileSync(
      trace,
      rows
        .map(([ts, ids]) =>
          JSON.stringify({ timestamp: ts, input_length: ids.length * 64, output_length: 4, hash_ids: ids }),
        )
        .join('\n'),
    )
    const emus = await Promise.all([
      createSglangEmulator({
        role: 'prefill',
        capacityTokens: 16_384,
        pageSize: 16,
        timing: { scale: 0.005 },
        kvEvents: false,
      }),
      createSglangEmulator({
        role: 'decode',
        capacityTokens: 16_384,
        pageSize: 16,
        timing: { scale: 0.005 },
      }),
    ])
    const workers = [
      { id: 'p0', role: 'prefill' as const, url: emus[0].url },
      { id: 'd0', role: 'decode' as const, url: emus[1].url },
    ]
    const proxy = await createProxy(resolveConfig({ listen: { port: 0 }, workers, decisionLog: 'off' }))
    let results: readonly RunResult[] = []
    try {
      const real = await runExperiment(
        {
          workload: { kind: 'trace', path: trace, traceBlockTokens: 64, pageTokens: 16 },
          topology: '1P1D',
          policies: ['kvc'],
          seeds: [1],
          bootstrapResamples: 10,
        },
        {
          runner: (tasks, onProgress) =>
            Promise.all(
              tasks.map((t) =>
                replayTask(t, {
                  target: externalTarget(workers),
                  via: { kind: 'url', url: proxy.url },
                  onProgress,
                }),
              ),
            ),
          onResults: (r) => {
            results = r
          },
        },
      )
      const run = real.runs[0]!
      expect(run.accounting).toMatchObject({ turns: 6, completed: 6, balanced: true })
      expect(run.topology).toBe('1P1D')
      // Blocks shared with a request that had ended when a request arrived are found cached (how
      // many requests overlap is the machine's business: a busy one makes them overlap more).
      const recs = [...results[0]!.records].sort((x, y) => x.arrivalMs - y.arrivalMs)
      let checked = 0
      for (const r of recs) {
        const ids = rows[r.id]![1]
        const shared = recs.some((q) => {
          const qids = rows[q.id]![1]
          return q !== r && q.status === 'completed' && q.endMs <= r.arrivalMs && qids[0] === ids[0]
        })
        if (!shared) continue
        checked++
        expect(r.cachedTokens, `request ${r.id}`).toBeGreaterThan(0)
      }
      expect(checked).toBeGreaterThan(0)
      expect(run.metrics.prefixHitRatio).toBeGreaterThan(0)
    } finally {
      await proxy.close()
      await Promise.all(emus.map((e) => e.close()))
    }
    expect(await leakedSince(baseline)).toEqual({})
  })
})

describe('the kvc-replay command', () => {
  it('writes results.json, report.html and, with --compare-sim, the simulation and the side-by-side verdicts', async () => {
    const out = join(dir, 'out')
    const lines: string[] = []
    const io = { out: (l: string) => lines.push(l), err: () => {} }
    const code = await main(
      [
        '--sessions',
        '3',
        ...Object.entries(TINY)
          .filter(([k]) => k !== 'sessions')
          .flatMap(([k, v]) => ['--workload', `${k}=${v}`]),
        '--topology',
        '1P2D',
        '--policies',
        'kvc,round-robin',
        '--time-scale',
        '100',
        '--emulator-scale',
        '0.005',
        '--capacity',
        '32k',
        '--bootstrap',
        '10',
        '--compare-sim',
        '--out',
        out,
      ],
      io,
    )
    expect(code, lines.join('\n')).toBe(0)
    const text = lines.join('\n')
    expect(text).toMatch(/simulated vs replayed:/)
    expect(text).toMatch(/round-robin vs kvc\s+fast_path_rate\s+-1\s+-1\s+yes/)
    const results = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8'))
    expect(results.replay).toMatchObject({ target: 'emulated workers', via: 'direct', vocabSize: 151_936 })
    expect(results.comparison.rows.length).toBeGreaterThan(0)
    expect(results.policies.map((p: { policy: string }) => p.policy)).toEqual(['kvc', 'round-robin'])
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toMatch(
      /<h1>kvc-replay \(emulated workers, via direct\)/,
    )
    expect(JSON.parse(readFileSync(join(out, 'simulated.json'), 'utf8')).tool.name).toBe('kvc-sim')
  })

  it('refuses bad arguments with exit code 2 and a message naming them', async () => {
    const errs: string[] = []
    const io = { out: () => {}, err: (l: string) => errs.push(l) }
    expect(await main(['--policies', 'fastest'], io)).toBe(2)
    expect(errs.join('\n')).toMatch(/unknown policy "fastest"/)
    expect(await main(['--via', 'carrier-pigeon'], io)).toBe(2)
    expect(errs.join('\n')).toMatch(/--via must be direct, proxy or an http\(s\) URL/)
    expect(await main(['--via', 'http://127.0.0.1:1', '--policies', 'kvc,random'], io)).toBe(2)
    expect(await main(['--trace', 'x.jsonl', '--sessions', '3'], io)).toBe(2)
    expect(await main(['--workload', 'colour=3'], io)).toBe(2)
  })

  it('exits 1 naming the worker when a real worker cannot be reached', async () => {
    const baseline = handleCounts()
    const file = join(dir, 'workers.json')
    writeFileSync(
      file,
      JSON.stringify({ workers: [{ id: 'd0', role: 'decode', url: 'http://127.0.0.1:1' }] }),
    )
    const errs: string[] = []
    const code = await main(
      ['--workers', file, '--topology', '0P1D', '--sessions', '1', '--out', join(dir, 'x')],
      {
        out: () => {},
        err: (l) => errs.push(l),
      },
    )
    expect(code).toBe(1)
    expect(errs.join('\n')).toMatch(/worker d0 \(http:\/\/127\.0\.0\.1:1\) did not answer/)
    expect(await leakedSince(baseline)).toEqual({})
  })
})
