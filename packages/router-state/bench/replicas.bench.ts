/**
 * Routing decisions per second with 1, 2 and 4 replicas on one store, and the latency a NATS or
 * Redis store adds to a decision relative to the in-process store, in the same run.
 *
 * A decision is one turn dispatched to its end with instant answers (admit, send): Route, the
 * store's claims, and the store writes. A batch is 32 new sessions of 4 turns each (128
 * decisions): the first turn of a session is seeded through P (a seed-slot claim and a binding
 * claim go to the store), the next three take the fast path on the bound D (no claim), and each
 * turn of a session runs on the next replica, so the binding must travel between replicas.
 * Servers are started on loopback ports of their own; a backend whose server is not installed is
 * left out with a message.
 */
import {
  type ClusterStateStore,
  type DispatchOutcome,
  InMemoryClusterStateStore,
  Router,
} from '@kvc/kvc-router'
import { scriptedResponse } from '@kvc/kvc-router/testing'
import { afterAll, bench, describe } from 'vitest'
import type { ReplicatedStateStore } from '../src/index.js'
import { connectStore, uniqueNamespace } from '../test/support/helpers.js'
import { type StateServer, hasStateServer, startStateServer } from '../src/testing/index.js'

const SESSIONS = 32
const TURNS = 4
const D = 8

const servers: StateServer[] = []
const stores: ReplicatedStateStore[] = []
afterAll(async () => {
  for (const s of stores) await s.close()
  for (const s of servers) await s.stop()
})

function routers(list: readonly ClusterStateStore[]): Router[] {
  return list.map(
    (store) =>
      new Router({
        store,
        params: { pageSize: 16, pendingSeedsPerD: 1_000 },
        workers: [
          { id: 'p0', role: 'prefill', capacityTokens: 1e9 },
          { id: 'p1', role: 'prefill', capacityTokens: 1e9 },
          ...Array.from({ length: D }, (_, i) => ({
            id: `d${i}`,
            role: 'decode' as const,
            capacityTokens: 1e9,
          })),
        ],
      }),
  )
}

async function decide(router: Router, sessionId: string, promptTokens: number): Promise<void> {
  const store = router.cluster.store as ReplicatedStateStore
  const t = router.dispatch({ sessionId, promptTokens })
  let a = t.next()
  while (a.type !== 'done' && a.type !== 'fail') {
    let out: DispatchOutcome
    if (a.type === 'claim') out = await store.claim(a.claim)
    else if (a.type === 'admit')
      out = { type: 'admitResult', response: scriptedResponse(a, { kind: 'admit' }) }
    else if (a.type === 'wait') out = { type: 'waited' }
    else out = { type: 'completed', outputTokens: 100 }
    a = t.next(out)
  }
  if (a.type === 'fail') throw new Error(a.error.message)
}

let batchNo = 0

/** One batch: sessions concurrently (`concurrent`) or one decision at a time. */
async function batch(rs: readonly Router[], concurrent: boolean): Promise<void> {
  const b = ++batchNo
  const session = async (s: number) => {
    let prompt = 0
    for (let k = 0; k < TURNS; k++) {
      prompt += k === 0 ? 12_000 : 400
      await decide(rs[(s + k) % rs.length]!, `b${b}s${s}`, prompt)
      prompt += 100
    }
  }
  if (concurrent) await Promise.all(Array.from({ length: SESSIONS }, (_, s) => session(s)))
  else for (let s = 0; s < SESSIONS; s++) await session(s)
}

type Kind = 'in-process' | 'nats' | 'redis'
const kinds: Kind[] = ['in-process']
if (hasStateServer('nats')) kinds.push('nats')
else console.warn('[router-state bench] nats-server is not installed: NATS left out')
if (hasStateServer('redis')) kinds.push('redis')
else console.warn('[router-state bench] redis-server is not installed: Redis left out')

const serverOf = new Map<Kind, StateServer>()
for (const k of kinds) {
  if (k === 'in-process') continue
  const s = await startStateServer(k)
  servers.push(s)
  serverOf.set(k, s)
}

async function storesFor(kind: Kind, n: number): Promise<ClusterStateStore[]> {
  if (kind === 'in-process') {
    // one replica: the default store; several: one shared store that confirms claims
    if (n === 1) return [new InMemoryClusterStateStore()]
    const shared = new InMemoryClusterStateStore({ confirmClaims: true })
    return Array.from({ length: n }, () => shared)
  }
  const ns = uniqueNamespace('bench')
  const out: ReplicatedStateStore[] = []
  for (let i = 0; i < n; i++) out.push(await connectStore(kind, serverOf.get(kind)!.port, ns))
  stores.push(...out)
  return out
}

const opts = { time: 1_500, warmupTime: 300 }

for (const n of [1, 2, 4]) {
  describe(`decisions per second, ${n} replica(s) on one store (batch of ${SESSIONS * TURNS}, sessions concurrent)`, async () => {
    for (const kind of kinds) {
      const rs = routers(await storesFor(kind, n))
      bench(`${kind}, ${n} replica(s)`, () => batch(rs, true), opts)
    }
  })
}

describe(`latency per decision, 1 replica, one decision at a time (batch of ${SESSIONS * TURNS})`, async () => {
  for (const kind of kinds) {
    const rs = routers(await storesFor(kind, 1))
    bench(`${kind}, sequential`, () => batch(rs, false), opts)
  }
})
