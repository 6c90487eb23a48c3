/**
 * KV events, one per page, in the shape SGLang, vLLM and Dynamo publish them (camelCase). Every
 * event carries `eventId`, monotonic per cache from 0, so a consumer can detect gaps.
 */
export type KvEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent

/**
 * A page entered the tree. `parentBlockHash` is the previous page's hash, or `null` for the
 * first page of a namespace.
 *
 * @example
 * ```ts
 * import { RadixCache, type KvEvent } from '@kvc/radix-cache'
 * const events: KvEvent[] = []
 * const cache = new RadixCache({ pageSize: 2, trackValues: false, onEvent: (e) => events.push(e) })
 * cache.insert([1, 2, 3, 4])
 * console.log(events.map((e) => e.type)) // ['BlockStored', 'BlockStored']
 * ```
 */
export interface BlockStoredEvent {
  readonly type: 'BlockStored'
  readonly eventId: number
  readonly blockHashes: readonly bigint[]
  readonly parentBlockHash: bigint | null
  readonly tokenIds: readonly number[]
  readonly blockSize: number
  /** Namespace of the page (`null` for the default namespace). */
  readonly extraKey: string | null
}

/** Pages left the tree (evicted). */
export interface BlockRemovedEvent {
  readonly type: 'BlockRemoved'
  readonly eventId: number
  readonly blockHashes: readonly bigint[]
  /**
   * Namespace of the pages (`null` for the default namespace). An extension: upstream SGLang's
   * `BlockRemoved` carries hashes only, which is ambiguous when namespaces share hashes. Absent
   * in events decoded from engines that do not send it.
   */
  readonly extraKey?: string | null
}

/** The whole tree was cleared (`reset()`). */
export interface AllBlocksClearedEvent {
  readonly type: 'AllBlocksCleared'
  readonly eventId: number
}
