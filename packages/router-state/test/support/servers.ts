import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, connect as tcpConnect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** Whether a binary is on the PATH (`nats-server`, `redis-server`). */
export function hasBinary(name: string): boolean {
  const r = spawnSync(name, ['--version'], { stdio: 'ignore' })
  return r.error === undefined && r.status === 0
}

export const HAS_NATS = hasBinary('nats-server')
export const HAS_REDIS = hasBinary('redis-server')

/** A free loopback port (the OS picks one). */
export async function freePort(): Promise<number> {
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

/** A server process this test owns, on a loopback port of its own. */
export interface TestServer {
  readonly kind: 'nats' | 'redis'
  readonly port: number
  readonly url: string
  /** Kills the process (SIGKILL) and starts it again on the same port (and, for NATS, the same store directory). */
  restart(downMs?: number): Promise<void>
  stop(): Promise<void>
  /** Kills the process (SIGKILL); `start` brings it back. */
  kill(): Promise<void>
  start(): Promise<void>
}

export async function startServer(kind: 'nats' | 'redis'): Promise<TestServer> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), `kvc-router-state-${kind}-`))
  let proc: ChildProcess | undefined
  const args =
    kind === 'nats'
      ? ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir]
      : ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]
  const bin = kind === 'nats' ? 'nats-server' : 'redis-server'
  const kill = async () => {
    const p = proc
    proc = undefined
    if (p === undefined || p.exitCode !== null) return
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve())
      p.kill('SIGKILL')
    })
  }
  const start = async () => {
    proc = spawn(bin, args, { stdio: 'ignore' })
    await waitForPort(port, 10_000)
  }
  await start()
  return {
    kind,
    port,
    url: kind === 'nats' ? `nats://127.0.0.1:${port}` : `redis://127.0.0.1:${port}`,
    start,
    kill,
    async restart(downMs = 300) {
      await kill()
      await new Promise((r) => setTimeout(r, downMs))
      await start()
    },
    async stop() {
      await kill()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
