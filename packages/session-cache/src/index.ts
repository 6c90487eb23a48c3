/**
 * `@kvc/session-cache`: multi-turn session retention over a `@kvc/radix-cache`. Each session's
 * `SessionSlot` locks its KV in the tree, so its next turn extends instead of re-prefilling;
 * under memory pressure idle sessions give KV back block by block (or, in the legacy mode kept for
 * comparison, whole sessions at once), with invariants I1–I5 of `docs/design/algorithms.md`. Pure.
 *
 * @module
 */
export { SessionCacheError, SessionCacheErrorCode } from './errors/sessionCacheError.js'
export { DEFAULT_EVICTION_BUCKETS, Histogram, type HistogramSnapshot } from './metrics/histogram.js'
export { SessionCache } from './session/sessionCache.js'
export type {
  CacheReqResult,
  EnsureFreeResult,
  EvictIdleOptions,
  EvictIdleResult,
  EvictionEvent,
  FinishOptions,
  KvPool,
  OpenSessionOptions,
  PoolAccounting,
  RequestInit,
  RequestPhase,
  SessionCacheOptions,
  SessionCacheStats,
  SessionGranularity,
  SessionMatchResult,
  SessionRequest,
  SessionSlot,
  SessionStatus,
} from './session/types.js'
