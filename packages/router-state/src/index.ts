/**
 * Shared router state for several `@kvc/kvc-router` replicas: a `ClusterStateStore` kept on NATS
 * (JetStream key-value buckets and core pub/sub) or Redis, with claims for what must not race
 * (first live binding wins; pending-seed budgets summed over live replicas), per-replica load that
 * expires with its replica, and a degraded mode that keeps routing on the last view.
 *
 * @packageDocumentation
 */
export { RouterStateError, RouterStateErrorCode } from './errors/routerStateError.js'
export type {
  BackendEvents,
  BackendSnapshot,
  BindingValue,
  FlagOp,
  FlagsValue,
  LoadMessage,
  PauseMessage,
  StateBackend,
  Versioned,
} from './store/backend.js'
export { ReplicatedStateStore } from './store/replicatedStore.js'
export type { ReplicatedStoreMetrics, ReplicatedStoreOptions, StoreEvent } from './store/storeOptions.js'
export { NatsStateBackend, connectNatsStore, type NatsStoreOptions } from './nats/natsStore.js'
export { RedisStateBackend, connectRedisStore, type RedisStoreOptions } from './redis/redisStore.js'
