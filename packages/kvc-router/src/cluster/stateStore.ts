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
  /** Clock time (ms) of the success that set it. */
  readonly updatedAt: number
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
  /** Turns sent to the worker and not finished. */
  readonly turns: number
  /** Seeds admitted on this D and not finished (the pending-seed budget counts these). */
  readonly pendingSeeds: number
  /** Tokens the worker still has to prefill for in-flight turns. */
  readonly prefillTokens: number
  /** KV blocks of in-flight turns (prompt + expected output), for Dynamo's decode cost. */
  readonly decodeBlocks: number
}

/**
 * The **shared** part of the router's state: what several router replicas must agree on to
 * avoid seeding one session on two D workers or over-committing a D. Everything else (the
 * residency index, fed by every replica from the same KV-event streams; capacity reports; link
 * health) stays local.
 *
 * The interface is synchronous: a distributed implementation keeps a local replica, answers reads
 * from it, and propagates writes in the background (bindings are advisory; a conflict resolves to
 * one binding and the loser's next turn is simply re-routed). {@link InMemoryClusterStateStore}
 * is the default, for one replica.
 *
 * Semantics each implementation must keep:
 * - `setPauseUntil` keeps the maximum of the current and the new time.
 * - `addReject` returns the new count; `resetSession` clears a session's rejects **and**
 *   exclusions at once (reset-on-success).
 * - load counters never go below zero.
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
  getBinding(sessionId: string): SessionBinding | undefined
  setBinding(sessionId: string, binding: SessionBinding): void
  deleteBinding(sessionId: string): void
  /** Number of bound sessions. */
  bindingCount(): number
  /** Adds deltas (possibly negative) to a worker's load. */
  addLoad(
    workerId: string,
    turns: number,
    pendingSeeds: number,
    prefillTokens: number,
    decodeBlocks: number,
  ): void
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
  readonly #bindings = new Map<string, SessionBinding>()
  readonly #loads = new Map<string, MutableLoad>()
  readonly #pause = new Map<string, number>()
  readonly #flags = new Map<string, SessionFlags>()

  getBinding(sessionId: string): SessionBinding | undefined {
    return this.#bindings.get(sessionId)
  }
  setBinding(sessionId: string, binding: SessionBinding): void {
    this.#bindings.set(sessionId, binding)
  }
  deleteBinding(sessionId: string): void {
    this.#bindings.delete(sessionId)
  }
  bindingCount(): number {
    return this.#bindings.size
  }
  addLoad(
    workerId: string,
    turns: number,
    pendingSeeds: number,
    prefillTokens: number,
    decodeBlocks: number,
  ): void {
    let l = this.#loads.get(workerId)
    if (l === undefined) {
      l = { turns: 0, pendingSeeds: 0, prefillTokens: 0, decodeBlocks: 0 }
      this.#loads.set(workerId, l)
    }
    l.turns = Math.max(0, l.turns + turns)
    l.pendingSeeds = Math.max(0, l.pendingSeeds + pendingSeeds)
    l.prefillTokens = Math.max(0, l.prefillTokens + prefillTokens)
    l.decodeBlocks = Math.max(0, l.decodeBlocks + decodeBlocks)
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

  #flagsOf(sessionId: string): SessionFlags {
    let f = this.#flags.get(sessionId)
    if (f === undefined) {
      f = { rejects: new Map(), excluded: new Set() }
      this.#flags.set(sessionId, f)
    }
    return f
  }
}
