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
