import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { runCli } from '../src/cli/main.js'
import { MAX_TRACE_BYTES, readTextCapped } from '../src/workload/traceFiles.js'
import { REPO_ROOT } from './helpers.js'

function capture() {
  const out: string[] = []
  const err: string[] = []
  return { io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l), isTTY: false }, out, err }
}

const tmp = mkdtempSync(join(tmpdir(), 'kvc-sim-files-'))

/**
 * Runs the CLI in a child process, killed after `limitMs` (a wide margin: a hang, not a slow
 * run, is what fails). Resolves to its exit code (`null` when it was killed) and its output.
 */
function runChild(
  args: readonly string[],
  limitMs = 120_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--conditions=@kvc/source', '--import', 'tsx', 'packages/sim/src/cli/main.ts', ...args],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    )
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString()
    })
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString()
    })
    const timer = setTimeout(() => child.kill('SIGKILL'), limitMs)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}

describe('kvc-sim and files: outputs checked before running, reads capped, bad numbers quoted', () => {
  it('--out that cannot be a folder fails with exit 2 before any simulation runs', async () => {
    for (const out of ['/dev/null/x', join(tmp, 'a-file')]) {
      writeFileSync(join(tmp, 'a-file'), 'in the way')
      const c = capture()
      expect(await runCli(['run', '--seeds', '1', '--sessions', '2', '--out', out], c.io)).toBe(2)
      expect(c.err.join('\n')).toMatch(
        /^kvc-sim: --out ".*": (cannot create the output folder|exists and is not a folder)/,
      )
      // Nothing ran: no comparison table was printed.
      expect(c.out).toEqual([])
    }
  })

  it.skipIf(!existsSync('/proc/self'))('--out under /proc ends at once with exit 2 (no hang)', async () => {
    const r = await runChild([
      'run',
      '--seeds',
      '1',
      '--sessions',
      '2',
      '--out',
      '/proc/nope/x',
      '--no-progress',
    ])
    expect(r.code).toBe(2)
    expect(r.stderr).toMatch(/--out "\/proc\/nope\/x": cannot create the output folder/)
    expect(r.stdout).toBe('')
  })

  it.skipIf(!existsSync('/dev/zero'))('trace stats /dev/zero ends with an error (no hang)', async () => {
    const r = await runChild(['trace', 'stats', '/dev/zero'])
    expect(r.code).toBe(2)
    expect(r.stderr).toMatch(/\/dev\/zero:1: field "\(file\)": holds binary data/)
  })

  it('reads stop at the cap: an endless text source fails as too large, a directory as unreadable', () => {
    const f = join(tmp, 'big.jsonl')
    writeFileSync(f, '{"timestamp": 0}\n'.repeat(1000))
    expect(() => readTextCapped(f, 100)).toThrow(/larger than 100 bytes \(17000 bytes\)/)
    expect(readTextCapped(f, 17_000)).toHaveLength(17_000)
    expect(() => readTextCapped(tmp)).toThrow(/it is a directory/)
    expect(MAX_TRACE_BYTES).toBeGreaterThanOrEqual(256 * 1024 * 1024)
    // A source without a size (a character device) is cut at the cap while it is read.
    if (existsSync('/dev/urandom')) {
      expect(() => readTextCapped('/dev/urandom', 4 << 20)).toThrow(/binary data|larger than/)
    }
  })

  it('a number too large for a double is quoted as written (1e400), not shown as null', async () => {
    const f = join(tmp, 'inf.jsonl')
    writeFileSync(
      f,
      '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n{"timestamp": 1, "input_length": 1e400, "output_length": 1, "hash_ids": [0]}\n',
    )
    const c = capture()
    expect(await runCli(['trace', 'stats', f], c.io)).toBe(2)
    const msg = c.err.join('\n')
    expect(msg).toMatch(/inf\.jsonl:2: field "input_length": .*\(got 1e400\)/)
    expect(msg).not.toContain('null')
  })

  it('a fault file is read with a cap too, and its errors say so', async () => {
    const c = capture()
    expect(await runCli(['run', '--seeds', '1', '--faults', join(tmp, 'none.json')], c.io)).toBe(2)
    expect(c.err.join('\n')).toMatch(/cannot read fault file .*none\.json: no such file/)
  })
})
