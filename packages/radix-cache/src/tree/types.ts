import type { KvAllocator } from '../allocator/kvAllocator.js'
import type { BlockHasher } from '../hashing/blockHasher.js'
import type { KvEvent } from '../events/kvEvents.js'
import type { HostTierOptions } from '../tier/types.js'

declare const nodeHandleBrand: unique symbol

/**
 * An opaque handle to a tree node. Handles stay valid while the node exists (a locked node is
 * never evicted); a handle to an evicted node is refused with `UNKNOWN_NODE`.
 */
export type NodeHandle = number & { readonly [nodeHandleBrand]: true }

/**
 * Eviction order, as in SGLang (`evict_policy.py`); smaller priority tuples are evicted first:
 *
 * | policy | order key |
 * |---|---|
 * | `lru` | last access time |
 * | `lfu` | (hit count, last access time) |
 * | `fifo` | creation time |
 * | `mru` | −last access time |
 * | `filo` | −creation time |
 * | `priority` | (priority, last access time) |
 * | `slru` | (hit count ≥ `slruProtectedThreshold` ? 1 : 0, last access time) |
 *
 * Ties are broken by a logical access (or creation) counter, so the order is total and
 * deterministic even with a coarse clock.
 */
export type EvictionPolicy = 'lru' | 'lfu' | 'fifo' | 'mru' | 'filo' | 'priority' | 'slru'

/** All eviction policies, in documentation order. */
export const EVICTION_POLICIES: readonly EvictionPolicy[] = [
  'lru',
  'lfu',
  'fifo',
  'mru',
  'filo',
  'priority',
  'slru',
]

/**
 * `'leaf'` (default, SGLang's behaviour) removes whole leaves and may free up to a leaf more than
 * asked; `'page'` trims the chosen leaf from its tail page by page, so an eviction frees what was
 * asked rounded up to one page.
 */
export type EvictGranularity = 'leaf' | 'page'

/** Options of the {@link RadixCache} constructor. */
export interface RadixCacheOptions {
  /** Tokens per page (default 1). Only page-aligned prefixes enter the tree. */
  readonly pageSize?: number
  /** Eviction order (default `'lru'`). */
  readonly evictionPolicy?: EvictionPolicy
  /** Whole leaves (default) or page-by-page trimming. */
  readonly evictGranularity?: EvictGranularity
  /**
   * Store the caller's KV slot indices (`values`) per token (default `true`). With `false` the
   * cache tracks token ids and lengths only (routers, simulators) and `insert` refuses values.
   */
  readonly trackValues?: boolean
  /** Clock in milliseconds (default `performance.now`). Injected for deterministic tests. */
  readonly now?: () => number
  /** Receives a KV event for every change of the tree (per page, as SGLang emits them). */
  readonly onEvent?: (event: KvEvent) => void
  /**
   * `'page'` (default, SGLang's): one `BlockStored` / `BlockRemoved` per page. `'node'`: one event
   * per inserted or evicted node carrying all its pages' hashes (vLLM's shape: a `BlockStored`
   * lists consecutive blocks after `parentBlockHash`) — far fewer event objects.
   */
  readonly eventBatching?: 'page' | 'node'
  /** Put the pages' token ids in `BlockStored` events (default `true`; `false` sends `[]`). */
  readonly eventTokenIds?: boolean
  /** Block hasher for event hashes (default: SGLang's SHA-256 chain, used only with `onEvent`). */
  readonly blockHasher?: BlockHasher
  /** Pool that receives the KV slots of evicted nodes (only with `trackValues`). */
  readonly allocator?: KvAllocator
  /** `slru`: hit count from which a node is in the protected segment (SGLang: 2). */
  readonly slruProtectedThreshold?: number
  /** Initial node capacity (grows by doubling). */
  readonly initialNodeCapacity?: number
  /**
   * An optional second tier in host memory (SGLang HiCache's L2): device eviction demotes pages
   * to it instead of discarding them (`write_back`), matches report host hits, and `loadBack`
   * promotes them onto device slots again. Absent: one tier, exactly as before.
   */
  readonly hostTier?: HostTierOptions
}

/** Options of {@link RadixCache.insert}. */
export interface InsertOptions {
  /** Namespace (LoRA id, cache salt...). Different namespaces never share nodes. */
  readonly extraKey?: string
  /** Priority for the `priority` policy; raised to the max along the path (default 0). */
  readonly priority?: number
  /** A chunked-prefill insert does not count as a hit (SGLang skips `hit_count` then). */
  readonly chunked?: boolean
  /**
   * `true`: `tokens` is a `Uint32Array` the caller never changes while this cache exists (a view of
   * an immutable token stream): new nodes keep views of it instead of copies of their tokens, and
   * a later walk over a node whose tokens are the very memory it compares with (the same stream,
   * the same position) skips the comparison. Ignored for other array types. Default `false`.
   */
  readonly lendTokens?: boolean
}

/** Options of {@link RadixCache.matchPrefix}. */
export interface MatchOptions {
  /** Namespace to match in. */
  readonly extraKey?: string
  /** Do not split nodes and do not refresh access times (routers, dry runs). */
  readonly readOnly?: boolean
  /**
   * Write the matched KV slot indices into this array (from index 0) instead of allocating one,
   * for example a request's `req_to_token` row. It needs room for the page-aligned length of
   * `tokens`; `indices` is then a view of it (with `loadBack`, room for the loaded tokens too).
   */
  readonly into?: Int32Array
  /**
   * With a host tier: load a host hit longer than the tier's `loadBackThreshold` back onto device
   * slots before returning (SGLang's load-back on match), evicting device pages for room if
   * needed; the result then covers the loaded tokens. A load that cannot get the slots is skipped
   * (the hit stays on host). No effect without a host tier; refused with `readOnly`.
   */
  readonly loadBack?: boolean
}

/** Result of {@link RadixCache.insert}. */
export interface InsertResult {
  /** Tokens that were already in the tree (the caller frees its duplicate slots for them). */
  readonly prefixLen: number
  /** The deepest node of the inserted (page-aligned) key. */
  readonly lastNode: NodeHandle
  /** Page-aligned length that entered the tree; `tokens[alignedLen:]` stays the caller's. */
  readonly alignedLen: number
}

/** Result of {@link RadixCache.matchPrefix}. */
export interface MatchResult {
  /** Matched tokens (a multiple of `pageSize`). */
  readonly length: number
  /** KV slot indices of the matched tokens (empty without `trackValues`). */
  readonly indices: Int32Array
  /** The deepest matched node (a root when nothing matched); lock it while using the prefix. */
  readonly lastNode: NodeHandle
  /**
   * Matched tokens after `length` that only the host tier holds (0 without a host tier): what
   * `loadBack(lastHostNode)` would copy back instead of recomputing.
   */
  readonly hostLength: number
  /** The deepest matched node including the host part (`lastNode` when `hostLength` is 0). */
  readonly lastHostNode: NodeHandle
  /** Tokens this call loaded back from the host tier (`loadBack` option; included in `length`). */
  readonly loadedTokens: number
}

/** Result of {@link RadixCache.evict}. */
export interface EvictResult {
  /** Tokens removed from the tree. */
  readonly evictedTokens: number
  /** Nodes removed from the tree (a trimmed leaf counts once). */
  readonly evictedNodes: number
}

/** Counters since construction (or the last {@link RadixCache.reset}). */
export interface RadixCacheStats {
  readonly totalSize: number
  readonly evictableSize: number
  readonly protectedSize: number
  readonly nodeCount: number
  readonly evictableLeaves: number
  readonly matchCalls: number
  /** Tokens asked for in matches (page-aligned). */
  readonly matchQueriedTokens: number
  readonly matchHitTokens: number
  /** `matchHitTokens / matchQueriedTokens` (0 when nothing was queried). */
  readonly hitRatio: number
  readonly insertCalls: number
  readonly insertedTokens: number
  readonly splits: number
  readonly evictCalls: number
  readonly evictedTokens: number
  readonly evictedNodes: number
  /** KV events emitted since construction (not reset by `reset()`, like event ids). */
  readonly eventsEmitted: number
  /** Host tier capacity in tokens (0 without a host tier). */
  readonly hostCapacity: number
  /** Tokens with a copy on the host tier (host-only pages and backups of device pages). */
  readonly hostSize: number
  /** Tokens only the host tier holds. */
  readonly hostOnlySize: number
  /** Host-only tokens that are neither locked nor host-protected. */
  readonly hostEvictableSize: number
  /** Matched tokens that were host-only (`hostLength` summed over matches). */
  readonly matchHostHitTokens: number
  /** Device tokens evicted by copying them to the host (demotion). */
  readonly demotedTokens: number
  /** Device tokens evicted without a host copy (discarded). */
  readonly discardedTokens: number
  /** Tokens copied from the device to the host (demotions, write-through, `protectHost`). */
  readonly hostWriteTokens: number
  /** Tokens evicted from the host tier. */
  readonly hostEvictedTokens: number
  /** Tokens promoted from the host onto device slots. */
  readonly loadedBackTokens: number
}

/** A read-only view of one node (for inspection, printing and invariant checks). */
export interface NodeInfo {
  readonly handle: NodeHandle
  readonly parent: NodeHandle | undefined
  readonly isRoot: boolean
  readonly extraKey: string
  /** This node's edge tokens (a copy). */
  readonly tokens: Uint32Array
  /** This node's KV slot indices (a copy), `undefined` without `trackValues`. */
  readonly values: Int32Array | undefined
  /** Tokens on the path root → this node, inclusive. */
  readonly pathLength: number
  readonly lockRef: number
  readonly lastAccessTime: number
  readonly creationTime: number
  readonly hitCount: number
  readonly priority: number
  readonly childCount: number
  /** Unlocked, not a root, no children on the device: a candidate of the next device eviction. */
  readonly evictableLeaf: boolean
  /** The node's KV is on the device (always, without a host tier). */
  readonly onDevice: boolean
  /** The node's KV has a copy on the host tier. */
  readonly onHost: boolean
  /** Host KV slot indices (a copy), `undefined` when not on host or without `trackValues`. */
  readonly hostValues: Int32Array | undefined
  /** Host references (`protectHost`) held on this node or below it. */
  readonly hostRef: number
  /** Host-only, unlocked, unprotected, no children: a candidate of the next host eviction. */
  readonly hostEvictableLeaf: boolean
}
