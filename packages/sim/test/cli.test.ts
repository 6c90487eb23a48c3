import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { runCli } from '../src/cli/main.js'
import { SCENARIOS, generateAgenticWorkload } from '../src/index.js'
import { REPO_ROOT } from './helpers.js'

function capture() {
  const out: string[] = []
  const err: string[] = []
  return { io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l), isTTY: false }, out, err }
}

const tmp = mkdtempSync(join(tmpdir(), 'kvc-sim-cli-'))

describe('kvc-sim command line', () => {
  const cases: [string[], number, RegExp][] = [
    [['compare', '--bogus'], 1, /unknown option '--bogus'/],
    [['frobnicate'], 1, /unknown command 'frobnicate'/],
    [['compare', '--topology', '2X3Y'], 2, /topology "2X3Y" not understood/],
    [['compare', '--seeds', 'many'], 2, /--seeds "many"/],
    [['compare', '--policies', 'kvc,best-ever'], 2, /unknown policy "best-ever"/],
    [['compare', '--policies', 'kvc:tauAppend=-5'], 2, /policy kvc:tauAppend=-5/],
    [['compare', '--policies', 'kvc:release=lazy'], 2, /release must be pressure or reaper/],
    [['compare', '--shared-prefix', 'big'], 2, /--shared-prefix "big": must be an integer/],
    [
      ['run', '--trace', 'x.jsonl', '--shared-prefix', '1024'],
      2,
      /--shared-prefix applies to the built-in workload only/,
    ],
    [['compare', '--max-concurrent-sessions', '0'], 2, /--max-concurrent-sessions "0"/],
    [['compare', '--capacity', 'lots'], 2, /--capacity "lots"/],
    [['compare', '--time-scale', '0'], 2, /--time-scale "0": must be a positive number/],
    [['compare', '--faults', 'meteor@1s'], 2, /unknown fault kind "meteor"/],
    [['compare', '--format', 'csv'], 1, /argument 'csv' is invalid/],
    [['run', '--trace', join(tmp, 'nope.jsonl')], 2, /cannot read trace .*nope\.jsonl: no such file/],
    [['trace', 'stats'], 2, /needs a trace path/],
    [['compare', '--slo', 'ttft=fast'], 2, /--slo "ttft=fast": "ttft=fast" not understood/],
    [['compare', '--slo', 'tpot=0ms'], 2, /tpot must be positive/],
    [['sweep', '--axis', 'load'], 1, /argument 'load' is invalid/],
    [['sweep', '--values', '2'], 2, /a sweep needs at least two values of time-scale/],
    [['sweep', '--axis', 'capacity', '--values', '100k,lots'], 2, /--capacity "lots"/],
    [['sweep', '--axis', 'sessions', '--values', '4,4'], 2, /sweep values of sessions repeat/],
    [['sweep', '--axis', 'pd-ratio', '--values', '2P6D,1P3D'], 2, /same number of GPUs/],
    [['compare', '--sweep', 'missing-sweep.json'], 2, /--sweep missing-sweep\.json: cannot read it as JSON/],
  ]
  for (const [argv, code, re] of cases) {
    it(`${argv.join(' ')} → exit ${code} with a clear message`, async () => {
      const c = capture()
      expect(await runCli(argv, c.io)).toBe(code)
      const text = c.err.join('\n')
      expect(text).toMatch(re)
      expect(text).not.toMatch(/\n\s+at /) // no stack trace
    })
  }

  it('a bad trace names its file, line and field', async () => {
    const f = join(tmp, 'bad.jsonl')
    writeFileSync(
      f,
      '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": "x"}\n',
    )
    const c = capture()
    expect(await runCli(['run', '--trace', f, '--out', join(tmp, 'o1')], c.io)).toBe(2)
    expect(c.err.join('\n')).toMatch(/bad\.jsonl:2: field "hash_ids": must be an array of block ids/)
    const c2 = capture()
    expect(await runCli(['trace', 'stats', f], c2.io)).toBe(2)
    expect(c2.err.join('\n')).toMatch(/bad\.jsonl:2/)
  })

  it('trace stats prints the ideal prefix hit ratio', async () => {
    const f = join(tmp, 'ok.jsonl')
    writeFileSync(
      f,
      '{"timestamp": 0, "input_length": 1024, "output_length": 3, "hash_ids": [0, 1]}\n{"timestamp": 5, "input_length": 1024, "output_length": 3, "hash_ids": [0, 2]}\n',
    )
    const c = capture()
    expect(await runCli(['trace', 'stats', f], c.io)).toBe(0)
    expect(c.out.join('\n')).toMatch(/ideal prefix hit ratio\s+25\.00% of pages/)
    const j = capture()
    expect(await runCli(['trace', 'stats', '--trace', f, '--json'], j.io)).toBe(0)
    expect(JSON.parse(j.out.join('\n')).requests).toBe(2)
  })

  it('compare writes report.html and results.json, prints the verdict and tables within 120 columns', async () => {
    const out = join(tmp, 'cmp')
    const c = capture()
    const code = await runCli(
      [
        'compare',
        '--sessions',
        '3',
        '--seeds',
        '3',
        '--topology',
        '1P2D',
        '--policies',
        'kvc,round-robin,dp-cache-aware:defaults=rust',
        '--bootstrap',
        '20',
        '--slo',
        'ttft=1s,tpot=30ms',
        '--jobs',
        '1',
        '--out',
        out,
      ],
      c.io,
    )
    expect(code).toBe(0)
    const text = c.out.join('\n')
    expect(text).toMatch(/^Verdict: /)
    expect(text).toMatch(/SLOs TTFT\u00a0≤\u00a01\u00a0s and TPOT\u00a0≤\u00a030\u00a0ms/)
    expect(text).toMatch(/policy\s+topology\s+goodput\s+TTFT p50/)
    expect(text).toMatch(/round-robin\s+1P2D/)
    expect(text).toMatch(/dp-cache-aware†\s+3xDP/)
    expect(text).toMatch(/† = :defaults=rust, the baseline with sgl-router's Rust cache-aware defaults/)
    expect(text).toMatch(/Paired against kvc/)
    for (const line of text.split('\n')) expect([...line].length, line).toBeLessThanOrEqual(120)
    // The turns of every trial, not the first seed's count repeated.
    const json = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8'))
    const perTrial: number[] = json.config.turnsPerTrial
    expect(perTrial).toHaveLength(3)
    const lo = Math.min(...perTrial)
    const hi = Math.max(...perTrial)
    expect(text).toContain(lo === hi ? `${lo} turns per trial` : `${lo}–${hi} turns per trial`)
    expect(json.config.policies).toEqual(['kvc', 'round-robin', 'dp-cache-aware:defaults=rust'])
    expect(json.config.slo).toEqual({ ttftS: 1, tpotS: 0.03 })
    expect(json.runs).toHaveLength(9)
    expect(json.policies[0].estimates.goodput.value).toBeGreaterThan(0)
    expect(existsSync(join(out, 'report.html'))).toBe(true)
    // Progress off a terminal: a first line before any run ends, then one per run.
    expect(c.err[0]).toMatch(/^kvc-sim: 9 runs \(3 policies × 3 seeds\) on 1 thread/)
    expect(c.err.filter((l) => /runs \d+\/9 done/.test(l)).length).toBeGreaterThanOrEqual(9)
  })

  it('a single-policy run prints no paired column', async () => {
    const c = capture()
    expect(
      await runCli(
        ['run', '--sessions', '2', '--topology', '1P1D', '--bootstrap', '10', '--out', join(tmp, 'one')],
        c.io,
      ),
    ).toBe(0)
    const text = c.out.join('\n')
    expect(text).toMatch(/Verdict: kvc alone: /)
    expect(text).not.toMatch(/Δ|Paired against/)
  })

  it('sweep writes sweep.html and sweep.json with the crossovers, and compare --sweep takes them in', async () => {
    const out = join(tmp, 'sweep')
    const c = capture()
    const argv = [
      '--sessions',
      '3',
      '--seeds',
      '2',
      '--topology',
      '1P2D',
      '--policies',
      'kvc,round-robin',
      '--bootstrap',
      '20',
      '--jobs',
      '1',
      '--no-progress',
    ]
    expect(
      await runCli(['sweep', ...argv, '--axis', 'capacity', '--values', '60k,200k', '--out', out], c.io),
    ).toBe(0)
    const text = c.out.join('\n')
    expect(text).toMatch(/^Verdict: At capacity 60K, .+ on goodput.*; at capacity 200K, /)
    expect(text).toMatch(/KV capacity\s+policy\s+goodput \[95% CI\]/)
    expect(text).toMatch(/^60K\s+kvc/m)
    expect(text).toMatch(/8 runs in [\d.]+ s wall on 1 threads?/)
    for (const line of text.split('\n')) expect([...line].length, line).toBeLessThanOrEqual(120)
    const json = JSON.parse(readFileSync(join(out, 'sweep.json'), 'utf8'))
    expect(json.config.axis).toBe('capacity')
    expect(json.points.map((p: { value: number }) => p.value)).toEqual([60_000, 200_000])
    expect(json.crossovers).toHaveLength(3)
    for (const x of json.crossovers) expect(text).toContain(x.text)
    expect(readFileSync(join(out, 'sweep.html'), 'utf8')).toMatch(/kvc-sim sweep over KV capacity/)
    const c2 = capture()
    const out2 = join(tmp, 'cmp-sweep')
    expect(await runCli(['compare', ...argv, '--sweep', join(out, 'sweep.json'), '--out', out2], c2.io)).toBe(
      0,
    )
    expect(c2.out.join('\n')).toContain(json.crossovers[0].text)
    expect(readFileSync(join(out2, 'report.html'), 'utf8')).toContain(
      json.crossovers[0].text.replace(/</g, '&lt;'),
    )
  })

  it('sweep --axis pd-ratio defaults to every nPmD split of the topology with n ≤ m', async () => {
    const out = join(tmp, 'sweep-pd')
    const c = capture()
    const argv = ['sweep', '--axis', 'pd-ratio', '--topology', '2P2D', '--sessions', '2', '--seeds', '1']
    const rest = ['--policies', 'kvc,round-robin', '--bootstrap', '10', '--jobs', '1', '--no-progress']
    expect(await runCli([...argv, ...rest, '--out', out], c.io)).toBe(0)
    const json = JSON.parse(readFileSync(join(out, 'sweep.json'), 'utf8'))
    expect(json.config.values).toEqual(['1P3D', '2P2D'])
    expect(json.points.map((p: { policies: { topology: string }[] }) => p.policies[1]!.topology)).toEqual([
      '1P3D',
      '2P2D',
    ])
    expect(c.out.join('\n')).toMatch(/^1P3D\s+kvc/m)
  })

  it('--scenario dynamo-agentic sets the workload and cluster; flags given replace its values', async () => {
    const out = join(tmp, 'scenario')
    const c = capture()
    const argv = ['run', '--scenario', 'dynamo-agentic', '--sessions', '3', '--turns-per-session', '4']
    const rest = ['--seeds', '1', '--bootstrap', '0', '--jobs', '1', '--no-progress', '--out', out]
    expect(await runCli([...argv, ...rest], c.io)).toBe(0)
    const json = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8'))
    expect(json.config.maxConcurrentSessions).toBe(1024)
    expect(json.config.capacityTokens).toBe(16_384 * 64)
    expect(json.config.pageSize).toBe(64)
    expect(json.config.turnsPerTrial).toEqual([12])
    expect(json.config.workload.turnsPerSession.max).toBe(4)
    // The scenario's generator options under the given flags: the same turns as generated directly.
    const w = generateAgenticWorkload({
      ...SCENARIOS['dynamo-agentic'].workload,
      sessions: 3,
      turnsPerSession: 4,
      seed: 1,
    })
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
    expect(json.config.workload.inputTokens.mean).toBeCloseTo(mean(w.turns.map((t) => t.inputLength)), 1)
    expect(json.config.workload.outputTokens.mean).toBeCloseTo(mean(w.turns.map((t) => t.outputLength)), 1)
    expect(c.out.join('\n')).toMatch(/12 turns per trial in 3 sessions/)
    const bad = capture()
    expect(await runCli(['run', '--scenario', 'dynamo-agentic', '--trace', 'x.jsonl', ...rest], bad.io)).toBe(
      2,
    )
    expect(bad.err.join('\n')).toMatch(/--scenario applies to the built-in workload only/)
  })

  it('run --records writes every turn', async () => {
    const out = join(tmp, 'run')
    const c = capture()
    expect(
      await runCli(
        ['run', '--sessions', '2', '--topology', '1P1D', '--bootstrap', '0', '--records', '--out', out],
        c.io,
      ),
    ).toBe(0)
    const lines = readFileSync(join(out, 'records.jsonl'), 'utf8').trim().split('\n')
    expect(lines.length).toBeGreaterThan(2)
    expect(JSON.parse(lines[0]!)).toHaveProperty('status')
  })

  it('the real process exits non-zero without a stack trace', () => {
    const r = spawnSync(
      process.execPath,
      [
        '--conditions=@kvc/source',
        '--import',
        'tsx',
        'packages/sim/src/cli/main.ts',
        'compare',
        '--seeds',
        '0',
      ],
      { cwd: REPO_ROOT, encoding: 'utf8', timeout: 60_000 },
    )
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/kvc-sim: --seeds 0: give 1 to 1000 seeds/)
    expect(r.stderr).not.toMatch(/\n\s+at /)
  })
})
