import type { KvEvent } from '@kvc/radix-cache'
import { invalidMessage, invalidOption } from '../errors/dtoPSyncError.js'
import type { HoldingsView } from '../protocol/types.js'
import { describe } from '../protocol/validate.js'

/**
 * One block a worker holds, as learnt from its `BlockStored` events.
 *
 * @example
 * ```ts
 * import { KvEventIndex, type IndexedBlock } from '@kvc/dto-p-sync'
 * const b: IndexedBlock | undefined = new KvEventIndex().get(7n)
 * ```
 */
export interface IndexedBlock {
  readonly hash: bigint
  readonly parentHash: bigint | null
  /** The page's tokens (only with `keepTokens`). */
  readonly tokens: Uint32Array | undefined
  /** Namespace of the first `BlockStored` for this hash. */
  readonly extraKey: string
  /** `BlockStored` minus `BlockRemoved` count (the same page in several namespaces). */
  readonly refs: number
}

/**
 * A point-in-time copy of a worker's holdings, to resynchronise an index after an event gap.
 *
 * @example
 * ```ts
 * import { KvEventIndex, type HoldingsSnapshot } from '@kvc/dto-p-sync'
 * const snap: HoldingsSnapshot = { eventId: 3, blocks: [{ hash: 7n, parentHash: null }] }
 * new KvEventIndex().resync(snap)
 * ```
 */
export interface HoldingsSnapshot {
  /** Id of the last event reflected in the snapshot. */
  readonly eventId: number
  readonly blocks: readonly { readonly hash: bigint; readonly parentHash: bigint | null }[]
}

/**
 * Options of {@link KvEventIndex}.
 *
 * @example
 * ```ts
 * import { KvEventIndex } from '@kvc/dto-p-sync'
 * const withTokens = new KvEventIndex({ keepTokens: true })
 * ```
 */
export interface KvEventIndexOptions {
  /** Keep each page's tokens (P's ingest needs them to rebuild token paths; views do not). */
  readonly keepTokens?: boolean
}

interface Entry {
  hash: bigint
  parentHash: bigint | null
  tokens: Uint32Array | undefined
  extraKey: string
  refs: number
  digest: Uint8Array | undefined
}

/**
 * Which blocks a worker holds, maintained from the worker's radix-cache KV events
 * (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`). Delivery may be at-least-once and lossy,
 * so every event's `eventId` is checked: an older or repeated id is ignored, a jump past
 * `lastEventId + 1` is a **gap**, after which the index is no longer `consistent` (it may claim
 * pages the worker has since evicted) until {@link KvEventIndex.resync} with a snapshot.
 *
 * The first event an index sees sets its baseline (an index attached to a running cache misses
 * the older pages; that only costs extra transfers).
 *
 * @example
 * ```ts
 * import { RadixCache } from '@kvc/radix-cache'
 * import { KvEventIndex } from '@kvc/dto-p-sync'
 * const index = new KvEventIndex()
 * const cache = new RadixCache({ pageSize: 2, trackValues: false, onEvent: (e) => index.apply(e) })
 * cache.insert([1, 2, 3, 4])
 * console.log(index.size, index.consistent) // 2 true
 * ```
 */
export class KvEventIndex implements HoldingsView {
  readonly #keepTokens: boolean
  readonly #entries = new Map<bigint, Entry>()
  #lastEventId = -1
  #started = false
  #consistent = true
  #gaps = 0
  #ignored = 0
  #resets = 0

  constructor(options: KvEventIndexOptions = {}) {
    const keep = options.keepTokens ?? false
    if (typeof keep !== 'boolean') throw invalidOption('keepTokens must be a boolean', keep)
    this.#keepTokens = keep
  }

  /** Number of distinct block hashes held. */
  get size(): number {
    return this.#entries.size
  }

  /** Id of the last event applied (-1 before any). */
  get lastEventId(): number {
    return this.#lastEventId
  }

  /** `false` after an event gap, until the next {@link KvEventIndex.resync}. */
  get consistent(): boolean {
    return this.#consistent
  }

  /** Event gaps detected so far. */
  get gaps(): number {
    return this.#gaps
  }

  /** Events ignored because their id was not newer than `lastEventId`. */
  get ignoredEvents(): number {
    return this.#ignored
  }

  /**
   * Apply one KV event. Returns `false` when the event was ignored (an old or repeated id).
   * Throws `INVALID_MESSAGE` (changing nothing) for a malformed event.
   *
   * @example
   * ```ts
   * import { KvEventIndex } from '@kvc/dto-p-sync'
   * const index = new KvEventIndex()
   * index.apply({ type: 'BlockStored', eventId: 0, blockHashes: [7n], parentBlockHash: null,
   *   tokenIds: [1, 2], blockSize: 2, extraKey: null }) // true
   * index.has(7n) // true
   * ```
   */
  apply(event: KvEvent): boolean {
    checkEvent(event)
    if (this.#started && event.eventId <= this.#lastEventId) {
      this.#ignored++
      return false
    }
    if (this.#started && event.eventId !== this.#lastEventId + 1) {
      this.#gaps++
      this.#consistent = false
      this.#resets++
    }
    this.#started = true
    this.#lastEventId = event.eventId
    switch (event.type) {
      case 'BlockStored': {
        const ns = event.extraKey ?? ''
        let parent = event.parentBlockHash
        const bs = event.blockSize
        for (let i = 0; i < event.blockHashes.length; i++) {
          const h = event.blockHashes[i]!
          const e = this.#entries.get(h)
          if (e !== undefined) e.refs++
          else {
            const tokens = this.#keepTokens
              ? Uint32Array.from(event.tokenIds.slice(i * bs, (i + 1) * bs))
              : undefined
            this.#entries.set(h, {
              hash: h,
              parentHash: parent,
              tokens,
              extraKey: ns,
              refs: 1,
              digest: undefined,
            })
          }
          parent = h
        }
        break
      }
      case 'BlockRemoved':
        for (const h of event.blockHashes) {
          const e = this.#entries.get(h)
          if (e === undefined) continue
          if (--e.refs <= 0) this.#entries.delete(h)
        }
        break
      case 'AllBlocksCleared':
        this.#entries.clear()
        this.#resets++
        break
    }
    return true
  }

  /**
   * Whether the worker holds block `hash` (as far as the events said).
   *
   * @example
   * ```ts
   * import { KvEventIndex } from '@kvc/dto-p-sync'
   * new KvEventIndex().has(1n) // false
   * ```
   */
  has(hash: bigint): boolean {
    return this.#entries.has(hash)
  }

  /**
   * The indexed block `hash`, or `undefined`.
   *
   * @example
   * ```ts
   * import { KvEventIndex } from '@kvc/dto-p-sync'
   * new KvEventIndex().get(1n) // undefined
   * ```
   */
  get(hash: bigint): IndexedBlock | undefined {
    return this.#entries.get(hash)
  }

  /**
   * Drop `hash` from the index (the worker said it lacks the page: a correction).
   *
   * @example
   * ```ts
   * import { KvEventIndex } from '@kvc/dto-p-sync'
   * new KvEventIndex().forget(1n) // false
   * ```
   */
  forget(hash: bigint): boolean {
    const had = this.#entries.delete(hash)
    if (had) this.#resets++
    return had
  }

  /**
   * Replace the contents with a snapshot and become `consistent` again.
   *
   * @example
   * ```ts
   * import { KvEventIndex } from '@kvc/dto-p-sync'
   * const index = new KvEventIndex()
   * index.resync({ eventId: 41, blocks: [{ hash: 7n, parentHash: null }] })
   * index.has(7n) // true; the next event expected is 42
   * ```
   */
  resync(snapshot: HoldingsSnapshot): void {
    if (snapshot === null || typeof snapshot !== 'object' || !Array.isArray(snapshot.blocks)) {
      throw invalidMessage('a snapshot must be { eventId, blocks[] }', snapshot)
    }
    if (!Number.isSafeInteger(snapshot.eventId) || snapshot.eventId < -1) {
      throw invalidMessage(
        `snapshot.eventId must be an integer >= -1, got ${describe(snapshot.eventId)}`,
        snapshot.eventId,
      )
    }
    for (const b of snapshot.blocks) {
      if (
        b === null ||
        typeof b !== 'object' ||
        typeof b.hash !== 'bigint' ||
        (b.parentHash !== null && typeof b.parentHash !== 'bigint')
      ) {
        throw invalidMessage('snapshot blocks must be { hash: bigint, parentHash: bigint | null }', b)
      }
    }
    this.#entries.clear()
    for (const b of snapshot.blocks) {
      this.#entries.set(b.hash, {
        hash: b.hash,
        parentHash: b.parentHash,
        tokens: undefined,
        extraKey: '',
        refs: 1,
        digest: undefined,
      })
    }
    this.#lastEventId = snapshot.eventId
    this.#started = true
    this.#consistent = true
    this.#resets++
  }

  /**
   * A snapshot of the current contents (hashes and parents).
   *
   * @example
   * ```ts
   * import { KvEventIndex } from '@kvc/dto-p-sync'
   * new KvEventIndex().snapshot() // { eventId: -1, blocks: [] }
   * ```
   */
  snapshot(): HoldingsSnapshot {
    const blocks: { hash: bigint; parentHash: bigint | null }[] = []
    for (const e of this.#entries.values()) blocks.push({ hash: e.hash, parentHash: e.parentHash })
    return { eventId: this.#lastEventId, blocks }
  }

  /**
   * @internal Bumped whenever the index stops being an exact mirror of a radix tree grown and
   * trimmed through events (a gap, a `forget`, a clear, a resync). Between bumps, the blocks of a
   * chain it holds form a prefix of the chain (a radix tree only loses pages from the tail of a
   * path), which lets callers cache per-chain prefixes.
   */
  get _resetGeneration(): number {
    return this.#resets
  }

  /** @internal Digest memo for hash verification on P. */
  _digest(hash: bigint): Uint8Array | undefined {
    return this.#entries.get(hash)?.digest
  }

  /** @internal */
  _setDigest(hash: bigint, digest: Uint8Array): void {
    const e = this.#entries.get(hash)
    if (e !== undefined) e.digest = digest
  }
}

function checkEvent(e: KvEvent): void {
  if (e === null || typeof e !== 'object') throw invalidMessage('a KV event must be an object', e)
  if (!Number.isSafeInteger(e.eventId) || e.eventId < 0) {
    throw invalidMessage(`eventId must be a non-negative integer, got ${describe(e.eventId)}`, e.eventId)
  }
  if (e.type === 'AllBlocksCleared') return
  if (e.type !== 'BlockStored' && e.type !== 'BlockRemoved') {
    throw invalidMessage(`unknown KV event type ${describe((e as { type: unknown }).type)}`, e)
  }
  if (!Array.isArray(e.blockHashes) || e.blockHashes.some((h) => typeof h !== 'bigint')) {
    throw invalidMessage('blockHashes must be an array of bigints', e.blockHashes)
  }
  if (e.type === 'BlockStored') {
    if (e.parentBlockHash !== null && typeof e.parentBlockHash !== 'bigint') {
      throw invalidMessage('parentBlockHash must be a bigint or null', e.parentBlockHash)
    }
    if (!Number.isInteger(e.blockSize) || e.blockSize <= 0 || !Array.isArray(e.tokenIds)) {
      throw invalidMessage('BlockStored needs a positive blockSize and tokenIds', e)
    }
    if (e.tokenIds.length !== e.blockSize * e.blockHashes.length) {
      throw invalidMessage(
        `BlockStored has ${e.tokenIds.length} tokens for ${e.blockHashes.length} blocks of ${e.blockSize}`,
        e.tokenIds.length,
      )
    }
  }
}
