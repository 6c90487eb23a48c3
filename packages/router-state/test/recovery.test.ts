import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  type BackendEvents,
  type BackendSnapshot,
  type BindingValue,
  type FlagsValue,
  ReplicatedStateStore,
  type ReplicatedStoreOptions,
  type StateBackend,
  type Versioned,
} from '../src/index.js'
import { type StateServer, eventually, startStateServer } from '../src/testing/index.js'
import { BACKENDS, connectStore, uniqueNamespace } from './support/helpers.js'
import { TcpProxy } from './support/tcpProxy.js'

const FAST: ReplicatedStoreOptions = { heartbeatMs: 100, replicaTtlMs: 800, opTimeoutMs: 250 }

const binding = (workerId: string, updatedAt: number) => ({
  workerId,
  committedTokens: 1_000,
  verifiedBlocks: 60,
  updatedAt,
})

for (const { kind, available } of BACKENDS) {
  describe.skipIf(!available)(`${kind}: shared state after an outage`, () => {
    let server: StateServer
    const open: ReplicatedStateStore[] = []
    const proxies: TcpProxy[] = []
    beforeAll(async () => {
      server = await startStateServer(kind)
    })
    afterAll(async () => {
      for (const s of open) await s.close({ graceful: false })
      for (const p of proxies) await p.close()
      await server?.stop()
    })
    const store = async (ns: string, port: number) => {
      const s = await connectStore(kind, port, ns, FAST)
      open.push(s)
      return s
    }
    const proxy = async () => {
      const p = await TcpProxy.start(server.port)
      proxies.push(p)
      return p
    }

    it('bindings decided apart during an outage converge to the D that served the session’s last turn', async () => {
      const ns = uniqueNamespace('rec')
      const [pa, pb] = [await proxy(), await proxy()]
      const a = await store(ns, pa.port)
      const b = await store(ns, pb.port)
      const sessions = ['s0', 's1', 's2']
      for (const s of sessions) a.setBinding(s, binding('d0', tick()))
      await a.flush()
      await eventually(() => {
        for (const s of sessions) expect(b.getBinding(s)?.workerId).toBe('d0')
      })
      // The outage: both replicas lose the server and route on their last view.
      pa.cut()
      pb.cut()
      await eventually(() => expect(a.degraded && b.degraded).toBe(true))
      // A moves each session to d1 (a claim decided on its last view) and serves a turn there;
      // then B, which still sees d0, serves the session's next turn on d0.
      for (const s of sessions) {
        const cur = a.getBinding(s)
        const claim = await a.claim({
          kind: 'binding',
          sessionId: s,
          workerId: 'd1',
          expected: cur,
          at: tick(),
        })
        expect(claim).toMatchObject({ granted: true, confirmed: false })
        a.setBinding(s, binding('d1', tick()))
      }
      await new Promise((r) => setTimeout(r, 10))
      for (const s of sessions) b.setBinding(s, binding('d0', tick()))
      // A comes back first and writes its bindings; then B.
      pa.restore()
      await eventually(() => expect(a.degraded).toBe(false), 30_000)
      await a.flush(30_000)
      pb.restore()
      await eventually(() => expect(b.degraded).toBe(false), 30_000)
      await b.flush(30_000)
      // Every view, and the server (a replica started now), names the D of the last turn.
      await eventually(() => {
        for (const s of sessions) {
          expect(a.getBinding(s)?.workerId, `A ${s}`).toBe('d0')
          expect(b.getBinding(s)?.workerId, `B ${s}`).toBe('d0')
        }
      })
      const late = await store(ns, server.port)
      for (const s of sessions) expect(late.getBinding(s)?.workerId, s).toBe('d0')
    })

    it('a binding confirmed on the server is not overridden by an older turn decided during the outage', async () => {
      const ns = uniqueNamespace('rec2')
      const [pa, pb] = [await proxy(), await proxy()]
      const a = await store(ns, pa.port)
      const b = await store(ns, pb.port)
      a.setBinding('s', binding('d0', tick()))
      await a.flush()
      await eventually(() => expect(b.getBinding('s')?.workerId).toBe('d0'))
      pb.cut()
      await eventually(() => expect(b.degraded).toBe(true))
      // B (cut off) serves a turn on d2; later A (connected) moves the session to d1 for good.
      b.setBinding('s', binding('d0', tick()))
      const early = tick()
      await new Promise((r) => setTimeout(r, 10))
      const cur = a.getBinding('s')
      expect(
        await a.claim({ kind: 'binding', sessionId: 's', workerId: 'd1', expected: cur, at: tick() }),
      ).toMatchObject({
        granted: true,
      })
      a.setBinding('s', binding('d1', tick()))
      await a.flush()
      expect(early).toBeLessThan(a.getBinding('s')!.updatedAt)
      pb.restore()
      await eventually(() => expect(b.degraded).toBe(false), 30_000)
      await b.flush(30_000)
      await eventually(() => {
        expect(a.getBinding('s')?.workerId).toBe('d1')
        expect(b.getBinding('s')?.workerId).toBe('d1')
      })
    })
  })
}

/**
 * An in-memory backend whose snapshot can be made to fail or hang, and whose connection events
 * the test sends (or withholds): the store's reconcile loop, without a server.
 */
class ScriptedBackend implements StateBackend {
  readonly kind = 'scripted'
  events!: BackendEvents
  /** Snapshots to fail (reject at once) before one succeeds. */
  failSnapshots = 0
  /** Snapshots to leave hanging (never settle) before one succeeds. */
  hangSnapshots = 0
  snapshots = 0
  /** Whether operations fail (a down server). */
  down = false
  readonly #bindings = new Map<string, Versioned<BindingValue>>()
  #rev = 0

  async start(events: BackendEvents): Promise<void> {
    this.events = events
  }
  #check(): void {
    if (this.down) throw new Error('connection refused')
  }
  async claimBinding(s: string, value: BindingValue, expected: number | undefined) {
    this.#check()
    const cur = this.#bindings.get(s)
    if (cur !== undefined && cur.revision !== expected) return { granted: false, current: cur }
    const v = { revision: ++this.#rev, value }
    this.#bindings.set(s, v)
    return { granted: true, current: v }
  }
  async putBinding(s: string, value: BindingValue, expected: number | undefined) {
    const r = await this.claimBinding(s, value, expected)
    return { ok: r.granted, current: r.current }
  }
  async flagOp(): Promise<FlagsValue | undefined> {
    this.#check()
    return undefined
  }
  async claimSeeds() {
    this.#check()
    return { granted: true, entries: {} }
  }
  async putSeeds() {
    this.#check()
    return {}
  }
  publishLoad(): void {}
  publishPause(): void {}
  snapshot(): Promise<BackendSnapshot> {
    this.snapshots++
    if (this.hangSnapshots > 0) {
      this.hangSnapshots--
      return new Promise(() => {})
    }
    if (this.down || this.failSnapshots > 0) {
      if (!this.down) this.failSnapshots--
      return Promise.reject(new Error('reading the server state failed'))
    }
    return Promise.resolve({
      lost: false,
      bindings: new Map(this.#bindings),
      flags: new Map(),
      seeds: new Map(),
    })
  }
  async close(): Promise<void> {}
}

/** A logical clock for the bindings' timestamps: strictly increasing, no wall clock. */
let clock = 0
const tick = (): number => ++clock

describe('reconcile retries until it succeeds', () => {
  it('failed and hanging reads, and a reconnect the client never reports: the store still recovers', async () => {
    const backend = new ScriptedBackend()
    const events: string[] = []
    const store = new ReplicatedStateStore(backend, {
      heartbeatMs: 20,
      replicaTtlMs: 200,
      opTimeoutMs: 20,
      onEvent: (e) => events.push(e.type),
    })
    await store.start()
    try {
      expect(store.degraded).toBe(false)
      // The server goes away; the client reports it.
      backend.down = true
      backend.events.connection(false)
      await eventually(() => expect(store.degraded).toBe(true))
      // It comes back: the client reports the reconnect, but the first reads fail or hang...
      backend.down = false
      backend.failSnapshots = 2
      backend.hangSnapshots = 1
      backend.events.connection(true)
      // ...and meanwhile the client reports a disconnect, then recovers its connection without a
      // word (no reconnect event ever comes).
      backend.events.connection(false)
      await eventually(() => expect(store.degraded).toBe(false), 60_000)
      expect(backend.snapshots).toBeGreaterThanOrEqual(5) // the first one, two failed, one hung, the good one
      expect(events).toContain('recovered')
      // Writes flow again.
      store.setBinding('s', { workerId: 'd0', committedTokens: 1, verifiedBlocks: 1, updatedAt: tick() })
      await store.flush(10_000)
      expect(store.metrics().pendingWrites).toBe(0)
    } finally {
      await store.close({ graceful: false })
    }
  })
})
