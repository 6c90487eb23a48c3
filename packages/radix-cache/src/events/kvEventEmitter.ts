import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import type { BlockHasher } from '../hashing/blockHasher.js'
import type { NodeStore } from '../tree/nodeStore.js'
import type { KvEvent } from './kvEvents.js'

const NO_TOKENS: readonly number[] = Object.freeze([])
const EMPTY_DIGESTS = new Uint8Array(0)

/** How a cache emits its KV events (validated by `RadixCache`). @internal */
export interface KvEventEmitterOptions {
  readonly onEvent: (event: KvEvent) => void
  readonly hasher: BlockHasher
  /** One event per node (`eventBatching: 'node'`) instead of one per page. */
  readonly perNode: boolean
  readonly tokenIds: boolean
  /** `medium` of the events of new device blocks. */
  readonly deviceMedium: string | undefined
}

/**
 * The KV events of one cache: block hashes of new nodes, `BlockStored` / `BlockRemoved` per page
 * or per node on a medium, and `AllBlocksCleared`, numbered by a running event id.
 * @internal
 */
export class KvEventEmitter {
  readonly #store: NodeStore
  readonly #onEvent: (event: KvEvent) => void
  readonly #hasher: BlockHasher
  readonly #perNode: boolean
  readonly #tokenIds: boolean
  readonly #deviceMedium: string | undefined
  /** Id of the next event. */
  eventId = 0
  emitted = 0
  /** One digest copied out of a node's packed digests, for `blockId`. */
  #one: Uint8Array = new Uint8Array(0)
  /** Digest bytes of a hasher that hashes runs of pages in place (`hashPagesInto`); 0: page by page. */
  readonly #intoLen: number
  /** The hasher reads ids in place (`blockIdAt`). */
  readonly #idAt: boolean

  constructor(store: NodeStore, o: KvEventEmitterOptions) {
    this.#store = store
    this.#onEvent = o.onEvent
    this.#hasher = o.hasher
    this.#perNode = o.perNode
    this.#tokenIds = o.tokenIds
    this.#deviceMedium = o.deviceMedium
    const h = o.hasher
    let intoLen = 0
    if (typeof h.hashPagesInto === 'function') {
      const len = h.digestLength
      if (typeof len !== 'number' || !Number.isInteger(len) || len <= 0) {
        throw new RadixCacheError(
          RadixCacheErrorCode.InvalidOption,
          `block hasher ${h.name} has hashPagesInto but no digestLength (a positive integer), got ${String(len)}`,
          len,
        )
      }
      intoLen = len
    }
    this.#intoLen = intoLen
    this.#idAt = typeof h.blockIdAt === 'function'
  }

  emit(event: KvEvent): void {
    this.emitted++
    this.#onEvent(event)
  }

  /** Emit `AllBlocksCleared`. */
  cleared(): void {
    this.emit({ type: 'AllBlocksCleared', eventId: this.eventId++ })
  }

  /**
   * The packed digests of the pages of `key[from, to)`, a new leaf under `parent` (chained on its
   * last page). Called before the leaf is linked: a hasher that breaks its contract throws
   * (`INVALID_OPTION`) with the tree unchanged.
   */
  hashLeaf(key: Uint32Array, from: number, to: number, parent: number): Uint8Array {
    const st = this.#store
    const hasher = this.#hasher
    const ps = st.pageSize
    const pages = (to - from) / ps
    const nsName = st.nsNames[st.ns[parent]!]!
    const extraKey = nsName === '' ? undefined : nsName
    const pd = st.digests[parent]
    const intoLen = this.#intoLen
    if (intoLen > 0 && pages > 0) {
      // The whole run in place: no digest, view or copy per page.
      if (st.digestLen === 0) st.digestLen = intoLen
      const chained = st.isRoot[parent] !== 1 && pd !== undefined && pd.length > 0
      const packed = new Uint8Array(pages * intoLen)
      hasher.hashPagesInto!(
        chained ? pd : undefined,
        chained ? pd.length - intoLen : 0,
        key,
        from,
        ps,
        pages,
        extraKey,
        packed,
        0,
      )
      return packed
    }
    let prev: Uint8Array | undefined =
      st.isRoot[parent] === 1 || pd === undefined || pd.length === 0
        ? undefined
        : pd.subarray(pd.length - st.digestLen)
    let packed = EMPTY_DIGESTS
    for (let p = 0; p < pages; p++) {
      const at = from + p * ps
      const d = hasher.hashBlock(prev, key.subarray(at, at + ps), extraKey)
      if (p === 0) {
        if (st.digestLen === 0) st.digestLen = d.length
        packed = new Uint8Array(pages * st.digestLen)
      }
      if (d.length !== st.digestLen) {
        throw new RadixCacheError(
          RadixCacheErrorCode.InvalidOption,
          `block hasher ${hasher.name} returned a ${d.length}-byte digest after ${st.digestLen}-byte ones`,
          hasher.name,
        )
      }
      packed.set(d, p * st.digestLen)
      prev = d
    }
    return packed
  }

  /** Emit the pages of new device leaf `s` (its digests set) stored. */
  storedLeaf(s: number): void {
    this.emitStored(s, this.#deviceMedium)
  }

  /** The block id of digest `i` of the packed digests `d`. */
  idAt(d: Uint8Array, i: number): bigint {
    const len = this.#store.digestLen
    if (this.#idAt) return this.#hasher.blockIdAt!(d, i * len)
    let one = this.#one
    if (one.length !== len) {
      one = new Uint8Array(len)
      this.#one = one
    }
    const at = i * len
    for (let j = 0; j < len; j++) one[j] = d[at + j]!
    return this.#hasher.blockId(one)
  }

  /** Block ids of the packed digests `d`. */
  ids(d: Uint8Array): bigint[] {
    const len = this.#store.digestLen
    const n = len === 0 ? 0 : d.length / len
    const out: bigint[] = new Array(n)
    for (let i = 0; i < n; i++) out[i] = this.idAt(d, i)
    return out
  }

  /** Emit `BlockStored` for the pages of `n` (hashes already computed) on `medium`. */
  emitStored(n: number, medium: string | undefined): void {
    const st = this.#store
    const d = st.digests[n]
    if (d === undefined) return
    const ps = st.pageSize
    const key = st.keys[n]!
    const ns = st.nsNames[st.ns[n]!]!
    const extraKey = ns === '' ? null : ns
    const p = st.parent[n]!
    const pd = st.digests[p]
    const parentId =
      st.isRoot[p] === 1 || pd === undefined || pd.length === 0
        ? null
        : this.idAt(pd, pd.length / st.digestLen - 1)
    const ids = this.ids(d)
    if (this.#perNode) {
      this.emit(
        withMedium(
          {
            type: 'BlockStored',
            eventId: this.eventId++,
            blockHashes: ids,
            parentBlockHash: parentId,
            tokenIds: this.#tokenIds ? Array.from(key) : NO_TOKENS,
            blockSize: ps,
            extraKey,
          },
          medium,
        ),
      )
      return
    }
    for (let i = 0; i < ids.length; i++) {
      this.emit(
        withMedium(
          {
            type: 'BlockStored',
            eventId: this.eventId++,
            blockHashes: [ids[i]!],
            parentBlockHash: i === 0 ? parentId : ids[i - 1]!,
            tokenIds: this.#tokenIds ? Array.from(key.subarray(i * ps, (i + 1) * ps)) : NO_TOKENS,
            blockSize: ps,
            extraKey,
          },
          medium,
        ),
      )
    }
  }

  /** Emit `BlockRemoved` for the pages of `n` on `medium`. */
  emitRemoved(n: number, medium: string | undefined): void {
    const st = this.#store
    const d = st.digests[n]
    if (d === undefined) return
    const ns = st.nsNames[st.ns[n]!]!
    const extraKey = ns === '' ? null : ns
    if (this.#perNode) {
      const ids = this.ids(d)
      this.emit(
        withMedium({ type: 'BlockRemoved', eventId: this.eventId++, blockHashes: ids, extraKey }, medium),
      )
      return
    }
    const pages = st.digestLen === 0 ? 0 : d.length / st.digestLen
    for (let i = 0; i < pages; i++) {
      this.emit(
        withMedium(
          { type: 'BlockRemoved', eventId: this.eventId++, blockHashes: [this.idAt(d, i)], extraKey },
          medium,
        ),
      )
    }
  }
}

function withMedium<E extends KvEvent>(event: E, medium: string | undefined): E {
  return medium === undefined ? event : { ...event, medium }
}
