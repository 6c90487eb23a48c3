import {
  type BlockHasher,
  type KvAllocator,
  type KvEvent,
  type NodeHandle,
  type RadixCache,
  RadixCacheError,
  sglangBlockHasher,
} from '@kvc/radix-cache'
import { DtoPSyncError, DtoPSyncErrorCode, invalidMessage, invalidOption } from '../errors/dtoPSyncError.js'
import { type HoldingsSnapshot, KvEventIndex } from '../holdings/kvEventIndex.js'
import type { ReplyStatus, SyncReply, TransferMessage } from '../protocol/types.js'
import { checkNonNegative, describe, monotonicClock, validateTransferMessage } from '../protocol/validate.js'

const EMPTY_TOKENS = new Uint32Array(0)
const EMPTY_SLOTS = new Int32Array(0)

/**
 * The KV slot pool P's ingest allocates from: the radix cache's `KvAllocator` (`free`)
 * plus `alloc` and `availableSize`. `PagedAllocator` from `@kvc/radix-cache` is one; a serving
 * engine plugs its own pool in.
 *
 * @example
 * ```ts
 * import { PagedAllocator } from '@kvc/radix-cache'
 * import type { SlotAllocator } from '@kvc/dto-p-sync'
 * const pool: SlotAllocator = new PagedAllocator({ size: 4096, pageSize: 16 })
 * ```
 */
export interface SlotAllocator extends KvAllocator {
  /** `numTokens` fresh slots; throws (allocating nothing) when the pool cannot serve them. */
  alloc(numTokens: number): Int32Array
  /** Free slots. */
  availableSize(): number
}

/**
 * Options of {@link SyncSink}.
 *
 * @example
 * ```ts
 * import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
 * import { SyncSink, type SyncSinkOptions } from '@kvc/dto-p-sync'
 * const pool = new PagedAllocator({ size: 1 << 20, pageSize: 64 })
 * let sink: SyncSink | undefined
 * const cache = new RadixCache({ pageSize: 64, allocator: pool, onEvent: (e) => sink?.observe(e) })
 * const opts: SyncSinkOptions = { cache, allocator: pool, now: () => performance.now(), pinTtlMs: 30_000 }
 * sink = new SyncSink(opts)
 * ```
 */
export interface SyncSinkOptions {
  /**
   * P's radix cache. It must store values (`trackValues`, the default), give evicted slots back to
   * `allocator` (its `allocator` option), hash with `blockHasher` (its `blockHasher` option) and
   * send its KV events to {@link SyncSink.observe} (its `onEvent` option).
   */
  readonly cache: RadixCache
  readonly allocator: SlotAllocator
  /** Must be P's cache's and D's hasher (default `sglangBlockHasher()`, the cache's default). */
  readonly blockHasher?: BlockHasher
  /** Clock in milliseconds (pins, reservation timeouts). */
  readonly now: () => number
  /**
   * Pin ingested paths against eviction for this long (ms). Default 0: synced pages are
   * immediately evictable like any cached page (`docs/design/algorithms.md#d-to-p-sync`), and D can
   * only count on them through P's KV events.
   */
  readonly pinTtlMs?: number
  /** Upper bound on tokens held by pins (default: no bound). Beyond it, paths are not pinned. */
  readonly maxPinnedTokens?: number
  /** A reservation whose transfer never completes is freed after this long (default 32 s, Mooncake's timeout). */
  readonly reservationTimeoutMs?: number
  /** Evict unlocked pages (policy order) to make room for an ingest (default `true`). */
  readonly evictForSpace?: boolean
  /** Recompute every received block's hash before accepting it (default `true`). */
  readonly verifyHashes?: boolean
  /** `priority` given to ingested pages (for the `priority` eviction policy; default 0). */
  readonly insertPriority?: number
  /** Replies remembered per session for duplicate detection (default 256). */
  readonly dedupWindow?: number
}

/**
 * An open ingest: KV slots allocated for a transfer that has started arriving.
 *
 * @example
 * ```ts
 * import type { Reservation } from '@kvc/dto-p-sync'
 * const describe = (r: Reservation) => `${r.sessionId}#${r.seq}: ${r.slots} slots since ${r.begunAt}`
 * ```
 */
export interface Reservation {
  readonly id: number
  readonly sessionId: string
  readonly seq: number
  /** Tokens of KV slots held by the reservation. */
  readonly slots: number
  readonly begunAt: number
}

/**
 * Result of {@link SyncSink.begin}: a reservation to complete or abort, an immediate reply
 * (nothing to receive: stale, duplicate, unknown parent, no space), or `ignored` (a network
 * duplicate of a transfer still arriving).
 *
 * @example
 * ```ts
 * import type { BeginResult } from '@kvc/dto-p-sync'
 * const needsData = (r: BeginResult) => r.kind === 'reserved'
 * ```
 */
export type BeginResult =
  | { readonly kind: 'reserved'; readonly reservation: Reservation }
  | { readonly kind: 'reply'; readonly reply: SyncReply }
  | { readonly kind: 'ignored' }

/**
 * Counters of a {@link SyncSink}.
 *
 * @example
 * ```ts
 * import type { SinkMetrics } from '@kvc/dto-p-sync'
 * const dedupRatio = (m: SinkMetrics) => m.skippedBlocks / Math.max(1, m.skippedBlocks + m.ingestedBlocks)
 * ```
 */
export interface SinkMetrics {
  /** Transfers begun (every `begin` that passed validation). */
  readonly messages: number
  readonly applied: number
  readonly partial: number
  readonly duplicates: number
  readonly stale: number
  readonly unknownParent: number
  readonly missingKv: number
  readonly noSpace: number
  /** Blocks inserted with their KV. */
  readonly ingestedBlocks: number
  readonly ingestedTokens: number
  /** Blocks skipped because P already held them. */
  readonly skippedBlocks: number
  /** Blocks received but dropped (a transfer that broke off, or inserted meanwhile by someone else). */
  readonly droppedBlocks: number
  readonly reservationsAborted: number
  readonly reservationsExpired: number
  readonly pinsTaken: number
  readonly pinsExpired: number
  /** Pins refused because of `maxPinnedTokens`. */
  readonly pinsRefused: number
  /** Tokens evicted from P's cache to make room for ingests. */
  readonly evictedForSpace: number
}

interface Pin {
  node: NodeHandle
  until: number
  tokens: number
  path: Uint32Array
  extraKey: string
}

interface SinkSession {
  version: number
  applied: Map<number, SyncReply>
  open: Set<number>
  pathHash: bigint | null
  pathTokens: Uint32Array
  pathDigest: Uint8Array | undefined
  pins: Pin[]
}

interface OpenReservation extends Reservation {
  readonly message: TransferMessage
  readonly tokens: Uint32Array
  readonly parentLen: number
  readonly present: number
  readonly kvEnd: number
  readonly lockedLen: number
  readonly lockedNode: NodeHandle | undefined
  readonly lockedIndices: Int32Array
  readonly slotArray: Int32Array
  readonly digests: Uint8Array[] | undefined
  readonly parentDigest: Uint8Array | undefined
}

type MutableMetrics = { -readonly [K in keyof SinkMetrics]: SinkMetrics[K] }

/**
 * P side of the sync: ingests transferred pages into P's radix cache as an **external producer**.
 *
 * - **Idempotent**: a network duplicate of a message (same `origin`, `sessionId`, `seq`) changes nothing and
 *   gets the original reply again; a block P already holds is skipped (its KV is not needed).
 * - **Ordered**: a message whose version is older than one already applied from the same origin is
 *   ignored (`stale`); each origin (D) has its own versions, sequence numbers and pins.
 * - **Unknown parent → re-request**: a segment whose parent page P does not hold is refused with
 *   `unknown-parent` and the missing hash; D sends again from further back.
 * - **Evictable unless pinned**: ingested pages are ordinary cached pages; with `pinTtlMs` the
 *   path through the last ingested page is locked until `now + pinTtlMs` (clock injected), and
 *   the reply says so, which is what lets D count the pages as synced.
 * - **No leaks**: KV slots come from `allocator` in {@link SyncSink.begin}; {@link SyncSink.complete}
 *   inserts what arrived and frees the rest and any duplicates; {@link SyncSink.abort} and
 *   {@link SyncSink.expire} free everything of a reservation. At every moment
 *   `pool free + cache total + reservedTokens() == pool size`.
 *
 * A transfer is two-phase, as over RDMA: `begin` when it starts arriving (allocate the target
 * slots, lock the parent path), `complete(id, receivedBlocks)` when it ends (whole or broken off).
 * {@link SyncSink.ingest} does both at once.
 *
 * @example
 * ```ts
 * import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
 * import { OfferBuilder, SyncSink } from '@kvc/dto-p-sync'
 * import { fnvBlockHasher } from '@kvc/dto-p-sync/testing'
 * const hasher = fnvBlockHasher()
 * let now = 0
 * const pool = new PagedAllocator({ size: 256, pageSize: 4 })
 * let sink: SyncSink | undefined
 * const cache = new RadixCache({
 *   pageSize: 4, allocator: pool, blockHasher: hasher, now: () => now, onEvent: (e) => sink?.observe(e),
 * })
 * sink = new SyncSink({ cache, allocator: pool, blockHasher: hasher, now: () => now, pinTtlMs: 5000 })
 * const offer = new OfferBuilder({ pageSize: 4, blockHasher: hasher }).commitTurn('s1', [1, 2, 3, 4, 5, 6, 7, 8, 9])
 * const reply = sink.ingest({
 *   sessionId: 's1', version: offer.version, seq: 0, extraKey: '', startPage: 0,
 *   blocks: offer.blocks.map((b) => ({ ...b, withKv: true })),
 * })
 * console.log(reply?.status, reply?.heldPages, reply?.pinnedUntil) // 'applied' 2 5000
 * ```
 */
export class SyncSink {
  /** Tokens per page (the cache's). */
  readonly pageSize: number
  readonly #cache: RadixCache
  readonly #allocator: SlotAllocator
  readonly #hasher: BlockHasher
  /** The injected clock, read through a check that it never goes back. */
  readonly #clock: () => number
  readonly #pinTtl: number
  readonly #maxPinned: number
  readonly #resTimeout: number
  readonly #evictForSpace: boolean
  readonly #verify: boolean
  readonly #priority: number
  readonly #dedupWindow: number
  readonly #index = new KvEventIndex({ keepTokens: true })
  /** Per origin (the sending D), per session. */
  readonly #origins = new Map<string, Map<string, SinkSession>>()
  readonly #reservations = new Map<number, OpenReservation>()
  #nextReservation = 1
  #reservedTokens = 0
  #pinnedTokens = 0
  #misconfigured: string | undefined
  readonly #m: MutableMetrics = {
    messages: 0,
    applied: 0,
    partial: 0,
    duplicates: 0,
    stale: 0,
    unknownParent: 0,
    missingKv: 0,
    noSpace: 0,
    ingestedBlocks: 0,
    ingestedTokens: 0,
    skippedBlocks: 0,
    droppedBlocks: 0,
    reservationsAborted: 0,
    reservationsExpired: 0,
    pinsTaken: 0,
    pinsExpired: 0,
    pinsRefused: 0,
    evictedForSpace: 0,
  }

  constructor(options: SyncSinkOptions) {
    if (options === null || typeof options !== 'object')
      throw invalidOption('options must be an object', options)
    const cache = options.cache
    if (cache === null || typeof cache !== 'object' || typeof cache.insert !== 'function') {
      throw invalidOption('cache must be a RadixCache', cache)
    }
    if (!cache.trackValues)
      throw invalidOption('the cache must store KV slot values (trackValues: true)', cache)
    const a = options.allocator
    if (
      a === null ||
      typeof a !== 'object' ||
      typeof a.alloc !== 'function' ||
      typeof a.free !== 'function' ||
      typeof a.availableSize !== 'function'
    ) {
      throw invalidOption('allocator must implement alloc, free and availableSize', a)
    }
    const hasher = options.blockHasher ?? sglangBlockHasher()
    if (typeof hasher.hashBlock !== 'function' || typeof hasher.blockId !== 'function') {
      throw invalidOption('blockHasher must implement hashBlock and blockId', hasher)
    }
    this.#clock = monotonicClock(options.now)
    this.#pinTtl = checkNonNegative('pinTtlMs', options.pinTtlMs ?? 0)
    this.#maxPinned = checkNonNegative('maxPinnedTokens', options.maxPinnedTokens ?? Infinity)
    this.#resTimeout = checkNonNegative('reservationTimeoutMs', options.reservationTimeoutMs ?? 32_000)
    const ev = options.evictForSpace ?? true
    if (typeof ev !== 'boolean') throw invalidOption('evictForSpace must be a boolean', ev)
    const verify = options.verifyHashes ?? true
    if (typeof verify !== 'boolean') throw invalidOption('verifyHashes must be a boolean', verify)
    const prio = options.insertPriority ?? 0
    if (typeof prio !== 'number' || !Number.isFinite(prio))
      throw invalidOption('insertPriority must be a finite number', prio)
    const win = checkNonNegative('dedupWindow', options.dedupWindow ?? 256, true)
    this.pageSize = cache.pageSize
    this.#cache = cache
    this.#allocator = a
    this.#hasher = hasher
    this.#evictForSpace = ev
    this.#verify = verify
    this.#priority = prio
    this.#dedupWindow = Math.max(1, win)
  }

  /**
   * Feed one KV event of P's cache (wire the cache's `onEvent` here). The sink keeps an index of
   * P's blocks by hash: to rebuild the token path of a parent hash, and to know what P holds.
   *
   * @example
   * ```ts
   * import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
   * import { SyncSink } from '@kvc/dto-p-sync'
   * const pool = new PagedAllocator({ size: 64, pageSize: 4 })
   * let sink: SyncSink | undefined
   * const cache = new RadixCache({ pageSize: 4, allocator: pool, onEvent: (e) => sink?.observe(e) })
   * sink = new SyncSink({ cache, allocator: pool, now: () => 0 })
   * ```
   */
  observe(event: KvEvent): void {
    this.#index.apply(event)
  }

  /**
   * Whether P holds block `hash` (per its KV events).
   *
   * @example
   * ```ts
   * // sink.holds(offer.blocks[0].hash)
   * ```
   */
  holds(hash: bigint): boolean {
    return this.#index.has(hash)
  }

  /**
   * P's holdings (hashes and parents) with the id of the last event they reflect, for a D-side
   * {@link KvEventIndex} to resync after an event gap.
   *
   * @example
   * ```ts
   * // dView.resync(sink.snapshot())
   * ```
   */
  snapshot(): HoldingsSnapshot {
    return this.#index.snapshot()
  }

  /**
   * Start receiving `message`: validate it (throws, changing nothing, on malformed input or a
   * hash that does not match its tokens), then either answer at once or allocate KV slots for the
   * blocks P lacks and lock the parent path until {@link SyncSink.complete} / {@link SyncSink.abort}.
   *
   * @example
   * ```ts
   * // const r = sink.begin(message)
   * // if (r.kind === 'reserved') { ...RDMA into the slots...; sink.complete(r.reservation.id) }
   * ```
   */
  begin(message: TransferMessage): BeginResult {
    if (this.#misconfigured !== undefined) throw invalidOption(this.#misconfigured, this.#cache)
    validateTransferMessage(message, this.pageSize)
    const now = this.#clock()
    const ps = this.pageSize
    const blocks = message.blocks
    const n = blocks.length
    const sess = this.#find(message.origin, message.sessionId)
    if (sess !== undefined) {
      if (message.version < sess.version) {
        this.#m.messages++
        this.#m.stale++
        return { kind: 'reply', reply: reply(message, 'stale') }
      }
      const prev = sess.applied.get(message.seq)
      if (prev !== undefined) {
        this.#m.messages++
        this.#m.duplicates++
        return { kind: 'reply', reply: { ...prev, status: 'duplicate' } }
      }
      if (sess.open.has(message.seq)) {
        this.#m.messages++
        this.#m.duplicates++
        return { kind: 'ignored' }
      }
    }
    const ns = message.extraKey
    const path = this.#parentPath(sess, message)
    if (path === undefined) {
      this.#m.messages++
      this.#m.unknownParent++
      return {
        kind: 'reply',
        reply: reply(message, 'unknown-parent', { missingHash: blocks[0]!.parentHash }),
      }
    }
    let digests: Uint8Array[] | undefined
    if (this.#verify) {
      digests = new Array(n)
      const nsArg = ns === '' ? undefined : ns
      let prev = path.digest
      for (let i = 0; i < n; i++) {
        const b = blocks[i]!
        const d = this.#hasher.hashBlock(prev, b.tokens, nsArg)
        const id = this.#hasher.blockId(d)
        if (id !== b.hash) {
          throw new DtoPSyncError(
            DtoPSyncErrorCode.HashMismatch,
            `block ${i} of ${message.sessionId}#${message.seq} has hash ${b.hash} but its tokens hash to ${id} (are D and P using the same block hasher?)`,
            b.hash,
          )
        }
        digests[i] = d
        prev = d
      }
    }
    const parentLen = message.startPage * ps
    const tokens = new Uint32Array(parentLen + n * ps)
    tokens.set(path.tokens)
    for (let i = 0; i < n; i++) tokens.set(blocks[i]!.tokens, parentLen + i * ps)
    const m = this.#cache.matchPrefix(tokens, { extraKey: ns, readOnly: true }).length
    if (m < parentLen) {
      this.#m.messages++
      this.#m.unknownParent++
      return {
        kind: 'reply',
        reply: reply(message, 'unknown-parent', { missingHash: blocks[0]!.parentHash }),
      }
    }
    const present = (m - parentLen) / ps
    let kvEnd = present
    while (kvEnd < n && blocks[kvEnd]!.withKv) kvEnd++
    const need = (kvEnd - present) * ps

    // Validation is over: from here on state changes.
    this.#m.messages++
    const lockedLen = parentLen + present * ps
    let lockedNode: NodeHandle | undefined
    let lockedIndices: Int32Array = EMPTY_SLOTS
    if (lockedLen > 0) {
      const mr = this.#cache.matchPrefix(tokens.subarray(0, lockedLen), { extraKey: ns })
      lockedNode = mr.lastNode
      lockedIndices = mr.indices
      this.#cache.incLockRef(lockedNode)
    }
    let slots: Int32Array = EMPTY_SLOTS
    if (need > 0) {
      const a = this.#allocator
      if (a.availableSize() < need && this.#evictForSpace) {
        this.#m.evictedForSpace += this.#cache.evict(need - a.availableSize()).evictedTokens
      }
      let ok = a.availableSize() >= need
      if (ok) {
        try {
          slots = a.alloc(need)
        } catch (e) {
          if (!(e instanceof RadixCacheError && e.code === 'OUT_OF_MEMORY')) {
            if (lockedNode !== undefined) this.#cache.decLockRef(lockedNode)
            throw e
          }
          ok = false
        }
      }
      if (ok && slots.length !== need) {
        a.free(slots)
        if (lockedNode !== undefined) this.#cache.decLockRef(lockedNode)
        throw invalidOption(`allocator returned ${slots.length} slots for ${need} tokens`, slots.length)
      }
      if (!ok) {
        if (lockedNode !== undefined) this.#cache.decLockRef(lockedNode)
        this.#m.noSpace++
        const held = message.startPage + present
        return {
          kind: 'reply',
          reply: reply(message, 'no-space', {
            heldPages: held,
            throughHash: held === 0 ? null : present > 0 ? blocks[present - 1]!.hash : blocks[0]!.parentHash,
          }),
        }
      }
    }
    const id = this.#nextReservation++
    const res: OpenReservation = {
      id,
      sessionId: message.sessionId,
      seq: message.seq,
      slots: slots.length,
      begunAt: now,
      message,
      tokens,
      parentLen,
      present,
      kvEnd,
      lockedLen,
      lockedNode,
      lockedIndices,
      slotArray: slots,
      digests,
      parentDigest: path.digest,
    }
    this.#reservations.set(id, res)
    this.#reservedTokens += slots.length
    this.#session(message.origin, message.sessionId).open.add(message.seq)
    return { kind: 'reserved', reservation: publicReservation(res) }
  }

  /**
   * Finish reservation `id`: the first `receivedBlocks` blocks of its message arrived intact
   * (default: all). Inserts the pages P lacked, frees the slots of everything else, pins the path
   * (with `pinTtlMs`) and returns the reply for D. Throws `UNKNOWN_RESERVATION` for an unknown id
   * and `INVALID_OPTION` for a count outside `[0, blocks]`, changing nothing.
   *
   * @example
   * ```ts
   * // const r = sink.begin(message)
   * // if (r.kind === 'reserved') sink.complete(r.reservation.id, 3) // the transfer broke after 3 blocks
   * ```
   */
  complete(id: number, receivedBlocks?: number): SyncReply {
    const r = this.#reservations.get(id)
    if (r === undefined) {
      throw new DtoPSyncError(DtoPSyncErrorCode.UnknownReservation, `no open reservation ${describe(id)}`, id)
    }
    const msg = r.message
    const n = msg.blocks.length
    const recv = receivedBlocks ?? n
    if (typeof recv !== 'number' || !Number.isInteger(recv) || recv < 0 || recv > n) {
      throw invalidOption(`receivedBlocks must be an integer in [0, ${n}], got ${describe(recv)}`, recv)
    }
    const now = this.#clock()
    const ps = this.pageSize
    this.#reservations.delete(id)
    this.#reservedTokens -= r.slots
    const sess = this.#session(msg.origin, msg.sessionId)
    sess.open.delete(msg.seq)
    if (msg.version < sess.version) {
      // A newer version was applied while this one was arriving.
      this.#release(r)
      this.#m.stale++
      this.#m.droppedBlocks += r.kvEnd - r.present
      return reply(msg, 'stale')
    }
    const ingestEnd = Math.max(r.present, Math.min(r.kvEnd, recv))
    const newKv = ingestEnd - r.present
    const used = r.slotArray.subarray(0, newKv * ps)
    const unused = r.slotArray.subarray(newKv * ps)
    if (unused.length > 0) this.#allocator.free(unused)
    this.#m.droppedBlocks += r.kvEnd - ingestEnd
    this.#m.skippedBlocks += r.present
    let lastNode = r.lockedNode
    const totalLen = r.parentLen + ingestEnd * ps
    if (newKv > 0) {
      const values = new Int32Array(totalLen)
      values.set(r.lockedIndices)
      values.set(used, r.lockedLen)
      const ins = this.#cache.insert(r.tokens.subarray(0, totalLen), values, {
        extraKey: msg.extraKey,
        priority: this.#priority,
        chunked: true,
      })
      const dup = ins.prefixLen - r.lockedLen
      if (dup > 0) {
        this.#allocator.free(used.subarray(0, dup))
        this.#m.skippedBlocks += dup / ps
      }
      this.#m.ingestedBlocks += newKv - Math.max(0, dup) / ps
      this.#m.ingestedTokens += newKv * ps - Math.max(0, dup)
      lastNode = ins.lastNode
      const lastHash = msg.blocks[ingestEnd - 1]!.hash
      if (ins.prefixLen < totalLen && !this.#index.has(lastHash)) {
        this.#misconfigured =
          "P's radix cache does not report the ingested pages under D's block hashes: create it with onEvent: (e) => sink.observe(e) and the same blockHasher as D"
      }
      if (r.digests !== undefined) {
        for (let i = r.present; i < ingestEnd; i++) this.#index._setDigest(msg.blocks[i]!.hash, r.digests[i]!)
      }
    }
    const heldPages = msg.startPage + ingestEnd
    const throughHash =
      ingestEnd > 0 ? msg.blocks[ingestEnd - 1]!.hash : msg.startPage > 0 ? msg.blocks[0]!.parentHash : null
    let pinnedUntil: number | null = null
    if (this.#pinTtl > 0 && heldPages > 0 && lastNode !== undefined) {
      pinnedUntil = this.#pin(
        sess,
        lastNode,
        now + this.#pinTtl,
        totalLen,
        r.tokens.subarray(0, totalLen),
        msg.extraKey,
      )
    }
    if (r.lockedNode !== undefined) this.#cache.decLockRef(r.lockedNode)
    // Remember the path for the session's next segment.
    if (heldPages > 0) {
      sess.pathHash = throughHash
      sess.pathTokens = r.tokens.subarray(0, totalLen)
      sess.pathDigest = ingestEnd > 0 ? r.digests?.[ingestEnd - 1] : r.parentDigest
    }
    let status: ReplyStatus
    if (ingestEnd === n) status = 'applied'
    else if (recv < r.kvEnd) status = 'partial'
    else status = 'missing-kv'
    if (status === 'applied') this.#m.applied++
    else if (status === 'partial') this.#m.partial++
    else this.#m.missingKv++
    const out = reply(msg, status, {
      heldPages,
      throughHash,
      pinnedUntil,
      missingHash: status === 'missing-kv' ? msg.blocks[r.kvEnd]!.hash : null,
      ingestedBlocks: newKv,
      skippedBlocks: r.present,
    })
    if (msg.version > sess.version) {
      sess.version = msg.version
      sess.applied.clear()
    }
    if (status !== 'partial') {
      sess.applied.set(msg.seq, out)
      if (sess.applied.size > this.#dedupWindow) sess.applied.delete(sess.applied.keys().next().value!)
    }
    return out
  }

  /**
   * Abandon reservation `id` (the transfer failed): free its slots and unlock its parent path.
   * Throws `UNKNOWN_RESERVATION` for an unknown id.
   *
   * @example
   * ```ts
   * // const r = sink.begin(message); if (r.kind === 'reserved') sink.abort(r.reservation.id)
   * ```
   */
  abort(id: number): void {
    const r = this.#reservations.get(id)
    if (r === undefined) {
      throw new DtoPSyncError(DtoPSyncErrorCode.UnknownReservation, `no open reservation ${describe(id)}`, id)
    }
    this.#reservations.delete(id)
    this.#reservedTokens -= r.slots
    this.#find(r.message.origin, r.sessionId)?.open.delete(r.seq)
    this.#release(r)
    this.#m.reservationsAborted++
    this.#m.droppedBlocks += r.kvEnd - r.present
  }

  /**
   * Begin and complete at once (a transfer that arrived whole, or broke off after
   * `receivedBlocks`). Returns the reply for D; an ignored network duplicate of a transfer still
   * arriving returns `undefined`.
   *
   * @example
   * ```ts
   * // const reply = sink.ingest(message)
   * ```
   */
  ingest(message: TransferMessage, receivedBlocks?: number): SyncReply | undefined {
    if (receivedBlocks !== undefined) {
      const n = Array.isArray(message?.blocks) ? message.blocks.length : 0
      if (
        typeof receivedBlocks !== 'number' ||
        !Number.isInteger(receivedBlocks) ||
        receivedBlocks < 0 ||
        receivedBlocks > n
      ) {
        throw invalidOption(
          `receivedBlocks must be an integer in [0, ${n}], got ${describe(receivedBlocks)}`,
          receivedBlocks,
        )
      }
    }
    const r = this.begin(message)
    if (r.kind === 'reply') return r.reply
    if (r.kind === 'ignored') return undefined
    return this.complete(r.reservation.id, receivedBlocks)
  }

  /**
   * Free reservations older than `reservationTimeoutMs` and release pins whose time is up.
   * Call it as the clock advances.
   *
   * @example
   * ```ts
   * // every tick: const { reservations, pins } = sink.expire()
   * ```
   */
  expire(): { readonly reservations: number; readonly pins: number } {
    const now = this.#clock()
    let reservations = 0
    for (const r of [...this.#reservations.values()]) {
      if (r.begunAt + this.#resTimeout <= now) {
        this.abort(r.id)
        this.#m.reservationsAborted--
        this.#m.reservationsExpired++
        reservations++
      }
    }
    let pins = 0
    for (const sess of this.#allSessions()) {
      if (sess.pins.length === 0) continue
      const keep: Pin[] = []
      for (const p of sess.pins) {
        if (p.until <= now) {
          this.#cache.decLockRef(p.node)
          this.#pinnedTokens -= p.tokens
          pins++
        } else keep.push(p)
      }
      sess.pins = keep
    }
    this.#m.pinsExpired += pins
    return { reservations, pins }
  }

  /**
   * Release every pin now (before a cache `reset()`, or at shutdown). Returns how many.
   *
   * @example
   * ```ts
   * // sink.releaseAllPins(); cache.reset()
   * ```
   */
  releaseAllPins(): number {
    let count = 0
    for (const sess of this.#allSessions()) {
      for (const p of sess.pins) {
        this.#cache.decLockRef(p.node)
        count++
      }
      sess.pins = []
    }
    this.#pinnedTokens = 0
    return count
  }

  /**
   * Forget a session: release its pins and its duplicate-detection state, for one `origin` (a D)
   * or, without it, for every D that synced it. Open reservations of the session still complete
   * normally. Returns whether the session was known.
   *
   * @example
   * ```ts
   * // sink.dropSession('s1')       // every D's state of s1
   * // sink.dropSession('s1', 'd0') // only what d0 sent
   * ```
   */
  dropSession(sessionId: string, origin?: string): boolean {
    let known = false
    for (const [o, sessions] of this.#origins) {
      if (origin !== undefined && o !== origin) continue
      const sess = sessions.get(sessionId)
      if (sess === undefined) continue
      known = true
      for (const p of sess.pins) {
        this.#cache.decLockRef(p.node)
        this.#pinnedTokens -= p.tokens
      }
      if (sess.open.size === 0) {
        sessions.delete(sessionId)
        if (sessions.size === 0) this.#origins.delete(o)
      } else {
        sess.pins = []
        sess.applied.clear()
      }
    }
    return known
  }

  /**
   * Whether reservation `id` is open.
   *
   * @example
   * ```ts
   * // if (sink.hasReservation(id)) sink.complete(id)
   * ```
   */
  hasReservation(id: number): boolean {
    return this.#reservations.has(id)
  }

  /**
   * Open reservations.
   *
   * @example
   * ```ts
   * // for (const r of sink.reservations()) console.log(r.sessionId, r.slots)
   * ```
   */
  reservations(): Reservation[] {
    return [...this.#reservations.values()].map(publicReservation)
  }

  /**
   * Tokens of KV slots held by open reservations (outside the cache).
   *
   * @example
   * ```ts
   * // pool.availableSize() + cache.totalSize() + sink.reservedTokens() === pool.size
   * ```
   */
  reservedTokens(): number {
    return this.#reservedTokens
  }

  /**
   * Tokens covered by pins (counting shared prefixes once per pin).
   *
   * @example
   * ```ts
   * // sink.pinnedTokens() <= maxPinnedTokens
   * ```
   */
  pinnedTokens(): number {
    return this.#pinnedTokens
  }

  /**
   * Number of pins held.
   *
   * @example
   * ```ts
   * // sink.pinCount()
   * ```
   */
  pinCount(): number {
    let c = 0
    for (const s of this.#allSessions()) c += s.pins.length
    return c
  }

  /**
   * The newest version applied for a session from `origin` (default `''`: messages without one),
   * 0 when none.
   *
   * @example
   * ```ts
   * // sink.appliedVersion('s1')
   * // sink.appliedVersion('s1', 'd0')
   * ```
   */
  appliedVersion(sessionId: string, origin?: string): number {
    return this.#find(origin, sessionId)?.version ?? 0
  }

  /**
   * Counters since construction.
   *
   * @example
   * ```ts
   * // const { ingestedTokens, skippedBlocks } = sink.metrics()
   * ```
   */
  metrics(): SinkMetrics {
    return { ...this.#m }
  }

  #find(origin: string | undefined, id: string): SinkSession | undefined {
    return this.#origins.get(origin ?? '')?.get(id)
  }

  *#allSessions(): IterableIterator<SinkSession> {
    for (const sessions of this.#origins.values()) yield* sessions.values()
  }

  #session(origin: string | undefined, id: string): SinkSession {
    let sessions = this.#origins.get(origin ?? '')
    if (sessions === undefined) {
      sessions = new Map()
      this.#origins.set(origin ?? '', sessions)
    }
    let s = sessions.get(id)
    if (s === undefined) {
      s = {
        version: 0,
        applied: new Map(),
        open: new Set(),
        pathHash: null,
        pathTokens: EMPTY_TOKENS,
        pathDigest: undefined,
        pins: [],
      }
      sessions.set(id, s)
    }
    return s
  }

  #release(r: OpenReservation): void {
    if (r.slotArray.length > 0) this.#allocator.free(r.slotArray)
    if (r.lockedNode !== undefined) this.#cache.decLockRef(r.lockedNode)
  }

  /** Token path (and digest) of the message's parent page, or `undefined` when P does not know it. */
  #parentPath(
    sess: SinkSession | undefined,
    msg: TransferMessage,
  ): { tokens: Uint32Array; digest: Uint8Array | undefined } | undefined {
    if (msg.startPage === 0) return { tokens: EMPTY_TOKENS, digest: undefined }
    const parent = msg.blocks[0]!.parentHash!
    const ps = this.pageSize
    if (sess !== undefined && sess.pathHash === parent && (!this.#verify || sess.pathDigest !== undefined)) {
      if (sess.pathTokens.length !== msg.startPage * ps) {
        throw invalidMessage(
          `message starts at page ${msg.startPage} but its parent ${parent} is page ${sess.pathTokens.length / ps} of the chain`,
          msg.startPage,
        )
      }
      return { tokens: sess.pathTokens, digest: sess.pathDigest }
    }
    const chain: bigint[] = []
    const pages: Uint32Array[] = []
    let h: bigint | null = parent
    while (h !== null) {
      const e = this.#index.get(h)
      if (e === undefined || e.tokens === undefined) return undefined
      chain.push(h)
      pages.push(e.tokens)
      if (pages.length > msg.startPage) break
      h = e.parentHash
    }
    if (pages.length !== msg.startPage) {
      throw invalidMessage(
        `message starts at page ${msg.startPage} but its parent ${parent} is page ${pages.length} of its chain on P`,
        msg.startPage,
      )
    }
    const tokens = new Uint32Array(msg.startPage * ps)
    for (let i = 0; i < pages.length; i++) tokens.set(pages[pages.length - 1 - i]!, i * ps)
    if (!this.#verify) return { tokens, digest: undefined }
    // Digest of the parent: from the memo of the nearest ancestor that has one, hashing down to
    // the parent (chain[0] is the parent, chain[length - 1] the first page of the chain).
    let j = 0
    while (j < chain.length && this.#index._digest(chain[j]!) === undefined) j++
    let prev = j < chain.length ? this.#index._digest(chain[j]!) : undefined
    const nsArg = msg.extraKey === '' ? undefined : msg.extraKey
    for (let k = j - 1; k >= 0; k--) {
      const d = this.#hasher.hashBlock(prev, pages[k]!, nsArg)
      if (this.#hasher.blockId(d) !== chain[k]) {
        throw new DtoPSyncError(
          DtoPSyncErrorCode.HashMismatch,
          `P's page ${chain[k]} does not hash to its id with this block hasher (is P's cache using the same blockHasher?)`,
          chain[k],
        )
      }
      this.#index._setDigest(chain[k]!, d)
      prev = d
    }
    return { tokens, digest: prev }
  }

  /** Pin the path through `node` until `until`; returns `until`, or `null` when refused. */
  #pin(
    sess: SinkSession,
    node: NodeHandle,
    until: number,
    tokens: number,
    path: Uint32Array,
    ns: string,
  ): number | null {
    if (this.#pinnedTokens + tokens > this.#maxPinned) {
      this.#m.pinsRefused++
      return null
    }
    this.#cache.incLockRef(node)
    this.#pinnedTokens += tokens
    this.#m.pinsTaken++
    // Older pins of the session on this path, expiring no later, are now redundant.
    const keep: Pin[] = []
    for (const p of sess.pins) {
      if (p.until <= until && p.extraKey === ns && p.tokens <= tokens && isPrefix(p.path, path)) {
        this.#cache.decLockRef(p.node)
        this.#pinnedTokens -= p.tokens
      } else keep.push(p)
    }
    keep.push({ node, until, tokens, path, extraKey: ns })
    sess.pins = keep
    return until
  }
}

function isPrefix(a: Uint32Array, b: Uint32Array): boolean {
  if (a.length > b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

function publicReservation(r: OpenReservation): Reservation {
  return { id: r.id, sessionId: r.sessionId, seq: r.seq, slots: r.slots, begunAt: r.begunAt }
}

function reply(
  msg: TransferMessage,
  status: ReplyStatus,
  extra: Partial<Omit<SyncReply, 'sessionId' | 'version' | 'seq' | 'status'>> = {},
): SyncReply {
  return {
    sessionId: msg.sessionId,
    version: msg.version,
    seq: msg.seq,
    status,
    heldPages: extra.heldPages ?? 0,
    throughHash: extra.throughHash ?? null,
    pinnedUntil: extra.pinnedUntil ?? null,
    missingHash: extra.missingHash ?? null,
    ingestedBlocks: extra.ingestedBlocks ?? 0,
    skippedBlocks: extra.skippedBlocks ?? 0,
    error: extra.error ?? null,
  }
}

/** @internal Build a `rejected` reply for a message that failed validation. */
export function rejectedReply(msg: TransferMessage, error: DtoPSyncError): SyncReply | undefined {
  if (msg === null || typeof msg !== 'object' || typeof msg.sessionId !== 'string' || msg.sessionId === '')
    return undefined
  if (!Number.isSafeInteger(msg.version) || msg.version < 1 || !Number.isSafeInteger(msg.seq) || msg.seq < 0)
    return undefined
  return reply(msg, 'rejected', { error: error.code })
}
