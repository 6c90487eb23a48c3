/**
 * A real `nats-server -js` or `redis-server` (no persistence) on a free loopback port, started
 * and stopped by a test file, as `@kvc/router-state`'s own tests do (their helper is not part of
 * that package's public exports, so this is a small copy). Tests are skipped, with a message,
 * when the binary is not installed.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, connect as tcpConnect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export type StateServerKind = 'nats' | 'redis'

/** Whether `<kind>-server` is on the PATH; says so on stderr when it is not. */
export function hasStateServer(kind: StateServerKind): boolean {
  const r = spawnSync(`${kind}-server`, ['--version'], { stdio: 'ignore' })
  const ok = r.error === undefined && r.status === 0
  if (!ok) {
    console.warn(
      `[example-proxy] ${kind}-server is not installed: skipping the replicas-on-${kind} tests (apt-get install ${kind}-server)`,
    )
  }
  return ok
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const a = s.address()
      s.close(() => (typeof a === 'object' && a !== null ? resolve(a.port) : reject(new Error('no port'))))
    })
  })
}

async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = tcpConnect(port, '127.0.0.1')
      c.once('connect', () => {
        c.destroy()
        resolve(true)
      })
      c.once('error', () => resolve(false))
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`port ${port} did not open within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

/** A server process owned by the test, on a loopback port of its own. */
export interface StateServer {
  readonly kind: StateServerKind
  /** `nats://127.0.0.1:<port>` or `redis://127.0.0.1:<port>`. */
  readonly url: string
  /** Kills it (SIGKILL), as a crash would. */
  kill(): Promise<void>
  /** Starts it again on the same port (NATS: the same JetStream directory). */
  start(): Promise<void>
  /** Kills it and removes its directory. */
  stop(): Promise<void>
}

export async function startStateServer(kind: StateServerKind): Promise<StateServer> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), `kvc-proxy-${kind}-`))
  const args =
    kind === 'nats'
      ? ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir]
      : ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]
  let proc: ChildProcess | undefined
  const kill = async (): Promise<void> => {
    const p = proc
    proc = undefined
    if (p === undefined || p.exitCode !== null || p.signalCode !== null) return
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve())
      p.kill('SIGKILL')
    })
  }
  const start = async (): Promise<void> => {
    proc = spawn(`${kind}-server`, args, { stdio: 'ignore' })
    await waitForPort(port, 10_000)
  }
  await start()
  return {
    kind,
    url: `${kind}://127.0.0.1:${port}`,
    kill,
    start,
    async stop() {
      await kill()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
