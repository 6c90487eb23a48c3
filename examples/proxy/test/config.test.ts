import { spawn } from 'node:child_process'
import { createServer } from 'node:net'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { afterAll, describe, expect, it } from 'vitest'
import { configFromArgs, main } from '../src/cli.js'
import { DEFAULT_CONFIG, resolveConfig } from '../src/config.js'
import { ProxyError } from '../src/errors.js'

const dir = mkdtempSync(join(tmpdir(), 'kvc-proxy-config-'))

/** A loopback port nothing listens on (taken, then given back). */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const workers = [
  { id: 'p0', role: 'prefill' as const, url: 'http://10.0.0.5:30000' },
  { id: 'd0', role: 'decode' as const, url: 'http://10.0.0.6:30001/' },
]

describe('configuration', () => {
  it('fills every default', () => {
    const c = resolveConfig({ workers })
    expect(c).toMatchObject({
      ...DEFAULT_CONFIG,
      workers: [workers[0], { ...workers[1], url: 'http://10.0.0.6:30001' }],
    })
  })

  it.each([
    [{}, /workers: give at least one worker/],
    [{ workers: [workers[0]] }, /need at least one decode worker/],
    [{ workers: [...workers, workers[1]] }, /duplicate worker id d0/],
    [{ workers: [{ ...workers[1], url: 'ftp://x' }] }, /workers\[0\]\.url: must be an http\(s\) URL/],
    [{ workers: [{ ...workers[1], role: 'both' }] }, /workers\[0\]\.role/],
    [{ workers, policy: 'fastest' }, /policy: unknown policy "fastest"/],
    [{ workers, router: { tauReject: 0 } }, /router: .*tauReject/],
    [{ workers, tokenizer: 'bpe' }, /tokenizer: must be 'estimate' or 'emulator'/],
    [{ workers, session: { sources: ['cookie'] } }, /session\.sources/],
    [{ workers, limits: { maxBodyBytes: 10 } }, /limits\.maxBodyBytes: must be an integer >= 64/],
    [{ workers, listen: { port: -1 } }, /listen\.port/],
    [{ workers, lissten: {} }, /\(root\)\.lissten: unknown key/],
    [{ workers, health: { intervalMs: 0 } }, /health\.intervalMs/],
    [
      { workers: [{ ...workers[1], kvEvents: { endpoint: 'http://x' } }] },
      /kvEvents\.endpoint: must be a tcp:\/\/ endpoint/,
    ],
    [{ workers, stateStore: 'etcd://10.0.0.9:2379' }, /stateStore\.url: must be memory, nats:/],
    [{ workers, stateStore: 'nats://a:4222,redis://b:6379' }, /stateStore\.url/],
    [{ workers, stateStore: { url: 'redis://r:6379', name: 'a b' } }, /stateStore\.name/],
    [
      { workers, stateStore: { url: 'redis://r:6379', heartbeatMs: 5_000 } },
      /stateStore\.heartbeatMs: must be less/,
    ],
    [{ workers, stateStore: { url: 'redis://r:6379', readyWhenDegraded: 'yes' } }, /readyWhenDegraded/],
    [{ workers, stateStore: { url: 'redis://r:6379', ttl: 1 } }, /stateStore\.ttl: unknown key/],
  ])('refuses %j', (input, message) => {
    expect(() => resolveConfig(input as never)).toThrow(message)
    try {
      resolveConfig(input as never)
    } catch (e) {
      expect(e).toBeInstanceOf(ProxyError)
      expect((e as ProxyError).code).toBe('INVALID_CONFIG')
    }
  })

  it('flags override the file; worker flags replace the file’s workers', () => {
    const file = join(dir, 'proxy.json')
    writeFileSync(
      file,
      JSON.stringify({
        listen: { host: '0.0.0.0', port: 9000 },
        workers,
        router: { tauAppend: 4096, tauReject: 5 },
        limits: { maxPromptTokens: 1000 },
        session: { header: 'x-conversation' },
      }),
    )
    const a = configFromArgs([
      '--config',
      file,
      '--port',
      '9100',
      '--tau-append',
      '2048',
      '--router',
      'loadFloorK=50',
    ])
    expect(a.config.listen).toEqual({ host: '0.0.0.0', port: 9100 })
    expect(a.config.router).toEqual({ tauAppend: 2048, tauReject: 5, loadFloorK: 50 })
    expect(a.config.limits.maxPromptTokens).toBe(1000)
    expect(a.config.session.header).toBe('x-conversation')
    expect(a.config.workers).toHaveLength(2)
    const b = configFromArgs([
      '-c',
      file,
      '--decode',
      'dx=http://127.0.0.1:1',
      '--decode',
      'dy=http://127.0.0.1:2',
      '--policy',
      'round-robin',
      '--session-sources',
      'header,user',
      '--decision-log',
      'off',
    ])
    expect(b.config.workers.map((w) => w.id)).toEqual(['dx', 'dy'])
    expect(b.config.policy).toBe('round-robin')
    expect(b.config.session.sources).toEqual(['header', 'user'])
    expect(b.config.decisionLog).toBe('off')
  })

  it('shared state store: memory by default; a URL or an object in the file; flags win', () => {
    expect(resolveConfig({ workers }).stateStore).toEqual({
      url: 'memory',
      name: 'kvc',
      bindingTtlMs: DEFAULT_CONFIG.session.idleTimeoutMs,
      readyWhenDegraded: true,
    })
    expect(
      resolveConfig({ workers, stateStore: 'nats://10.0.0.5:4222, nats://10.0.0.6:4222' }).stateStore.url,
    ).toBe('nats://10.0.0.5:4222, nats://10.0.0.6:4222')
    const o = resolveConfig({
      workers,
      session: { idleTimeoutMs: 60_000 },
      stateStore: { url: 'redis://10.0.0.7:6379/2', name: 'kvc-prod', replicaTtlMs: 3_000, heartbeatMs: 500 },
    }).stateStore
    expect(o).toEqual({
      url: 'redis://10.0.0.7:6379/2',
      name: 'kvc-prod',
      bindingTtlMs: 60_000, // the session idle timeout
      replicaTtlMs: 3_000,
      heartbeatMs: 500,
      readyWhenDegraded: true,
    })
    const file = join(dir, 'store.json')
    writeFileSync(file, JSON.stringify({ workers, stateStore: { url: 'redis://r:6379', opTimeoutMs: 250 } }))
    const c = configFromArgs([
      '-c',
      file,
      '--state-store',
      'nats://n:4222',
      '--state-store-name',
      'blue',
      '--replica-id',
      'proxy-1',
    ]).config.stateStore
    expect(c).toMatchObject({ url: 'nats://n:4222', name: 'blue', replicaId: 'proxy-1', opTimeoutMs: 250 })
    writeFileSync(file, JSON.stringify({ workers, stateStore: 'redis://r:6379' }))
    expect(configFromArgs(['-c', file, '--replica-id', 'p2']).config.stateStore).toMatchObject({
      url: 'redis://r:6379',
      replicaId: 'p2',
    })
  })

  it('main() exits 2 on a bad configuration, 0 for --help and --print-config', async () => {
    const err = process.stderr.write
    const out = process.stdout.write
    const written: string[] = []
    process.stderr.write = ((s: string) => written.push(s)) as never
    process.stdout.write = ((s: string) => written.push(s)) as never
    try {
      expect(await main(['--decode', 'd0=notaurl'])).toBe(2)
      expect(written.join('')).toMatch(/workers\[0\]\.url/)
      expect(await main(['--help'])).toBe(0)
      expect(await main(['--policy', 'nope', '--decode', 'd0=http://x:1'])).toBe(1)
      written.length = 0
      expect(await main(['--decode', 'd0=http://127.0.0.1:1', '--print-config'])).toBe(0)
      expect(JSON.parse(written.join('')).workers[0].id).toBe('d0')
      // A state store that cannot be reached at startup: exit 1, the URL's password not echoed.
      written.length = 0
      const emu = await createSglangEmulator({ role: 'decode', capacityTokens: 16_384, timing: { scale: 0 } })
      try {
        const port = await closedPort()
        expect(
          await main([
            '--decode',
            `d0=${emu.url}`,
            '--port',
            '0',
            '--state-store',
            `redis://:secret@127.0.0.1:${port}`,
          ]),
        ).toBe(1)
        expect(written.join('')).toMatch(/state store: cannot connect to Redis/)
        expect(written.join('')).not.toContain('secret')
      } finally {
        await emu.close()
      }
    } finally {
      process.stderr.write = err
      process.stdout.write = out
    }
  })
})

describe('the command', () => {
  it('starts from flags, serves a turn, and exits cleanly on SIGTERM', async () => {
    const emu = await createSglangEmulator({ role: 'decode', capacityTokens: 16_384, timing: { scale: 0 } })
    const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.ts')
    const child = spawn(
      process.execPath,
      [
        '--conditions=@kvc/source',
        '--import',
        'tsx',
        cli,
        '--decode',
        `d0=${emu.url}`,
        '--port',
        '0',
        '--tokenizer',
        'emulator',
        '--decision-log',
        'stdout',
      ],
      { cwd: join(dirname(cli), '..'), stdio: ['ignore', 'pipe', 'pipe'] },
    )
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (b: Buffer) => {
      stdout += b.toString()
    })
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (b: Buffer) => {
        stderr += b.toString()
        const m = /"url":"(http:\/\/[^"]+)"/.exec(stderr)
        if (m) resolve(m[1]!)
      })
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${stderr}`)))
    })
    try {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': 'cli' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], max_tokens: 3 }),
      })
      expect(res.status).toBe(200)
      const exited = new Promise<number | null>((r) => child.once('exit', r))
      child.kill('SIGTERM')
      expect(await exited).toBe(0)
      const line = JSON.parse(stdout.trim().split('\n').at(-1)!)
      expect(line).toMatchObject({
        msg: 'turn',
        sessionId: 'cli',
        status: 'completed',
        worker: 'd0',
        path: 'fast',
      })
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL')
      await emu.close()
    }
  })
})
