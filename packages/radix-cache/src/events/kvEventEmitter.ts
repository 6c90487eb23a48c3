import type { BlockHasher } from '../hashing/blockHasher.js'
import type { NodeStore } from '../tree/nodeStore.js'
import type { KvEvent } from './kvEvents.js'

const NO_TOKENS: readonly number[] = Object.freeze([])

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

  constructor(store: NodeStore, o: KvEventEmitterOptions) {
    this.#store = store
    this.#onEvent = o.onEvent
    this.#hasher = o.hasher
    this.#perNode = o.perNode
    this.#tokenIds = o.tokenIds
    this.#deviceMedium = o.deviceMedium
  }

  emit(event: KvEvent): void {
    this.emitted++
    this.#onEvent(event)
  }

  /** Emit `AllBlocksCleared`. */
  cleared(): void {
    this.emit({ type: 'AllBlocksCleared', eventId: this.eventId++ })
  }

  /** Hash the pages of new device leaf `s` (chained on `parent`'s last page) and emit them stored. */
  storeBlocks(s: number, parent: number): void {
    const st = this.#store
    const hasher = this.#hasher
    const ps = st.pageSize
    const key = st.keys[s]!
    const pages = key.length / ps
    const nsName = st.nsNames[st.ns[s]!]!
    const extraKey = nsName === '' ? undefined : nsName
    const pd = st.digests[parent]
    let prev: Uint8Array | undefined =
      st.isRoot[parent] === 1 || pd === undefined ? undefined : pd[pd.length - 1]
    const digests: Uint8Array[] = new Array(pages)
    for (let p = 0; p < pages; p++) {
      const d = hasher.hashBlock(prev, key.subarray(p * ps, (p + 1) * ps), extraKey)
      digests[p] = d
      prev = d
    }
    st.digests[s] = digests
    this.emitStored(s, this.#deviceMedium)
  }

  /** Emit `BlockStored` for the pages of `n` (hashes already computed) on `medium`. */
  emitStored(n: number, medium: string | undefined): void {
    const st = this.#store
    const d = st.digests[n]
    if (d === undefined) return
    const hasher = this.#hasher
    const ps = st.pageSize
    const key = st.keys[n]!
    const ns = st.nsNames[st.ns[n]!]!
    const extraKey = ns === '' ? null : ns
    const p = st.parent[n]!
    const pd = st.digests[p]
    const parentId =
      st.isRoot[p] === 1 || pd === undefined || pd.length === 0 ? null : hasher.blockId(pd[pd.length - 1]!)
    const ids = d.map((x) => hasher.blockId(x))
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
    const hasher = this.#hasher
    const ns = st.nsNames[st.ns[n]!]!
    const extraKey = ns === '' ? null : ns
    if (this.#perNode) {
      const ids: bigint[] = new Array(d.length)
      for (let i = 0; i < d.length; i++) ids[i] = hasher.blockId(d[i]!)
      this.emit(
        withMedium({ type: 'BlockRemoved', eventId: this.eventId++, blockHashes: ids, extraKey }, medium),
      )
      return
    }
    for (let i = 0; i < d.length; i++) {
      this.emit(
        withMedium(
          { type: 'BlockRemoved', eventId: this.eventId++, blockHashes: [hasher.blockId(d[i]!)], extraKey },
          medium,
        ),
      )
    }
  }
}

function withMedium<E extends KvEvent>(event: E, medium: string | undefined): E {
  return medium === undefined ? event : { ...event, medium }
}
