/**
 * Two proxy replicas sharing one router state through a real NATS or Redis server
 * (`stateStore.url`), in front of the same emulated P/D workers; run by `replicasNats.test.ts`
 * and `replicasRedis.test.ts`.
 */
import type { ReplicatedStateStore, StoreEvent } from '@kvc/router-state'
import {
  type StateServer,
  type StateServerKind,
  eventually,
  expectNoLoad,
  hasStateServer,
  startStateServer,
} from '@kvc/router-state/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type ProxyConfigInput, resolveConfig } from '../src/config.js'
import type { DecisionLine } from '../src/decisionLog.js'
import type { StartedResponse, TurnTransport } from '../src/gateway.js'
import { type KvcProxy, createProxy } from '../src/server.js'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { type Cluster, Conversation, chat, startCluster, testProxyConfig } from './helpers.js'

export const SYSTEM = 'You are a careful coding agent. Follow the repository conventions. '.repeat(48) // ~3.2K tokens
/** Pending seeds per D, across replicas: small, so that the budget binds. */
export const BUDGET = 1
const SESSIONS = 12
const TURNS = 4
/** Sessions whose first turn is sent to both replicas at the same moment. */
const RACES = 4
/** The agent's tool call between two turns of a session. */
const THINK_MS = 20

/** Seeds in flight per D across every replica (counted where the proxy sends them), and the most seen. */
export class SeedMeter {
  readonly now = new Map<string, number>()
  readonly max = new Map<string, number>()
  total = 0

  /** Counts the seed-path sends of `proxy` (wraps the transport of every turn it runs). */
  watch(proxy: KvcProxy): void {
    const gw = proxy.gateway
    const run = gw.runTurn.bind(gw)
    gw.runTurn = (input, transport, signal) => run(input, this.#wrap(transport), signal)
  }

  #wrap(transport: TurnTransport): TurnTransport {
    return {
      start: async (served, signal): Promise<StartedResponse> => {
        if (served.path !== 'seed') return transport.start(served, signal)
        const d = served.decode.id
        const k = (this.now.get(d) ?? 0) + 1
        this.now.set(d, k)
        this.max.set(d, Math.max(k, this.max.get(d) ?? 0))
        this.total++
        let ended = false
        const end = (): void => {
          if (ended) return
          ended = true
          this.now.set(d, this.now.get(d)! - 1)
        }
        let started: StartedResponse
        try {
          started = await transport.start(served, signal)
        } catch (err) {
          end()
          throw err
        }
        return {
          finish: () => started.finish().finally(end),
          cancel: () => {
            end()
            started.cancel()
          },
        }
      },
    }
  }
}

export interface Replica {
  readonly name: string
  readonly proxy: KvcProxy
  readonly decisions: DecisionLine[]
  readonly events: StoreEvent[]
  readonly store: ReplicatedStateStore | undefined
}

/** A proxy replica in front of `cluster`, its decisions and store events collected. */
export async function startReplica(
  name: string,
  cluster: Cluster,
  stateStore: ProxyConfigInput['stateStore'],
  meter: SeedMeter,
): Promise<Replica> {
  const decisions: DecisionLine[] = []
  const events: StoreEvent[] = []
  const config = resolveConfig({
    ...testProxyConfig(cluster),
    router: {
      tauAppend: 2_048,
      pendingSeedsPerD: BUDGET,
      backoffBaseMs: 5,
      backoffCapMs: 50,
      admissionTimeoutMs: 500,
    },
    ...(stateStore === undefined ? {} : { stateStore }),
  })
  const proxy = await createProxy(config, {
    onDecision: (l) => decisions.push(l),
    onStoreEvent: (e) => events.push(e),
    onWarning: () => {},
  })
  meter.watch(proxy)
  return { name, proxy, decisions, events, store: proxy.gateway.stateStore }
}

export interface TurnOutcome {
  readonly session: string
  /** The turn's index in its session. */
  readonly turn: number
  readonly replica: string
  readonly status: number
  readonly path: string | null
  readonly worker: string | null
  readonly cause: string | undefined
  readonly error?: string
}

/**
 * `SESSIONS` agent sessions of `TURNS` turns, run concurrently; turn k of session s goes to
 * replica (s + k) mod 2, so every session alternates between the replicas; the first turn of the
 * first `RACES` sessions is sent to both replicas at the same moment.
 */
export async function interleavedWorkload(
  replicas: readonly Replica[],
  conversations: Map<string, Conversation>,
): Promise<TurnOutcome[]> {
  const outcomes: TurnOutcome[] = []
  const record = (
    session: string,
    turn: number,
    replica: Replica,
    r: Awaited<ReturnType<typeof chat>>,
  ): void => {
    const err = r.json.error as { kvc?: { cause?: string } } | undefined
    outcomes.push({
      session,
      turn,
      replica: replica.name,
      status: r.status,
      path: r.headers.get('x-kvc-path'),
      worker: r.headers.get('x-kvc-worker'),
      cause: r.status === 200 && r.content.length === 8 ? undefined : (err?.kvc?.cause ?? `http_${r.status}`),
      ...(r.status === 200 ? {} : { error: JSON.stringify(r.json) }),
    })
  }
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, s) => {
      // The session's own opening first: no prefix shared between sessions, every first turn is seeded.
      const c = new Conversation(`agent-${s}`, `Agent ${s}. ${SYSTEM}`)
      conversations.set(c.id, c)
      for (let k = 0; k < TURNS; k++) {
        const mine = replicas[(s + k) % replicas.length]!
        if (k > 0) await new Promise((r) => setTimeout(r, THINK_MS))
        const user = `Step ${k} of task ${s}: run the tests. ${'Tool output line. '.repeat(1 + ((s + k) % 5))}`
        if (k === 0 && s < RACES) {
          // The same first turn on both replicas at once: their binding claims race.
          const other = replicas[(s + 1) % replicas.length]!
          const msgs = [...c.messages, { role: 'user', content: user }]
          const [a, b] = await Promise.all([
            chat(mine.proxy.url, c.id, msgs),
            chat(other.proxy.url, c.id, msgs),
          ])
          record(c.id, k, mine, a)
          record(c.id, k, other, b)
          // At most one of them may be refused (429 session_busy): D runs one turn per session.
          const ok = a.status === 200 ? a : b
          c.messages.push({ role: 'user', content: user })
          if (ok.status === 200) c.messages.push({ role: 'assistant', content: ok.content })
          else c.messages.pop()
          continue
        }
        record(c.id, k, mine, await c.turn(mine.proxy.url, user))
      }
    }),
  )
  return outcomes
}

async function metricsOf(r: Replica): Promise<string> {
  return (await fetch(`${r.proxy.url}/metrics`)).text()
}

async function readyOf(r: Replica): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${r.proxy.url}/ready`)
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

/** A `kvc_router_state_<name>` sample of a replica's `/metrics` page. */
function stateMetric(text: string, name: string, replica: string): number {
  const m = new RegExp(
    `^kvc_router_state_${name}\\{replica="${replica}",backend="[a-z]+"\\} (\\S+)$`,
    'm',
  ).exec(text)
  if (m === null) throw new Error(`no kvc_router_state_${name} for ${replica} in /metrics`)
  return Number(m[1])
}

/** The whole suite for one backend. */
export function replicaSuite(kind: StateServerKind): void {
  const available = hasStateServer(kind)
  if (!available) {
    console.warn(
      `[example-proxy] ${kind}-server is not installed: skipping the replicas-on-${kind} tests (apt-get install ${kind}-server)`,
    )
  }
  describe.skipIf(!available)(`two proxy replicas sharing one router state on ${kind}`, () => {
    let baseline: Record<string, number>
    let server: StateServer
    let cluster: Cluster
    const meter = new SeedMeter()
    const replicas: Replica[] = []
    const conversations = new Map<string, Conversation>()
    const sessions = Array.from({ length: SESSIONS }, (_, s) => `agent-${s}`)

    beforeAll(async () => {
      baseline = handleCounts()
      server = await startStateServer(kind)
      cluster = await startCluster({ prefill: 2, decode: 2, scale: 0.005 })
      const name = `proxy${kind}${Date.now().toString(36)}`
      // A wide operation timeout: load must not look like an outage (the outage test kills the server).
      const common = { url: server.url, name, heartbeatMs: 200, opTimeoutMs: 2_000 }
      replicas.push(await startReplica('A', cluster, { ...common, replicaId: 'A' }, meter))
      // B leaves its load balancer while its store is degraded.
      replicas.push(
        await startReplica('B', cluster, { ...common, replicaId: 'B', readyWhenDegraded: false }, meter),
      )
    })

    afterAll(async () => {
      for (const r of replicas) await r.proxy.close()
      await cluster?.close()
      await server?.stop()
      expect(await leakedSince(baseline)).toEqual({})
    })

    it('interleaved turns of the same sessions on both replicas: every turn completes (or fails with a cause), every session ends bound to one D on both, fast path on both, seed budget held', async () => {
      const [a, b] = replicas as [Replica, Replica]
      // Each replica sees the other (heartbeats), before any turn.
      await eventually(() => {
        expect(a.store!.metrics().liveReplicas).toBe(1)
        expect(b.store!.metrics().liveReplicas).toBe(1)
      })
      const outcomes = await interleavedWorkload(replicas, conversations)

      // Every turn has one outcome and one decision line; a failure names its cause. The only
      // failures allowed: one of two racing first turns refused because D was running the other
      // (429 session_busy), never both.
      expect(outcomes).toHaveLength(SESSIONS * TURNS + RACES)
      expect(a.decisions.length + b.decisions.length).toBe(outcomes.length)
      const failed = outcomes.filter((o) => o.cause !== undefined)
      for (const f of failed) {
        expect(f, JSON.stringify(f)).toMatchObject({ cause: 'session_busy', status: 429, turn: 0 })
        expect(
          outcomes.filter((o) => o.session === f.session && o.turn === 0 && o.status === 200),
        ).toHaveLength(1)
      }
      const counted = [
        ...(await metricsOf(a)).matchAll(
          /^kvc_proxy_turns_total\{outcome="(\w+)",[^}]*cause="(\w*)"\} (\d+)$/gm,
        ),
      ].concat([
        ...(await metricsOf(b)).matchAll(
          /^kvc_proxy_turns_total\{outcome="(\w+)",[^}]*cause="(\w*)"\} (\d+)$/gm,
        ),
      ])
      const sum = (f: (m: RegExpMatchArray) => boolean) =>
        counted.filter(f).reduce((n, m) => n + Number(m[3]), 0)
      expect(sum(() => true)).toBe(outcomes.length)
      expect(sum((m) => m[1] === 'failed')).toBe(failed.length)
      expect(sum((m) => m[2] === 'session_busy')).toBe(failed.length)

      // Where each session's turns ran, in order (completed turns).
      const served = new Map<string, string[]>()
      for (const o of [...outcomes].sort((x, y) => x.turn - y.turn)) {
        if (o.status !== 200) continue
        if (!served.has(o.session)) served.set(o.session, [])
        served.get(o.session)!.push(o.worker!)
      }
      const final = new Map(sessions.map((s) => [s, served.get(s)!.at(-1)!]))
      // Sessions spread over both D workers.
      expect(new Set(final.values()).size).toBe(2)
      // Sessions keep their D across replicas: the binding one replica made is used by the other.
      // (A session may still move: when a turn reaches a replica before the previous turn's KV
      // events, from the D, did, that replica cannot verify the binding; two racing first turns
      // may also complete on two D workers. See the README.)
      const moved = sessions.slice(RACES).filter((s) => new Set(served.get(s)).size > 1)
      expect(moved.length, `sessions that moved: ${moved.join(', ')}`).toBeLessThanOrEqual(2)

      // Later turns take the fast path, on both replicas.
      for (const r of replicas) {
        const fast = r.decisions.filter((d) => d.path === 'fast')
        expect(fast.length, `fast turns on ${r.name}`).toBeGreaterThanOrEqual(SESSIONS)
      }
      const later = outcomes.filter((o) => o.turn > 0)
      expect(later.filter((o) => o.path === 'fast').length / later.length).toBeGreaterThan(0.8)

      // The pending-seed budget held across the replicas: never more than BUDGET seeds at once on a D.
      expect(meter.total).toBeGreaterThanOrEqual(SESSIONS)
      for (const [d, n] of meter.max) expect(n, `seeds at once on ${d}`).toBeLessThanOrEqual(BUDGET)

      // Both replicas end with the same binding for every session, to the D that served its last
      // turn, and only that D holds the session (a D left behind released it).
      await a.store!.flush()
      await b.store!.flush()
      await eventually(() => {
        for (const s of sessions) {
          const d = final.get(s)!
          expect(a.store!.getBinding(s)?.workerId, `${s} on A`).toBe(d)
          expect(b.store!.getBinding(s)?.workerId, `${s} on B`).toBe(d)
          const holders = cluster.decode.flatMap((e, i) => (e.sessionCache.hasSession(s) ? [`d${i}`] : []))
          expect(holders, `${s} held by`).toEqual([d])
        }
      })

      // Racing first turns: claims were decided by the store (some lost and re-routed, none dropped).
      const claims = [a, b].map((r) => r.store!.metrics())
      expect(claims[0]!.bindingClaimsGranted + claims[1]!.bindingClaimsGranted).toBeGreaterThan(0)
      expect(claims[0]!.seedClaimsGranted + claims[1]!.seedClaimsGranted).toBeGreaterThanOrEqual(SESSIONS)

      // Nothing left in flight, on either replica's view.
      await expectNoLoad(
        replicas.map((r) => r.store!),
        ['p0', 'p1', 'd0', 'd1'],
      )
      for (const r of replicas) {
        // A store operation slowed by a busy machine can make a replica degraded for a moment:
        // it reconciles, and then every figure below holds.
        await eventually(async () => {
          const m = await metricsOf(r)
          expect(m).toContain('kvc_proxy_inflight_turns 0')
          expect(m).toMatch(/kvc_proxy_turns_total\{outcome="completed",path="fast",cause=""\} [1-9]/)
          // The store's metrics, on the same page.
          expect(stateMetric(m, 'degraded', r.name)).toBe(0)
          expect(stateMetric(m, 'connected', r.name)).toBe(1)
          expect(stateMetric(m, 'live_replicas', r.name)).toBe(1)
          expect(stateMetric(m, 'pending_writes', r.name)).toBe(0)
          expect(stateMetric(m, 'binding_claims_lost_total', r.name)).toBe(
            r.store!.metrics().bindingClaimsLost,
          )
          const ready = await readyOf(r)
          expect(ready.status).toBe(200)
          expect(ready.body.stateStore).toMatchObject({ backend: kind, replicaId: r.name, degraded: false })
        }, 30_000)
      }
      for (const d of cluster.decode) expect(d.stats().balanced).toBe(true)
    })

    it('with the server down both replicas go degraded and keep routing on their last view; they reconcile when it is back', async () => {
      const [a, b] = replicas as [Replica, Replica]
      await server.kill()
      await eventually(async () => {
        expect((await readyOf(a)).body.stateStore).toMatchObject({ degraded: true })
        expect((await readyOf(b)).body.stateStore).toMatchObject({ degraded: true })
      })
      // A stays in its load balancer (the default), B leaves it (readyWhenDegraded: false).
      const ra = await readyOf(a)
      expect(ra.status).toBe(200)
      expect(ra.body.reason).toMatch(/state store degraded/)
      const rb = await readyOf(b)
      expect(rb.status).toBe(503)
      expect(rb.body.reason).toBe('state store degraded')

      // A bound session still takes the fast path on its D, through the degraded replica.
      const c = conversations.get('agent-5')!
      const s = c.id
      const d = a.store!.getBinding(s)!.workerId
      const r = await c.turn(a.proxy.url, 'Step 9: while the state server is down.')
      expect(r.status, JSON.stringify(r.json)).toBe(200)
      expect(r.headers.get('x-kvc-worker')).toBe(d)
      expect(r.headers.get('x-kvc-path')).toBe('fast')
      const m = await metricsOf(a)
      expect(stateMetric(m, 'degraded', 'A')).toBe(1)
      expect(stateMetric(m, 'pending_writes', 'A')).toBeGreaterThan(0) // the turn's binding, queued
      expect(a.events.some((e) => e.type === 'degraded')).toBe(true)

      await server.start()
      await eventually(async () => {
        for (const x of replicas) {
          const ready = await readyOf(x)
          expect(ready.status).toBe(200)
          expect(ready.body.stateStore).toMatchObject({ degraded: false })
        }
      }, 10_000)
      expect(a.events.some((e) => e.type === 'recovered')).toBe(true)
      // The queued write reached the server and B sees it; B serves the session on the same D.
      await a.store!.flush()
      await eventually(() => {
        expect(b.store!.getBinding(s)?.workerId).toBe(d)
        expect(b.store!.getBinding(s)?.committedTokens).toBe(a.store!.getBinding(s)?.committedTokens)
      })
      const r2 = await c.turn(b.proxy.url, 'Step 10: the server is back.')
      expect(r2.status, JSON.stringify(r2.json)).toBe(200)
      expect(r2.headers.get('x-kvc-worker')).toBe(d)
      expect(r2.headers.get('x-kvc-path')).toBe('fast')
      const mb = await metricsOf(b)
      expect(stateMetric(mb, 'degraded', 'B')).toBe(0)
      expect(stateMetric(mb, 'reconciles_total', 'B')).toBeGreaterThanOrEqual(1)
      if (kind === 'redis') {
        // Redis without persistence came back empty: the replicas noticed and republished their view.
        expect(a.store!.metrics().serverStateLost + b.store!.metrics().serverStateLost).toBeGreaterThan(0)
      }
    })

    it('an idle session is released on its D by the replica that served it last, not by one that served it before', async () => {
      const [a, b] = replicas as [Replica, Replica]
      // agent-5's last turn ran through B (the test above); A served earlier turns.
      const s = 'agent-5'
      const d = b.store!.getBinding(s)!.workerId
      const holder = cluster.decode[Number(d.slice(1))]!
      // A's idle sweep runs an idle timeout after B's turn, long after A learned of it: wait until
      // B's write of the binding reached A, or A would (rightly) see its own turn as the last one.
      await b.store!.flush()
      await eventually(() => expect(a.store!.getBinding(s)).toEqual(b.store!.getBinding(s)))
      a.proxy.gateway.forgetSession(s) // as A's idle sweep would
      await new Promise((r) => setTimeout(r, 100))
      expect(holder.sessionCache.hasSession(s)).toBe(true)
      expect(a.store!.getBinding(s)?.workerId).toBe(d)
      b.proxy.gateway.forgetSession(s)
      await eventually(() => expect(holder.sessionCache.hasSession(s)).toBe(false))
      expect(b.store!.getBinding(s)).toBeUndefined()
    })
  })
}
