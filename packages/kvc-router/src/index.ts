/**
 * `@kvc/kvc-router`: the KVC router's decisions for prefill/decode serving. Route (Algorithm 1)
 * ranks D workers by session, capacity and overlap from a residency index fed by KV events; Admit
 * (Algorithm 2) is the D's side, with leases and pause hints; Dispatch (Algorithm 3) walks a turn
 * through fast path, seeds, retries and migration, driven by `TurnDriver`. Also the cost model,
 * the baselines (round-robin to Dynamo's KV cost) and the admission RPC's wire contract. Pure.
 *
 * @module
 */
export { RouterError, RouterErrorCode } from './errors/routerError.js'
export {
  ADMIT_HTTP_PATH,
  ADMIT_PATHS,
  ADMIT_PROTOCOL_VERSION,
  ADMIT_REASONS,
  SLO_CLASSES,
  admitRequestJsonSchema,
  admitResponseJsonSchema,
  parseAdmitRequest,
  parseAdmitResponse,
  type AdmitPath,
  type AdmitReason,
  type AdmitRequest,
  type AdmitResponse,
  type SloClass,
} from './admission/contract.js'
export {
  DEFAULT_ADMIT_OPTIONS,
  DEFAULT_PAUSE_HINT,
  LeaseBook,
  admit,
  recommendedPauseMs,
  type AdmitDecision,
  type AdmitOptions,
  type AdmitSession,
  type AdmitWorkerState,
  type Lease,
  type PauseHintParams,
} from './admission/admit.js'
export {
  admitWorkerState,
  decodeCapacityReport,
  type DecodePoolView,
  type DecodeSessionStatus,
  type DecodeSessionsView,
  type DecodeStateSource,
} from './admission/decodeState.js'
export {
  DEFAULT_COST_MODEL,
  decodeStepSeconds,
  loadBackSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
  type CostModel,
  type LoadBackSource,
} from './cost/costModel.js'
export { HostResidency } from './tier/hostResidency.js'
export { type KvTierName, mediumTier } from './tier/medium.js'
export {
  chooseLoadBack,
  planPrefix,
  type PrefixPlan,
  type ReseedEstimate,
  type TieredHit,
} from './tier/prefixCost.js'
export {
  chooseWaitOrMigrate,
  type MigrationEstimate,
  migrationSeconds,
  type OwnDecodeWait,
  type WaitOrMigrate,
} from './tier/waitOrMigrate.js'
export {
  DEFAULT_PATH_PARAMS,
  choosePath,
  estimateLocal,
  estimateRemote,
  headOfLineSeconds,
  pathParams,
  shouldWaitForOwnDecode,
  type PathChoice,
  type PathEstimate,
  type PathParams,
  type PathSignals,
  type PrefillSignals,
  type PrefillSite,
} from './path/pathChoice.js'
export { ArrivalRates } from './path/arrivalRates.js'
export { chooseEvictOrWait, type PauseChoice, type PauseSignals } from './path/evictOrWait.js'
export { type ArrivalDecision, type ArrivalView, admitOnArrival } from './admission/onArrival.js'
export { PendingRetractions } from './retraction/pendingRetractions.js'
export {
  DEFAULT_RETRACTION_PARAMS,
  planRetraction,
  type RetractionParams,
  type RetractionPlan,
  type RetractionSession,
  type RetractionSignals,
} from './retraction/planRetraction.js'
export {
  DEFAULT_TOPOLOGY_PARAMS,
  adviseTopology,
  type RoleSwitch,
  type TopologyAdvice,
  type TopologyParams,
  type TopologyRole,
  type TopologySignals,
  type WorkerTopologySignal,
} from './topology/adviseTopology.js'
export { BlockKeys } from './residency/blockKeys.js'
export {
  ResidencyIndex,
  type GapReport,
  type IngestStatus,
  type OverlapMode,
  type ResidencyIndexOptions,
  type WorkerResidencyStatus,
} from './residency/residencyIndex.js'
export {
  InMemoryClusterStateStore,
  checkLoadDelta,
  type ClaimOutcome,
  type ClusterStateStore,
  type InMemoryClusterStateStoreOptions,
  type LoadDelta,
  type StateClaim,
  type SessionBinding,
  type WorkerLoad,
} from './cluster/stateStore.js'
export { SeedWaitQueue } from './cluster/seedWaitQueue.js'
export {
  ClusterView,
  type CachedAdmission,
  type CapacityReport,
  type ClusterViewOptions,
  type DecodeWorkerRecord,
  type LinkHealth,
  type QueueReport,
  type WorkerInfo,
  type WorkerRole,
  type WorkerSpec,
} from './cluster/clusterView.js'
export {
  DEFAULT_ROUTER_PARAMS,
  MAX_PAGE_SIZE,
  resolveRouterParams,
  type PathChoiceMode,
  type PauseChoiceMode,
  type RouterParams,
  type RouterParamsInput,
  type SloBudget,
} from './route/params.js'
export type {
  IneligibleReason,
  IneligibleWorker,
  PathMode,
  RankKey,
  RouteCandidate,
  RouteContext,
  RouteDecision,
  RoutingPolicy,
  TurnRequest,
} from './route/types.js'
export {
  analyzeTurn,
  finishDecision,
  kvcPolicy,
  turnKeys,
  validateTurn,
  type CandidateAnalysis,
  type TurnAnalysis,
} from './route/route.js'
export { TurnDispatch } from './dispatch/turnDispatch.js'
export { backoffDelayMs, type BackoffJitter, type BackoffPolicy } from './backoff/backoff.js'
export { LatencyWindow } from './hedging/latencyWindow.js'
export {
  DEFAULT_TUNING_OPTIONS,
  SelfTuner,
  type TunedParams,
  type TuningOptions,
} from './tuning/selfTuner.js'
export type {
  AdmitAction,
  AdmitAnswerOutcome,
  AdmitHedge,
  HedgedAdmitOutcome,
  ClaimAction,
  DispatchAction,
  DispatchOutcome,
  DispatchRecord,
  DispatchStep,
  DoneAction,
  FailAction,
  SeedViaPAction,
  SendFailureCause,
  SendFastAction,
  TurnFailureCause,
  WaitAction,
  WaitReason,
} from './dispatch/types.js'
export { Router, type RouterOptions } from './router/router.js'
export {
  TurnDriver,
  sleepUntil,
  type AdmitOutcome,
  type Awaitable,
  type DriveOptions,
  type DrivenTurn,
  type SendOutcome,
  type TurnEffects,
  type TurnStop,
  type TurnTimers,
} from './driver/turnDriver.js'
export { ApproxPrefixTree } from './policies/approxTree.js'
export {
  dataParallelCacheAwarePolicy,
  dynamoKvCostPolicy,
  powerOfTwoPolicy,
  randomPolicy,
  roundRobinPolicy,
  sglangCacheAwarePolicy,
  stickySessionPolicy,
  type BaselineOptions,
  type DynamoKvCostOptions,
  type SglangCacheAwareOptions,
} from './policies/baselines.js'
export { llmdPrecisePrefixPolicy, type LlmdPrecisePrefixOptions } from './policies/llmdPrecisePrefix.js'
export { renderDispatch, renderRoute } from './explain/render.js'
