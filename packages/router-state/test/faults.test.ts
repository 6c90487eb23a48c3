import { RouterError } from '@kvc/kvc-router'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ReplicatedStateStore, ReplicatedStoreOptions } from '../src/index.js'
import { SimCluster, type TurnResult, sessionBlocks } from './support/cluster.js'
import { type StateServer, eventually, expectNoLoad, startStateServer } from '../src/testing/index.js'
import { BACKENDS, connectStore, expectConverged, sleep, uniqueNamespace } from './support/helpers.js'
import { TcpProxy } from './support/tcpProxy.js'

const WORKERS = ['p0', 'd0', 'd1', 'd2']
const BUDGET = 2
const FAST: ReplicatedStoreOptions = { heartbeatMs: 100, replicaTtlMs: 800, opTimeoutMs: 250 }

/** `sessions` sessions of `turns` sequential turns on replica `pick(s, k)`, all sessions at once. */
async function run(
  sim: SimCluster,
  tag: string,
  sessions: number,
  turns: number,
  pick: (s: number, k: number) => number,
) {
  await Promise.all(
    Array.from({ length: sessions }, async (_, s) => {
      let prompt = 0
      for (let k = 0; k < turns; k++) {
        prompt += k === 0 ? (s % 2 === 0 ? 4_000 : 14_000) : 600
        const id = `${tag}${s}`
        await sim.runTurn(pick(s, k), {
          sessionId: id,
          promptTokens: prompt,
          blocks: sessionBlocks(s + tag.length * 100, prompt),
        })
        prompt += 100
      }
    }),
  )
}

function expectEnded(results: readonly TurnResult[]) {
  for (const r of results) {
    if (r.final.type === 'fail') {
      expect(r.final.error).toBeInstanceOf(RouterError)
      expect(r.final.error.message).toContain(r.final.cause)
    }
  }
}

/** Counts of the handles that would keep the process alive. */
function handles(): Map<string, number> {
  const m = new Map<string, number>()
  for (const h of process.getActiveResourcesInfo()) m.set(h, (m.get(h) ?? 0) + 1)
  return m
}

for (const { kind, available } of BACKENDS) {
  describe.skipIf(!available)(`${kind}: faults`, () => {
    let server: StateServer
    const open: ReplicatedStateStore[] = []
    const proxies: TcpProxy[] = []
    let baseline: Map<string, number>

    beforeAll(async () => {
      baseline = handles()
      server = await startStateServer(kind)
    })
    afterAll(async () => {
      for (const s of open) await s.close({ graceful: false })
      for (const p of proxies) await p.close()
      await server?.stop()
    })
    const store = async (ns: string, port = server.port, opts: ReplicatedStoreOptions = {}) => {
      const s = await connectStore(kind, port, ns, { ...FAST, ...opts })
      open.push(s)
      return s
    }
    const proxy = async () => {
      const p = await TcpProxy.start(server.port)
      proxies.push(p)
      return p
    }

    it('the server restarted mid-run: replicas route on their last view, reconcile, and a new replica sees every binding', async () => {
      const ns = uniqueNamespace('f')
      const st = [await store(ns), await store(ns)]
      const sim = new SimCluster(st, { nD: 3, params: { pendingSeedsPerD: BUDGET }, sendMs: () => 20 })
      const load = run(sim, 'a', 8, 5, (s, k) => (s + k) % 2)
      await sleep(120)
      await server.restart(400)
      await load
      expectEnded(sim.results)
      expect(sim.results.every((r) => r.final.type === 'done')).toBe(true)
      expect(sim.world.violations).toEqual([])
      await eventually(() => {
        for (const s of st) expect(s.degraded).toBe(false)
      }, 10_000)
      for (const s of st) expect(s.metrics()).toMatchObject({ degradedEpisodes: expect.any(Number) })
      expect(st.some((s) => s.metrics().degradedEpisodes >= 1)).toBe(true)
      if (kind === 'redis') {
        // No persistence: the server came back empty and the replicas republished their view.
        expect(st.some((s) => s.metrics().serverStateLost >= 1)).toBe(true)
      }
      const sessions = Array.from({ length: 8 }, (_, s) => `a${s}`)
      const bound = await expectConverged(st, sessions)
      await expectNoLoad(st, WORKERS)
      // After recovery the budget holds across replicas again.
      sim.maxSeeding.clear()
      await run(sim, 'b', 8, 1, (s) => s % 2)
      for (const [d, n] of sim.maxSeeding) expect(n, d).toBeLessThanOrEqual(BUDGET)
      // Nothing was lost: a replica started now sees every session's binding.
      const late = await store(ns)
      for (const s of sessions) expect(late.getBinding(s)?.workerId, s).toBe(bound.get(s))
    })

    it("one replica's connection cut and restored: it goes degraded, keeps routing, and reconciles", async () => {
      const ns = uniqueNamespace('c')
      const p = await proxy()
      const a = await store(ns)
      const b = await store(ns, p.port)
      const sim = new SimCluster([a, b], { nD: 3, params: { pendingSeedsPerD: BUDGET }, sendMs: () => 20 })
      const load = run(sim, 'c', 8, 5, (s, k) => (s + k) % 2)
      await sleep(100)
      p.cut()
      await eventually(() => expect(b.degraded).toBe(true), 3_000)
      expect(a.degraded).toBe(false)
      await sleep(500) // b routes on its last view meanwhile
      p.restore()
      await load
      expectEnded(sim.results)
      expect(sim.results.every((r) => r.final.type === 'done')).toBe(true)
      expect(sim.world.violations).toEqual([])
      await eventually(() => expect(b.degraded).toBe(false), 10_000)
      expect(b.metrics().degradedEpisodes).toBeGreaterThanOrEqual(1)
      expect(b.metrics().reconciles).toBeGreaterThanOrEqual(2)
      const sessions = Array.from({ length: 8 }, (_, s) => `c${s}`)
      const bound = await expectConverged([a, b], sessions)
      await expectNoLoad([a, b], WORKERS)
      const late = await store(ns)
      for (const s of sessions) expect(late.getBinding(s)?.workerId, s).toBe(bound.get(s))
    })

    it('a replica killed without cleanup: its load and seed slots expire after the replica TTL, its bindings after their TTL', async () => {
      const ns = uniqueNamespace('k')
      const ttl = { bindingTtlMs: 1_500 }
      const p = await proxy()
      const a = await store(ns, server.port, ttl)
      const b = await store(ns, server.port, ttl)
      const c = await connectStore(kind, p.port, ns, { ...FAST, ...ttl })
      await sleep(900) // past the start-up grace: liveness comes from heartbeats now
      const sim = new SimCluster([a, b, c], { nD: 3, params: { pendingSeedsPerD: BUDGET }, sendMs: () => 20 })
      // c seeds two sessions on slow sends, then dies in the middle of them.
      const slow = new SimCluster([c], { nD: 3, params: { pendingSeedsPerD: BUDGET }, sendMs: () => 1_500 })
      const dying = Promise.all(
        [0, 1].map((s) =>
          slow
            .runTurn(0, { sessionId: `z${s}`, promptTokens: 14_000, blocks: sessionBlocks(900 + s, 14_000) })
            .catch(() => undefined),
        ),
      )
      await eventually(() => expect(a.load('d0').turns + a.load('d1').turns + a.load('d2').turns).toBe(2))
      const seedsBefore = WORKERS.reduce((n, w) => n + a.load(w).pendingSeeds, 0)
      expect(seedsBefore).toBe(2)
      await eventually(() => expect(a.getBinding('z0')).toBeDefined())
      p.cut()
      await c.close({ graceful: false })
      // The survivors keep serving.
      await run(sim, 'k', 6, 3, (s, k) => (s + k) % 2)
      expectEnded(sim.results)
      expect(sim.results.every((r) => r.final.type === 'done')).toBe(true)
      await expectNoLoad([a, b], WORKERS, 3_000) // c's share expired
      expect(a.metrics().expiredReplicas).toBeGreaterThanOrEqual(1)
      // Its seed slots no longer count: the whole budget of a D is available.
      for (const s of [a, b]) {
        s.addLoad('d0', { pendingSeeds: 1 })
        expect(
          (await s.claim({ kind: 'seedSlot', sessionId: 'x', workerId: 'd0', budget: BUDGET, at: 0 }))
            .granted,
        ).toBe(true)
      }
      a.addLoad('d0', { pendingSeeds: -1 })
      b.addLoad('d0', { pendingSeeds: -1 })
      // Its bindings expire with their idle TTL, on the server too.
      await eventually(() => expect(a.getBinding('z0')).toBeUndefined(), 4_000)
      await eventually(async () => {
        const again = await b.claim({
          kind: 'binding',
          sessionId: 'z0',
          workerId: 'd2',
          expected: undefined,
          at: 0,
        })
        expect(again.granted, JSON.stringify(again)).toBe(true)
      }, 4_000)
      await dying
    })

    it('leaves no connection or timer behind once its stores are closed', async () => {
      for (const s of open.splice(0)) await s.close()
      for (const p of proxies.splice(0)) await p.close()
      await server.stop()
      await eventually(() => {
        const now = handles()
        for (const h of ['TCPSocketWrap', 'TCPServerWrap', 'Timeout', 'Immediate']) {
          expect(now.get(h) ?? 0, h).toBeLessThanOrEqual(baseline.get(h) ?? 0)
        }
      }, 3_000)
    })
  })
}
