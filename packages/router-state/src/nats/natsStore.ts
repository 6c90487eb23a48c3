import { JetStreamApiError, jetstream } from '@nats-io/jetstream'
import { type KV, type KvEntry, KvWatchInclude, Kvm } from '@nats-io/kv'
import {
  type NatsConnection,
  type NodeConnectionOptions,
  type QueuedIterator,
  type Subscription,
  connect,
} from '@nats-io/transport-node'
import { RouterStateError, checkOption, describeValue } from '../errors/routerStateError.js'
import type {
  BackendEvents,
  BackendSnapshot,
  BindingValue,
  FlagOp,
  FlagsValue,
  LoadMessage,
  PauseMessage,
  StateBackend,
  Versioned,
} from '../store/backend.js'
import { applyFlagOp, decodeJson, encodeKey, decodeKey, sumSeeds } from '../store/codec.js'
import { ReplicatedStateStore } from '../store/replicatedStore.js'
import { type ReplicatedStoreOptions, STORE_DEFAULTS, checkStoreOptions } from '../store/storeOptions.js'

/**
 * Options of {@link connectNatsStore}.
 *
 * @example
 * ```ts
 * import type { NatsStoreOptions } from '@kvc/router-state'
 * const o: NatsStoreOptions = { servers: ['nats://10.0.0.5:4222'], name: 'kvc-prod', bindingTtlMs: 600_000 }
 * ```
 */
export interface NatsStoreOptions extends ReplicatedStoreOptions {
  /** Server address(es), e.g. `nats://127.0.0.1:4222` (ignored with `connection`). */
  readonly servers?: string | string[]
  /** An open connection to use instead (the store does not close it). */
  readonly connection?: NatsConnection
  /** More connection options (reconnection is always on, forever). */
  readonly connectOptions?: Partial<NodeConnectionOptions>
  /**
   * Prefix of the key-value buckets (`<name>_bindings`, `<name>_flags`, `<name>_seeds`) and of the
   * subjects (`<name>.load`, `<name>.pause`): one name per cluster of replicas (default `kvc`).
   */
  readonly name?: string
}

const WRONG_LAST_SEQUENCE = new Set([10071, 10164])
const META = 'meta'

function isWrongSeq(err: unknown): boolean {
  return err instanceof JetStreamApiError && WRONG_LAST_SEQUENCE.has(err.code)
}

/** The entry if it holds a value (not a delete marker). */
function live(e: KvEntry | null): KvEntry | undefined {
  return e !== null && e.operation === 'PUT' ? e : undefined
}

/**
 * The NATS side of a {@link ReplicatedStateStore}: JetStream key-value buckets for bindings
 * (`<name>_bindings`, the bucket's max age is the idle TTL; compare-and-set on the subject's
 * last sequence), session flags (`<name>_flags`, same TTL) and pending-seed slots
 * (`<name>_seeds`, one key per D holding every replica's count); core pub/sub for load
 * (`<name>.load`) and pause hints (`<name>.pause`). Use {@link connectNatsStore}.
 *
 * @example
 * ```ts
 * import { connect } from '@nats-io/transport-node'
 * import { NatsStateBackend, ReplicatedStateStore } from '@kvc/router-state'
 * const nc = await connect({ servers: 'nats://127.0.0.1:4222' })
 * const store = new ReplicatedStateStore(new NatsStateBackend(nc, { name: 'kvc', bindingTtlMs: 600_000 }))
 * await store.start()
 * ```
 */
export class NatsStateBackend implements StateBackend {
  readonly kind = 'nats'
  readonly #nc: NatsConnection
  readonly #ownsConnection: boolean
  readonly #name: string
  readonly #ttl: number
  #bindings: KV | undefined
  #flags: KV | undefined
  #seeds: KV | undefined
  #events: BackendEvents | undefined
  #subs: Subscription[] = []
  #watches: QueuedIterator<unknown>[] = []
  #statusLoop: Promise<void> | undefined
  readonly #seedCache = new Map<string, { revision: number; entries: Readonly<Record<string, number>> }>()
  #closed = false

  /**
   * @param connection an open NATS connection
   * @param options `name` (bucket and subject prefix, default `kvc`), `bindingTtlMs` (the bucket
   *   max age, fixed by the first replica that creates the buckets), `ownsConnection` (close it on
   *   `close`, default false)
   *
   * @example
   * ```ts
   * import { connect } from '@nats-io/transport-node'
   * import { NatsStateBackend } from '@kvc/router-state'
   * const backend = new NatsStateBackend(await connect({ servers: 'nats://127.0.0.1:4222' }), { name: 'kvc' })
   * ```
   */
  constructor(
    connection: NatsConnection,
    options: {
      readonly name?: string
      readonly bindingTtlMs?: number
      readonly ownsConnection?: boolean
    } = {},
  ) {
    const name = options.name ?? 'kvc'
    checkOption(
      typeof name === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(name),
      `name must match /^[A-Za-z0-9_-]{1,64}$/, got ${describeValue(name)}`,
      name,
    )
    this.#nc = connection
    this.#ownsConnection = options.ownsConnection === true
    this.#name = name
    this.#ttl = options.bindingTtlMs ?? STORE_DEFAULTS.bindingTtlMs
  }

  async start(events: BackendEvents): Promise<void> {
    this.#events = events
    await this.#ensureBuckets()
    const onMsg =
      <T>(f: (m: T) => void) =>
      (err: Error | null, msg: { json<U>(): U }) => {
        if (err !== null) return
        let m: T
        try {
          m = msg.json<T>()
        } catch {
          return // not ours
        }
        f(m)
      }
    this.#subs.push(
      this.#nc.subscribe(`${this.#name}.load`, { callback: onMsg<LoadMessage>((m) => events.load(m)) }),
      this.#nc.subscribe(`${this.#name}.pause`, { callback: onMsg<PauseMessage>((m) => events.pause(m)) }),
    )
    const status = this.#nc.status()
    this.#statusLoop = (async () => {
      for await (const s of status) {
        if (this.#closed) break
        if (s.type === 'disconnect') events.connection(false)
        else if (s.type === 'reconnect') events.connection(true)
      }
    })()
    void this.#nc.closed().then(() => {
      if (!this.#closed) events.connection(false)
    })
  }

  async #ensureBuckets(): Promise<void> {
    const kvm = new Kvm(jetstream(this.#nc))
    const open = async (bucket: string, ttl: number) => {
      try {
        return await kvm.create(bucket, { history: 1, ttl, storage: 'file' })
      } catch (err) {
        // exists with another configuration (another TTL): use it as it is
        if (err instanceof JetStreamApiError) return kvm.open(bucket)
        throw err
      }
    }
    this.#bindings = await open(`${this.#name}_bindings`, this.#ttl)
    this.#flags = await open(`${this.#name}_flags`, this.#ttl)
    this.#seeds = await open(`${this.#name}_seeds`, 0)
  }

  async #restartWatches(): Promise<void> {
    for (const w of this.#watches) w.stop()
    this.#watches = []
    const ev = this.#events!
    const bw = await this.#bindings!.watch({ include: KvWatchInclude.UpdatesOnly })
    const fw = await this.#flags!.watch({ include: KvWatchInclude.UpdatesOnly })
    this.#watches.push(bw, fw)
    void (async () => {
      try {
        for await (const e of bw) {
          const s = decodeKey(e.key)
          if (e.operation === 'PUT') {
            const v = decodeJson<BindingValue>(e.value)
            if (v !== undefined) ev.binding(s, v, e.revision)
          } else ev.binding(s, undefined, e.revision)
        }
      } catch {
        // the watch ends with the connection; the next reconcile starts a new one
      }
    })()
    void (async () => {
      try {
        for await (const e of fw) {
          const s = decodeKey(e.key)
          ev.flags(s, e.operation === 'PUT' ? decodeJson<FlagsValue>(e.value) : undefined)
        }
      } catch {
        // as above
      }
    })()
  }

  async claimBinding(
    sessionId: string,
    value: BindingValue,
    expectedRevision: number | undefined,
  ): Promise<{ granted: boolean; current: Versioned<BindingValue> | undefined }> {
    const kv = this.#bindings!
    const key = encodeKey(sessionId)
    const data = JSON.stringify(value)
    // Optimistic first try, one round trip: create when the turn saw no binding, replace the one
    // it saw otherwise; either fails if the key moved, and then we read and decide.
    try {
      const revision = await kv.put(key, data, { previousSeq: expectedRevision ?? 0 })
      return { granted: true, current: { revision, value } }
    } catch (err) {
      if (!isWrongSeq(err)) throw err
    }
    for (;;) {
      const e = await kv.get(key)
      const l = live(e)
      if (l !== undefined) {
        const cur = decodeJson<BindingValue>(l.value)
        if (cur !== undefined) {
          if (cur.w === value.w) return { granted: true, current: { revision: l.revision, value: cur } }
          if (expectedRevision === undefined || l.revision !== expectedRevision) {
            return { granted: false, current: { revision: l.revision, value: cur } }
          }
        }
      }
      try {
        const revision = await kv.put(key, data, { previousSeq: e === null ? 0 : e.revision })
        return { granted: true, current: { revision, value } }
      } catch (err) {
        if (!isWrongSeq(err)) throw err
      }
    }
  }

  async putBinding(
    sessionId: string,
    value: BindingValue,
    expectedRevision: number | undefined,
  ): Promise<{ ok: boolean; current: Versioned<BindingValue> | undefined }> {
    const kv = this.#bindings!
    const key = encodeKey(sessionId)
    let previousSeq = expectedRevision ?? 0
    if (expectedRevision === undefined) {
      const e = await kv.get(key)
      const l = live(e)
      if (l !== undefined) {
        const cur = decodeJson<BindingValue>(l.value)
        return { ok: false, current: cur === undefined ? undefined : { revision: l.revision, value: cur } }
      }
      if (e !== null) previousSeq = e.revision
    }
    try {
      const revision = await kv.put(key, JSON.stringify(value), { previousSeq })
      return { ok: true, current: { revision, value } }
    } catch (err) {
      if (!isWrongSeq(err)) throw err
    }
    const e = live(await kv.get(key))
    if (e === undefined) return { ok: false, current: undefined }
    const cur = decodeJson<BindingValue>(e.value)
    return { ok: false, current: cur === undefined ? undefined : { revision: e.revision, value: cur } }
  }

  async flagOp(sessionId: string, op: FlagOp): Promise<FlagsValue | undefined> {
    const kv = this.#flags!
    const key = encodeKey(sessionId)
    for (;;) {
      const e = await kv.get(key)
      const l = live(e)
      const cur = l === undefined ? undefined : decodeJson<FlagsValue>(l.value)
      const next = applyFlagOp(cur, op)
      try {
        if (next === undefined) {
          if (l !== undefined) await kv.delete(key, { previousSeq: l.revision })
        } else {
          await kv.put(key, JSON.stringify(next), { previousSeq: e === null ? 0 : e.revision })
        }
        return next
      } catch (err) {
        if (!isWrongSeq(err)) throw err
      }
    }
  }

  async claimSeeds(
    workerId: string,
    me: string,
    mine: number,
    budget: number,
    liveSet: ReadonlySet<string> | 'all',
  ): Promise<{ granted: boolean; entries: Readonly<Record<string, number>> }> {
    return this.#casSeeds(workerId, (cur) => {
      const others = sumSeeds(cur, me, liveSet)
      if (others + mine > budget) return { write: undefined, granted: false }
      const next: Record<string, number> = {}
      for (const [r, n] of Object.entries(cur)) {
        if (r !== me && n > 0 && (liveSet === 'all' || liveSet.has(r))) next[r] = n
      }
      if (mine > 0) next[me] = mine
      return { write: next, granted: true }
    })
  }

  async putSeeds(workerId: string, me: string, mine: number): Promise<Readonly<Record<string, number>>> {
    const r = await this.#casSeeds(workerId, (cur) => {
      if ((cur[me] ?? 0) === mine) return { write: undefined, granted: true }
      const next: Record<string, number> = { ...cur }
      if (mine > 0) next[me] = mine
      else delete next[me]
      return { write: next, granted: true }
    })
    return r.entries
  }

  async #casSeeds(
    workerId: string,
    decide: (cur: Readonly<Record<string, number>>) => {
      write: Record<string, number> | undefined
      granted: boolean
    },
  ): Promise<{ granted: boolean; entries: Readonly<Record<string, number>> }> {
    const kv = this.#seeds!
    const key = `w.${encodeKey(workerId)}`
    // The version this replica last read or wrote: usually still current (one round trip).
    let known = this.#seedCache.get(workerId)
    let fromCache = known !== undefined
    for (;;) {
      if (known === undefined) {
        fromCache = false
        const e = await kv.get(key)
        const l = live(e)
        known = {
          revision: e === null ? 0 : e.revision,
          entries: (l === undefined ? undefined : decodeJson<Record<string, number>>(l.value)) ?? {},
        }
      }
      const { write, granted } = decide(known.entries)
      if (write === undefined) {
        // never refuse on a cached picture: others may have given slots back since
        if (fromCache) {
          known = undefined
          continue
        }
        return { granted, entries: known.entries }
      }
      try {
        const revision = await kv.put(key, JSON.stringify(write), { previousSeq: known.revision })
        this.#seedCache.set(workerId, { revision, entries: write })
        return { granted, entries: write }
      } catch (err) {
        if (!isWrongSeq(err)) throw err
        this.#seedCache.delete(workerId)
        known = undefined
      }
    }
  }

  publishLoad(message: LoadMessage): void {
    if (this.#nc.isClosed()) return
    this.#nc.publish(`${this.#name}.load`, JSON.stringify(message))
  }

  publishPause(message: PauseMessage): void {
    if (this.#nc.isClosed()) return
    this.#nc.publish(`${this.#name}.pause`, JSON.stringify(message))
  }

  async snapshot(): Promise<BackendSnapshot> {
    this.#seedCache.clear()
    await this.#ensureBuckets()
    await this.#restartWatches() // subscribe first, then read: nothing falls in between
    let lost = false
    const meta = live(await this.#seeds!.get(META))
    if (meta === undefined) {
      lost = true
      try {
        await this.#seeds!.create(META, JSON.stringify({ createdAt: Date.now() }))
      } catch (err) {
        if (!isWrongSeq(err)) throw err
        lost = false // another replica just created it
      }
    }
    const bindings = new Map<string, Versioned<BindingValue>>()
    for (const e of await this.#all(this.#bindings!)) {
      const v = decodeJson<BindingValue>(e.value)
      if (v !== undefined) bindings.set(decodeKey(e.key), { revision: e.revision, value: v })
    }
    const flags = new Map<string, FlagsValue>()
    for (const e of await this.#all(this.#flags!)) {
      const v = decodeJson<FlagsValue>(e.value)
      if (v !== undefined) flags.set(decodeKey(e.key), v)
    }
    const seeds = new Map<string, Readonly<Record<string, number>>>()
    for (const e of await this.#all(this.#seeds!)) {
      if (!e.key.startsWith('w.')) continue
      const v = decodeJson<Record<string, number>>(e.value)
      if (v !== undefined) seeds.set(decodeKey(e.key.slice(2)), v)
    }
    return { lost, bindings, flags, seeds }
  }

  async #all(kv: KV): Promise<KvEntry[]> {
    const out: KvEntry[] = []
    const it = await kv.history({ key: '>' })
    for await (const e of it) if (e.operation === 'PUT') out.push(e)
    return out
  }

  async close(graceful: boolean): Promise<void> {
    this.#closed = true
    for (const w of this.#watches) w.stop()
    this.#watches = []
    for (const s of this.#subs) {
      try {
        s.unsubscribe()
      } catch {
        // closed already
      }
    }
    this.#subs = []
    if (this.#ownsConnection && !this.#nc.isClosed()) {
      if (graceful) await this.#nc.drain().catch(() => this.#nc.close())
      else await this.#nc.close()
    }
    await this.#statusLoop?.catch(() => {})
  }
}

/**
 * Connects a {@link ReplicatedStateStore} to NATS: opens a connection (reconnecting forever),
 * creates or opens the buckets, reads the server's state and starts the heartbeat.
 *
 * @throws RouterStateError `INVALID_OPTION`, `CONNECT_FAILED`.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { connectNatsStore } from '@kvc/router-state'
 * const store = await connectNatsStore({ servers: 'nats://127.0.0.1:4222', name: 'kvc', replicaId: 'router-a' })
 * const router = new Router({ store })
 * ```
 */
export async function connectNatsStore(options: NatsStoreOptions): Promise<ReplicatedStateStore> {
  checkStoreOptions(options)
  const name = options.name ?? 'kvc'
  checkOption(
    typeof name === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(name),
    `name must match /^[A-Za-z0-9_-]{1,64}$/, got ${describeValue(name)}`,
    name,
  )
  let nc = options.connection
  if (nc === undefined) {
    try {
      nc = await connect({
        ...(options.servers === undefined ? {} : { servers: options.servers }),
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
        pingInterval: 5_000,
        name: `kvc-router-state ${options.replicaId ?? ''}`.trim(),
        ...options.connectOptions,
      })
    } catch (err) {
      throw new RouterStateError(
        'CONNECT_FAILED',
        `cannot connect to NATS at ${String(options.servers)}: ${(err as Error).message}`,
        options.servers,
      )
    }
  }
  const backend = new NatsStateBackend(nc, {
    ...(options.name === undefined ? {} : { name: options.name }),
    bindingTtlMs: options.bindingTtlMs ?? STORE_DEFAULTS.bindingTtlMs,
    ownsConnection: options.connection === undefined,
  })
  let store: ReplicatedStateStore
  try {
    store = new ReplicatedStateStore(backend, options)
    await store.start()
  } catch (err) {
    await backend.close(false).catch(() => {})
    throw err
  }
  return store
}
