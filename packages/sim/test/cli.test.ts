import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { runCli } from '../src/cli/main.js'
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

  it('compare writes report.html and results.json and prints a table', async () => {
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
        'kvc,round-robin',
        '--bootstrap',
        '20',
        '--jobs',
        '1',
        '--out',
        out,
      ],
      c.io,
    )
    expect(code).toBe(0)
    const text = c.out.join('\n')
    expect(text).toMatch(/policy\s+topology\s+TTFT p50/)
    expect(text).toMatch(/round-robin\s+1P2D/)
    expect(existsSync(join(out, 'report.html'))).toBe(true)
    const json = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8'))
    expect(json.config.policies).toEqual(['kvc', 'round-robin'])
    expect(json.runs).toHaveLength(6)
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
