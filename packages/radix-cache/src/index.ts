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
export { xxh3BlockHasher, type Xxh3BlockHasherOptions } from './hashing/xxh3BlockHasher.js'
export { RadixCache } from './tree/radixCache.js'
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
