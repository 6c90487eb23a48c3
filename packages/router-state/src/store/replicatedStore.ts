import {
  type ClaimOutcome,
  type ClusterStateStore,
  type LoadDelta,
  RouterError,
  type SessionBinding,
  type StateClaim,
  type WorkerLoad,
  checkLoadDelta as checkRouterLoadDelta,
} from '@kvc/kvc-router'
import { RouterStateError } from '../errors/routerStateError.js'
import type {
  BackendEvents,
  BindingValue,
  FlagOp,
  FlagsValue,
  LoadMessage,
  PauseMessage,
  StateBackend,
  Versioned,
} from './backend.js'
import {
  type Flags,
  type LocalBinding,
  type LocalView,
  type MutableLoad,
  type Peer,
  toBinding,
  withoutRevision,
} from './localView.js'
import { formatStoreMetrics } from './metricsText.js'
import { applySnapshot, nextRetryMs, readSnapshot } from './recovery.js'
import {
  type ReplicatedStoreMetrics,
  type ReplicatedStoreOptions,
  STORE_DEFAULTS,
  type StoreEvent,
  checkStoreOptions,
  defaultReplicaId,
} from './storeOptions.js'

const ZERO: WorkerLoad = Object.freeze({ turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 })
const TIMEOUT = Symbol('timeout')

/** kvc-router's one check of a load delta, its refusal reported as this package's error. */
function checkLoadDelta(workerId: unknown, delta: LoadDelta): void {
  try {
    checkRouterLoadDelta(workerId, delta)
  } catch (e) {
    if (e instanceof RouterError) throw new RouterStateError('INVALID_OPTION', e.message, e.value)
    throw e
  }
}

/**
 * A {@link ClusterStateStore} shared by several router replicas through a server (NATS or Redis,
 * see `connectNatsStore` / `connectRedisStore`). Reads are answered from a local view, writes
 * are applied locally at once and propagated in the background, and what must not race goes
 * through claims (`confirmsClaims` is `true`: the driver answers each `claim` action with
 * {@link ReplicatedStateStore.claim}).
 *
 * - **Bindings** are advisory, with an idle TTL; the first live binding wins (compare-and-set on
 *   the server's revision) and a turn whose claim lost is re-routed by Dispatch, not dropped.
 * - **Load** is counted per replica and summed: each replica publishes its own counters (absolute
 *   values, so a lost message is repaired by the next heartbeat); a replica not heard from for
 *   `replicaTtlMs` stops counting, so a dead replica's load expires instead of leaking.
 * - **Pending-seed slots** are claimed on the server against the budget, summed over live replicas.
 * - **Pause hints** go by pub/sub; **rejects and exclusions** are stored per session with the TTL.
 * - **Degraded mode**: when the server is unreachable or slow, the replica keeps routing on its last
 *   view (claims are decided locally and marked unconfirmed), reports `degraded` in its metrics,
 *   and reconciles on reconnect (the server's bindings win; its own writes are replayed).
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { connectNatsStore } from '@kvc/router-state'
 * const store = await connectNatsStore({ servers: 'nats://127.0.0.1:4222' })
 * const router = new Router({ store, workers: [{ id: 'd0', role: 'decode', capacityTokens: 400_000 }] })
 * const turn = router.dispatch({ sessionId: 's1', promptTokens: 3_000 })
 * let a = turn.next()
 * if (a.type === 'claim') a = turn.next(await store.claim(a.claim))
 * // ... answer admit / sendFast / seedViaP / wait as usual, until done or fail
 * await store.close()
 * ```
 */
export class ReplicatedStateStore implements ClusterStateStore {
  readonly confirmsClaims = true
  readonly replicaId: string
  readonly #backend: StateBackend
  readonly #now: () => number
  readonly #ttl: number
  readonly #replicaTtl: number
  readonly #heartbeatMs: number
  readonly #opTimeout: number
  readonly #onEvent: ((e: StoreEvent) => void) | undefined

  readonly #bindings = new Map<string, LocalBinding>()
  readonly #flags = new Map<string, Flags>()
  readonly #flagOps = new Map<string, FlagOp[]>()
  readonly #flagsSeen = new Map<string, FlagsValue | undefined>()
  readonly #own = new Map<string, MutableLoad>()
  readonly #total = new Map<string, MutableLoad>()
  readonly #peers = new Map<string, Peer>()
  readonly #pause = new Map<string, number>()
  /** Per D: the seed slots per replica, as last read from the server. */
  readonly #seeds = new Map<string, Readonly<Record<string, number>>>()
  readonly #dirtyBindings = new Set<string>()
  readonly #dirtySeeds = new Set<string>()
  readonly #dirtyLoads = new Set<string>()
  readonly #seedChains = new Map<string, Promise<unknown>>()
  /** The maps above, as a reconcile rewrites them. */
  readonly #view: LocalView

  #connected = false
  #degraded = true
  #degradedSince: number
  #degradedTotal = 0
  #graceUntil = 0
  #closed = false
  #flushing = false
  #flushAgain = false
  #flushTimer: NodeJS.Timeout | undefined
  #loadTimer: NodeJS.Immediate | undefined
  #heartbeat: NodeJS.Timeout | undefined
  #reconcileTimer: NodeJS.Timeout | undefined
  #reconciling: Promise<void> | undefined
  #retryMs = 0

  #m = {
    degradedEpisodes: 0,
    bindingClaimsGranted: 0,
    bindingClaimsLost: 0,
    seedClaimsGranted: 0,
    seedClaimsDenied: 0,
    claimsUnconfirmed: 0,
    bindingConflicts: 0,
    reconciles: 0,
    serverStateLost: 0,
    writeErrors: 0,
    expiredReplicas: 0,
  }

  /**
   * Builds a store over a backend; call {@link ReplicatedStateStore.start} before use (the
   * `connect*Store` functions do both).
   *
   * @throws RouterStateError `INVALID_OPTION`.
   *
   * @example
   * ```ts
   * import { ReplicatedStateStore, type StateBackend } from '@kvc/router-state'
   * declare const backend: StateBackend // your own engine
   * const store = new ReplicatedStateStore(backend, { replicaId: 'router-a' })
   * await store.start()
   * ```
   */
  constructor(backend: StateBackend, options: ReplicatedStoreOptions = {}) {
    const o = options
    checkStoreOptions(o)
    this.#ttl = o.bindingTtlMs ?? STORE_DEFAULTS.bindingTtlMs
    this.#replicaTtl = o.replicaTtlMs ?? STORE_DEFAULTS.replicaTtlMs
    this.#heartbeatMs = o.heartbeatMs ?? STORE_DEFAULTS.heartbeatMs
    this.#opTimeout = o.opTimeoutMs ?? STORE_DEFAULTS.opTimeoutMs
    const id = o.replicaId ?? defaultReplicaId()
    this.replicaId = id
    this.#backend = backend
    this.#now = o.now ?? Date.now
    this.#onEvent = o.onEvent
    this.#degradedSince = this.#now()
    this.#view = {
      replicaId: id,
      bindings: this.#bindings,
      flags: this.#flags,
      flagOps: this.#flagOps,
      own: this.#own,
      peers: this.#peers,
      seeds: this.#seeds,
      dirtyBindings: this.#dirtyBindings,
      dirtySeeds: this.#dirtySeeds,
      setFlags: (s, v) => this.#setFlags(s, v),
    }
  }

  /**
   * Subscribes, reads the server's state (the first reconcile) and starts the heartbeat.
   *
   * @throws RouterStateError `CONNECT_FAILED` when the first reconcile fails.
   *
   * @example
   * ```ts
   * import { ReplicatedStateStore, type StateBackend } from '@kvc/router-state'
   * declare const backend: StateBackend
   * await new ReplicatedStateStore(backend).start()
   * ```
   */
  async start(): Promise<void> {
    const events: BackendEvents = {
      binding: (s, v, rev) => this.#onBinding(s, v, rev),
      flags: (s, v) => this.#onFlags(s, v),
      load: (m) => this.#onLoad(m),
      pause: (m) => this.#onPause(m),
      connection: (up) => this.#onConnection(up),
    }
    await this.#backend.start(events)
    this.#connected = true
    try {
      await this.#reconcile()
    } catch (err) {
      throw new RouterStateError(
        'CONNECT_FAILED',
        `${this.#backend.kind}: first reconcile failed: ${(err as Error).message}`,
        err,
      )
    }
    this.#heartbeat = setInterval(() => this.#tick(), this.#heartbeatMs)
    this.#heartbeat.unref()
    this.#publishLoad(true)
  }

  // ------------------------------------------------------------------ bindings

  /**
   * The session's binding in the local view (`undefined` once its idle TTL has passed).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.getBinding('s1')?.workerId
   * ```
   */
  getBinding(sessionId: string): SessionBinding | undefined {
    const e = this.#bindings.get(sessionId)
    if (e === undefined) return undefined
    if (e.exp <= this.#now() && !e.dirty) {
      this.#bindings.delete(sessionId)
      return undefined
    }
    return e.b
  }

  /**
   * Records a success's binding locally and writes it to the server in the background
   * (compare-and-set on the revision this replica knows). If the session is bound to another D
   * (another replica's claim came after this turn's own), that binding is kept and a `conflict`
   * is reported: the turn has completed, only the binding stays where it is.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.setBinding('s1', { workerId: 'd0', committedTokens: 3_256, verifiedBlocks: 187, updatedAt: 0 })
   * ```
   */
  setBinding(sessionId: string, binding: SessionBinding): void {
    this.#open()
    const prev = this.#bindings.get(sessionId)
    if (
      prev !== undefined &&
      prev.b.workerId !== binding.workerId &&
      (prev.exp > this.#now() || prev.dirty)
    ) {
      // Every placement on a new D is claimed first, so the session moved after this turn's
      // claim: the later claim stands (first live binding wins); this turn already completed.
      this.#conflict(sessionId, prev.b.workerId, binding.workerId, 'another replica')
      return
    }
    const base = prev?.b.revision
    const b: SessionBinding = {
      workerId: binding.workerId,
      committedTokens: binding.committedTokens,
      verifiedBlocks: binding.verifiedBlocks,
      updatedAt: binding.updatedAt,
      ...(base === undefined ? {} : { revision: base }),
    }
    this.#bindings.set(sessionId, {
      b,
      exp: this.#now() + this.#ttl,
      at: this.#now(),
      dirty: true,
      unconfirmed: this.#degraded || prev?.unconfirmed === true,
    })
    this.#dirtyBindings.add(sessionId)
    this.#kick()
  }

  /**
   * Forgets the session's binding in the local view (other replicas keep theirs until its TTL).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.deleteBinding('s1')
   * ```
   */
  deleteBinding(sessionId: string): void {
    this.#bindings.delete(sessionId)
    this.#dirtyBindings.delete(sessionId)
  }

  /**
   * Bindings in the local view (expired ones included until they are next read).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.bindingCount()
   * ```
   */
  bindingCount(): number {
    return this.#bindings.size
  }

  // ------------------------------------------------------------------ load

  /**
   * Adds a delta to this replica's own load on a worker (absent fields 0; no counter goes below
   * zero); the sum over live replicas is what `load` answers. Published (coalesced) at the next
   * turn of the event loop.
   *
   * @throws RouterStateError `INVALID_OPTION` (a field that is not an integer; nothing changes).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.addLoad('d0', { turns: 1, prefillTokens: 2_048, decodeBlocks: 200 })
   * ```
   */
  addLoad(workerId: string, delta: LoadDelta): void {
    checkLoadDelta(workerId, delta)
    const turns = delta.turns ?? 0
    const pendingSeeds = delta.pendingSeeds ?? 0
    const prefillTokens = delta.prefillTokens ?? 0
    const decodeBlocks = delta.decodeBlocks ?? 0
    let o = this.#own.get(workerId)
    if (o === undefined) {
      o = { turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 }
      this.#own.set(workerId, o)
    }
    const t = this.#totalOf(workerId)
    const nt = Math.max(0, o.turns + turns)
    const ns = Math.max(0, o.pendingSeeds + pendingSeeds)
    const np = Math.max(0, o.prefillTokens + prefillTokens)
    const nb = Math.max(0, o.decodeBlocks + decodeBlocks)
    t.turns += nt - o.turns
    t.pendingSeeds += ns - o.pendingSeeds
    t.prefillTokens += np - o.prefillTokens
    t.decodeBlocks += nb - o.decodeBlocks
    const released = ns < o.pendingSeeds
    o.turns = nt
    o.pendingSeeds = ns
    o.prefillTokens = np
    o.decodeBlocks = nb
    if (released) {
      this.#dirtySeeds.add(workerId)
      this.#kick()
    }
    if (this.#closed) return
    this.#dirtyLoads.add(workerId)
    if (this.#loadTimer === undefined) this.#loadTimer = setImmediate(() => this.#publishLoad(false))
  }

  /**
   * A worker's in-flight load summed over this replica and every live one.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.load('d0').turns
   * ```
   */
  load(workerId: string): WorkerLoad {
    return this.#total.get(workerId) ?? ZERO
  }

  /**
   * This replica's own contribution to a worker's load.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.ownLoad('d0').pendingSeeds
   * ```
   */
  ownLoad(workerId: string): WorkerLoad {
    return this.#own.get(workerId) ?? ZERO
  }

  // ------------------------------------------------------------------ pauses

  /**
   * When the worker's pause ends (router clock, ms), from any replica's pause hints.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.pauseUntil('d0') // -Infinity when never paused
   * ```
   */
  pauseUntil(workerId: string): number {
    return this.#pause.get(workerId) ?? Number.NEGATIVE_INFINITY
  }

  /**
   * Keeps the later of the current and the new pause, and tells the other replicas.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.setPauseUntil('d0', Date.now() + 1_500)
   * ```
   */
  setPauseUntil(workerId: string, untilMs: number): void {
    const cur = this.#pause.get(workerId)
    if (cur !== undefined && untilMs <= cur) return
    this.#pause.set(workerId, untilMs)
    if (this.#connected && !this.#closed) {
      try {
        this.#backend.publishPause({ r: this.replicaId, w: workerId, u: untilMs })
      } catch {
        // a pause hint is a hint: the D's own admission stays the ground truth
      }
    }
  }

  // ------------------------------------------------------------------ flags

  /**
   * Rejections of the session by the worker (shared by all replicas).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.rejects('s1', 'd0')
   * ```
   */
  rejects(sessionId: string, workerId: string): number {
    return this.#liveFlags(sessionId)?.rejects.get(workerId) ?? 0
  }

  /**
   * Counts one more rejection and returns the new count (written to the server in the background).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.addReject('s1', 'd0') // 1
   * ```
   */
  addReject(sessionId: string, workerId: string): number {
    const f = this.#flagsOf(sessionId)
    const n = (f.rejects.get(workerId) ?? 0) + 1
    f.rejects.set(workerId, n)
    this.#queueFlag(sessionId, { t: 'reject', d: workerId })
    return n
  }

  /**
   * Whether the worker is excluded for the session.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.isExcluded('s1', 'd0')
   * ```
   */
  isExcluded(sessionId: string, workerId: string): boolean {
    return this.#liveFlags(sessionId)?.excluded.has(workerId) ?? false
  }

  /**
   * Excludes the worker for the session (every replica, until a success resets it or the TTL ends).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.exclude('s1', 'd0')
   * ```
   */
  exclude(sessionId: string, workerId: string): void {
    this.#flagsOf(sessionId).excluded.add(workerId)
    this.#queueFlag(sessionId, { t: 'exclude', d: workerId })
  }

  /**
   * Workers excluded for the session.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.excludedWorkers('s1') // []
   * ```
   */
  excludedWorkers(sessionId: string): readonly string[] {
    const f = this.#liveFlags(sessionId)
    return f === undefined || f.excluded.size === 0 ? [] : [...f.excluded]
  }

  /**
   * Clears the session's rejects and exclusions (reset-on-success), on every replica.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.resetSession('s1')
   * ```
   */
  resetSession(sessionId: string): void {
    // Most sessions never have flags: no server write for them.
    if (!this.#flags.has(sessionId) && !this.#flagOps.has(sessionId)) return
    this.#flags.delete(sessionId)
    this.#flagOps.set(sessionId, [{ t: 'reset' }])
    this.#kick()
  }

  /**
   * Forgets a worker in the local view: its load (this replica's share is published as zero),
   * its pause, the sessions' flags and bindings naming it (the server's copies expire by TTL).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.dropWorker('d3')
   * ```
   */
  dropWorker(workerId: string): void {
    const o = this.#own.get(workerId)
    if (o !== undefined)
      this.addLoad(workerId, {
        turns: -o.turns,
        pendingSeeds: -o.pendingSeeds,
        prefillTokens: -o.prefillTokens,
        decodeBlocks: -o.decodeBlocks,
      })
    this.#total.delete(workerId)
    for (const p of this.#peers.values()) p.loads.delete(workerId)
    this.#pause.delete(workerId)
    for (const [s, f] of this.#flags) {
      f.rejects.delete(workerId)
      f.excluded.delete(workerId)
      if (f.rejects.size === 0 && f.excluded.size === 0) this.#flags.delete(s)
    }
    for (const [s, e] of this.#bindings) {
      if (e.b.workerId === workerId) {
        this.#bindings.delete(s)
        this.#dirtyBindings.delete(s)
      }
    }
  }

  // ------------------------------------------------------------------ claims

  /**
   * Answers a `claim` action (see `StateClaim` in `@kvc/kvc-router`): atomically on the server,
   * or, while degraded, on the last view (`confirmed: false`; reconciled later). Never rejects.
   *
   * @example
   * ```ts
   * import type { DispatchAction, TurnDispatch } from '@kvc/kvc-router'
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * declare const turn: TurnDispatch
   * declare let a: DispatchAction
   * if (a.type === 'claim') a = turn.next(await store.claim(a.claim))
   * ```
   */
  async claim(claim: StateClaim): Promise<ClaimOutcome> {
    this.#open()
    return claim.kind === 'seedSlot' ? this.#claimSeed(claim) : this.#claimBinding(claim)
  }

  async #claimBinding(claim: Extract<StateClaim, { kind: 'binding' }>): Promise<ClaimOutcome> {
    const s = claim.sessionId
    const value: BindingValue = { w: claim.workerId, c: 0, v: 0, u: claim.at, r: this.replicaId }
    const expectedRev = claim.expected?.revision
    if (!this.#degraded) {
      const r = await this.#op(() => this.#backend.claimBinding(s, value, expectedRev, this.#ttl))
      if (r !== TIMEOUT) {
        if (r.current !== undefined) this.#adopt(s, r.current)
        const binding = this.getBinding(s)
        if (r.granted) this.#m.bindingClaimsGranted++
        else this.#m.bindingClaimsLost++
        return {
          type: 'claimResult',
          granted: r.granted,
          ...(binding === undefined ? {} : { binding }),
        }
      }
    }
    // Degraded: decide on the last view, write it later (the server's binding wins then).
    this.#m.claimsUnconfirmed++
    const cur = this.getBinding(s)
    const granted =
      cur === undefined ||
      cur.workerId === claim.workerId ||
      (claim.expected !== undefined &&
        claim.expected.workerId === cur.workerId &&
        claim.expected.revision === cur.revision)
    if (!granted) {
      this.#m.bindingClaimsLost++
      return { type: 'claimResult', granted: false, binding: cur, confirmed: false }
    }
    this.#m.bindingClaimsGranted++
    if (cur?.workerId !== claim.workerId) {
      const b: SessionBinding = {
        workerId: claim.workerId,
        committedTokens: 0,
        verifiedBlocks: 0,
        updatedAt: claim.at,
        ...(cur?.revision === undefined ? {} : { revision: cur.revision }),
      }
      this.#bindings.set(s, {
        b,
        exp: this.#now() + this.#ttl,
        at: this.#now(),
        dirty: true,
        unconfirmed: true,
      })
      this.#dirtyBindings.add(s)
    }
    const binding = this.getBinding(s)!
    return { type: 'claimResult', granted: true, binding, confirmed: false }
  }

  #claimSeed(claim: Extract<StateClaim, { kind: 'seedSlot' }>): Promise<ClaimOutcome> {
    const d = claim.workerId
    const run = async (): Promise<ClaimOutcome> => {
      const mine = this.ownLoad(d).pendingSeeds
      if (!this.#degraded) {
        const live = this.#liveSet()
        const r = await this.#op(() => this.#backend.claimSeeds(d, this.replicaId, mine, claim.budget, live))
        if (r !== TIMEOUT) {
          this.#seeds.set(d, r.entries)
          if (r.granted) this.#m.seedClaimsGranted++
          else this.#m.seedClaimsDenied++
          return { type: 'claimResult', granted: r.granted }
        }
      }
      this.#m.claimsUnconfirmed++
      const known = this.#seeds.get(d) ?? {}
      const live = this.#liveSet()
      let sum = mine
      for (const [r, n] of Object.entries(known)) {
        if (r !== this.replicaId && (live === 'all' || live.has(r))) sum += n
      }
      const granted = sum <= claim.budget
      if (granted) {
        this.#m.seedClaimsGranted++
        this.#dirtySeeds.add(d)
      } else this.#m.seedClaimsDenied++
      return { type: 'claimResult', granted, confirmed: false }
    }
    return this.#chain(d, run)
  }

  // ------------------------------------------------------------------ health

  /**
   * Whether the replica routes on its last view (the server unreachable, slow, or not reconciled yet).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * if (store.degraded) console.warn('routing on the last view')
   * ```
   */
  get degraded(): boolean {
    return this.#degraded
  }

  /**
   * A snapshot of the store's health and counters.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.metrics().degraded // false when connected and reconciled
   * ```
   */
  metrics(): ReplicatedStoreMetrics {
    const now = this.#now()
    let live = 0
    for (const p of this.#peers.values()) if (now - p.seen < this.#replicaTtl) live++
    let bindings = 0
    for (const e of this.#bindings.values()) if (e.exp > now || e.dirty) bindings++
    let flagOps = 0
    for (const q of this.#flagOps.values()) flagOps += q.length
    return {
      replicaId: this.replicaId,
      backend: this.#backend.kind,
      connected: this.#connected,
      degraded: this.#degraded,
      degradedEpisodes: this.#m.degradedEpisodes,
      degradedMs: this.#degradedTotal + (this.#degraded ? now - this.#degradedSince : 0),
      liveReplicas: live,
      bindings,
      bindingClaimsGranted: this.#m.bindingClaimsGranted,
      bindingClaimsLost: this.#m.bindingClaimsLost,
      seedClaimsGranted: this.#m.seedClaimsGranted,
      seedClaimsDenied: this.#m.seedClaimsDenied,
      claimsUnconfirmed: this.#m.claimsUnconfirmed,
      bindingConflicts: this.#m.bindingConflicts,
      reconciles: this.#m.reconciles,
      serverStateLost: this.#m.serverStateLost,
      pendingWrites: this.#dirtyBindings.size + this.#dirtySeeds.size + flagOps,
      writeErrors: this.#m.writeErrors,
      expiredReplicas: this.#m.expiredReplicas,
    }
  }

  /**
   * The metrics in the Prometheus text format (gauges and counters named `<prefix>_...`, labelled
   * with the replica id and backend), to append to a `/metrics` page.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * store.metricsText().includes('kvc_router_state_degraded') // true
   * ```
   */
  metricsText(prefix = 'kvc_router_state'): string {
    return formatStoreMetrics(this.metrics(), prefix)
  }

  /**
   * Resolves when every local write has reached the server (or rejects after `timeoutMs`): for
   * tests and graceful shutdown.
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * await store.flush()
   * ```
   */
  async flush(timeoutMs = 5_000): Promise<void> {
    const deadline = this.#now() + timeoutMs
    for (;;) {
      if (this.#loadTimer !== undefined) {
        clearImmediate(this.#loadTimer)
        this.#publishLoad(false)
      }
      if (this.#reconciling !== undefined) await this.#reconciling.catch(() => {})
      if (!this.#degraded && !this.#flushing) await this.#flush()
      if (!this.#degraded && this.metrics().pendingWrites === 0 && !this.#flushing) return
      if (this.#now() >= deadline) {
        throw new RouterStateError('TIMEOUT', `flush timed out after ${timeoutMs} ms`, this.metrics())
      }
      await new Promise((r) => setTimeout(r, 10))
    }
  }

  /**
   * Closes the store. Gracefully (default): writes what is pending, gives back this replica's
   * seed slots, tells the other replicas to drop its load now, and closes the connections. With
   * `{ graceful: false }` it just drops the connections, as a crash would (the other replicas
   * then expire its load after `replicaTtlMs` and its bindings after their TTL).
   *
   * @example
   * ```ts
   * import type { ReplicatedStateStore } from '@kvc/router-state'
   * declare const store: ReplicatedStateStore
   * await store.close()
   * ```
   */
  async close(options: { readonly graceful?: boolean; readonly timeoutMs?: number } = {}): Promise<void> {
    if (this.#closed) return
    const graceful = options.graceful !== false
    if (graceful && !this.#degraded) {
      try {
        for (const d of this.#own.keys()) this.#dirtySeeds.add(d)
        await this.flush(options.timeoutMs ?? 2_000)
        for (const [d, o] of this.#own) {
          if (o.pendingSeeds > 0 || (this.#seeds.get(d)?.[this.replicaId] ?? 0) > 0) {
            await this.#op(() => this.#backend.putSeeds(d, this.replicaId, 0))
          }
        }
        this.#backend.publishLoad({ r: this.replicaId, full: true, w: {}, bye: true })
      } catch (err) {
        this.#emit('error', `close: ${(err as Error).message}`)
      }
    }
    this.#closed = true
    clearInterval(this.#heartbeat)
    clearTimeout(this.#flushTimer)
    clearTimeout(this.#reconcileTimer)
    if (this.#loadTimer !== undefined) clearImmediate(this.#loadTimer)
    this.#loadTimer = undefined
    await this.#backend.close(graceful)
    this.#connected = false
  }

  // ------------------------------------------------------------------ internals: events

  #onBinding(s: string, v: BindingValue | undefined, rev: number): void {
    const e = this.#bindings.get(s)
    if (e?.dirty) {
      // Our write is pending: the flusher settles it with the server; keep the newest version
      // announced meanwhile (it may be newer than ours once ours is written).
      if (v !== undefined && (e.seen === undefined || e.seen.revision < rev))
        e.seen = { value: v, revision: rev }
      return
    }
    if (v === undefined) {
      if (e !== undefined && (e.b.revision ?? 0) <= rev) this.#bindings.delete(s)
      return
    }
    if (e !== undefined && e.b.revision !== undefined && e.b.revision >= rev) return
    this.#bindings.set(s, {
      b: toBinding(v, rev),
      exp: this.#now() + this.#ttl,
      at: this.#now(),
      dirty: false,
    })
  }

  #adopt(s: string, cur: Versioned<BindingValue>): void {
    const e = this.#bindings.get(s)
    if (e?.dirty && this.#dirtyBindings.has(s) && e.b.workerId === cur.value.w) {
      // keep our pending write, on top of the server's version
      e.b = { ...e.b, revision: cur.revision }
      return
    }
    if (e !== undefined && !e.dirty && e.b.revision !== undefined && e.b.revision > cur.revision) return
    this.#bindings.set(s, {
      b: toBinding(cur.value, cur.revision),
      exp: this.#now() + this.#ttl,
      at: this.#now(),
      dirty: false,
    })
    this.#dirtyBindings.delete(s)
  }

  #onFlags(s: string, v: FlagsValue | undefined): void {
    if (this.#flagOps.has(s)) {
      // Our ops are pending: remember what was announced meanwhile, applied after their result.
      this.#flagsSeen.set(s, v)
      return
    }
    this.#setFlags(s, v)
  }

  #setFlags(s: string, v: FlagsValue | undefined): void {
    if (v === undefined || (Object.keys(v.r).length === 0 && v.x.length === 0)) {
      this.#flags.delete(s)
      return
    }
    this.#flags.set(s, {
      rejects: new Map(Object.entries(v.r)),
      excluded: new Set(v.x),
      exp: this.#now() + this.#ttl,
    })
  }

  #onLoad(m: LoadMessage): void {
    if (m.r === this.replicaId || this.#closed) return
    let p = this.#peers.get(m.r)
    if (m.bye === true) {
      if (p !== undefined) this.#dropPeer(m.r, p)
      return
    }
    if (p === undefined) {
      p = { seen: 0, loads: new Map() }
      this.#peers.set(m.r, p)
    }
    p.seen = this.#now()
    if (m.full) {
      for (const [w, old] of p.loads) {
        if (m.w[w] === undefined) {
          this.#applyPeer(w, old, [0, 0, 0, 0])
          p.loads.delete(w)
        }
      }
    }
    for (const [w, v] of Object.entries(m.w)) {
      if (!Array.isArray(v) || v.length !== 4) continue
      const old = p.loads.get(w) ?? ([0, 0, 0, 0] as const)
      this.#applyPeer(w, old, v)
      p.loads.set(w, v)
    }
  }

  #applyPeer(
    w: string,
    old: readonly [number, number, number, number],
    v: readonly [number, number, number, number],
  ): void {
    const t = this.#totalOf(w)
    t.turns = Math.max(0, t.turns + v[0] - old[0])
    t.pendingSeeds = Math.max(0, t.pendingSeeds + v[1] - old[1])
    t.prefillTokens = Math.max(0, t.prefillTokens + v[2] - old[2])
    t.decodeBlocks = Math.max(0, t.decodeBlocks + v[3] - old[3])
  }

  #dropPeer(id: string, p: Peer): void {
    for (const [w, old] of p.loads) this.#applyPeer(w, old, [0, 0, 0, 0])
    this.#peers.delete(id)
  }

  #onPause(m: PauseMessage): void {
    if (m.r === this.replicaId || typeof m.u !== 'number') return
    const cur = this.#pause.get(m.w)
    if (cur === undefined || m.u > cur) this.#pause.set(m.w, m.u)
  }

  #onConnection(up: boolean): void {
    if (this.#closed) return
    if (!up) {
      this.#connected = false
      this.#setDegraded(true, 'connection lost')
      return
    }
    this.#connected = true
    this.#scheduleReconcile(0)
  }

  // ------------------------------------------------------------------ internals: sync

  #tick(): void {
    if (this.#closed) return
    const now = this.#now()
    // A dead replica's load stops counting; not while we cannot hear anybody (degraded).
    if (!this.#degraded) {
      for (const [id, p] of this.#peers) {
        if (now - p.seen >= this.#replicaTtl) {
          this.#dropPeer(id, p)
          this.#m.expiredReplicas++
        }
      }
    }
    for (const [s, f] of this.#flags) if (f.exp <= now && !this.#flagOps.has(s)) this.#flags.delete(s)
    this.#publishLoad(true)
    // Degraded: a reconcile is pending or scheduled until one succeeds, whatever the client
    // reports about its connection (a reconnect can go unreported; an attempt while the
    // connection is down just fails and is retried).
    if (this.#degraded) this.#scheduleReconcile(this.#retryMs)
    else if (this.#dirtyBindings.size + this.#dirtySeeds.size + this.#flagOps.size > 0) this.#kick()
  }

  #publishLoad(full: boolean): void {
    if (this.#loadTimer !== undefined) clearImmediate(this.#loadTimer)
    this.#loadTimer = undefined
    if (this.#closed || !this.#connected) return
    const w: Record<string, [number, number, number, number]> = {}
    const put = (id: string, o: MutableLoad) => {
      w[id] = [o.turns, o.pendingSeeds, o.prefillTokens, o.decodeBlocks]
    }
    if (full) {
      for (const [id, o] of this.#own) {
        if (o.turns + o.pendingSeeds + o.prefillTokens + o.decodeBlocks > 0) put(id, o)
      }
    } else {
      for (const id of this.#dirtyLoads) put(id, this.#own.get(id) ?? { ...ZERO })
    }
    this.#dirtyLoads.clear()
    try {
      this.#backend.publishLoad({ r: this.replicaId, full, w })
    } catch {
      // repeated by the next heartbeat
    }
  }

  #kick(): void {
    if (this.#closed || this.#degraded) return
    if (this.#flushing) {
      this.#flushAgain = true
      return
    }
    if (this.#flushTimer === undefined) {
      this.#flushTimer = setTimeout(() => {
        this.#flushTimer = undefined
        void this.#flush()
      }, 0)
    }
  }

  async #flush(): Promise<void> {
    if (this.#flushing || this.#closed || this.#degraded) return
    this.#flushing = true
    try {
      do {
        this.#flushAgain = false
        for (const s of [...this.#dirtyBindings]) await this.#flushBinding(s)
        for (const s of [...this.#flagOps.keys()]) await this.#flushFlags(s)
        for (const d of [...this.#dirtySeeds]) {
          this.#dirtySeeds.delete(d)
          await this.#chain(d, async () => {
            const r = await this.#op(() =>
              this.#backend.putSeeds(d, this.replicaId, this.ownLoad(d).pendingSeeds),
            )
            if (r === TIMEOUT) this.#dirtySeeds.add(d)
            else this.#seeds.set(d, r)
          })
        }
      } while (this.#flushAgain && !this.#degraded && !this.#closed)
      this.#retryMs = 0
    } catch (err) {
      this.#m.writeErrors++
      this.#emit('error', `flush: ${(err as Error).message}`)
    } finally {
      this.#flushing = false
    }
  }

  async #flushBinding(s: string): Promise<void> {
    for (let tries = 0; tries < 8; tries++) {
      const e = this.#bindings.get(s)
      if (e === undefined || !e.dirty) {
        this.#dirtyBindings.delete(s)
        return
      }
      const b = e.b
      const value: BindingValue = {
        w: b.workerId,
        c: b.committedTokens,
        v: b.verifiedBlocks,
        u: b.updatedAt,
        r: this.replicaId,
      }
      const r = await this.#op(() => this.#backend.putBinding(s, value, b.revision, this.#ttl))
      if (r === TIMEOUT) return
      const now = this.#bindings.get(s)
      if (r.ok) {
        if (now === e && e.b === b) {
          const rev = r.current!.revision
          const seen = e.seen
          e.seen = undefined
          e.dirty = false
          e.unconfirmed = false
          e.exp = this.#now() + this.#ttl
          this.#dirtyBindings.delete(s)
          // Another replica wrote on top of ours before we heard back: its version is the newest.
          e.b =
            seen !== undefined && seen.revision > rev
              ? toBinding(seen.value, seen.revision)
              : { ...b, revision: rev }
          return
        }
        // rewritten meanwhile: write again on top of this version
        if (now !== undefined) now.b = { ...now.b, revision: r.current!.revision }
        continue
      }
      const cur = r.current
      if (cur === undefined) {
        // gone (expired, or the server lost it): create it
        e.b = withoutRevision(e.b)
        continue
      }
      if (cur.value.w === b.workerId) {
        // same D (a concurrent success there): ours is the later write
        e.b = { ...e.b, revision: cur.revision }
        continue
      }
      if (e.unconfirmed === true && b.updatedAt > cur.value.u) {
        // Both bindings were decided apart (at least ours during an outage, on the last view), and
        // ours records the later turn: the session's last turn ran on our D, where its KV is
        // freshest. The server takes ours (a later turn there overrides it again).
        e.b = { ...e.b, revision: cur.revision }
        continue
      }
      // Another replica bound the session to another D first: keep that binding.
      this.#conflict(s, cur.value.w, b.workerId, `replica ${cur.value.r}`)
      e.dirty = false
      this.#adopt(s, cur)
      this.#dirtyBindings.delete(s)
      return
    }
  }

  async #flushFlags(s: string): Promise<void> {
    const q = this.#flagOps.get(s)
    if (q === undefined) return
    let last: FlagsValue | undefined
    while (q.length > 0) {
      const r = await this.#op(() => this.#backend.flagOp(s, q[0]!, this.#ttl))
      if (r === TIMEOUT) return
      last = r
      q.shift()
    }
    if (this.#flagOps.get(s) === q) {
      this.#flagOps.delete(s)
      this.#setFlags(s, last)
      // An announcement heard meanwhile may be newer than our result (or older: then the
      // announcement of our own last op, still on its way, sets it right).
      if (this.#flagsSeen.has(s)) this.#setFlags(s, this.#flagsSeen.get(s))
    }
    this.#flagsSeen.delete(s)
  }

  async #reconcile(): Promise<void> {
    const started = this.#now()
    const snap = await readSnapshot(this.#backend, this.#opTimeout)
    const now = this.#now()
    // On the first reconcile an empty server is just a new cluster.
    const republish = snap.lost && this.#m.reconciles > 0
    if (republish) {
      this.#m.serverStateLost++
      this.#emit('serverStateLost', 'the server came back without state: republishing the local view')
    }
    applySnapshot(this.#view, snap, { started, now, ttl: this.#ttl, republish })
    this.#graceUntil = now + this.#replicaTtl
    this.#m.reconciles++
    this.#setDegraded(false, 'reconciled')
    this.#publishLoad(true)
    await this.#flush()
  }

  #scheduleReconcile(delayMs: number): void {
    if (this.#closed || this.#reconcileTimer !== undefined || this.#reconciling !== undefined) return
    this.#reconcileTimer = setTimeout(() => {
      this.#reconcileTimer = undefined
      if (this.#closed) return
      this.#reconciling = this.#reconcile()
        .catch((err) => {
          this.#m.writeErrors++
          this.#emit('error', `reconcile: ${(err as Error).message}`)
          this.#retryMs = nextRetryMs(this.#retryMs)
        })
        .finally(() => {
          this.#reconciling = undefined
          // Failed, or degraded again meanwhile (a write of the reconcile's flush timed out,
          // which could not schedule while this one ran): retry until one succeeds.
          if (this.#degraded && !this.#closed) this.#scheduleReconcile(this.#retryMs)
        })
    }, delayMs)
  }

  /** Runs one server operation with the timeout; a failure or timeout makes the store degraded. */
  async #op<T>(f: () => Promise<T>): Promise<T | typeof TIMEOUT> {
    if (this.#closed || this.#degraded) return TIMEOUT
    let timer: NodeJS.Timeout | undefined
    try {
      const r = await Promise.race([
        f(),
        new Promise<typeof TIMEOUT>((res) => {
          timer = setTimeout(() => res(TIMEOUT), this.#opTimeout)
        }),
      ])
      if (r === TIMEOUT) this.#fault('a server operation timed out')
      return r
    } catch (err) {
      this.#m.writeErrors++
      this.#fault((err as Error).message)
      return TIMEOUT
    } finally {
      clearTimeout(timer)
    }
  }

  #fault(why: string): void {
    if (this.#closed) return
    this.#setDegraded(true, why)
    this.#retryMs = nextRetryMs(this.#retryMs)
    this.#scheduleReconcile(this.#retryMs)
  }

  #setDegraded(on: boolean, why: string): void {
    if (on === this.#degraded) return
    const now = this.#now()
    if (on) {
      this.#degraded = true
      this.#degradedSince = now
      this.#m.degradedEpisodes++
      this.#emit('degraded', why)
    } else {
      this.#degradedTotal += now - this.#degradedSince
      this.#degraded = false
      if (this.#m.reconciles > 1) this.#emit('recovered', why)
    }
  }

  #conflict(s: string, kept: string, dropped: string, by: string): void {
    this.#m.bindingConflicts++
    this.#emit(
      'conflict',
      `session ${s}: kept its binding to ${kept} (${by}), not ${dropped} from this replica`,
      {
        sessionId: s,
        kept,
        dropped,
      },
    )
  }

  #emit(type: StoreEvent['type'], detail: string, conflict?: StoreEvent['conflict']): void {
    try {
      this.#onEvent?.(conflict === undefined ? { type, detail } : { type, detail, conflict })
    } catch {
      // a logger's failure is not ours
    }
  }

  #chain<T>(key: string, f: () => Promise<T>): Promise<T> {
    const prev = this.#seedChains.get(key) ?? Promise.resolve()
    const next = prev.then(f, f)
    const tail = next.catch(() => {})
    this.#seedChains.set(key, tail)
    void tail.then(() => {
      if (this.#seedChains.get(key) === tail) this.#seedChains.delete(key)
    })
    return next
  }

  #liveSet(): ReadonlySet<string> | 'all' {
    const now = this.#now()
    if (now < this.#graceUntil) return 'all'
    const live = new Set<string>()
    for (const [id, p] of this.#peers) if (now - p.seen < this.#replicaTtl) live.add(id)
    return live
  }

  #totalOf(w: string): MutableLoad {
    let t = this.#total.get(w)
    if (t === undefined) {
      t = { turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 }
      this.#total.set(w, t)
    }
    return t
  }

  #liveFlags(s: string): Flags | undefined {
    const f = this.#flags.get(s)
    if (f === undefined) return undefined
    if (f.exp <= this.#now() && !this.#flagOps.has(s)) {
      this.#flags.delete(s)
      return undefined
    }
    return f
  }

  #flagsOf(s: string): Flags {
    let f = this.#liveFlags(s)
    if (f === undefined) {
      f = { rejects: new Map(), excluded: new Set(), exp: 0 }
      this.#flags.set(s, f)
    }
    f.exp = this.#now() + this.#ttl
    return f
  }

  #queueFlag(s: string, op: FlagOp): void {
    const q = this.#flagOps.get(s)
    if (q === undefined) this.#flagOps.set(s, [op])
    else q.push(op)
    this.#kick()
  }

  #open(): void {
    if (this.#closed) throw new RouterStateError('CLOSED', 'the store is closed', this.replicaId)
  }
}
