import { type BlockHasher, type EvictGranularity, PagedAllocator, RadixCache } from '@kvc/radix-cache'
import { seededRandom } from '@kvc/radix-cache/testing'
import type { Offer, SyncReply, TransferMessage } from '../protocol/types.js'
import type { SyncPlan } from '../planner/planSync.js'
import { SyncSink } from '../sink/syncSink.js'
import { SyncSource } from '../source/syncSource.js'
import { InMemoryNetwork, type InMemoryLink, type LinkModel } from '../transport/inMemoryNetwork.js'
import { type SyncWiring, wireSync } from '../wiring/wireSync.js'
import { fnvBlockHasher } from './fnvBlockHasher.js'
import { checkSyncInvariants, checkTheorem4 } from './invariants.js'

/**
 * Options of {@link SyncHarness}.
 *
 * @example
 * ```ts
 * import { SyncHarness } from '@kvc/dto-p-sync/testing'
 * const h = new SyncHarness({ pageSize: 4, beta: 8, pinTtlMs: 0, forward: { bytesPerSecond: 1e5, lossRate: 0.1 } })
 * ```
 */
export interface SyncHarnessOptions {
  /** Tokens per page (default 4). */
  readonly pageSize?: number
  /** Staleness budget β in tokens (default 8). */
  readonly beta?: number
  /** P's KV pool in pages (default 64). */
  readonly poolPages?: number
  /** P's pin TTL in ms (default 1000; 0: no pins, D relies on P's KV events). */
  readonly pinTtlMs?: number
  /** Default: `true` without pins, `false` with pins (then only pins count). */
  readonly trustPrefillEvents?: boolean
  /** P's eviction granularity (default `'leaf'`). */
  readonly evictGranularity?: EvictGranularity
  /** KV bytes per token (default 100). */
  readonly kvBytesPerToken?: number
  /** Sync bandwidth budget, bytes/s (default: the forward link's). */
  readonly syncBytesPerSecond?: number
  /** D → P link (default 1e6 B/s, 1 ms latency). */
  readonly forward?: Omit<LinkModel<TransferMessage>, 'units'>
  /** P → D link (default 1e7 B/s, 1 ms latency). */
  readonly backward?: Omit<LinkModel<SyncReply>, 'units'>
  /** Seed of the network's randomness (default 1). */
  readonly seed?: number
  readonly maxBlocksPerTransfer?: number
  readonly reservationTimeoutMs?: number
  readonly blockHasher?: BlockHasher
}

/**
 * A complete D→P sync over an in-memory network: D's truth (session histories, which pages D has
 * lost), a {@link SyncSource}, P's `RadixCache` over a `PagedAllocator` with a
 * {@link SyncSink}, and lossy links wired with {@link wireSync}. Every method is one step of a
 * scenario; {@link SyncHarness.check} asserts the invariants and Theorem 4 after any of them.
 *
 * @example
 * ```ts
 * import { SyncHarness } from '@kvc/dto-p-sync/testing'
 * const h = new SyncHarness({ beta: 8, forward: { bytesPerSecond: 1e6, lossRate: 0.2 } })
 * h.commit('s1', [1, 2, 3, 4, 5, 6], [7, 8, 9])
 * h.round(100)
 * h.advance(100)
 * h.check([10, 11]) // invariants + Theorem 4 with a 2-token append
 * ```
 */
export class SyncHarness {
  readonly pageSize: number
  readonly beta: number
  readonly network: InMemoryNetwork
  readonly forward: InMemoryLink<TransferMessage>
  readonly backward: InMemoryLink<SyncReply>
  readonly pool: PagedAllocator
  readonly cache: RadixCache
  readonly sink: SyncSink
  readonly source: SyncSource
  readonly wiring: SyncWiring
  readonly hasher: BlockHasher
  /** D's truth: every session's history. */
  readonly histories = new Map<string, number[]>()
  /** Blocks D no longer has (evicted before they were synced). */
  readonly lostOnDecode = new Set<bigint>()
  /** Theorem 4 checks that found a session within budget (to show the property is not vacuous). */
  withinBudgetChecks = 0

  constructor(options: SyncHarnessOptions = {}) {
    const ps = options.pageSize ?? 4
    this.pageSize = ps
    this.beta = options.beta ?? 8
    const pinTtl = options.pinTtlMs ?? 1000
    this.hasher = options.blockHasher ?? fnvBlockHasher()
    this.network = new InMemoryNetwork({ random: seededRandom(options.seed ?? 1) })
    const now = (): number => this.network.now()
    const fwd = { bytesPerSecond: 1e6, latencyMs: 1, ...options.forward }
    this.forward = this.network.link<TransferMessage>({ ...fwd, units: (m) => m.blocks.length })
    this.backward = this.network.link<SyncReply>({ bytesPerSecond: 1e7, latencyMs: 1, ...options.backward })
    this.pool = new PagedAllocator({ size: (options.poolPages ?? 64) * ps, pageSize: ps })
    let sink: SyncSink | undefined
    let source: SyncSource | undefined
    this.cache = new RadixCache({
      pageSize: ps,
      allocator: this.pool,
      blockHasher: this.hasher,
      evictGranularity: options.evictGranularity ?? 'leaf',
      now,
      onEvent: (e) => {
        sink?.observe(e)
        source?.observePrefillEvent(e)
      },
    })
    sink = new SyncSink({
      cache: this.cache,
      allocator: this.pool,
      blockHasher: this.hasher,
      now,
      pinTtlMs: pinTtl,
      ...(options.reservationTimeoutMs === undefined
        ? {}
        : { reservationTimeoutMs: options.reservationTimeoutMs }),
    })
    source = new SyncSource({
      pageSize: ps,
      beta: this.beta,
      now,
      blockHasher: this.hasher,
      bandwidth: {
        bytesPerSecond: options.syncBytesPerSecond ?? fwd.bytesPerSecond,
        kvBytesPerToken: options.kvBytesPerToken ?? 100,
      },
      trustPrefillEvents: options.trustPrefillEvents ?? pinTtl === 0,
      decodeHolds: { has: (h) => !this.lostOnDecode.has(h) },
      ...(options.maxBlocksPerTransfer === undefined
        ? {}
        : { maxBlocksPerTransfer: options.maxBlocksPerTransfer }),
    })
    this.sink = sink
    this.source = source
    this.wiring = wireSync({ source, sink, forward: this.forward, backward: this.backward })
  }

  /**
   * A turn of `sessionId` commits: its history grows by `append` (the prompt's new part) and
   * `output` (decoded tokens; the last one is the newest sampled token). Returns D's offer.
   */
  commit(sessionId: string, append: readonly number[], output: readonly number[]): Offer {
    let h = this.histories.get(sessionId)
    if (h === undefined) {
      h = []
      this.histories.set(sessionId, h)
    }
    h.push(...append, ...output)
    return this.source.commitTurn(sessionId, h, { newestSampled: output.length > 0 })
  }

  /** The client rewrites a session: keep its first `keep` tokens, then `tokens`. */
  rewrite(sessionId: string, keep: number, tokens: readonly number[]): Offer | undefined {
    const h = this.histories.get(sessionId)
    if (h === undefined) return undefined
    h.length = Math.min(keep, h.length)
    h.push(...tokens)
    return this.source.commitTurn(sessionId, h, { newestSampled: false })
  }

  /** One planning round for the next `horizonMs`. */
  round(horizonMs: number): SyncPlan {
    return this.wiring.round(horizonMs)
  }

  /** Advance the clock (deliveries, statuses, timeouts fire), then expire pins and reservations. */
  advance(ms: number): void {
    this.network.advanceBy(ms)
    this.wiring.expire()
  }

  /** P evicts `tokens` tokens (policy order; pinned and in-use pages stay). */
  evictPrefill(tokens: number): number {
    return this.cache.evict(tokens).evictedTokens
  }

  /**
   * A reseed of `sessionId` goes through P: P prefills its history plus `append` (page-aligned
   * part inserted into its cache, evicting the shortfall first; nothing when the pool is full).
   */
  prefillOnP(sessionId: string, append: readonly number[] = []): boolean {
    const h = this.histories.get(sessionId)
    if (h === undefined) return false
    const ps = this.pageSize
    const prompt = Uint32Array.from([...h, ...append])
    const hit = this.cache.matchPrefix(prompt)
    this.cache.incLockRef(hit.lastNode)
    const aligned = prompt.length - (prompt.length % ps)
    const fresh = aligned - hit.length
    try {
      if (fresh <= 0) return true
      if (this.pool.availableSize() < fresh) this.cache.evict(fresh - this.pool.availableSize())
      if (this.pool.availableSize() < fresh) return false
      const values = new Int32Array(aligned)
      values.set(hit.indices)
      const slots = this.pool.alloc(fresh)
      values.set(slots, hit.length)
      const res = this.cache.insert(prompt.subarray(0, aligned), values)
      if (res.prefixLen > hit.length) this.pool.free(slots.subarray(0, res.prefixLen - hit.length))
      return true
    } finally {
      this.cache.decLockRef(hit.lastNode)
    }
  }

  /** D loses (evicts) the last `pages` committed pages of `sessionId`. */
  loseOnDecode(sessionId: string, pages: number): void {
    const st = this.source.sessionIds().includes(sessionId) ? this.source.status(sessionId) : undefined
    if (st === undefined) return
    const h = this.histories.get(sessionId)!
    const ps = this.pageSize
    const hashes = computeChain(this.hasher, h, ps, st.syncablePages)
    for (let i = Math.max(0, hashes.length - pages); i < hashes.length; i++) this.lostOnDecode.add(hashes[i]!)
  }

  /**
   * Invariants of P ({@link checkSyncInvariants}) and Theorem 4 ({@link checkTheorem4}) with the
   * given append. Throws on a violation.
   */
  check(append: readonly number[] = []): void {
    checkSyncInvariants({ cache: this.cache, pool: this.pool, sink: this.sink, poolSize: this.pool.size })
    const r = checkTheorem4({
      source: this.source,
      cache: this.cache,
      history: (id) => this.histories.get(id)!,
      append,
    })
    this.withinBudgetChecks += r.withinBudget
  }

  /**
   * Let everything in flight land or time out, expire every pin and reservation, and check that no
   * KV slot leaked: afterwards `free + cached == pool size` and nothing is locked.
   */
  drain(): void {
    this.network.runUntilIdle()
    this.network.advanceBy(1e9)
    this.wiring.expire()
    this.network.runUntilIdle()
    this.network.advanceBy(1e9)
    this.wiring.expire()
    checkSyncInvariants({ cache: this.cache, pool: this.pool, sink: this.sink, poolSize: this.pool.size })
    const problems: string[] = []
    if (this.sink.reservedTokens() !== 0) problems.push(`${this.sink.reservedTokens()} tokens still reserved`)
    if (this.pool.availableSize() + this.cache.totalSize() !== this.pool.size) problems.push('slots leaked')
    if (this.cache.protectedSize() !== 0) problems.push(`${this.cache.protectedSize()} tokens still locked`)
    if (this.sink.pinCount() !== 0) problems.push(`${this.sink.pinCount()} pins left`)
    if (this.source.inFlightCount() !== 0)
      problems.push(`${this.source.inFlightCount()} transfers still in flight`)
    if (problems.length > 0) throw new Error(`after drain:\n- ${problems.join('\n- ')}`)
  }
}

function computeChain(hasher: BlockHasher, tokens: readonly number[], ps: number, pages: number): bigint[] {
  const out: bigint[] = []
  let prev: Uint8Array | undefined
  for (let p = 0; p < pages; p++) {
    prev = hasher.hashBlock(prev, Uint32Array.from(tokens.slice(p * ps, (p + 1) * ps)), undefined)
    out.push(hasher.blockId(prev))
  }
  return out
}
