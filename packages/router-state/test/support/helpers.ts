import {
  connectNatsStore,
  connectRedisStore,
  type ReplicatedStateStore,
  type ReplicatedStoreOptions,
} from '../../src/index.js'
import { HAS_NATS, HAS_REDIS, type TestServer } from './servers.js'

export type BackendKind = 'nats' | 'redis'

/** The backends whose server binary is installed; the others are skipped with a message. */
export const BACKENDS: readonly { kind: BackendKind; available: boolean }[] = [
  { kind: 'nats', available: HAS_NATS },
  { kind: 'redis', available: HAS_REDIS },
]

for (const b of BACKENDS) {
  if (!b.available) {
    console.warn(
      `[router-state] ${b.kind}-server is not installed: skipping the ${b.kind} tests (apt-get install ${b.kind}-server)`,
    )
  }
}

let counter = 0

/** Connects a store to the server at `port` (a proxy's port, usually), in a namespace of its own. */
export async function connectStore(
  kind: BackendKind,
  port: number,
  namespace: string,
  options: ReplicatedStoreOptions = {},
): Promise<ReplicatedStateStore> {
  const replicaId = options.replicaId ?? `r${++counter}`
  return kind === 'nats'
    ? connectNatsStore({
        servers: `nats://127.0.0.1:${port}`,
        name: namespace,
        connectOptions: { reconnectTimeWait: 50, pingInterval: 500, maxPingOut: 2 },
        ...options,
        replicaId,
      })
    : connectRedisStore({
        url: `redis://127.0.0.1:${port}`,
        prefix: namespace,
        redisOptions: { retryStrategy: () => 50 },
        ...options,
        replicaId,
      })
}

/** Polls `check` until it stops throwing (or rethrows after `timeoutMs`). */
export async function eventually(check: () => void | Promise<void>, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      await check()
      return
    } catch (err) {
      if (Date.now() > deadline) throw err
      await new Promise((r) => setTimeout(r, 20))
    }
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export function uniqueNamespace(tag: string): string {
  return `t${tag}${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`
}

export type { TestServer }
