import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type ReplicatedStateStore,
  RouterStateError,
  type StoreEvent,
  connectNatsStore,
  connectRedisStore,
} from '../src/index.js'
import { type StateServer, eventually, freePort, startStateServer } from '../src/testing/index.js'
import { BACKENDS, connectStore, sleep, uniqueNamespace } from './support/helpers.js'
import { TcpProxy } from './support/tcpProxy.js'

for (const { kind, available } of BACKENDS) {
  describe.skipIf(!available)(`${kind} store: shared state between replicas`, () => {
    let server: StateServer
    const open: ReplicatedStateStore[] = []
    const proxies: TcpProxy[] = []
    const store = async (ns: string, opts = {}) => {
      const s = await connectStore(kind, server.port, ns, opts)
      open.push(s)
      return s
    }

    beforeAll(async () => {
      server = await startStateServer(kind)
    })
    afterAll(async () => {
      for (const s of open) await s.close({ graceful: false })
      for (const p of proxies) await p.close()
      await server?.stop()
    })

    it('first live binding wins; the loser learns the winner; a success write reaches every replica', async () => {
      const ns = uniqueNamespace('b')
      const events: StoreEvent[] = []
      const [a, b] = [await store(ns, { onEvent: (e: StoreEvent) => events.push(e) }), await store(ns)]
      const ca = await a.claim({
        kind: 'binding',
        sessionId: 's',
        workerId: 'd0',
        expected: undefined,
        at: 1,
      })
      expect(ca).toMatchObject({ granted: true, binding: { workerId: 'd0', committedTokens: 0 } })
      const cb = await b.claim({
        kind: 'binding',
        sessionId: 's',
        workerId: 'd1',
        expected: undefined,
        at: 2,
      })
      expect(cb).toMatchObject({ granted: false, binding: { workerId: 'd0' } })
      expect(b.getBinding('s')?.workerId).toBe('d0')
      // A claim naming the binding it replaces moves it (a migration).
      const mv = await b.claim({
        kind: 'binding',
        sessionId: 's',
        workerId: 'd1',
        expected: cb.binding,
        at: 3,
      })
      expect(mv).toMatchObject({ granted: true, binding: { workerId: 'd1' } })
      await eventually(() => expect(a.getBinding('s')?.workerId).toBe('d1'))
      // A's success on d0 comes after B moved the session: B's binding stays, A reports a conflict.
      a.setBinding('s', { workerId: 'd0', committedTokens: 900, verifiedBlocks: 56, updatedAt: 4 })
      await a.flush()
      expect(a.getBinding('s')?.workerId).toBe('d1')
      expect(a.metrics().bindingConflicts).toBe(1)
      expect(events.find((e) => e.type === 'conflict')?.conflict).toEqual({
        sessionId: 's',
        kept: 'd1',
        dropped: 'd0',
      })
      b.setBinding('s', { workerId: 'd1', committedTokens: 1_200, verifiedBlocks: 75, updatedAt: 5 })
      await b.flush()
      await eventually(() =>
        expect(a.getBinding('s')).toMatchObject({ workerId: 'd1', committedTokens: 1_200 }),
      )
      expect(a.metrics().bindingClaimsGranted).toBe(1)
      expect(b.metrics().bindingClaimsLost).toBe(1)
    })

    it('a success write that races with another replica binding the session elsewhere keeps the other binding', async () => {
      const ns = uniqueNamespace('c')
      const [a, b] = [await store(ns), await store(ns)]
      const ca = await a.claim({
        kind: 'binding',
        sessionId: 's',
        workerId: 'd0',
        expected: undefined,
        at: 1,
      })
      await eventually(() => expect(b.getBinding('s')?.revision).toBe(ca.binding?.revision))
      // B moves it to d1 while A (not yet told) writes its success on d0 on top of its own claim.
      const mv = await b.claim({
        kind: 'binding',
        sessionId: 's',
        workerId: 'd1',
        expected: b.getBinding('s'),
        at: 2,
      })
      expect(mv.granted).toBe(true)
      a.setBinding('s', { workerId: 'd0', committedTokens: 900, verifiedBlocks: 56, updatedAt: 3 })
      await a.flush()
      await eventually(() => expect(a.getBinding('s')?.workerId).toBe('d1'))
      expect(b.getBinding('s')?.workerId).toBe('d1')
      expect(a.metrics().bindingConflicts).toBe(1)
    })

    it('load is summed over replicas; pause hints and flags reach every replica', async () => {
      const ns = uniqueNamespace('l')
      const [a, b] = [await store(ns), await store(ns)]
      a.addLoad('d0', { turns: 2, prefillTokens: 4_096, decodeBlocks: 300 })
      b.addLoad('d0', { turns: 1, prefillTokens: 1_000, decodeBlocks: 100 })
      await eventually(() => {
        expect(a.load('d0')).toEqual({ turns: 3, pendingSeeds: 0, prefillTokens: 5_096, decodeBlocks: 400 })
        expect(b.load('d0')).toEqual({ turns: 3, pendingSeeds: 0, prefillTokens: 5_096, decodeBlocks: 400 })
      })
      expect(a.ownLoad('d0').turns).toBe(2)
      // A delta with a bad field is refused whole.
      expect(() => a.addLoad('d0', { turns: -2, decodeBlocks: 1.5 })).toThrowError(RouterStateError)
      expect(a.ownLoad('d0')).toEqual({ turns: 2, pendingSeeds: 0, prefillTokens: 4_096, decodeBlocks: 300 })
      a.addLoad('d0', { turns: -2, prefillTokens: -4_096, decodeBlocks: -300 })
      await eventually(() => expect(b.load('d0').turns).toBe(1))
      a.setPauseUntil('d1', 123_456)
      a.setPauseUntil('d1', 100) // keeps the later one
      await eventually(() => expect(b.pauseUntil('d1')).toBe(123_456))
      expect(a.pauseUntil('d1')).toBe(123_456)
      expect(a.addReject('s', 'd0')).toBe(1)
      expect(a.addReject('s', 'd0')).toBe(2)
      a.exclude('s', 'd0')
      await eventually(() => {
        expect(b.rejects('s', 'd0')).toBe(2)
        expect(b.isExcluded('s', 'd0')).toBe(true)
        expect(b.excludedWorkers('s')).toEqual(['d0'])
      })
      expect(b.addReject('s', 'd0')).toBe(3)
      await eventually(() => expect(a.rejects('s', 'd0')).toBe(3))
      b.resetSession('s')
      await eventually(() => {
        expect(a.rejects('s', 'd0')).toBe(0)
        expect(a.excludedWorkers('s')).toEqual([])
      })
      a.resetSession('never-flagged') // no server write for a session without flags
      expect(a.metrics().pendingWrites).toBe(0)
    })

    it('pending-seed slots are claimed against the budget summed over live replicas', async () => {
      const ns = uniqueNamespace('s')
      const [a, b] = [await store(ns), await store(ns)]
      const claim = (s: ReplicatedStateStore) => {
        s.addLoad('d0', { pendingSeeds: 1 }) // the turn takes its slot, then claims it
        return s.claim({ kind: 'seedSlot', sessionId: 'x', workerId: 'd0', budget: 3, at: 0 })
      }
      expect((await claim(a)).granted).toBe(true)
      expect((await claim(a)).granted).toBe(true)
      expect((await claim(b)).granted).toBe(true)
      const denied = await claim(b)
      expect(denied.granted).toBe(false)
      b.addLoad('d0', { pendingSeeds: -1 }) // the denied turn gives its slot back
      a.addLoad('d0', { pendingSeeds: -1 }) // one of A's seeds ends
      await a.flush()
      expect((await claim(b)).granted).toBe(true)
      expect(b.metrics()).toMatchObject({ seedClaimsGranted: 2, seedClaimsDenied: 1 })
    })

    it('bindings and flags expire after their idle TTL on the server and in every view', async () => {
      const ns = uniqueNamespace('t')
      const opts = { bindingTtlMs: 600 }
      const [a, b] = [await store(ns, opts), await store(ns, opts)]
      await a.claim({ kind: 'binding', sessionId: 's', workerId: 'd0', expected: undefined, at: 0 })
      a.exclude('s', 'd1')
      await a.flush()
      await eventually(() => expect(b.getBinding('s')?.workerId).toBe('d0'))
      await sleep(800)
      expect(a.getBinding('s')).toBeUndefined()
      expect(b.getBinding('s')).toBeUndefined()
      expect(b.isExcluded('s', 'd1')).toBe(false)
      // ...and on the server: a new claim for another D is granted.
      const c = await b.claim({ kind: 'binding', sessionId: 's', workerId: 'd1', expected: undefined, at: 1 })
      expect(c.granted).toBe(true)
    })

    it('a replica killed without cleanup: its load and seed slots stop counting after the replica TTL', async () => {
      const ns = uniqueNamespace('k')
      const opts = { replicaTtlMs: 600, heartbeatMs: 100 }
      const proxy = await TcpProxy.start(server.port)
      proxies.push(proxy)
      const a = await store(ns, opts)
      const victim = await connectStore(kind, proxy.port, ns, opts)
      await sleep(700) // past the first replica TTL (its grace), heartbeats flowing
      victim.addLoad('d0', { turns: 3, pendingSeeds: 2, prefillTokens: 9_000, decodeBlocks: 900 })
      expect(
        (await victim.claim({ kind: 'seedSlot', sessionId: 'v', workerId: 'd0', budget: 2, at: 0 })).granted,
      ).toBe(true)
      await eventually(() => expect(a.load('d0')).toMatchObject({ turns: 3, pendingSeeds: 2 }))
      a.addLoad('d0', { pendingSeeds: 1 })
      expect(
        (await a.claim({ kind: 'seedSlot', sessionId: 'a', workerId: 'd0', budget: 2, at: 0 })).granted,
      ).toBe(false)
      a.addLoad('d0', { pendingSeeds: -1 })
      proxy.cut() // the replica dies: nothing more leaves it
      await victim.close({ graceful: false })
      await eventually(() =>
        expect(a.load('d0')).toEqual({ turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 }),
      )
      expect(a.metrics().expiredReplicas).toBeGreaterThanOrEqual(1)
      a.addLoad('d0', { pendingSeeds: 1 })
      expect(
        (await a.claim({ kind: 'seedSlot', sessionId: 'a', workerId: 'd0', budget: 2, at: 0 })).granted,
      ).toBe(true)
    })

    it('a graceful close gives back its seed slots and drops its load on the others at once', async () => {
      const ns = uniqueNamespace('g')
      const [a, b] = [await store(ns), await store(ns)]
      b.addLoad('d0', { turns: 1, pendingSeeds: 1 })
      expect(
        (await b.claim({ kind: 'seedSlot', sessionId: 'v', workerId: 'd0', budget: 1, at: 0 })).granted,
      ).toBe(true)
      await eventually(() => expect(a.load('d0').turns).toBe(1))
      await b.close()
      await eventually(() => expect(a.load('d0').turns).toBe(0), 1_000)
      a.addLoad('d0', { pendingSeeds: 1 })
      expect(
        (await a.claim({ kind: 'seedSlot', sessionId: 'a', workerId: 'd0', budget: 1, at: 0 })).granted,
      ).toBe(true)
      expect(() =>
        b.setBinding('s', { workerId: 'd0', committedTokens: 0, verifiedBlocks: 0, updatedAt: 0 }),
      ).toThrow(RouterStateError)
      await expect(
        b.claim({ kind: 'seedSlot', sessionId: 'a', workerId: 'd0', budget: 1, at: 0 }),
      ).rejects.toThrow(/closed/)
    })

    it('reports its health as metrics (Prometheus text too)', async () => {
      const s = await store(uniqueNamespace('m'))
      const m = s.metrics()
      expect(m).toMatchObject({ backend: kind, connected: true, degraded: false, reconciles: 1 })
      const text = s.metricsText()
      expect(text).toContain(`kvc_router_state_degraded{replica="${m.replicaId}",backend="${kind}"} 0`)
      expect(text).toContain('# TYPE kvc_router_state_binding_claims_lost_total counter')
    })
  })
}

describe('options and connection errors', () => {
  it('refuses bad options before connecting, and says which server it could not reach', async () => {
    const port = await freePort() // nothing listens there
    await expect(
      connectRedisStore({ url: `redis://127.0.0.1:${port}`, redisOptions: { retryStrategy: () => null } }),
    ).rejects.toMatchObject({
      code: 'CONNECT_FAILED',
    })
    await expect(
      connectNatsStore({ servers: `nats://127.0.0.1:${port}`, connectOptions: { maxReconnectAttempts: 0 } }),
    ).rejects.toMatchObject({ code: 'CONNECT_FAILED' })
    await expect(connectRedisStore({ prefix: 'bad prefix!' })).rejects.toMatchObject({
      code: 'INVALID_OPTION',
      value: 'bad prefix!',
      message: 'prefix must match /^[A-Za-z0-9_.-]{1,64}$/, got "bad prefix!"',
    })
    await expect(
      connectNatsStore({ servers: `nats://127.0.0.1:${port}`, name: 'a.b' }),
    ).rejects.toMatchObject({
      code: 'INVALID_OPTION',
    })
    await expect(connectNatsStore({ servers: `nats://127.0.0.1:${port}`, bindingTtlMs: -1 })).rejects.toThrow(
      'bindingTtlMs must be a finite number > 0, got -1',
    )
    for (const bad of [{ bindingTtlMs: -1 }, { replicaTtlMs: 500, heartbeatMs: 500 }, { replicaId: '' }]) {
      await expect(connectRedisStore({ url: `redis://127.0.0.1:${port}`, ...bad })).rejects.toThrow(
        RouterStateError,
      )
      await expect(connectNatsStore({ servers: `nats://127.0.0.1:${port}`, ...bad })).rejects.toMatchObject({
        code: 'INVALID_OPTION',
      })
    }
  })
})
