import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, connect as tcpConnect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * The servers a replicated store runs on: `nats` (`nats-server -js`) or `redis` (`redis-server`).
 *
 * @example
 * ```ts
 * import type { StateServerKind } from '@kvc/router-state/testing'
 * const kinds: StateServerKind[] = ['nats', 'redis']
 * ```
 */
export type StateServerKind = 'nats' | 'redis'

/**
 * Whether `<kind>-server` is on the `PATH` (it answers `--version`). Tests that need it skip,
 * saying so, when it is not.
 *
 * @example
 * ```ts
 * import { describe } from 'vitest'
 * import { hasStateServer } from '@kvc/router-state/testing'
 * describe.skipIf(!hasStateServer('redis'))('on a real Redis', () => {
 *   // ...
 * })
 * ```
 */
export function hasStateServer(kind: StateServerKind): boolean {
  const r = spawnSync(`${kind}-server`, ['--version'], { stdio: 'ignore' })
  return r.error === undefined && r.status === 0
}

/**
 * A free loopback port (the OS picks one; nothing listens on it when this resolves).
 *
 * @example
 * ```ts
 * import { freePort } from '@kvc/router-state/testing'
 * const port = await freePort() // a store pointed here finds no server
 * ```
 */
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

/**
 * A server process owned by a test (see {@link startStateServer}), on a loopback port of its own.
 *
 * @example
 * ```ts
 * import { type StateServer, startStateServer } from '@kvc/router-state/testing'
 * const server: StateServer = await startStateServer('nats')
 * await server.restart() // an outage of 300 ms
 * await server.stop()
 * ```
 */
export interface StateServer {
  readonly kind: StateServerKind
  readonly port: number
  /** `nats://127.0.0.1:<port>` or `redis://127.0.0.1:<port>`. */
  readonly url: string
  /** Kills the process (SIGKILL), as a crash would; {@link StateServer.start} brings it back. */
  kill(): Promise<void>
  /** Starts it again on the same port (NATS: the same JetStream directory). */
  start(): Promise<void>
  /** Kills it, waits `downMs` (default 300) and starts it again. */
  restart(downMs?: number): Promise<void>
  /** Kills it and removes its directory. */
  stop(): Promise<void>
}

/**
 * Starts a real `nats-server -js` or `redis-server` (no persistence) on a free loopback port,
 * with a temporary directory of its own, and resolves once the port accepts connections. The
 * binary must be installed (see {@link hasStateServer}); {@link StateServer.stop} ends it.
 *
 * @example
 * ```ts
 * import { connectRedisStore } from '@kvc/router-state'
 * import { startStateServer } from '@kvc/router-state/testing'
 * const server = await startStateServer('redis')
 * const store = await connectRedisStore({ url: server.url, prefix: 'test', replicaId: 'r1' })
 * await store.close()
 * await server.stop()
 * ```
 */
export async function startStateServer(kind: StateServerKind): Promise<StateServer> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), `kvc-state-server-${kind}-`))
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
    port,
    url: `${kind}://127.0.0.1:${port}`,
    kill,
    start,
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
