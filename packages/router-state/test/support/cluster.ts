import {
  type AdmitAction,
  type AdmitResponse,
  type ClusterStateStore,
  type DoneAction,
  type FailAction,
  LeaseBook,
  Router,
  type RouterParamsInput,
  TurnDriver,
  type TurnEffects,
  type TurnRequest,
  admit,
} from '@kvc/kvc-router'
import { type AdmitAnswer, type SendAnswer, scriptedResponse, seededRandom } from '@kvc/kvc-router/testing'
import { sleep } from './helpers.js'

interface DWorker {
  readonly capacity: number
  readonly sessions: Map<
    string,
    { sessionId: string; residentTokens: number; lastAccessTime: number; idle: boolean }
  >
  readonly leases: LeaseBook
}

/**
 * The D workers every replica talks to, with their own ground truth: Algorithm 2 (`admit`) over a
 * KV pool with leases, sessions kept after their turns (evictable), and an invariant check after
 * every admission: locked tokens plus live reservations never exceed the capacity.
 */
export class DWorld {
  readonly #ds = new Map<string, DWorker>()
  readonly violations: string[] = []
  readonly #now: () => number
  readonly #onEvict: (d: string, sessionId: string) => void

  constructor(
    ids: readonly string[],
    capacity: number,
    now: () => number,
    onEvict: (d: string, sessionId: string) => void = () => {},
  ) {
    this.#now = now
    this.#onEvict = onEvict
    for (const id of ids) this.#ds.set(id, { capacity, sessions: new Map(), leases: new LeaseBook() })
  }

  admit(a: AdmitAction): AdmitResponse {
    const d = this.#ds.get(a.workerId)!
    const now = this.#now()
    let used = 0
    let evictable = 0
    for (const s of d.sessions.values()) {
      used += s.residentTokens
      if (s.idle) evictable += s.residentTokens
    }
    const decision = admit(
      {
        capacityTokens: d.capacity,
        usedTokens: Math.min(used, d.capacity),
        evictableTokens: Math.min(evictable, used, d.capacity),
        sessions: d.sessions,
        leases: d.leases.live(now),
        transferQueueDepth: 0,
        retractedQueueDepth: 0,
      },
      a.request,
      { now },
    )
    d.leases.apply(decision)
    for (const s of decision.releaseSessions) {
      d.sessions.delete(s)
      this.#onEvict(a.workerId, s)
    }
    this.#check(a.workerId, d, now)
    return decision.response
  }

  /** A turn ended on D `d`: its lease ends, the session holds `committed` tokens there. */
  complete(d: string, sessionId: string, leaseId: string | undefined, committed: number): void {
    const w = this.#ds.get(d)!
    if (leaseId !== undefined) w.leases.release(leaseId)
    w.sessions.set(sessionId, {
      sessionId,
      residentTokens: Math.min(committed, w.capacity),
      lastAccessTime: this.#now(),
      idle: true,
    })
  }

  release(d: string, sessionId: string): void {
    this.#ds.get(d)?.sessions.delete(sessionId)
  }

  #check(id: string, d: DWorker, now: number): void {
    let locked = 0
    for (const s of d.sessions.values()) if (!s.idle) locked += s.residentTokens
    const reserved = d.leases.reservedTokens(now)
    if (locked + reserved > d.capacity) {
      this.violations.push(`${id}: locked ${locked} + reserved ${reserved} > capacity ${d.capacity}`)
    }
  }
}

/** One router replica: its own Router (residency index, capacity view) over its own store connection. */
export interface Replica {
  readonly router: Router
  readonly store: ClusterStateStore
}

export interface SimOptions {
  readonly nP?: number
  readonly nD?: number
  readonly capacity?: number
  readonly params?: RouterParamsInput
  /** Real milliseconds an admission RPC takes (default 1). */
  readonly admitMs?: () => number
  /** Real milliseconds a send or a seed takes (default 5). */
  readonly sendMs?: () => number
  /** Adversary: answers before the D's own admission (`undefined`: ask the D). */
  readonly admitAnswer?: (a: AdmitAction) => AdmitAnswer | undefined
  readonly sendAnswer?: () => SendAnswer | undefined
  readonly seed?: number
  /** Router time runs this many times faster than real time (waits sleep accordingly; default 1). */
  readonly speed?: number
}

export interface TurnResult {
  readonly replica: number
  readonly turn: TurnRequest
  readonly final: DoneAction | FailAction
  readonly actions: number
}

/**
 * Several replicas over one {@link DWorld} and one router clock: real time, sped up `speed`
 * times (waits sleep for real, scaled). Every replica consumes the D workers' KV events, as
 * real replicas do. Tracks how many seeds run at once on each D, across replicas.
 */
export class SimCluster {
  readonly now: () => number
  readonly world: DWorld
  readonly replicas: Replica[]
  readonly results: TurnResult[] = []
  /** Seeds in flight per D now, and the most ever seen. */
  readonly seeding = new Map<string, number>()
  readonly maxSeeding = new Map<string, number>()
  readonly #o: SimOptions
  readonly #speed: number
  readonly #eventIds = new Map<string, number>()
  /** Per D, per session: the blocks it holds there (for BlockRemoved events). */
  readonly #held = new Map<string, Map<string, readonly bigint[]>>()
  /** One turn driver per replica (its router's). */
  readonly #drivers: TurnDriver[]

  constructor(stores: readonly ClusterStateStore[], options: SimOptions = {}) {
    this.#o = options
    const speed = options.speed ?? 1
    this.#speed = speed
    const t0 = Date.now()
    this.now = () => 1_000 + (Date.now() - t0) * speed
    const nP = options.nP ?? 1
    const nD = options.nD ?? 2
    const capacity = options.capacity ?? 2_000_000
    const dIds = Array.from({ length: nD }, (_, i) => `d${i}`)
    this.world = new DWorld(dIds, capacity, this.now, (d, s) => this.#removed(d, s))
    this.replicas = stores.map((store, i) => ({
      store,
      router: new Router({
        now: this.now,
        random: seededRandom((options.seed ?? 1) * 31 + i),
        store,
        params: { pageSize: 16, ...options.params },
        workers: [
          ...Array.from({ length: nP }, (_, k) => ({
            id: `p${k}`,
            role: 'prefill' as const,
            capacityTokens: 4_000_000,
          })),
          ...dIds.map((id) => ({ id, role: 'decode' as const, capacityTokens: capacity })),
        ],
      }),
    }))
    this.#drivers = this.replicas.map((r) => new TurnDriver(r.router))
  }

  /** Runs one turn on replica `r` to its end, with kvc-router's `TurnDriver` over this world. */
  async runTurn(r: number, turn: TurnRequest): Promise<TurnResult> {
    const { router } = this.replicas[r]!
    const t = router.dispatch(turn)
    let n = 0
    let lease: string | undefined
    const effects: TurnEffects = {
      // claims: the replica's store (the driver's default)
      admit: async (a) => {
        await sleep(this.#o.admitMs?.() ?? 1)
        const forced = this.#o.admitAnswer?.(a)
        if (forced === undefined) {
          const response = this.world.admit(a)
          if (response.admitted) lease = a.request.requestId
          return { type: 'admitResult', response }
        }
        if (forced.kind === 'timeout') return { type: 'admitTimeout' }
        if (forced.kind === 'error') return { type: 'admitError', message: 'scripted' }
        return { type: 'admitResult', response: scriptedResponse(a, forced) }
      },
      send: async (a) => {
        const d = a.type === 'sendFast' ? a.workerId : a.decodeId
        const seed = a.type === 'seedViaP'
        if (seed) {
          const k = (this.seeding.get(d) ?? 0) + 1
          this.seeding.set(d, k)
          this.maxSeeding.set(d, Math.max(k, this.maxSeeding.get(d) ?? 0))
        }
        await sleep(this.#o.sendMs?.() ?? 5)
        if (seed) this.seeding.set(d, this.seeding.get(d)! - 1)
        const ans = this.#o.sendAnswer?.() ?? { kind: 'ok', outputTokens: 100 }
        const used = lease
        lease = undefined
        if (ans.kind !== 'ok') return { type: 'failed', cause: ans.cause }
        this.world.complete(d, turn.sessionId, used, turn.promptTokens + (ans.outputTokens ?? 100))
        this.#stored(d, turn)
        if (a.migratedFrom !== undefined) {
          this.world.release(a.migratedFrom, turn.sessionId)
          this.#removed(a.migratedFrom, turn.sessionId)
        }
        return { type: 'completed', outputTokens: ans.outputTokens ?? 100 }
      },
      wait: async (a) => {
        await sleep(Math.max(0, (a.untilMs - this.now()) / this.#speed))
      },
    }
    const run = await this.#drivers[r]!.drive(t, effects, {
      onAction: () => {
        if (++n > 100_000) throw new Error(`turn ${t.turnId} did not end`)
      },
    })
    if (run.stop !== undefined) throw run.stop.error ?? new Error(`turn ${t.turnId}: ${run.stop.reason}`)
    const a = run.final
    const res = { replica: r, turn, final: a, actions: n }
    if (a.type === 'done' && a.migratedFrom !== undefined) {
      this.world.release(a.migratedFrom, turn.sessionId)
      this.#removed(a.migratedFrom, turn.sessionId)
    }
    this.results.push(res)
    return res
  }

  /** D `d` now holds the turn's prompt: every replica hears the KV event. */
  #stored(d: string, turn: TurnRequest): void {
    const blocks = (turn.blocks ?? []) as readonly bigint[]
    if (blocks.length === 0) return
    let m = this.#held.get(d)
    if (m === undefined) {
      m = new Map()
      this.#held.set(d, m)
    }
    m.set(turn.sessionId, blocks)
    this.#publish(d, {
      type: 'BlockStored',
      blockHashes: [...blocks],
      parentBlockHash: null,
      tokenIds: [],
      blockSize: 16,
      extraKey: null,
    })
  }

  #removed(d: string, sessionId: string): void {
    const blocks = this.#held.get(d)?.get(sessionId)
    if (blocks === undefined) return
    this.#held.get(d)!.delete(sessionId)
    this.#publish(d, { type: 'BlockRemoved', blockHashes: [...blocks], extraKey: null })
  }

  #publish(d: string, e: Record<string, unknown>): void {
    const eventId = this.#eventIds.get(d) ?? 0
    this.#eventIds.set(d, eventId + 1)
    for (const { router } of this.replicas) {
      router.ingest(d, { ...e, eventId } as unknown as Parameters<Router['ingest']>[1])
    }
  }
}

/** Block hashes of session `s`'s prompt of `tokens` tokens (prompts of a session extend each other). */
export function sessionBlocks(s: number, tokens: number): bigint[] {
  return Array.from({ length: Math.floor(tokens / 16) }, (_, i) => BigInt(s + 1) * 1_000_000n + BigInt(i))
}
