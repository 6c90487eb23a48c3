/**
 * `@kvc/radix-cache`: SGLang's paged radix prefix cache in TypeScript. Match, insert and `lock_ref`
 * over a page allocator; incremental eviction by seven policies at leaf or page granularity; KV
 * events (stored, removed, cleared) and SGLang/Dynamo-compatible block hashing for routers that
 * track residency. Pure: no runtime dependencies, no I/O, clock injected.
 *
 * @module
 */
export { RadixCacheError, RadixCacheErrorCode } from './errors/radixCacheError.js'
export type { KvAllocator } from './allocator/kvAllocator.js'
export { PagedAllocator } from './allocator/pagedAllocator.js'
export type {
  AllBlocksClearedEvent,
  BlockRemovedEvent,
  BlockStoredEvent,
  KvEvent,
} from './events/kvEvents.js'
export type { BlockHasher } from './hashing/blockHasher.js'
export { computeBlockHashes } from './hashing/blockHasher.js'
export { sglangBlockHasher, type SglangBlockHasherOptions } from './hashing/sglangBlockHasher.js'
export { localBlockHash, xxh3BlockHasher, type Xxh3BlockHasherOptions } from './hashing/xxh3BlockHasher.js'
export { Sha256, sha256, sha256Words } from './hashing/sha256.js'
export { xxh3_64 } from './hashing/xxh3.js'
export { RadixCache } from './tree/radixCache.js'
export {
  HOST_WRITE_POLICIES,
  type HostTierConfig,
  type HostTierOptions,
  type HostWritePolicy,
  type KvSlotAllocator,
  type KvTransfer,
  type LoadBackResult,
  type Residency,
} from './tier/types.js'
export {
  EVICTION_POLICIES,
  type EvictGranularity,
  type EvictionPolicy,
  type EvictResult,
  type InsertOptions,
  type InsertResult,
  type MatchOptions,
  type MatchResult,
  type NodeHandle,
  type NodeInfo,
  type RadixCacheOptions,
  type RadixCacheStats,
} from './tree/types.js'
export { formatTree, type FormatTreeOptions } from './format/formatTree.js'
