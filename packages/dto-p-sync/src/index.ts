/**
 * `@kvc/dto-p-sync`: incremental decode-to-prefill KV sync, so that a session's reseed through a P
 * finds most of its history already there. D-side offers, a bandwidth-aware planner with a
 * staleness budget, an idempotent P-side sink, and a transport interface with an in-memory
 * network for tests. Pure.
 *
 * @module
 */
export { DtoPSyncError, DtoPSyncErrorCode } from './errors/dtoPSyncError.js'
export type {
  HoldingsView,
  Offer,
  ReplyStatus,
  SyncBlock,
  SyncReply,
  TransferBlock,
  TransferMessage,
} from './protocol/types.js'
export { BLOCK_HEADER_BYTES, MESSAGE_HEADER_BYTES, messageBytes, REPLY_BYTES } from './protocol/bytes.js'
export {
  type CommitOptions,
  OfferBuilder,
  type OfferBuilderOptions,
  type OfferSessionInfo,
  RETIRED_SESSIONS_KEPT,
} from './offers/offerBuilder.js'
export {
  type HoldingsSnapshot,
  type IndexedBlock,
  KvEventIndex,
  type KvEventIndexOptions,
} from './holdings/kvEventIndex.js'
export {
  DEFAULT_PRIORITY_WEIGHTS,
  type PriorityHints,
  type PriorityWeights,
  priorityScore,
} from './planner/priority.js'
export {
  type Bandwidth,
  type OverBudgetReason,
  type PlanInput,
  type PlannedTransfer,
  type PlanSession,
  planSync,
  type SessionPlan,
  type SyncPlan,
} from './planner/planSync.js'
export {
  type SessionSyncStatus,
  type SourceMetrics,
  SyncSource,
  type SyncSourceOptions,
} from './source/syncSource.js'
export {
  type BeginResult,
  type Reservation,
  type SinkMetrics,
  type SlotAllocator,
  SyncSink,
  type SyncSinkOptions,
} from './sink/syncSink.js'
export type {
  Delivery,
  TransferStatus,
  TransferTicket,
  Transport,
  TransportHandlers,
} from './transport/transport.js'
export {
  InMemoryLink,
  InMemoryNetwork,
  type InMemoryNetworkOptions,
  type LinkModel,
  type LinkStats,
  transferTimeMs,
} from './transport/inMemoryNetwork.js'
export { type SyncWiring, type SyncWiringOptions, wireSync, type WiringStats } from './wiring/wireSync.js'
