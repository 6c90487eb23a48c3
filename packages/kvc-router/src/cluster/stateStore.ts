import { RouterError, describeValue } from '../errors/routerError.js'

/**
 * Where a session's KV lives, as far as the router knows: the D worker it is bound to, how many
 * tokens it has committed there (prompt + output of its last successful turn) and how many of the
 * last prompt's blocks the residency index must still show on that worker for the binding to be
 * trusted (an eviction event that removes one of them invalidates the fast path).
 *
 * @example
 * ```ts
 * import type { SessionBinding } from '@kvc/kvc-router'
 * const b: SessionBinding = { workerId: 'd2', committedTokens: 41_312, verifiedBlocks: 2_560, updatedAt: 1_000 }
 * ```
 */
export interface SessionBinding {
  readonly workerId: string
  readonly committedTokens: number
  readonly verifiedBlocks: number
  /** Clock time (ms) of the success (or the claim) that set it. */
  readonly updatedAt: number
  /**
   * Version assigned by a store that confirms claims (it increases with every write of the
   * session's binding); a binding claim names the version it was decided on, so a store can
   * refuse it when another replica moved the binding meanwhile. Absent in the default store.
   */
  readonly revision?: number
}

/**
 * A worker's in-flight load as the router counts it.
 *
 * @example
 * ```ts
 * import type { WorkerLoad } from '@kvc/kvc-router'
 * const idle: WorkerLoad = { turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 }
 * ```
 */
export interface WorkerLoad {
  /**
   * Turns committed to the worker and not finished: a D counts a turn from the turn's first claim
   * or admission request for it (or its send, for policies without admission) until the turn ends
   * or moves on to another D; a P counts the seeds it is running.
   */
  readonly turns: number
  /** Seeds admitted on this D and not finished (the pending-seed budget counts these). */
  readonly pendingSeeds: number
  /** Tokens the worker still has to prefill for in-flight turns. */
  readonly prefillTokens: number
  /** KV blocks of in-flight turns (prompt + expected output), for Dynamo's decode cost. */
  readonly decodeBlocks: number
}

/**
 * A change to a worker's load ({@link ClusterStateStore.addLoad}): each field is added to the
 * counter of the same name (negative to give load back); an absent field changes nothing.
 *
 * @example
 * ```ts
 * import type { LoadDelta } from '@kvc/kvc-router'
 * const seedStarts: LoadDelta = { turns: 1, prefillTokens: 12_000 }
 * const seedEnds: LoadDelta = { turns: -1, prefillTokens: -12_000 }
 * ```
 */
export interface LoadDelta {
  readonly turns?: number
  readonly pendingSeeds?: number
  readonly prefillTokens?: number
  readonly decodeBlocks?: number
}

const isDelta = (v: number | undefined): boolean => v === undefined || Number.isSafeInteger(v)

/**
 * Throws `INVALID_OPTION` unless `workerId` is a non-empty string and `delta` an object whose
 * given fields are integers. Every `ClusterStateStore` implementation calls it in `addLoad` before
 * changing anything, so all stores refuse the same deltas with the same message. Dispatch calls
 * `addLoad` a few times per action: the check reads each field once, and builds a message only
 * for a bad one.
 *
 * @throws RouterError `INVALID_OPTION` naming the bad field and its value.
 *
 * @example
 * ```ts
 * import { checkLoadDelta } from '@kvc/kvc-router'
 * checkLoadDelta('d0', { turns: 1, prefillTokens: 2_048 }) // fine
 * // checkLoadDelta('d0', { turns: 0.5 }) throws: addLoad: turns must be an integer, got 0.5
 * ```
 */
export function checkLoadDelta(workerId: unknown, delta: LoadDelta): void {
  if (
    typeof workerId === 'string' &&
    workerId.length > 0 &&
    typeof delta === 'object' &&
    delta !== null &&
    isDelta(delta.turns) &&
    isDelta(delta.pendingSeeds) &&
    isDelta(delta.prefillTokens) &&
    isDelta(delta.decodeBlocks)
  ) {
    return
  }
  if (typeof workerId !== 'string' || workerId.length === 0) {
    throw new RouterError(
      'INVALID_OPTION',
      `addLoad: workerId must be a non-empty string, got ${describeValue(workerId)}`,
      workerId,
    )
  }
  if (typeof delta !== 'object' || delta === null) {
    throw new RouterError(
      'INVALID_OPTION',
      `addLoad: the delta must be an object, got ${describeValue(delta)}`,
      delta,
    )
  }
  for (const k of ['turns', 'pendingSeeds', 'prefillTokens', 'decodeBlocks'] as const) {
    const v = delta[k]
    if (!isDelta(v)) {
      throw new RouterError('INVALID_OPTION', `addLoad: ${k} must be an integer, got ${describeValue(v)}`, v)
    }
  }
}

/**
 * What a turn asks a store that confirms claims (see {@link ClusterStateStore.confirmsClaims})
 * before it relies on shared state several replicas may change at once:
 *
 * - `binding`: the turn is about to use D `workerId` for a session that is unbound or bound to
 *   another D (a first placement or a migration). `expected` is the binding the turn decided on
 *   (`undefined` if it saw none). The store grants it when the session has no live binding, when
 *   its binding is already to `workerId`, or when its binding is still `expected` (same
 *   `revision`): it then binds the session to `workerId` (no committed tokens yet). Otherwise
 *   another replica bound it first: the claim is **lost**, the answer names the winner's binding
 *   and the turn is re-routed (to the winner's D first), not dropped.
 * - `seedSlot`: the turn took a pending-seed slot on `workerId` (counted in this replica's load);
 *   the store grants it when the slots held on `workerId` by all live replicas, this one's
 *   included, stay within `budget`. A denied slot is given back by the turn.
 *
 * `at` is the router's clock when the claim was made.
 *
 * @example
 * ```ts
 * import type { StateClaim } from '@kvc/kvc-router'
 * const first: StateClaim = { kind: 'binding', sessionId: 's1', workerId: 'd0', expected: undefined, at: 0 }
 * const slot: StateClaim = { kind: 'seedSlot', sessionId: 's1', workerId: 'd0', budget: 4, at: 0 }
 * ```
 */
export type StateClaim =
  | {
      readonly kind: 'binding'
      readonly sessionId: string
      readonly workerId: string
      readonly expected: SessionBinding | undefined
      readonly at: number
    }
  | {
      readonly kind: 'seedSlot'
      readonly sessionId: string
      readonly workerId: string
      readonly budget: number
      readonly at: number
    }

/**
 * A store's answer to a {@link StateClaim}; it is also the outcome the driver hands back to a
 * `claim` action (`turn.next(await store.claim(action.claim))`).
 *
 * @example
 * ```ts
 * import type { ClaimOutcome } from '@kvc/kvc-router'
 * const lost: ClaimOutcome = {
 *   type: 'claimResult',
 *   granted: false,
 *   binding: { workerId: 'd1', committedTokens: 0, verifiedBlocks: 0, updatedAt: 5, revision: 7 },
 * }
 * ```
 */
export interface ClaimOutcome {
  readonly type: 'claimResult'
  readonly granted: boolean
  /** For a binding claim: the session's binding after the claim (the winner's when it is lost). */
  readonly binding?: SessionBinding
  /**
   * `false` when the store could not reach its server and decided on its last view (degraded
   * mode); it reconciles later. Default `true`.
   */
  readonly confirmed?: boolean
}

/**
 * The **shared** part of the router's state: what several router replicas must agree on to
 * avoid seeding one session on two D workers or over-committing a D. Everything else (the
 * residency index, fed by every replica from the same KV-event streams; capacity reports; link
 * health) stays local.
 *
 * Reads and writes are synchronous, so Route stays a plain function: a distributed implementation
 * (`@kvc/router-state`: NATS, Redis) keeps a local view, answers reads from it and propagates
 * writes in the background. What must not race between replicas goes through **claims**: a store
 * with `confirmsClaims: true` makes Dispatch yield a `claim` action (a {@link StateClaim}) before
 * a turn moves or creates a session's binding and after it takes a pending-seed slot; the driver
 * answers it with the store's own `claim` method (synchronous or asynchronous). {@link InMemoryClusterStateStore}
 * is the default, for one replica, and confirms no claims unless asked to.
 *
 * Semantics each implementation must keep:
 * - `setPauseUntil` keeps the maximum of the current and the new time.
 * - `addReject` returns the new count; `resetSession` clears a session's rejects **and**
 *   exclusions at once (reset-on-success).
 * - load counters never go below zero.
 * - with `confirmsClaims`, claims follow {@link StateClaim}'s rules, and `setBinding` assigns a
 *   new `revision` but keeps a binding to another D (claimed after the turn's own claim: the
 *   first live binding wins; the turn has completed, only the binding stays).
 *
 * @example
 * ```ts
 * import { InMemoryClusterStateStore, type ClusterStateStore } from '@kvc/kvc-router'
 * const store: ClusterStateStore = new InMemoryClusterStateStore()
 * store.addReject('s1', 'd0') // 1
 * store.resetSession('s1')
 * store.rejects('s1', 'd0') // 0
 * ```
 */
export interface ClusterStateStore {
  /**
   * `true` when several replicas share this store and Dispatch must confirm claims with it (a
   * `claim` action per {@link StateClaim}); absent or `false` for one replica (no claim actions).
   */
  readonly confirmsClaims?: boolean
  getBinding(sessionId: string): SessionBinding | undefined
  setBinding(sessionId: string, binding: SessionBinding): void
  deleteBinding(sessionId: string): void
  /** Number of bound sessions. */
  bindingCount(): number
  /**
   * Adds a delta (fields possibly negative, absent ones 0) to a worker's load; no counter goes
   * below zero.
   *
   * @throws RouterError `INVALID_OPTION` (a field that is not an integer; nothing changes).
   */
  addLoad(workerId: string, delta: LoadDelta): void
  load(workerId: string): WorkerLoad
  pauseUntil(workerId: string): number
  setPauseUntil(workerId: string, untilMs: number): void
  rejects(sessionId: string, workerId: string): number
  addReject(sessionId: string, workerId: string): number
  isExcluded(sessionId: string, workerId: string): boolean
  exclude(sessionId: string, workerId: string): void
  /** Workers excluded for the session (empty array if none). */
  excludedWorkers(sessionId: string): readonly string[]
  resetSession(sessionId: string): void
  /** Forgets everything about a worker (its load, pause, and every session's rejects / exclusions of it; bindings to it are dropped). */
  dropWorker(workerId: string): void
  /**
   * Decides a {@link StateClaim} by its rules and answers the `claim` action Dispatch yields for
   * it (`turn.next(await store.claim(action.claim))`; `TurnDriver` does this by default). Dispatch
   * yields claims only when `confirmsClaims` is true, but every store decides them, so a driver
   * answers every action without a cast; a store for one process decides on its own maps
   * ({@link InMemoryClusterStateStore.claim}, synchronously), a shared one on its server
   * (asynchronously).
   */
  claim(claim: StateClaim): ClaimOutcome | Promise<ClaimOutcome>
}

/**
 * Options of {@link InMemoryClusterStateStore}.
 *
 * @example
 * ```ts
 * import type { InMemoryClusterStateStoreOptions } from '@kvc/kvc-router'
 * const o: InMemoryClusterStateStoreOptions = { confirmClaims: true }
 * ```
 */
export interface InMemoryClusterStateStoreOptions {
  /**
   * Confirm claims (default `false`): Dispatch then yields `claim` actions, answered
   * synchronously by {@link InMemoryClusterStateStore.claim}. Several routers in one process can
   * share such a store; it is also the reference semantics of the distributed stores.
   */
  readonly confirmClaims?: boolean
}

interface SessionFlags {
  rejects: Map<string, number>
  excluded: Set<string>
}

interface MutableLoad {
  turns: number
  pendingSeeds: number
  prefillTokens: number
  decodeBlocks: number
}

const ZERO_LOAD: WorkerLoad = Object.freeze({ turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 })

/**
 * The in-process {@link ClusterStateStore}: plain maps, O(1) per call, with per-session flags
 * created only when a session is rejected (so 100K quiet sessions cost one binding each).
 *
 * @example
 * ```ts
 * import { InMemoryClusterStateStore } from '@kvc/kvc-router'
 * const store = new InMemoryClusterStateStore()
 * store.setBinding('s1', { workerId: 'd0', committedTokens: 900, verifiedBlocks: 50, updatedAt: 0 })
 * store.getBinding('s1')?.workerId // 'd0'
 * ```
 */
export class InMemoryClusterStateStore implements ClusterStateStore {
  readonly confirmsClaims: boolean
  readonly #bindings = new Map<string, SessionBinding>()
  readonly #loads = new Map<string, MutableLoad>()
  readonly #pause = new Map<string, number>()
  readonly #flags = new Map<string, SessionFlags>()
  #revision = 0

  constructor(options: InMemoryClusterStateStoreOptions = {}) {
    this.confirmsClaims = options.confirmClaims === true
  }

  getBinding(sessionId: string): SessionBinding | undefined {
    return this.#bindings.get(sessionId)
  }
  setBinding(sessionId: string, binding: SessionBinding): void {
    if (!this.confirmsClaims) {
      this.#bindings.set(sessionId, binding)
      return
    }
    // With claims every placement on a new D is claimed first: a binding to another D was
    // claimed after this turn's own claim, and stands (first live binding wins).
    const cur = this.#bindings.get(sessionId)
    if (cur !== undefined && cur.workerId !== binding.workerId) return
    this.#bindings.set(sessionId, { ...binding, revision: ++this.#revision })
  }
  deleteBinding(sessionId: string): void {
    this.#bindings.delete(sessionId)
  }
  bindingCount(): number {
    return this.#bindings.size
  }
  /**
   * Adds a delta to a worker's load (see {@link ClusterStateStore.addLoad}).
   *
   * @throws RouterError `INVALID_OPTION` (nothing changes).
   *
   * @example
   * ```ts
   * import { InMemoryClusterStateStore } from '@kvc/kvc-router'
   * const store = new InMemoryClusterStateStore()
   * store.addLoad('d0', { turns: 1, decodeBlocks: 40 })
   * store.addLoad('d0', { turns: -1 })
   * store.load('d0') // { turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 40 }
   * ```
   */
  addLoad(workerId: string, delta: LoadDelta): void {
    checkLoadDelta(workerId, delta)
    let l = this.#loads.get(workerId)
    if (l === undefined) {
      l = { turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 }
      this.#loads.set(workerId, l)
    }
    if (delta.turns !== undefined) l.turns = Math.max(0, l.turns + delta.turns)
    if (delta.pendingSeeds !== undefined) l.pendingSeeds = Math.max(0, l.pendingSeeds + delta.pendingSeeds)
    if (delta.prefillTokens !== undefined)
      l.prefillTokens = Math.max(0, l.prefillTokens + delta.prefillTokens)
    if (delta.decodeBlocks !== undefined) l.decodeBlocks = Math.max(0, l.decodeBlocks + delta.decodeBlocks)
  }
  load(workerId: string): WorkerLoad {
    return this.#loads.get(workerId) ?? ZERO_LOAD
  }
  pauseUntil(workerId: string): number {
    return this.#pause.get(workerId) ?? Number.NEGATIVE_INFINITY
  }
  setPauseUntil(workerId: string, untilMs: number): void {
    const cur = this.#pause.get(workerId)
    if (cur === undefined || untilMs > cur) this.#pause.set(workerId, untilMs)
  }
  rejects(sessionId: string, workerId: string): number {
    return this.#flags.get(sessionId)?.rejects.get(workerId) ?? 0
  }
  addReject(sessionId: string, workerId: string): number {
    const f = this.#flagsOf(sessionId)
    const n = (f.rejects.get(workerId) ?? 0) + 1
    f.rejects.set(workerId, n)
    return n
  }
  isExcluded(sessionId: string, workerId: string): boolean {
    return this.#flags.get(sessionId)?.excluded.has(workerId) ?? false
  }
  exclude(sessionId: string, workerId: string): void {
    this.#flagsOf(sessionId).excluded.add(workerId)
  }
  excludedWorkers(sessionId: string): readonly string[] {
    const f = this.#flags.get(sessionId)
    return f === undefined ? [] : [...f.excluded]
  }
  resetSession(sessionId: string): void {
    this.#flags.delete(sessionId)
  }
  dropWorker(workerId: string): void {
    this.#loads.delete(workerId)
    this.#pause.delete(workerId)
    for (const [s, f] of this.#flags) {
      f.rejects.delete(workerId)
      f.excluded.delete(workerId)
      if (f.rejects.size === 0 && f.excluded.size === 0) this.#flags.delete(s)
    }
    for (const [s, b] of this.#bindings) if (b.workerId === workerId) this.#bindings.delete(s)
  }

  /**
   * Decides a claim at once, by {@link StateClaim}'s rules, over this store's maps (a lost
   * binding claim names the current binding; a granted one to another D binds the session to it
   * with no committed tokens).
   *
   * @example
   * ```ts
   * import { InMemoryClusterStateStore } from '@kvc/kvc-router'
   * const store = new InMemoryClusterStateStore({ confirmClaims: true })
   * store.claim({ kind: 'binding', sessionId: 's', workerId: 'd0', expected: undefined, at: 0 }).granted // true
   * store.claim({ kind: 'binding', sessionId: 's', workerId: 'd1', expected: undefined, at: 1 }).granted // false: d0 won
   * ```
   */
  claim(claim: StateClaim): ClaimOutcome {
    if (claim.kind === 'seedSlot') {
      return { type: 'claimResult', granted: this.load(claim.workerId).pendingSeeds <= claim.budget }
    }
    const cur = this.#bindings.get(claim.sessionId)
    if (cur !== undefined && cur.workerId === claim.workerId) {
      return { type: 'claimResult', granted: true, binding: cur }
    }
    if (
      cur === undefined ||
      (claim.expected !== undefined &&
        claim.expected.workerId === cur.workerId &&
        claim.expected.revision === cur.revision)
    ) {
      const b: SessionBinding = {
        workerId: claim.workerId,
        committedTokens: 0,
        verifiedBlocks: 0,
        updatedAt: claim.at,
        revision: ++this.#revision,
      }
      this.#bindings.set(claim.sessionId, b)
      return { type: 'claimResult', granted: true, binding: b }
    }
    return { type: 'claimResult', granted: false, binding: cur }
  }

  #flagsOf(sessionId: string): SessionFlags {
    let f = this.#flags.get(sessionId)
    if (f === undefined) {
      f = { rejects: new Map(), excluded: new Set() }
      this.#flags.set(sessionId, f)
    }
    return f
  }
}
