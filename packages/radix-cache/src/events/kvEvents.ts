/**
 * KV events, one per page, in the shape SGLang, vLLM and Dynamo publish them (camelCase). Every
 * event carries `eventId`, monotonic per cache from 0, so a consumer can detect gaps.
 *
 * With a host tier, `BlockStored` and `BlockRemoved` carry the `medium` they concern, as vLLM's
 * events and SGLang HiCache's tier events do: a page is stored on and removed from each medium
 * separately (`'GPU'` for the device, `'CPU_TIER1'` by default for the host). Without a host tier
 * the field is absent, which consumers read as the device.
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
  /** Medium the page entered (`'GPU'`, `'CPU_TIER1'`...); absent: the device (a cache without a host tier). */
  readonly medium?: string
}

/**
 * Pages left the tree (evicted), or, with a host tier, left one medium (`medium`).
 *
 * @example
 * ```ts
 * import type { BlockRemovedEvent } from '@kvc/radix-cache'
 * const leftDevice = (e: BlockRemovedEvent) => e.medium === undefined || e.medium === 'GPU'
 * ```
 */
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
  /** Medium the pages left (`'GPU'`, `'CPU_TIER1'`...); absent: the device. */
  readonly medium?: string
}

/** The whole tree was cleared (`reset()`). */
export interface AllBlocksClearedEvent {
  readonly type: 'AllBlocksCleared'
  readonly eventId: number
}
