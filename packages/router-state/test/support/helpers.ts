import {
  connectNatsStore,
  connectRedisStore,
  type ReplicatedStateStore,
  type ReplicatedStoreOptions,
} from '../../src/index.js'
import { type StateServerKind, eventually, hasStateServer } from '../../src/testing/index.js'

export type BackendKind = StateServerKind

/** The backends whose server binary is installed; the others are skipped with a message. */
export const BACKENDS: readonly { kind: BackendKind; available: boolean }[] = [
  { kind: 'nats', available: hasStateServer('nats') },
  { kind: 'redis', available: hasStateServer('redis') },
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

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export function uniqueNamespace(tag: string): string {
  return `t${tag}${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`
}

/** Every replica's view agrees on each session's binding (after their writes reached the server). */
export async function expectConverged(
  stores: readonly ReplicatedStateStore[],
  sessions: readonly string[],
  timeoutMs = 20_000,
): Promise<Map<string, string | undefined>> {
  for (const s of stores) await s.flush(timeoutMs)
  const out = new Map<string, string | undefined>()
  await eventually(() => {
    for (const s of sessions) {
      const views = stores.map((st) => {
        const b = st.getBinding(s)
        return b === undefined ? 'none' : `${b.workerId}/${b.committedTokens}`
      })
      if (new Set(views).size !== 1) {
        const detail = stores.map(
          (st) => `${st.replicaId}: rev ${st.getBinding(s)?.revision} ${JSON.stringify(st.metrics())}`,
        )
        throw new Error(`session ${s}: replicas disagree: ${views.join(' | ')}\n${detail.join('\n')}`)
      }
      out.set(s, stores[0]!.getBinding(s)?.workerId)
    }
  }, timeoutMs)
  return out
}
