import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { afterAll, describe, expect, it } from 'vitest'
import { configFromArgs, main } from '../src/cli.js'
import { DEFAULT_CONFIG, readConfigFile, resolveConfig } from '../src/config.js'
import { ProxyError } from '../src/errors.js'
import { checkExposure, isLoopback, maskSecrets } from '../src/tenancy/authConfig.js'
import { KeyTable, hashApiKey } from '../src/tenancy/keys.js'
import { cacheSaltOf, clientSaltOf } from '../src/tenancy/tenants.js'

const dir = mkdtempSync(join(tmpdir(), 'kvc-proxy-tenancy-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const workers = [{ id: 'd0', role: 'decode' as const, url: 'http://10.0.0.6:30001' }]
const KEY_A = 'sk-config-a-0123456789'
const KEY_B = 'sk-config-b-0123456789'

/** Runs `main` with stdout and stderr captured. */
async function runMain(argv: string[]): Promise<{ code: number; out: string }> {
  const err = process.stderr.write
  const out = process.stdout.write
  const written: string[] = []
  process.stderr.write = ((s: string) => written.push(s)) as never
  process.stdout.write = ((s: string) => written.push(s)) as never
  try {
    return { code: await main(argv), out: written.join('') }
  } finally {
    process.stderr.write = err
    process.stdout.write = out
  }
}

describe('tenants in the configuration', () => {
  it('hashes every key, fills the tenant defaults, and keeps no key in clear', () => {
    const c = resolveConfig({
      workers,
      auth: {
        tenants: [
          { id: 'a', keys: [KEY_A] },
          { id: 'b', keySha256: [hashApiKey(KEY_B).toUpperCase()], cache: 'shared', exposeCacheInfo: true },
        ],
      },
    })
    expect(c.auth.tenants).toEqual([
      {
        id: 'a',
        keyHashes: [hashApiKey(KEY_A)],
        cache: { kind: 'isolated' },
        exposeCacheInfo: false,
        admin: false,
        limits: DEFAULT_CONFIG.tenantDefaults.limits,
        turnDeadlineMs: undefined,
      },
      expect.objectContaining({ id: 'b', keyHashes: [hashApiKey(KEY_B)], cache: { kind: 'shared' } }),
    ])
    expect(JSON.stringify(c)).not.toContain(KEY_A)
    expect(DEFAULT_CONFIG).toMatchObject({
      auth: { tenants: [], metrics: 'admin', ready: 'admin', allowUnauthenticated: false },
      deadlines: { turnMs: 600_000, bodyReadMs: 30_000, headersMs: 10_000 },
      limits: { maxConcurrentTurns: 1_024 },
      session: { headers: ['x-session-id', 'x-smg-routing-key', 'x-session-token'] },
      tenantDefaults: { cache: { kind: 'isolated' }, exposeCacheInfo: false },
      cacheSaltField: 'cache_salt',
    })
  })

  it('reads keys from the environment (keysEnv)', () => {
    process.env.KVC_TEST_KEYS = `${KEY_A}, ${KEY_B}`
    try {
      const c = resolveConfig({ workers, auth: { tenants: [{ id: 'a', keysEnv: 'KVC_TEST_KEYS' }] } })
      expect(c.auth.tenants[0]!.keyHashes).toEqual([hashApiKey(KEY_A), hashApiKey(KEY_B)])
    } finally {
      delete process.env.KVC_TEST_KEYS
    }
  })

  it.each([
    [
      { auth: { tenants: [{ id: 'a', keys: ['short-key'] }] } },
      /auth\.tenants\[0\]\.keys\[0\]: must be 16-512/,
    ],
    [{ auth: { tenants: [{ id: 'a', keys: [`${KEY_A} x`] }] } }, /without spaces/],
    [{ auth: { tenants: [{ id: 'a' }] } }, /tenant a has no key/],
    [{ auth: { tenants: [{ id: 'a b', keys: [KEY_A] }] } }, /auth\.tenants\[0\]\.id/],
    [
      {
        auth: {
          tenants: [
            { id: 'a', keys: [KEY_A] },
            { id: 'a', keys: [KEY_B] },
          ],
        },
      },
      /duplicate tenant id a/,
    ],
    [
      {
        auth: {
          tenants: [
            { id: 'a', keys: [KEY_A] },
            { id: 'b', keys: [KEY_A] },
          ],
        },
      },
      /tenants a and b share a key/,
    ],
    [
      { auth: { tenants: [{ id: 'a', keysEnv: 'KVC_NOT_SET_ANYWHERE' }] } },
      /KVC_NOT_SET_ANYWHERE is not set/,
    ],
    [{ auth: { tenants: [{ id: 'a', keySha256: ['abc'] }] } }, /keySha256\[0\]: must be a SHA-256 digest/],
    [{ auth: { tenants: [{ id: 'a', keys: [KEY_A], cache: 'public' }] } }, /cache: must be an object/],
    [{ auth: { tenants: [{ id: 'a', keys: [KEY_A], cache: { group: '' } }] } }, /cache\.group/],
    [
      { auth: { tenants: [{ id: 'a', keys: [KEY_A], limits: { requestsPerSecond: 0 } }] } },
      /limits\.requestsPerSecond: must be a number > 0, or null/,
    ],
    [
      { auth: { tenants: [{ id: 'a', keys: [KEY_A], limits: { tokenBurst: 1.5 } }] } },
      /limits\.tokenBurst: must be an integer/,
    ],
    [{ auth: { tenants: [{ id: 'a', keys: [KEY_A], rate: 1 }] } }, /auth\.tenants\[0\]\.rate: unknown key/],
    [{ auth: { metrics: 'open' } }, /auth\.metrics: must be 'admin' or 'public'/],
    [{ auth: { reloadIntervalMs: -1 } }, /auth\.reloadIntervalMs/],
    [{ tenantDefaults: { limits: { maxConcurrentTurns: 0 } } }, /tenantDefaults\.limits\.maxConcurrentTurns/],
    [{ deadlines: { turnMs: 0 } }, /deadlines\.turnMs: must be an integer >= 1/],
    [{ deadlines: { idleMs: 1 } }, /deadlines\.idleMs: unknown key/],
    [{ cacheSaltField: 'salt' }, /cacheSaltField: must be 'cache_salt' or 'extra_key'/],
    [
      { session: { header: 'x-a', headers: ['x-b'] } },
      /session\.header: give session\.header or session\.headers/,
    ],
    [{ session: { headers: ['x a'] } }, /session\.headers: must be a header name/],
    [{ limits: { maxConcurrentTurns: 0 } }, /limits\.maxConcurrentTurns/],
  ])('refuses %j without echoing a key', (input, message) => {
    try {
      resolveConfig({ workers, ...input } as never)
      expect.unreachable()
    } catch (e) {
      expect(e).toBeInstanceOf(ProxyError)
      expect((e as ProxyError).code).toBe('INVALID_CONFIG')
      expect((e as ProxyError).message).toMatch(message)
      for (const text of [(e as ProxyError).message, JSON.stringify((e as ProxyError).value)]) {
        expect(text).not.toContain('short-key')
        expect(text).not.toContain(KEY_A)
      }
    }
  })

  it('refuses to listen beyond loopback without keys, unless told to', () => {
    const open = resolveConfig({ workers, listen: { host: '0.0.0.0' } })
    expect(() => checkExposure(open.listen.host, open.auth)).toThrow(/0\.0\.0\.0 is not a loopback address/)
    const keyed = resolveConfig({
      workers,
      listen: { host: '0.0.0.0' },
      auth: { tenants: [{ id: 'a', keys: [KEY_A] }] },
    })
    expect(() => checkExposure(keyed.listen.host, keyed.auth)).not.toThrow()
    const allowed = resolveConfig({ workers, listen: { host: '::' }, auth: { allowUnauthenticated: true } })
    expect(() => checkExposure(allowed.listen.host, allowed.auth)).not.toThrow()
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]']) expect(isLoopback(h)).toBe(true)
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '128.0.0.1']) expect(isLoopback(h)).toBe(false)
  })

  it('the example configurations resolve: one on loopback, the shared one on every address with keys', () => {
    const here = join(dirname(fileURLToPath(import.meta.url)), '..')
    const local = resolveConfig(readConfigFile(join(here, 'proxy.example.json')))
    expect(isLoopback(local.listen.host)).toBe(true)
    expect(() => checkExposure(local.listen.host, local.auth)).not.toThrow()
    process.env.KVC_OPS_KEYS = KEY_A
    try {
      const shared = resolveConfig(readConfigFile(join(here, 'proxy.shared.example.json')))
      expect(shared.listen.host).toBe('0.0.0.0')
      expect(() => checkExposure(shared.listen.host, shared.auth)).not.toThrow()
      expect(shared.auth.tenantsFile).toBe('/etc/kvc/tenants.json')
      expect(shared.tenantDefaults.limits.requestsPerSecond).toBe(20)
      // Without its keys it would be an open proxy on every address: refused.
      expect(() =>
        checkExposure(shared.listen.host, { ...shared.auth, tenants: [], tenantsFile: undefined }),
      ).toThrow()
    } finally {
      delete process.env.KVC_OPS_KEYS
    }
  })

  it('masks every secret in --print-config: key digests as fingerprints, the store password', async () => {
    const file = join(dir, 'proxy.json')
    writeFileSync(
      file,
      JSON.stringify({
        workers,
        auth: { tenants: [{ id: 'a', keys: [KEY_A] }] },
        stateStore: 'redis://user:hunter2-secret@10.0.0.9:6379',
      }),
    )
    const { code, out } = await runMain(['--config', file, '--print-config'])
    expect(code).toBe(0)
    expect(out).not.toContain(KEY_A)
    expect(out).not.toContain(hashApiKey(KEY_A))
    expect(out).not.toContain('hunter2')
    const printed = JSON.parse(out)
    expect(printed.auth.tenants[0].keyHashes).toEqual([`sha256:${hashApiKey(KEY_A).slice(0, 8)}…`])
    expect(printed.stateStore.url).toBe('redis://***@10.0.0.9:6379')
    expect(maskSecrets(resolveConfig({ workers })).stateStore.url).toBe('memory')
  })

  it('never quotes a configuration file that does not parse (it may hold keys)', () => {
    const file = join(dir, 'broken.json')
    writeFileSync(file, `{"auth": {"tenants": [{"id": "a", "keys": ["${KEY_A}"}]}}`)
    try {
      readConfigFile(file)
      expect.unreachable()
    } catch (e) {
      expect((e as Error).message).toMatch(/is not valid JSON/)
      expect((e as Error).message).not.toContain(KEY_A)
    }
  })

  it('main() exits 1 on a non-loopback address without keys, naming the way out', async () => {
    const { code, out } = await runMain(['--decode', 'd0=http://127.0.0.1:1', '--host', '0.0.0.0'])
    expect(code).toBe(1)
    expect(out).toMatch(/auth\.allowUnauthenticated/)
  })

  it('flags: --tenants-file, --turn-deadline-ms, --session-header', () => {
    const c = configFromArgs([
      '--decode',
      'd0=http://127.0.0.1:1',
      '--tenants-file',
      '/etc/kvc/tenants.json',
      '--turn-deadline-ms',
      '5000',
      '--session-header',
      'x-conversation',
    ]).config
    expect(c.auth.tenantsFile).toBe('/etc/kvc/tenants.json')
    expect(c.deadlines.turnMs).toBe(5_000)
    expect(c.session.headers).toEqual(['x-conversation'])
  })
})

describe('keys and salts', () => {
  it('looks keys up by digest', () => {
    const t = new KeyTable([
      [hashApiKey(KEY_A), 'a'],
      [hashApiKey(KEY_B), 'b'],
    ])
    expect(t.lookup(KEY_A)).toBe('a')
    expect(t.lookup(KEY_B)).toBe('b')
    expect(t.lookup(`${KEY_A}x`)).toBeUndefined()
    expect(t.lookup('')).toBeUndefined()
  })

  it('a client’s own salt narrows its tenant’s namespace and can never leave it', () => {
    const iso = { id: 'acme', cache: { kind: 'isolated' } } as const
    const grp = { id: 'x', cache: { kind: 'group', group: 'team' } } as const
    const shared = { id: 'y', cache: { kind: 'shared' } } as const
    expect(cacheSaltOf(iso, undefined)).toBe('tenant=acme')
    expect(cacheSaltOf(grp, undefined)).toBe('group=team')
    expect(cacheSaltOf(shared, undefined)).toBeUndefined()
    expect(cacheSaltOf(iso, clientSaltOf({ cache_salt: 'u1' }))).toBe('tenant=acme|c=u1')
    // A shared tenant's client cannot name an isolated tenant's namespace.
    expect(cacheSaltOf(shared, clientSaltOf({ cache_salt: 'tenant=acme' }))).toBe('c=tenant=acme')
    expect(clientSaltOf({ cache_salt: 's', extra_key: 'k' })).toBe('s|k=k')
    expect(() => clientSaltOf({ cache_salt: 7 })).toThrow(expect.objectContaining({ status: 400 }))
  })
})

describe('the command rotates keys on SIGHUP', () => {
  it('re-reads its configuration file’s tenants; old keys stop working; no key is logged', async () => {
    const emu = await createSglangEmulator({ role: 'decode', capacityTokens: 16_384, timing: { scale: 0 } })
    const file = join(dir, 'hup.json')
    const write = (key: string) =>
      writeFileSync(
        file,
        JSON.stringify({
          workers: [{ id: 'd0', role: 'decode', url: emu.url }],
          auth: { tenants: [{ id: 'a', keys: [key] }] },
        }),
      )
    write(KEY_A)
    const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'cli.ts')
    const child = spawn(
      process.execPath,
      [
        '--conditions=@kvc/source',
        '--import',
        'tsx',
        cli,
        '--config',
        file,
        '--port',
        '0',
        '--decision-log',
        'off',
      ],
      { cwd: join(dirname(cli), '..'), stdio: ['ignore', 'pipe', 'pipe'] },
    )
    let stderr = ''
    let stdout = ''
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
    const ask = async (key: string) =>
      (
        await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'hup' }], max_tokens: 2 }),
        })
      ).status
    try {
      expect(await ask(KEY_A)).toBe(200)
      expect(await ask(KEY_B)).toBe(401)
      write(KEY_B)
      child.kill('SIGHUP')
      await expect.poll(() => ask(KEY_B), { timeout: 20_000, interval: 100 }).toBe(200)
      expect(await ask(KEY_A)).toBe(401)
      expect(stderr).toMatch(/"msg":"tenants reloaded","tenants":1,"keys":1/)
      const exited = new Promise<number | null>((r) => child.once('exit', r))
      child.kill('SIGTERM')
      expect(await exited).toBe(0)
      for (const text of [stderr, stdout]) {
        expect(text).not.toContain(KEY_A)
        expect(text).not.toContain(KEY_B)
      }
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL')
      await emu.close()
    }
  })
})
