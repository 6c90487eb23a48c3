/**
 * A session binding as stored on the server: the D worker, committed tokens, verified blocks,
 * the router clock at the write, and the replica that wrote it.
 *
 * @example
 * ```ts
 * import type { BindingValue } from '@kvc/router-state'
 * const v: BindingValue = { w: 'd0', c: 41_312, v: 2_560, u: 1_000, r: 'router-a' }
 * ```
 */
export interface BindingValue {
  /** D worker id. */
  readonly w: string
  /** Committed tokens. */
  readonly c: number
  /** Verified blocks. */
  readonly v: number
  /** Router clock (ms) at the write. */
  readonly u: number
  /** Replica id of the writer. */
  readonly r: string
}

/**
 * A value with the server's version of it (NATS: the stream sequence; Redis: a counter).
 *
 * @example
 * ```ts
 * import type { BindingValue, Versioned } from '@kvc/router-state'
 * const x: Versioned<BindingValue> = { revision: 7, value: { w: 'd0', c: 0, v: 0, u: 0, r: 'a' } }
 * ```
 */
export interface Versioned<T> {
  readonly revision: number
  readonly value: T
}

/**
 * A session's rejects (per D) and exclusions, as stored on the server.
 *
 * @example
 * ```ts
 * import type { FlagsValue } from '@kvc/router-state'
 * const f: FlagsValue = { r: { d0: 2 }, x: ['d1'] }
 * ```
 */
export interface FlagsValue {
  readonly r: Readonly<Record<string, number>>
  readonly x: readonly string[]
}

/**
 * One change to a session's flags: a rejection by D `d`, an exclusion of `d`, or a reset
 * (reset-on-success clears both).
 *
 * @example
 * ```ts
 * import type { FlagOp } from '@kvc/router-state'
 * const ops: FlagOp[] = [{ t: 'reject', d: 'd0' }, { t: 'exclude', d: 'd0' }, { t: 'reset' }]
 * ```
 */
export type FlagOp =
  | { readonly t: 'reject'; readonly d: string }
  | { readonly t: 'exclude'; readonly d: string }
  | { readonly t: 'reset' }

/**
 * A replica's load message (core pub/sub): its own in-flight load per worker as absolute
 * `[turns, pendingSeeds, prefillTokens, decodeBlocks]`, for the listed workers (`full`: for every
 * worker; a worker left out is zero). `bye` says the replica is closing (drop its contribution now).
 *
 * @example
 * ```ts
 * import type { LoadMessage } from '@kvc/router-state'
 * const m: LoadMessage = { r: 'router-a', full: true, w: { d0: [2, 1, 4_096, 300] } }
 * ```
 */
export interface LoadMessage {
  readonly r: string
  readonly full: boolean
  readonly w: Readonly<Record<string, readonly [number, number, number, number]>>
  readonly bye?: boolean
}

/**
 * A pause hint (core pub/sub): D `w` paused until `u` (router clock, ms), from replica `r`.
 *
 * @example
 * ```ts
 * import type { PauseMessage } from '@kvc/router-state'
 * const m: PauseMessage = { r: 'router-a', w: 'd0', u: 1_700_000_001_500 }
 * ```
 */
export interface PauseMessage {
  readonly r: string
  readonly w: string
  readonly u: number
}

/**
 * What a backend tells its store: updates written by any replica (its own included), gossip, and
 * its connection going down or up.
 *
 * @example
 * ```ts
 * import type { BackendEvents } from '@kvc/router-state'
 * const quiet: BackendEvents = {
 *   binding: () => {}, flags: () => {}, load: () => {}, pause: () => {}, connection: () => {},
 * }
 * ```
 */
export interface BackendEvents {
  /** A binding was written (`value`) or deleted (`undefined`) at `revision`. */
  binding(sessionId: string, value: BindingValue | undefined, revision: number): void
  /** A session's flags are now `value` (`undefined`: none). */
  flags(sessionId: string, value: FlagsValue | undefined): void
  load(message: LoadMessage): void
  pause(message: PauseMessage): void
  connection(up: boolean): void
}

/**
 * Everything the server holds, read at once when a replica (re)connects.
 *
 * @example
 * ```ts
 * import type { BackendSnapshot } from '@kvc/router-state'
 * const empty: BackendSnapshot = { lost: false, bindings: new Map(), flags: new Map(), seeds: new Map() }
 * ```
 */
export interface BackendSnapshot {
  /** The server lost its state (restarted without persistence): replicas republish what they know. */
  readonly lost: boolean
  readonly bindings: ReadonlyMap<string, Versioned<BindingValue>>
  readonly flags: ReadonlyMap<string, FlagsValue>
  /** Per D worker: pending-seed slots held by each replica. */
  readonly seeds: ReadonlyMap<string, Readonly<Record<string, number>>>
}

/**
 * The server side of {@link ReplicatedStateStore}: atomic operations on one server (NATS
 * JetStream key-value buckets, or Redis). Every method may reject (connection lost, timeout);
 * the store then decides on its last view and retries later. Implement it to put the replicated
 * store on another engine.
 *
 * @example
 * ```ts
 * import type { StateBackend } from '@kvc/router-state'
 * const describe = (b: StateBackend) => `${b.kind} backend`
 * ```
 */
export interface StateBackend {
  readonly kind: string
  /** Subscribes to updates and gossip (before any snapshot, so nothing falls in between). */
  start(events: BackendEvents): Promise<void>
  /**
   * Atomically: grant when the session has no binding, is bound to `value.w`, or its binding is
   * at `expectedRevision`; then (unless already bound to `value.w`) write `value`. Answers the
   * binding after the call.
   */
  claimBinding(
    sessionId: string,
    value: BindingValue,
    expectedRevision: number | undefined,
    ttlMs: number,
  ): Promise<{ readonly granted: boolean; readonly current: Versioned<BindingValue> | undefined }>
  /**
   * Compare-and-set: write `value` if the binding is at `expectedRevision` (`undefined`: if
   * there is none). Answers the new version, or the current one when the comparison failed.
   */
  putBinding(
    sessionId: string,
    value: BindingValue,
    expectedRevision: number | undefined,
    ttlMs: number,
  ): Promise<{ readonly ok: boolean; readonly current: Versioned<BindingValue> | undefined }>
  /** Applies one flag change atomically and answers the session's flags after it. */
  flagOp(sessionId: string, op: FlagOp, ttlMs: number): Promise<FlagsValue | undefined>
  /**
   * Atomically: if `mine` plus the slots held on `workerId` by the replicas in `live` (every
   * other replica when `live` is `'all'`) is at most `budget`, record `mine` for replica `me`
   * (and forget replicas not in `live`). Answers the slots per replica after the call.
   */
  claimSeeds(
    workerId: string,
    me: string,
    mine: number,
    budget: number,
    live: ReadonlySet<string> | 'all',
  ): Promise<{ readonly granted: boolean; readonly entries: Readonly<Record<string, number>> }>
  /** Records `mine` slots for replica `me` on `workerId` unconditionally (a release, or a rewrite). */
  putSeeds(workerId: string, me: string, mine: number): Promise<Readonly<Record<string, number>>>
  /** Fire-and-forget; dropped while disconnected (the next heartbeat repeats it). */
  publishLoad(message: LoadMessage): void
  /** Fire-and-forget. */
  publishPause(message: PauseMessage): void
  snapshot(): Promise<BackendSnapshot>
  /** Closes the connections. `graceful: false` drops them at once (a crash, for tests). */
  close(graceful: boolean): Promise<void>
}
