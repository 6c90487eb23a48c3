import type { KvAllocator } from '../allocator/kvAllocator.js'
import type { EvictionPolicy } from '../tree/types.js'

/**
 * When the host tier receives a copy of a device page (SGLang HiCache's
 * `--hicache-write-policy`):
 *
 * | policy | a device page is copied to host |
 * |---|---|
 * | `write_back` (default) | only when it is evicted from the device: eviction demotes instead of discarding |
 * | `write_through` | on every insert that counts a hit (threshold 1), so eviction finds a copy and just frees the device slots |
 * | `write_through_selective` | once its hit count reaches `writeThroughThreshold` (default 2): only pages reused at least once |
 *
 * Under `write_through*` a page that was never copied is discarded when evicted from the device;
 * under `write_back` it is copied at eviction when the host can make room.
 *
 * @example
 * ```ts
 * import type { HostWritePolicy } from '@kvc/radix-cache'
 * const policy: HostWritePolicy = 'write_through_selective'
 * ```
 */
export type HostWritePolicy = 'write_back' | 'write_through' | 'write_through_selective'

/**
 * All host write policies, in documentation order.
 *
 * @example
 * ```ts
 * import { HOST_WRITE_POLICIES } from '@kvc/radix-cache'
 * HOST_WRITE_POLICIES.includes('write_back') // true
 * ```
 */
export const HOST_WRITE_POLICIES: readonly HostWritePolicy[] = [
  'write_back',
  'write_through',
  'write_through_selective',
]

/**
 * A KV slot pool the caches allocate from: {@link KvAllocator} plus allocation and a free count.
 * `PagedAllocator` implements it. The host tier allocates its slots from one; `loadBack` allocates
 * device slots from the cache's `allocator`, which must then be one too.
 *
 * @example
 * ```ts
 * import { PagedAllocator, type KvSlotAllocator } from '@kvc/radix-cache'
 * const host: KvSlotAllocator = new PagedAllocator({ size: 1 << 20, pageSize: 16 })
 * ```
 */
export interface KvSlotAllocator extends KvAllocator {
  /** Total slots. */
  readonly size: number
  /** Free slots. */
  availableSize(): number
  /** `numTokens` fresh slots; throws when fewer are free (the caches check `availableSize` first). */
  alloc(numTokens: number): Int32Array
}

/**
 * A copy between the tiers that the serving engine must carry out (the cache only does the
 * bookkeeping). `deviceToHost` happens when a page is written to host (demotion on eviction,
 * write-through, `protectHost`), before its device slots are freed; `hostToDevice` when
 * `loadBack` promotes host pages onto fresh device slots. Both index arrays are empty in a
 * length-only cache (`trackValues: false`).
 *
 * @example
 * ```ts
 * import type { KvTransfer } from '@kvc/radix-cache'
 * let pcieTokens = 0
 * const onTransfer = (t: KvTransfer) => { pcieTokens += t.tokens }
 * ```
 */
export interface KvTransfer {
  readonly direction: 'deviceToHost' | 'hostToDevice'
  /** Tokens copied. */
  readonly tokens: number
  /** Device KV slots, position by position (read from for `deviceToHost`, written for `hostToDevice`). */
  readonly deviceIndices: Int32Array
  /** Host KV slots, position by position. */
  readonly hostIndices: Int32Array
}

/**
 * Options of the optional host tier of a `RadixCache` (`hostTier` option): the L2 of SGLang's
 * HiCache. Give the capacity either in tokens (`capacity`) or as a multiple of the device pool
 * (`ratio`, SGLang's `--hicache-ratio`; needs an `allocator` with a `size`).
 *
 * @example
 * ```ts
 * import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
 * const device = new PagedAllocator({ size: 4096, pageSize: 16 })
 * const cache = new RadixCache({
 *   pageSize: 16,
 *   allocator: device,
 *   hostTier: { ratio: 2, writePolicy: 'write_back', evictionPolicy: 'lru' },
 * })
 * cache.hostCapacity() // 8192
 * ```
 */
export interface HostTierOptions {
  /** Host capacity in tokens (a multiple of `pageSize`). */
  readonly capacity?: number
  /** Host capacity as a multiple of the device allocator's `size` (rounded down to a page). */
  readonly ratio?: number
  /**
   * Host slot pool (value-tracking caches only). Default: a `PagedAllocator` of `capacity` slots
   * created by the cache. Its `size` is the capacity when `capacity` and `ratio` are left out.
   */
  readonly allocator?: KvSlotAllocator
  /** Default `'write_back'`. */
  readonly writePolicy?: HostWritePolicy
  /** Hit count at which `write_through*` copies a page (default 1, `write_through_selective` 2). */
  readonly writeThroughThreshold?: number
  /** The host tier's own eviction order (default `'lru'`); same keys as the device's. */
  readonly evictionPolicy?: EvictionPolicy
  /**
   * `matchPrefix(…, { loadBack: true })` loads a host hit back only when it is longer than this
   * many tokens (default 10, SGLang's `load_back_threshold`).
   */
  readonly loadBackThreshold?: number
  /** `medium` of device events (default `'GPU'`). */
  readonly deviceMedium?: string
  /** `medium` of host events (default `'CPU_TIER1'`, SGLang HiCache's host tier; vLLM says `'CPU'`). */
  readonly hostMedium?: string
  /** Called for every copy between the tiers, before the source slots are freed. */
  readonly onTransfer?: (transfer: KvTransfer) => void
}

/**
 * The resolved configuration of a cache's host tier (`RadixCache.hostTier`).
 *
 * @example
 * ```ts
 * import { RadixCache } from '@kvc/radix-cache'
 * const cache = new RadixCache({ trackValues: false, hostTier: { capacity: 1024 } })
 * cache.hostTier?.writePolicy // 'write_back'
 * ```
 */
export interface HostTierConfig {
  readonly capacity: number
  readonly writePolicy: HostWritePolicy
  readonly writeThroughThreshold: number
  readonly evictionPolicy: EvictionPolicy
  readonly loadBackThreshold: number
  readonly deviceMedium: string
  readonly hostMedium: string
}

/**
 * Where the tokens on the path root → a node live (`RadixCache.residencyOf`): device residency is
 * closed under ancestors, so the path is `deviceTokens` on the device followed by `hostTokens`
 * held only by the host tier.
 *
 * @example
 * ```ts
 * import type { Residency } from '@kvc/radix-cache'
 * const loadBackShare = (r: Residency) => r.hostTokens / (r.deviceTokens + r.hostTokens)
 * ```
 */
export interface Residency {
  readonly deviceTokens: number
  readonly hostTokens: number
}

/**
 * Result of `RadixCache.loadBack`.
 *
 * @example
 * ```ts
 * import type { LoadBackResult } from '@kvc/radix-cache'
 * const copied = (r: LoadBackResult) => r.loadedTokens
 * ```
 */
export interface LoadBackResult {
  /** Host-only tokens promoted onto device slots (0 when the node was already on the device). */
  readonly loadedTokens: number
  /** Their new device slots, position by position (empty without `trackValues`). */
  readonly indices: Int32Array
}
