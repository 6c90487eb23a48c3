/**
 * ADAPTER BOUNDARY — `@kvc/dto-p-sync`.
 *
 * The optional D→P incremental sync (`docs/design/algorithms.md#d-to-p-sync`): every D worker runs one `SyncSource` per
 * P worker, every P worker one `SyncSink` that ingests into its real `RadixCache`, wired by the
 * package's `wireSync` over its in-memory transport (`InMemoryNetwork`, whose virtual clock the
 * simulator advances). The simulator only feeds it (committed turns, P's KV events) and calls
 * `round` periodically; planning, ingestion, pins and replies are the package's.
 */
import type { KvEvent, PagedAllocator, RadixCache } from '@kvc/radix-cache'
import {
  InMemoryNetwork,
  KvEventIndex,
  OfferBuilder,
  type SyncReply,
  SyncSink,
  SyncSource,
  type SyncWiring,
  type TransferMessage,
  wireSync,
} from '@kvc/dto-p-sync'
import { simBlockHasher } from '../hashing/simBlockHasher.js'

/**
 * Options of {@link SyncFabric}.
 *
 * @example
 * ```ts
 * import type { SyncFabricOptions } from '@kvc/sim'
 * const o: Omit<SyncFabricOptions, 'prefill'> = { decodeIds: ['d0'], pageSize: 16, betaTokens: 1024,
 *   bytesPerSecondPerLink: 5e9, kvBytesPerToken: 98_304, pinTtlMs: 30_000 }
 * ```
 */
export interface SyncFabricOptions {
  /** P workers: their radix cache and KV pool (the sink inserts into them). */
  readonly prefill: readonly {
    readonly id: string
    readonly cache: RadixCache
    readonly pool: PagedAllocator
  }[]
  readonly decodeIds: readonly string[]
  readonly pageSize: number
  /** Staleness budget β (tokens). */
  readonly betaTokens: number
  /** Bandwidth given to the sync on each D→P link. */
  readonly bytesPerSecondPerLink: number
  readonly kvBytesPerToken: number
  /** How long P keeps synced pages pinned. */
  readonly pinTtlMs: number
  /**
   * Share of each P's KV pool that synced pins may hold (default 0.5, a choice): pins beyond it
   * are refused, so synced sessions cannot lock P's memory away from its own prefills. The same
   * share, split evenly among the D workers, is the room each D's source plans for
   * (`maxHeldTokens`): a P smaller than the synced sessions would otherwise keep evicting what it
   * ingests.
   */
  readonly maxPinnedShare?: number
}

/**
 * Totals of the sync fabric.
 *
 * @example
 * ```ts
 * import type { SyncFabricStats } from '@kvc/sim'
 * const efficiency = (s: SyncFabricStats) => (s.ingestedTokens * 98_304) / Math.max(1, s.bytesSent)
 * ```
 */
export interface SyncFabricStats {
  readonly rounds: number
  readonly bytesSent: number
  readonly ingestedTokens: number
  readonly overBudgetReports: number
}

/**
 * The D→P sync of a simulated cluster: one source per (D, P), one sink per P.
 *
 * @example
 * ```ts
 * import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
 * import { SyncFabric, simBlockHasher } from '@kvc/sim'
 * let fabric: SyncFabric | undefined
 * const pool = new PagedAllocator({ size: 1 << 16, pageSize: 16 })
 * const cache = new RadixCache({ pageSize: 16, allocator: pool, blockHasher: simBlockHasher, onEvent: (e) => fabric?.observePrefill('p0', e) })
 * fabric = new SyncFabric({ prefill: [{ id: 'p0', cache, pool }], decodeIds: ['d0'], pageSize: 16, betaTokens: 64,
 *   bytesPerSecondPerLink: 5e9, kvBytesPerToken: 98_304, pinTtlMs: 30_000 })
 * fabric.commit('d0', 's1', Uint32Array.from({ length: 1000 }, (_, i) => i))
 * fabric.round(0, 100)
 * fabric.round(100, 100)
 * cache.matchPrefix(Uint32Array.from({ length: 1000 }, (_, i) => i), { readOnly: true }).length // ≥ 1000 − 64 − 16
 * ```
 */
export class SyncFabric {
  readonly #net: InMemoryNetwork
  readonly #sinks = new Map<string, SyncSink>()
  readonly #sources = new Map<string, { p: string; source: SyncSource; wiring: SyncWiring }[]>()
  /** Per D, one offer builder for all its sources: a commit is hashed once, not once per P. */
  readonly #offers = new Map<string, OfferBuilder>()
  /** Per P, one view of its KV events shared by every D's source for it: each event applied once. */
  readonly #views = new Map<string, KvEventIndex>()
  #rounds = 0
  #overBudget = 0

  constructor(o: SyncFabricOptions) {
    this.#net = new InMemoryNetwork({ startTime: 0 })
    const now = () => this.#net.now()
    for (const p of o.prefill) {
      this.#sinks.set(
        p.id,
        new SyncSink({
          cache: p.cache,
          allocator: p.pool,
          blockHasher: simBlockHasher,
          now,
          pinTtlMs: o.pinTtlMs,
          maxPinnedTokens: Math.floor(p.pool.size * (o.maxPinnedShare ?? 0.5)),
        }),
      )
      this.#views.set(p.id, new KvEventIndex())
    }
    for (const d of o.decodeIds) {
      const list: { p: string; source: SyncSource; wiring: SyncWiring }[] = []
      for (const p of o.prefill) {
        const source = new SyncSource({
          origin: d,
          maxHeldTokens: Math.floor((p.pool.size * (o.maxPinnedShare ?? 0.5)) / o.decodeIds.length),
          pageSize: o.pageSize,
          beta: o.betaTokens,
          now,
          blockHasher: simBlockHasher,
          bandwidth: { bytesPerSecond: o.bytesPerSecondPerLink, kvBytesPerToken: o.kvBytesPerToken },
          prefillView: this.#views.get(p.id)!,
        })
        const wiring = wireSync({
          source,
          sink: this.#sinks.get(p.id)!,
          forward: this.#net.link<TransferMessage>({
            bytesPerSecond: o.bytesPerSecondPerLink,
            latencyMs: 0.02,
            units: (m) => m.blocks.length,
          }),
          backward: this.#net.link<SyncReply>({ bytesPerSecond: o.bytesPerSecondPerLink, latencyMs: 0.02 }),
        })
        list.push({ p: p.id, source, wiring })
      }
      this.#sources.set(d, list)
      this.#offers.set(d, new OfferBuilder({ pageSize: o.pageSize, blockHasher: simBlockHasher }))
    }
  }

  /** A KV event of P `p`'s radix cache (the sink and every source's view of P follow it). */
  observePrefill(p: string, e: KvEvent): void {
    this.#sinks.get(p)?.observe(e)
    this.#views.get(p)?.apply(e)
  }

  /** D `d` committed a turn of `sessionId`: its history is now `history` (prompt + output). */
  commit(d: string, sessionId: string, history: Uint32Array): void {
    const offers = this.#offers.get(d)
    if (offers === undefined) return
    const offer = offers.commitTurn(sessionId, history)
    for (const { source } of this.#sources.get(d) ?? []) source.addOffer(offer)
  }

  /** Forget a session on D `d` (it migrated away or its D died). */
  endSession(d: string, sessionId: string): void {
    this.#offers.get(d)?.endSession(sessionId)
    for (const { source } of this.#sources.get(d) ?? []) source.endSession(sessionId)
  }

  /** Bring the transport to `nowMs` (deliveries, ingestion, replies), then plan the next `horizonMs`. */
  round(nowMs: number, horizonMs: number): void {
    if (nowMs > this.#net.now()) this.#net.advanceTo(nowMs)
    this.#rounds++
    for (const list of this.#sources.values()) {
      for (const { wiring } of list) {
        wiring.expire()
        const plan = wiring.round(horizonMs)
        this.#overBudget += plan.overBudget.length
      }
    }
  }

  /** KV slots P's sink holds outside the tree (reservations of transfers in flight). */
  reservedTokens(p: string): number {
    return this.#sinks.get(p)?.reservedTokens() ?? 0
  }

  /** Totals since construction. */
  stats(): SyncFabricStats {
    let bytes = 0
    for (const list of this.#sources.values())
      for (const { source } of list) bytes += source.metrics().bytesSent
    let ingested = 0
    for (const s of this.#sinks.values()) ingested += s.metrics().ingestedTokens
    return {
      rounds: this.#rounds,
      bytesSent: bytes,
      ingestedTokens: ingested,
      overBudgetReports: this.#overBudget,
    }
  }
}
