import type { BlockHasher, KvEvent } from '@kvc/radix-cache'
import { RouterError, checkOption, describeValue } from '../errors/routerError.js'
import { DEFAULT_ROUTER_PARAMS, checkRouterParam } from '../route/params.js'
import { BlockKeys } from './blockKeys.js'
import { type KvTierName, mediumTier } from '../tier/medium.js'
import { HI, LO, b64, w32 } from './split64.js'

/**
 * How overlap is counted.
 *
 * - `plain`: the number of leading blocks of the query the worker holds.
 * - `exclusive`: the same walk, but blocks held by at least `θ_shared` of the workers (and by at
 *   least two) are not counted: a system prompt every worker holds says nothing about where a
 *   session should go (`docs/design/prototype.md#s5-cold-d-workers`).
 * - `sole`: the same walk, counting only the blocks the worker alone holds: the prefix a session
 *   holds exclusively on a D, the prototype's own definition of exclusive overlap. It is
 *   `exclusive` with `θ_shared` at or below `1/workers` (a boilerplate threshold of two holders).
 *
 * @example
 * ```ts
 * import type { OverlapMode } from '@kvc/kvc-router'
 * const mode: OverlapMode = 'exclusive'
 * ```
 */
export type OverlapMode = 'plain' | 'exclusive' | 'sole'

/**
 * What {@link ResidencyIndex.ingest} did with an event.
 *
 * - `applied`: the event had the next id and was applied.
 * - `duplicate`: the id was already applied and the index was built with `dedupe: true`; skipped.
 * - `gap-applied`: ids were missing before it (reported); under `gapPolicy: 'apply'` it was applied.
 * - `gap-held`: ids were missing before it; under `gapPolicy: 'hold'` it was **not** applied: replay
 *   the missing ids first, or {@link ResidencyIndex.resync} the worker.
 *
 * @example
 * ```ts
 * import type { IngestStatus } from '@kvc/kvc-router'
 * const s: IngestStatus = 'applied'
 * ```
 */
export type IngestStatus = 'applied' | 'duplicate' | 'gap-applied' | 'gap-held'

/**
 * A detected hole in a worker's KV-event stream: the events with ids in
 * `[expectedEventId, receivedEventId)` never arrived. The worker needs a resync (replay from the
 * publisher's buffer, or a dump of its tree) before its residency can be trusted again.
 *
 * @example
 * ```ts
 * import type { GapReport } from '@kvc/kvc-router'
 * const gap: GapReport = { workerId: 'd1', expectedEventId: 10, receivedEventId: 13, missing: 3 }
 * ```
 */
export interface GapReport {
  readonly workerId: string
  readonly expectedEventId: number
  readonly receivedEventId: number
  readonly missing: number
}

/**
 * Per-worker counters of {@link ResidencyIndex.workerStatus}.
 *
 * @example
 * ```ts
 * import { ResidencyIndex } from '@kvc/kvc-router'
 * const index = new ResidencyIndex()
 * index.addWorker('d0')
 * index.workerStatus('d0').lastEventId // -1: nothing applied yet
 * ```
 */
export interface WorkerResidencyStatus {
  readonly workerId: string
  /** Id of the last applied KV event (-1 before the first). */
  readonly lastEventId: number
  /** Blocks the index believes the worker holds. */
  readonly blocks: number
  /** A gap was seen and no resync (or `AllBlocksCleared`) happened since. */
  readonly needsResync: boolean
  readonly eventsApplied: number
  readonly gaps: number
  readonly duplicatesSkipped: number
  /** `BlockStored` events whose parent block the worker did not hold (see the class docs). */
  readonly orphanStores: number
  /** `BlockRemoved` entries for blocks the worker did not hold (ignored). */
  readonly unknownRemovals: number
  /** Blocks added or removed by router-side updates (`recordStored` / `recordRemoved`). */
  readonly routerUpdates: number
}

/**
 * Options of {@link ResidencyIndex}.
 *
 * @example
 * ```ts
 * import { sglangBlockHasher } from '@kvc/radix-cache'
 * import { ResidencyIndex } from '@kvc/kvc-router'
 * const index = new ResidencyIndex({ hasher: sglangBlockHasher(), pageSize: 16, thetaShared: 0.5 })
 * ```
 */
export interface ResidencyIndexOptions {
  /** Boilerplate threshold `θ_shared` of `exclusive` overlap, in `(0, 1]` (default: the router's, 0.5). */
  readonly thetaShared?: number
  /** What to do with an event that follows a gap (default `'apply'`). */
  readonly gapPolicy?: 'apply' | 'hold'
  /** Skip events whose id was already applied instead of throwing `EVENT_OUT_OF_ORDER` (default false). */
  readonly dedupe?: boolean
  /** Called once per detected gap (also kept in {@link ResidencyIndex.recentGaps}). */
  readonly onGap?: (gap: GapReport) => void
  /** Hasher for token queries ({@link ResidencyIndex.keysFor}); must match the engines'. */
  readonly hasher?: BlockHasher
  /**
   * Page size for token queries, in `[1, MAX_PAGE_SIZE]`; when set, `BlockStored` events of
   * another block size are refused. In a `Router` it must equal `params.pageSize` (the router's
   * page size, which it defaults when `params` does not give one).
   */
  readonly pageSize?: number
  /** Initial node capacity (grows by doubling). */
  readonly initialBlocks?: number
  /**
   * The tier this index holds (default `'device'`): events whose `medium` names another tier
   * (see {@link mediumTier}) keep the id sequence whole but change nothing. One index per tier
   * gives, e.g., the host-resident blocks of every worker (`tier: 'host'`).
   */
  readonly tier?: KvTierName
}

interface WorkerRec {
  id: string
  slot: number
  lastEventId: number
  blocks: number
  needsResync: boolean
  eventsApplied: number
  gaps: number
  duplicatesSkipped: number
  orphanStores: number
  unknownRemovals: number
  routerUpdates: number
}

const EMPTY = -1
const MAX_RECENT_GAPS = 64

// Block hashes are 64-bit, in their signed or unsigned spelling: [-2^63, 2^64), the values that
// `BigInt.asIntN(64, h)` or `BigInt.asUintN(64, h)` leaves unchanged (a third of the cost of two
// bigint comparisons with the bounds).

function validateHashes(what: string, hs: unknown): readonly bigint[] {
  if (!Array.isArray(hs)) throw new RouterError('INVALID_MESSAGE', `${what} must be an array of bigint`, hs)
  for (let i = 0; i < hs.length; i++) {
    const h = hs[i]
    if (typeof h !== 'bigint') {
      throw new RouterError('INVALID_MESSAGE', `${what}[${i}] must be a bigint`, h)
    }
    // Past 64 bits a hash would alias another block's once folded into the index's 64-bit keys.
    if (BigInt.asIntN(64, h) !== h && BigInt.asUintN(64, h) !== h) {
      throw new RouterError('INVALID_MESSAGE', `${what}[${i}] must fit in 64 bits, got ${h}`, h)
    }
  }
  return hs as readonly bigint[]
}

/**
 * The router's residency index: which D workers hold which KV blocks, fed by the workers' KV
 * events (`BlockStored` / `BlockRemoved` / `AllBlocksCleared`, the shape of
 * `@kvc/radix-cache`, SGLang, vLLM and Dynamo) and by router-side updates for workers that
 * publish none. `overlapInto(keys)` returns, per worker, how many leading blocks of a prompt it
 * holds.
 *
 * **Structure.** Engines publish *chained* block hashes: the hash of block `i` covers blocks
 * `0..i`, so one hash names a whole prefix, i.e. a node of the prefix tree. The index is that tree
 * flattened: an open-addressed table from the hash (as two 32-bit halves, converted from bigint
 * once at ingest) to a node, and per node a bitmask of the workers holding it plus their count.
 * A query walks the prompt's blocks from the first, intersecting the candidate mask, and stops as
 * soon as no worker is left: O(depth × ⌈workers/32⌉), no allocation, no bigint.
 *
 * **Event ids.** Each worker's events carry ids that increase by one from 0 (or from the id given
 * to {@link ResidencyIndex.addWorker} / {@link ResidencyIndex.resync}). An id at or below the last
 * applied one is refused (`EVENT_OUT_OF_ORDER`, nothing changes) unless `dedupe` is set. An id
 * past the next one is a **gap**: it is reported (`onGap`, {@link ResidencyIndex.recentGaps}) and
 * the worker is flagged `needsResync`; under `gapPolicy: 'apply'` (default) the event is applied
 * anyway (best effort: admission is the ground truth), under `'hold'` it is refused until the
 * missing ids are replayed.
 *
 * **A `BlockStored` whose parent is unknown** (the worker does not hold `parentBlockHash`: the
 * parent was stored before we subscribed, evicted out of order, or lost in a gap) is applied as
 * is and counted in `orphanStores`. This is safe: matching walks from a prompt's first block and a
 * worker drops out at the first block it does not hold, so an orphan block never adds overlap
 * until its whole prefix is held again (for example after a replay of the lost events).
 *
 * **Removals** only drop the named blocks. A node held by no worker is freed at once. Removing a
 * block whose descendants a worker still holds leaves those descendants unreachable for that
 * worker (the same prefix rule), which is what vLLM's out-of-order eviction means.
 *
 * @example
 * ```ts
 * import { BlockKeys, ResidencyIndex } from '@kvc/kvc-router'
 * const index = new ResidencyIndex()
 * index.addWorker('d0')
 * index.addWorker('d1')
 * index.ingest('d0', { type: 'BlockStored', eventId: 0, blockHashes: [11n, 12n, 13n], parentBlockHash: null, tokenIds: [], blockSize: 16, extraKey: null })
 * index.ingest('d1', { type: 'BlockStored', eventId: 0, blockHashes: [11n], parentBlockHash: null, tokenIds: [], blockSize: 16, extraKey: null })
 * const q = BlockKeys.fromHashes([11n, 12n, 99n])
 * index.overlap(q, 'plain') // Map { 'd0' => 2, 'd1' => 1 }
 * index.overlap(q, 'exclusive') // Map { 'd0' => 1, 'd1' => 0 }: block 11 is on both workers
 * ```
 */
export class ResidencyIndex {
  readonly #theta: number
  readonly #tier: KvTierName
  readonly #gapPolicy: 'apply' | 'hold'
  readonly #dedupe: boolean
  readonly #onGap: ((gap: GapReport) => void) | undefined
  readonly #hasher: BlockHasher | undefined
  readonly #pageSize: number | undefined

  // nodes (struct of arrays)
  #keyHi: Uint32Array
  #keyLo: Uint32Array
  #holderCount: Int32Array
  #holders: Uint32Array
  /**
   * Per node, the node a query last went to from it (the next block of a prompt): a hint, used only
   * when that node is live with the key sought, so a query following a chain reads the nodes'
   * arrays (allocated along chains) instead of probing the hash table at random places.
   */
  #next: Int32Array
  #words = 1
  #nodeTop = 0
  #freeNodes: Int32Array
  #freeTop = 0
  #liveNodes = 0
  // hash table: per table slot, its node and the node's key's low half side by side (one cache
  // line holds both, so a probe rarely reads the node's key arrays)
  #slots: Int32Array
  #mask: number
  #shift: number
  /**
   * Where the last {@link ResidencyIndex.#find} stopped: the table slot of the node it found, or
   * the empty slot that ended its probe (where that key would go): an insert or a delete right
   * after it need not probe again.
   */
  #probeEnd = 0
  // workers
  readonly #bySlot: (WorkerRec | undefined)[] = []
  readonly #byId = new Map<string, WorkerRec>()
  readonly #freeWorkerSlots: number[] = []
  #liveWorkers = 0
  #cand = new Uint32Array(1)
  #liveMask = new Uint32Array(1)
  readonly #recentGaps: GapReport[] = []
  // scratch for map-returning queries
  #plainScratch = new Int32Array(32)
  #exclScratch = new Int32Array(32)

  constructor(options: ResidencyIndexOptions = {}) {
    const theta = checkRouterParam('thetaShared', options.thetaShared ?? DEFAULT_ROUTER_PARAMS.thetaShared)
    const gp = options.gapPolicy ?? 'apply'
    checkOption(
      gp === 'apply' || gp === 'hold',
      `gapPolicy must be 'apply' or 'hold', got ${describeValue(gp)}`,
      gp,
    )
    if (options.pageSize !== undefined) checkRouterParam('pageSize', options.pageSize)
    const tier = options.tier ?? 'device'
    checkOption(
      tier === 'device' || tier === 'host' || tier === 'disk' || tier === 'external',
      `tier must be 'device', 'host', 'disk' or 'external', got ${describeValue(tier)}`,
      tier,
    )
    this.#tier = tier
    const initial = options.initialBlocks ?? 1024
    checkOption(
      Number.isInteger(initial) && initial > 0,
      `initialBlocks must be a positive integer, got ${describeValue(initial)}`,
      initial,
    )
    this.#theta = theta
    this.#gapPolicy = gp
    this.#dedupe = options.dedupe ?? false
    this.#onGap = options.onGap
    this.#hasher = options.hasher
    this.#pageSize = options.pageSize
    const cap = 1 << Math.max(4, Math.ceil(Math.log2(initial)))
    this.#keyHi = new Uint32Array(cap)
    this.#keyLo = new Uint32Array(cap)
    this.#holderCount = new Int32Array(cap)
    this.#holders = new Uint32Array(cap)
    this.#next = new Int32Array(cap).fill(EMPTY)
    this.#freeNodes = new Int32Array(cap)
    const tableSize = cap * 2
    this.#slots = new Int32Array(tableSize * 2).fill(EMPTY)
    this.#mask = tableSize - 1
    this.#shift = 32 - Math.log2(tableSize)
  }

  // ---------------------------------------------------------------- workers

  /**
   * Registers a worker. `lastEventId` is the id of the last event already reflected (default -1,
   * so the first expected event is 0). Returns the worker's slot (the index into overlap arrays).
   *
   * @throws RouterError `DUPLICATE_WORKER`, `INVALID_OPTION`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0') // 0
   * index.addWorker('d1', { lastEventId: 41 }) // 1: the next event expected from d1 is 42
   * ```
   */
  addWorker(workerId: string, options: { readonly lastEventId?: number } = {}): number {
    if (typeof workerId !== 'string' || workerId.length === 0) {
      throw new RouterError('INVALID_OPTION', 'worker id must be a non-empty string', workerId)
    }
    if (this.#byId.has(workerId)) {
      throw new RouterError('DUPLICATE_WORKER', `worker ${workerId} already added`, workerId)
    }
    const last = options.lastEventId ?? -1
    checkOption(
      Number.isInteger(last) && last >= -1,
      `lastEventId must be an integer >= -1, got ${describeValue(last)}`,
      last,
    )
    const slot = this.#freeWorkerSlots.length > 0 ? this.#freeWorkerSlots.pop()! : this.#bySlot.length
    if (slot >= this.#words * 32) this.#growWords()
    const rec: WorkerRec = {
      id: workerId,
      slot,
      lastEventId: last,
      blocks: 0,
      needsResync: false,
      eventsApplied: 0,
      gaps: 0,
      duplicatesSkipped: 0,
      orphanStores: 0,
      unknownRemovals: 0,
      routerUpdates: 0,
    }
    this.#bySlot[slot] = rec
    this.#byId.set(workerId, rec)
    this.#liveMask[slot >>> 5]! |= 1 << (slot & 31)
    this.#liveWorkers++
    if (this.#plainScratch.length < this.#bySlot.length) {
      this.#plainScratch = new Int32Array(this.#words * 32)
      this.#exclScratch = new Int32Array(this.#words * 32)
    }
    return slot
  }

  /**
   * Forgets a worker and every block it held. Its slot may be reused by a later `addWorker`.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.removeWorker('d0')
   * index.hasWorker('d0') // false
   * ```
   */
  removeWorker(workerId: string): void {
    const rec = this.#rec(workerId)
    this.#clearSlot(rec)
    this.#byId.delete(workerId)
    this.#bySlot[rec.slot] = undefined
    this.#liveMask[rec.slot >>> 5]! &= ~(1 << (rec.slot & 31))
    this.#freeWorkerSlots.push(rec.slot)
    this.#liveWorkers--
  }

  /**
   * Whether the worker is registered.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * new ResidencyIndex().hasWorker('d0') // false
   * ```
   */
  hasWorker(workerId: string): boolean {
    return this.#byId.has(workerId)
  }

  /**
   * The worker's slot: its position in the arrays filled by {@link ResidencyIndex.overlapInto}.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.slotOf('d0') // 0
   * ```
   */
  slotOf(workerId: string): number {
    return this.#rec(workerId).slot
  }

  /**
   * One past the highest slot in use: the length overlap arrays need.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('a')
   * index.addWorker('b')
   * index.slotCount // 2
   * ```
   */
  get slotCount(): number {
    return this.#bySlot.length
  }

  /**
   * The page size the index was given (`undefined`: none; token queries are then refused and
   * `BlockStored` events of any block size are applied).
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * new ResidencyIndex({ pageSize: 64 }).pageSize // 64
   * ```
   */
  get pageSize(): number | undefined {
    return this.#pageSize
  }

  /**
   * Number of registered workers.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * new ResidencyIndex().workerCount // 0
   * ```
   */
  get workerCount(): number {
    return this.#liveWorkers
  }

  /**
   * Number of distinct blocks held by at least one worker.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * new ResidencyIndex().blockCount // 0
   * ```
   */
  get blockCount(): number {
    return this.#liveNodes
  }

  /**
   * Counters and the event-stream state of one worker.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.workerStatus('d0').needsResync // false
   * ```
   */
  workerStatus(workerId: string): WorkerResidencyStatus {
    const r = this.#rec(workerId)
    return {
      workerId: r.id,
      lastEventId: r.lastEventId,
      blocks: r.blocks,
      needsResync: r.needsResync,
      eventsApplied: r.eventsApplied,
      gaps: r.gaps,
      duplicatesSkipped: r.duplicatesSkipped,
      orphanStores: r.orphanStores,
      unknownRemovals: r.unknownRemovals,
      routerUpdates: r.routerUpdates,
    }
  }

  /**
   * The last (up to 64) detected gaps, oldest first.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * new ResidencyIndex().recentGaps() // []
   * ```
   */
  recentGaps(): readonly GapReport[] {
    return this.#recentGaps.slice()
  }

  // ---------------------------------------------------------------- events

  /**
   * Applies one KV event of `workerId` (see the class docs for ids, gaps and unknown parents).
   * The event is fully validated before anything changes. An event whose `medium` names another
   * tier than the index's (by default the device's: host, disk, external or unknown media) takes
   * its place in the id sequence but changes no residency (`ClusterView` gives host events to its
   * `HostResidency`).
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_MESSAGE` (malformed event, or a block size
   * other than the configured `pageSize`), `EVENT_OUT_OF_ORDER`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.ingest('d0', { type: 'BlockStored', eventId: 0, blockHashes: [5n], parentBlockHash: null, tokenIds: [], blockSize: 4, extraKey: null }) // 'applied'
   * index.ingest('d0', { type: 'BlockRemoved', eventId: 3, blockHashes: [5n], extraKey: null }) // 'gap-applied' (ids 1 and 2 were lost)
   * ```
   */
  ingest(workerId: string, event: KvEvent): IngestStatus {
    const rec = this.#rec(workerId)
    if (typeof event !== 'object' || event === null) {
      throw new RouterError('INVALID_MESSAGE', 'KV event must be an object', event)
    }
    const id = event.eventId
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      throw new RouterError('INVALID_MESSAGE', `KV event id must be a non-negative integer`, id)
    }
    let hashes: readonly bigint[] | undefined
    let parent: bigint | null = null
    switch (event.type) {
      case 'BlockStored': {
        hashes = validateHashes('BlockStored.blockHashes', event.blockHashes)
        parent = event.parentBlockHash
        if (parent !== null && typeof parent !== 'bigint') {
          throw new RouterError(
            'INVALID_MESSAGE',
            'BlockStored.parentBlockHash must be a bigint or null',
            parent,
          )
        }
        const bs = event.blockSize
        // Another tier's events may carry no block size (vLLM's offloading connector: 0).
        if (mediumTier(event.medium) !== this.#tier) break
        if (!Number.isInteger(bs) || bs <= 0) {
          throw new RouterError('INVALID_MESSAGE', 'BlockStored.blockSize must be a positive integer', bs)
        }
        if (this.#pageSize !== undefined && bs !== this.#pageSize) {
          throw new RouterError(
            'INVALID_MESSAGE',
            `BlockStored.blockSize ${bs} differs from the index's pageSize ${this.#pageSize}`,
            bs,
          )
        }
        if (!Array.isArray(event.tokenIds)) {
          throw new RouterError('INVALID_MESSAGE', 'BlockStored.tokenIds must be an array', event.tokenIds)
        }
        break
      }
      case 'BlockRemoved':
        hashes = validateHashes('BlockRemoved.blockHashes', event.blockHashes)
        break
      case 'AllBlocksCleared':
        break
      default:
        throw new RouterError(
          'INVALID_MESSAGE',
          `unknown KV event type ${String((event as { type?: unknown }).type)}`,
          event,
        )
    }
    if (id <= rec.lastEventId) {
      if (this.#dedupe) {
        rec.duplicatesSkipped++
        return 'duplicate'
      }
      throw new RouterError(
        'EVENT_OUT_OF_ORDER',
        `worker ${workerId}: event id ${id} is not after the last applied id ${rec.lastEventId}`,
        id,
      )
    }
    let status: IngestStatus = 'applied'
    if (id > rec.lastEventId + 1) {
      const gap: GapReport = {
        workerId,
        expectedEventId: rec.lastEventId + 1,
        receivedEventId: id,
        missing: id - rec.lastEventId - 1,
      }
      if (this.#gapPolicy === 'hold') {
        if (!rec.needsResync) this.#reportGap(rec, gap)
        return 'gap-held'
      }
      this.#reportGap(rec, gap)
      status = 'gap-applied'
    } else if (this.#gapPolicy === 'hold') {
      // Under 'hold' nothing was ever skipped: an in-order event means the stream is whole again.
      rec.needsResync = false
    }
    rec.lastEventId = id
    rec.eventsApplied++
    // An event about another tier (a host-tier `medium` in a device index) keeps the id sequence
    // whole but changes nothing here (`HostResidency` holds the host tier for the router).
    if (event.type !== 'AllBlocksCleared' && mediumTier(event.medium) !== this.#tier) return status
    if (event.type === 'BlockStored') {
      if (parent !== null && !this.#holds(rec.slot, parent)) rec.orphanStores++
      this.#storeHashes(rec, hashes!)
    } else if (event.type === 'BlockRemoved') {
      this.#removeHashes(rec, hashes!, false)
    } else {
      this.#clearSlot(rec)
      rec.needsResync = false
    }
    return status
  }

  /**
   * Router-side update: records that `workerId` now holds these blocks (for workers that publish
   * no KV events, or to cover the lag before their `BlockStored` arrives). Does not touch event ids.
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_MESSAGE`.
   *
   * @example
   * ```ts
   * import { BlockKeys, ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', BlockKeys.fromHashes([1n, 2n]))
   * index.overlap(BlockKeys.fromHashes([1n, 2n]), 'plain').get('d0') // 2
   * ```
   */
  recordStored(workerId: string, blocks: BlockKeys | readonly bigint[]): void {
    const rec = this.#rec(workerId)
    const keys = blocks instanceof BlockKeys ? blocks : BlockKeys.fromHashes(validateHashes('blocks', blocks))
    for (let i = 0; i < keys.length; i++) {
      if (this.#storeKey(rec, keys.hi[i]!, keys.lo[i]!)) rec.routerUpdates++
    }
  }

  /**
   * Router-side update: records that `workerId` no longer holds these blocks (for example after
   * its session was released or migrated away).
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_MESSAGE`.
   *
   * @example
   * ```ts
   * import { BlockKeys, ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', [1n, 2n])
   * index.recordRemoved('d0', [2n])
   * index.overlap(BlockKeys.fromHashes([1n, 2n]), 'plain').get('d0') // 1
   * ```
   */
  recordRemoved(workerId: string, blocks: BlockKeys | readonly bigint[]): void {
    const rec = this.#rec(workerId)
    const keys = blocks instanceof BlockKeys ? blocks : BlockKeys.fromHashes(validateHashes('blocks', blocks))
    for (let i = 0; i < keys.length; i++) {
      if (this.#removeKey(rec, keys.hi[i]!, keys.lo[i]!, true)) rec.routerUpdates++
    }
  }

  /**
   * Replaces everything known about a worker with a snapshot (a replay of its whole tree, the
   * answer to a gap): it then holds exactly `blocks`, its last event id becomes `lastEventId` and
   * `needsResync` is cleared.
   *
   * @throws RouterError `UNKNOWN_WORKER`, `INVALID_MESSAGE`, `INVALID_OPTION`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.resync('d0', [1n, 2n, 3n], 120)
   * index.workerStatus('d0').blocks // 3
   * ```
   */
  resync(workerId: string, blocks: BlockKeys | readonly bigint[], lastEventId: number): void {
    const rec = this.#rec(workerId)
    checkOption(
      Number.isSafeInteger(lastEventId) && lastEventId >= -1,
      `lastEventId must be an integer >= -1, got ${describeValue(lastEventId)}`,
      lastEventId,
    )
    const keys = blocks instanceof BlockKeys ? blocks : BlockKeys.fromHashes(validateHashes('blocks', blocks))
    this.#clearSlot(rec)
    for (let i = 0; i < keys.length; i++) this.#storeKey(rec, keys.hi[i]!, keys.lo[i]!)
    rec.lastEventId = lastEventId
    rec.needsResync = false
  }

  /**
   * Drops every block of a worker (as `AllBlocksCleared` does) without touching its event ids.
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', [1n])
   * index.clearWorker('d0')
   * index.blockCount // 0
   * ```
   */
  clearWorker(workerId: string): void {
    this.#clearSlot(this.#rec(workerId))
  }

  // ---------------------------------------------------------------- queries

  /**
   * Chained block keys of a token prompt, with the hasher and page size given at construction.
   *
   * @throws RouterError `INVALID_OPTION` if the index has no `hasher` / `pageSize`.
   *
   * @example
   * ```ts
   * import { sglangBlockHasher } from '@kvc/radix-cache'
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex({ hasher: sglangBlockHasher(), pageSize: 2 })
   * index.keysFor([1, 2, 3, 4]).length // 2
   * ```
   */
  keysFor(tokens: ArrayLike<number>, extraKey?: string): BlockKeys {
    if (this.#hasher === undefined || this.#pageSize === undefined) {
      throw new RouterError('INVALID_OPTION', 'token queries need the hasher and pageSize options', undefined)
    }
    return BlockKeys.fromTokens(this.#hasher, tokens, this.#pageSize, extraKey)
  }

  /**
   * The hot query. Writes, for every slot, the number of leading blocks of `keys` the worker
   * holds into `plainOut[slot]` and, when given, the same count without boilerplate blocks into
   * `exclusiveOut[slot]` (unused and removed slots get 0). A block is boilerplate when at least
   * `holderLimit` workers hold it (default {@link ResidencyIndex.boilerplateThreshold}; 2 counts
   * only the blocks a worker alone holds, the `sole` mode). Returns `keys.length`. Allocates
   * nothing; the arrays must have at least {@link ResidencyIndex.slotCount} entries.
   *
   * @example
   * ```ts
   * import { BlockKeys, ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', [1n, 2n])
   * const plain = new Int32Array(index.slotCount)
   * index.overlapInto(BlockKeys.fromHashes([1n, 2n, 3n]), plain)
   * plain[0] // 2
   * ```
   */
  overlapInto(
    keys: BlockKeys,
    plainOut: Int32Array,
    exclusiveOut?: Int32Array,
    holderLimit: number = this.boilerplateThreshold(),
  ): number {
    if (!(holderLimit >= 1)) {
      throw new RouterError(
        'INVALID_OPTION',
        `holderLimit must be >= 1, got ${describeValue(holderLimit)}`,
        holderLimit,
      )
    }
    const slots = this.#bySlot.length
    if (plainOut.length < slots || (exclusiveOut !== undefined && exclusiveOut.length < slots)) {
      throw new RouterError('INVALID_LENGTH', `overlap arrays need ${slots} entries`, plainOut.length)
    }
    plainOut.fill(0, 0, slots)
    const hasExcl = exclusiveOut !== undefined
    if (hasExcl) exclusiveOut.fill(0, 0, slots)
    const n = keys.length
    if (n === 0 || this.#liveWorkers === 0) return n
    const words = this.#words
    const cand = this.#cand
    cand.set(this.#liveMask)
    const holders = this.#holders
    const counts = this.#holderCount
    const next = this.#next
    const keyHi = this.#keyHi
    const keyLo = this.#keyLo
    const hi = keys.hi
    const lo = keys.lo
    const threshold = holderLimit
    let excl = 0
    let i = 0
    let prev = EMPTY
    for (; i < n; i++) {
      const h = hi[i]!
      const l = lo[i]!
      let node = prev === EMPTY ? EMPTY : next[prev]!
      if (node === EMPTY || counts[node] === 0 || keyLo[node] !== l || keyHi[node] !== h) {
        node = this.#find(h, l)
        if (node === EMPTY) break
        if (prev !== EMPTY) next[prev] = node
      }
      prev = node
      const base = node * words
      let any = 0
      for (let j = 0; j < words; j++) {
        const c = cand[j]!
        if (c === 0) continue
        const nc = c & holders[base + j]!
        let dropped = c & ~nc
        while (dropped !== 0) {
          const bit = dropped & -dropped
          const w = (j << 5) + 31 - Math.clz32(bit)
          plainOut[w] = i
          if (hasExcl) exclusiveOut[w] = excl
          dropped ^= bit
        }
        cand[j] = nc
        any |= nc
      }
      if (any === 0) return n
      if (counts[node]! < threshold) excl++
    }
    for (let j = 0; j < words; j++) {
      let c = cand[j]!
      while (c !== 0) {
        const bit = c & -c
        const w = (j << 5) + 31 - Math.clz32(bit)
        plainOut[w] = i
        if (hasExcl) exclusiveOut[w] = excl
        c ^= bit
      }
    }
    return n
  }

  /**
   * Convenience form of {@link ResidencyIndex.overlapInto}: matched depth (in blocks) per worker
   * id. `input` is prepared keys, a list of 64-bit block hashes, or token ids (hashed with the
   * index's hasher and page size).
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', [7n])
   * index.overlap([7n, 8n]) // Map { 'd0' => 0 } in exclusive mode: one worker holds everything
   * index.overlap([7n, 8n], 'plain') // Map { 'd0' => 1 }
   * ```
   */
  overlap(
    input: BlockKeys | readonly bigint[] | ArrayLike<number>,
    mode: OverlapMode = 'exclusive',
  ): Map<string, number> {
    const keys = this.#toKeys(input)
    const plain = this.#plainScratch
    const excl = this.#exclScratch
    this.overlapInto(keys, plain, excl, mode === 'sole' ? 2 : this.boilerplateThreshold())
    const out = new Map<string, number>()
    for (const rec of this.#byId.values()) {
      out.set(rec.id, mode === 'plain' ? plain[rec.slot]! : excl[rec.slot]!)
    }
    return out
  }

  /**
   * Holder count at or above which a block is boilerplate for `exclusive` overlap:
   * `max(2, ⌈θ_shared × workers⌉)`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex({ thetaShared: 0.5 })
   * for (const id of ['a', 'b', 'c', 'd', 'e']) index.addWorker(id)
   * index.boilerplateThreshold() // 3
   * ```
   */
  boilerplateThreshold(): number {
    return Math.max(2, Math.ceil(this.#theta * this.#liveWorkers - 1e-9))
  }

  /**
   * Ids of the workers holding a block.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', [3n])
   * index.holdersOf(3n) // ['d0']
   * ```
   */
  holdersOf(hash: bigint): string[] {
    if (typeof hash !== 'bigint') throw new RouterError('INVALID_MESSAGE', 'hash must be a bigint', hash)
    b64[0] = hash
    const node = this.#find(w32[HI]!, w32[LO]!)
    const out: string[] = []
    if (node === EMPTY) return out
    for (const rec of this.#bySlot) {
      if (rec !== undefined && this.#hasBit(node, rec.slot)) out.push(rec.id)
    }
    return out
  }

  /**
   * Every block the index believes `workerId` holds, as unsigned 64-bit hashes (a dump; O(blocks)).
   *
   * @throws RouterError `UNKNOWN_WORKER`.
   *
   * @example
   * ```ts
   * import { ResidencyIndex } from '@kvc/kvc-router'
   * const index = new ResidencyIndex()
   * index.addWorker('d0')
   * index.recordStored('d0', [-1n])
   * index.workerBlocks('d0') // [18446744073709551615n]
   * ```
   */
  workerBlocks(workerId: string): bigint[] {
    const rec = this.#rec(workerId)
    const out: bigint[] = []
    for (let node = 0; node < this.#nodeTop; node++) {
      if (this.#holderCount[node]! > 0 && this.#hasBit(node, rec.slot)) {
        out.push((BigInt(this.#keyHi[node]!) << 32n) | BigInt(this.#keyLo[node]!))
      }
    }
    return out
  }

  // ---------------------------------------------------------------- internals

  #rec(workerId: string): WorkerRec {
    const rec = this.#byId.get(workerId)
    if (rec === undefined)
      throw new RouterError('UNKNOWN_WORKER', `unknown worker ${String(workerId)}`, workerId)
    return rec
  }

  #reportGap(rec: WorkerRec, gap: GapReport): void {
    rec.gaps++
    rec.needsResync = true
    this.#recentGaps.push(gap)
    if (this.#recentGaps.length > MAX_RECENT_GAPS) this.#recentGaps.shift()
    this.#onGap?.(gap)
  }

  #toKeys(input: BlockKeys | readonly bigint[] | ArrayLike<number>): BlockKeys {
    if (input instanceof BlockKeys) return input
    if (Array.isArray(input) && input.length > 0 && typeof input[0] === 'bigint') {
      return BlockKeys.fromHashes(validateHashes('hashes', input))
    }
    if (input.length === 0) return new BlockKeys(1)
    return this.keysFor(input as ArrayLike<number>)
  }

  #hasBit(node: number, slot: number): boolean {
    return (this.#holders[node * this.#words + (slot >>> 5)]! & (1 << (slot & 31))) !== 0
  }

  #holds(slot: number, hash: bigint): boolean {
    b64[0] = hash
    const node = this.#find(w32[HI]!, w32[LO]!)
    return node !== EMPTY && this.#hasBit(node, slot)
  }

  #storeHashes(rec: WorkerRec, hashes: readonly bigint[]): void {
    for (let i = 0; i < hashes.length; i++) {
      b64[0] = hashes[i]!
      this.#storeKey(rec, w32[HI]!, w32[LO]!)
    }
  }

  #removeHashes(rec: WorkerRec, hashes: readonly bigint[], routerSide: boolean): void {
    for (let i = 0; i < hashes.length; i++) {
      b64[0] = hashes[i]!
      this.#removeKey(rec, w32[HI]!, w32[LO]!, routerSide)
    }
  }

  /** Adds the worker to the block's holders; true if it was not a holder. */
  #storeKey(rec: WorkerRec, hi: number, lo: number): boolean {
    let node = this.#find(hi, lo)
    if (node === EMPTY) node = this.#insertNode(hi, lo, this.#probeEnd)
    const idx = node * this.#words + (rec.slot >>> 5)
    const bit = 1 << (rec.slot & 31)
    const h = this.#holders[idx]!
    if ((h & bit) !== 0) return false
    this.#holders[idx] = h | bit
    this.#holderCount[node]!++
    rec.blocks++
    return true
  }

  /** Removes the worker from the block's holders; true if it was a holder. */
  #removeKey(rec: WorkerRec, hi: number, lo: number, routerSide: boolean): boolean {
    const node = this.#find(hi, lo)
    const idx = node * this.#words + (rec.slot >>> 5)
    const bit = 1 << (rec.slot & 31)
    if (node === EMPTY || (this.#holders[idx]! & bit) === 0) {
      if (!routerSide) rec.unknownRemovals++
      return false
    }
    this.#holders[idx]! &= ~bit
    rec.blocks--
    if (--this.#holderCount[node]! === 0) this.#deleteNode(node, this.#probeEnd)
    return true
  }

  #clearSlot(rec: WorkerRec): void {
    const words = this.#words
    const j = rec.slot >>> 5
    const bit = 1 << (rec.slot & 31)
    for (let node = 0; node < this.#nodeTop && rec.blocks > 0; node++) {
      const idx = node * words + j
      const h = this.#holders[idx]!
      if ((h & bit) === 0 || this.#holderCount[node]! === 0) continue
      this.#holders[idx] = h & ~bit
      rec.blocks--
      if (--this.#holderCount[node]! === 0) this.#deleteNode(node, -1)
    }
    rec.blocks = 0
  }

  #home(hi: number, lo: number): number {
    return Math.imul(lo ^ Math.imul(hi, 0x85ebca6b), 0x9e3779b1) >>> this.#shift
  }

  #find(hi: number, lo: number): number {
    const slots = this.#slots
    const mask = this.#mask
    const kh = this.#keyHi
    let i = this.#home(hi, lo)
    for (;;) {
      const node = slots[2 * i]!
      if (node === EMPTY || (slots[2 * i + 1] === (lo | 0) && kh[node] === hi)) {
        this.#probeEnd = i
        return node
      }
      i = (i + 1) & mask
    }
  }

  /** A new node for the key; `at`: the empty table slot where its probe ends (`#find`'s), or -1. */
  #insertNode(hi: number, lo: number, at: number): number {
    if ((this.#liveNodes + 1) * 2 > this.#mask + 1) {
      this.#growTable()
      at = -1
    }
    let node: number
    if (this.#freeTop > 0) node = this.#freeNodes[--this.#freeTop]!
    else {
      if (this.#nodeTop === this.#keyHi.length) this.#growNodes()
      node = this.#nodeTop++
    }
    this.#keyHi[node] = hi
    this.#keyLo[node] = lo
    this.#holderCount[node] = 0
    const words = this.#words
    const h = this.#holders
    for (let j = node * words, end = j + words; j < end; j++) h[j] = 0
    const slots = this.#slots
    const mask = this.#mask
    let i = at
    if (i < 0) {
      i = this.#home(hi, lo)
      while (slots[2 * i] !== EMPTY) i = (i + 1) & mask
    }
    slots[2 * i] = node
    slots[2 * i + 1] = lo
    this.#liveNodes++
    return node
  }

  /** Free `node`; `at`: its table slot when known (`#find`'s), or -1. */
  #deleteNode(node: number, at: number): void {
    const slots = this.#slots
    const mask = this.#mask
    let i = at
    if (i < 0) {
      i = this.#home(this.#keyHi[node]!, this.#keyLo[node]!)
      while (slots[2 * i] !== node) i = (i + 1) & mask
    }
    // Backward-shift deletion (linear probing, no tombstones).
    slots[2 * i] = EMPTY
    let j = i
    for (;;) {
      j = (j + 1) & mask
      const n = slots[2 * j]!
      if (n === EMPTY) break
      const k = this.#home(this.#keyHi[n]!, this.#keyLo[n]!)
      const inRange = i <= j ? i < k && k <= j : i < k || k <= j
      if (!inRange) {
        slots[2 * i] = n
        slots[2 * i + 1] = slots[2 * j + 1]!
        slots[2 * j] = EMPTY
        i = j
      }
    }
    this.#freeNodes[this.#freeTop++] = node
    this.#liveNodes--
  }

  #growNodes(): void {
    const cap = this.#keyHi.length * 2
    const grow32 = (a: Uint32Array, n: number): Uint32Array => {
      const b = new Uint32Array(n)
      b.set(a)
      return b
    }
    this.#keyHi = grow32(this.#keyHi, cap)
    this.#keyLo = grow32(this.#keyLo, cap)
    this.#holders = grow32(this.#holders, cap * this.#words)
    const hc = new Int32Array(cap)
    hc.set(this.#holderCount)
    this.#holderCount = hc
    const nx = new Int32Array(cap).fill(EMPTY)
    nx.set(this.#next)
    this.#next = nx
    const fr = new Int32Array(cap)
    fr.set(this.#freeNodes)
    this.#freeNodes = fr
  }

  #growTable(): void {
    const size = (this.#mask + 1) * 2
    this.#slots = new Int32Array(size * 2).fill(EMPTY)
    this.#mask = size - 1
    this.#shift = 32 - Math.log2(size)
    const slots = this.#slots
    for (let node = 0; node < this.#nodeTop; node++) {
      if (this.#holderCount[node]! === 0) continue
      const lo = this.#keyLo[node]!
      let i = this.#home(this.#keyHi[node]!, lo)
      while (slots[2 * i] !== EMPTY) i = (i + 1) & this.#mask
      slots[2 * i] = node
      slots[2 * i + 1] = lo
    }
  }

  #growWords(): void {
    const old = this.#words
    const words = old * 2
    const cap = this.#keyHi.length
    const h = new Uint32Array(cap * words)
    for (let node = 0; node < this.#nodeTop; node++) {
      for (let j = 0; j < old; j++) h[node * words + j] = this.#holders[node * old + j]!
    }
    this.#holders = h
    this.#words = words
    const lm = new Uint32Array(words)
    lm.set(this.#liveMask)
    this.#liveMask = lm
    this.#cand = new Uint32Array(words)
  }
}
