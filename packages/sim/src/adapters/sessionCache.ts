/**
 * ADAPTER BOUNDARY — `@kvc/session-cache` and `@kvc/radix-cache`.
 *
 * Every simulated worker's KV state is a real `RadixCache` over a real `PagedAllocator`,
 * wrapped in a real `SessionCache` (with sessions on D workers under KVC, without sessions
 * elsewhere, where it behaves exactly like the bare radix cache: invariant I4). The simulator
 * drives it with the calls an engine makes (`createRequest`, `matchPrefix`, `prefill`,
 * `cacheUnfinishedReq`, `decode`, `cacheFinishedReq`, `abortReq`, `ensureFree`, sessions) and
 * never touches the pool or the tree behind its back.
 */
import {
  type EvictGranularity,
  type EvictionPolicy,
  type HostTierOptions,
  type KvEvent,
  PagedAllocator,
  RadixCache,
} from '@kvc/radix-cache'
import { type SessionGranularity, SessionCache } from '@kvc/session-cache'
import { simBlockHasher } from '../hashing/simBlockHasher.js'

export { SessionCache, SessionCacheError, type SessionRequest } from '@kvc/session-cache'
export type {
  EvictGranularity,
  EvictionPolicy,
  HostTierOptions,
  HostWritePolicy,
  KvEvent,
  PagedAllocator,
} from '@kvc/radix-cache'

/**
 * Options of {@link createWorkerCache}.
 *
 * @example
 * ```ts
 * import type { WorkerCacheOptions } from '@kvc/sim'
 * const o: WorkerCacheOptions = { capacityTokens: 200_000, pageSize: 16, now: () => 0 }
 * ```
 */
export interface WorkerCacheOptions {
  /** KV pool size in tokens (rounded down to a page multiple). */
  readonly capacityTokens: number
  readonly pageSize: number
  /** `block` (default) or the legacy `session` retention. */
  readonly granularity?: SessionGranularity
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  /** The simulated clock (ms). */
  readonly now: () => number
  /** KV events of the tree (D workers under KVC feed the router's residency index). */
  readonly onEvent?: (event: KvEvent) => void
  /**
   * Put the pages' token ids in `BlockStored` events (default `false`: the router's residency
   * index reads block hashes only; a consumer that rebuilds pages from events, such as the D→P
   * sync's `SyncSink`, asks for them).
   */
  readonly eventTokenIds?: boolean
  /**
   * `page` (default, SGLang's): one KV event per page. `node`: one per inserted or evicted tree
   * node, carrying all its pages (the same hashes, far fewer event objects).
   */
  readonly eventBatching?: 'page' | 'node'
  /** Called with the tokens freed by each eviction (tree eviction or legacy session drop). */
  readonly onEviction?: (freedTokens: number) => void
  /** A host KV tier under the tree (`--host-tier`): eviction demotes, a match loads back. */
  readonly hostTier?: HostTierOptions
}

/**
 * A worker's KV state: a `SessionCache` over a `RadixCache` over a `PagedAllocator`.
 *
 * @example
 * ```ts
 * import { createWorkerCache } from '@kvc/sim'
 * const sc = createWorkerCache({ capacityTokens: 4096, pageSize: 16, now: () => 0 })
 * sc.pool.availableSize() // 4096
 * ```
 */
export function createWorkerCache(o: WorkerCacheOptions): SessionCache {
  return createWorkerKv(o).cache
}

/** A worker's session cache and the paged pool under it, typed as the allocator it is. */
export interface WorkerKv {
  readonly cache: SessionCache
  readonly pool: PagedAllocator
}

/** {@link createWorkerCache}, also handing back the cache's pool as a `PagedAllocator`. */
export function createWorkerKv(o: WorkerCacheOptions): WorkerKv {
  const pool = createWorkerPool(o.capacityTokens, o.pageSize)
  const cache = new RadixCache({
    pageSize: o.pageSize,
    allocator: pool,
    now: o.now,
    ...(o.evictionPolicy === undefined ? {} : { evictionPolicy: o.evictionPolicy }),
    ...(o.evictGranularity === undefined ? {} : { evictGranularity: o.evictGranularity }),
    ...(o.onEvent === undefined
      ? {}
      : {
          onEvent: o.onEvent,
          blockHasher: simBlockHasher,
          eventTokenIds: o.eventTokenIds === true,
          eventBatching: o.eventBatching ?? 'page',
        }),
    ...(o.hostTier === undefined ? {} : { hostTier: o.hostTier }),
  })
  const onEviction = o.onEviction
  const sessions = new SessionCache({
    cache,
    pool,
    now: o.now,
    // The workloads' token streams never change: the tree keeps views of the prompts lent to it.
    lentTokensFrozen: true,
    granularity: o.granularity ?? 'block',
    ...(onEviction === undefined
      ? {}
      : { onEviction: (e: { freedTokens: number }) => onEviction(e.freedTokens) }),
  })
  return { cache: sessions, pool }
}

/**
 * A bare KV pool of `capacityTokens` (rounded down to a page multiple), for a worker that keeps
 * nothing between requests.
 */
export function createWorkerPool(capacityTokens: number, pageSize: number): PagedAllocator {
  const size = Math.floor(capacityTokens / pageSize) * pageSize
  return new PagedAllocator({ size, pageSize })
}
