/**
 * `@kvc/sim`: a deterministic discrete-event simulator of a P/D cluster in which the real kvc
 * packages make every decision and only GPU and link time come from the cost model. Workloads
 * (the built-in agentic generator, Mooncake, LMCache and Azure traces), faults, the evaluation
 * protocol (paired seeds, bootstrap intervals), reports, and the `kvc-sim` command.
 *
 * @module
 */
export {
  RawText,
  SimError,
  SimErrorCode,
  checkOption,
  traceError,
  type TraceLocation,
} from './errors/simError.js'
export { EventQueue } from './engine/eventQueue.js'
export { Prng } from './engine/prng.js'
export {
  type CostModel,
  DEFAULT_COST_MODEL,
  decodeStepSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
} from './cost/costModel.js'
export type { ArrivalMode, TurnSpec, Workload } from './workload/types.js'
export {
  type AgenticWorkloadOptions,
  DEFAULT_GAP_QUANTILES,
  generateAgenticWorkload,
  sampleQuantiles,
} from './workload/agentic.js'
export { SCENARIOS, type Scenario, type ScenarioName, scenarioByName } from './workload/scenarios.js'
export { expandBlockIds, mix32, type TextTokenizer, tokenizeText, uniqueTokens } from './workload/tokens.js'
export { loadMooncakeTrace, type MooncakeTraceOptions, parseMooncakeTrace } from './workload/mooncake.js'
export { type LmcacheTraceOptions, loadLmcacheTrace, parseLmcacheTrace } from './workload/lmcache.js'
export { loadAzureTrace, parseAzureTrace } from './workload/azure.js'
export {
  detectTraceFormat,
  type LoadTraceOptions,
  loadTrace,
  TRACE_FORMATS,
  type TraceFormat,
} from './workload/loadTrace.js'
export { computeTraceStats, type Summary, summarize, type TraceStats } from './workload/stats.js'
export {
  defaultFaultDuration,
  FAULT_KINDS,
  type FaultKind,
  type FaultSpec,
  formatFaults,
  parseFaults,
} from './faults/faults.js'
export { simBlockHasher } from './hashing/simBlockHasher.js'
export {
  admitOptionsFor,
  createPolicy,
  DEFAULT_REAPER,
  extendBlockKeys,
  POLICY_NAMES,
  type PolicyName,
  type PolicySpec,
  parsePolicySpec,
  consumesKvEvents,
  runsColocated,
  type SessionRelease,
} from './adapters/router.js'
export { type GatewayRetry, SGLANG_GATEWAY_RETRY } from './gateway/retry.js'
export { createWorkerCache, type WorkerCacheOptions } from './adapters/sessionCache.js'
export { SyncFabric, type SyncFabricOptions, type SyncFabricStats } from './adapters/dtoPSync.js'
export { formatTopology, parseTopology, type Topology, topologyWorkers } from './cluster/topology.js'
export { ClusterSimulation, runSimulation } from './cluster/simulation.js'
export type { RunOptions } from './config/runOptions.js'
export {
  type HostTierSpec,
  type ResolvedHostTier,
  admissionCostModel,
  hostTierOptions,
  loadBackBreakEven,
  parseHostTier,
  resolveHostTier,
  peerFetchSeconds,
  tierLoadSeconds,
} from './hostTier/hostTier.js'
export { type HostTierFigures, type ReprefillCauses, hostTierFigures } from './hostTier/figures.js'
export {
  peakRssMB,
  type AdaptiveRunInfo,
  type RunAccounting,
  type RunCounters,
  type RunResult,
} from './metrics/runResult.js'
export { autoGranularity, KvGeometry, type SimGranularity } from './granularity/kvGeometry.js'
export type { ElasticSwitch } from './adaptive/elastic.js'
export type { EvictionStats, ServePath, TurnRecord, UsageSeries } from './metrics/types.js'
export { finiteMean, type LatencyStats, latencyStats, quantileSorted } from './metrics/quantiles.js'
export {
  computeRunMetrics,
  e2eOf,
  elapsedOf,
  fastPathBucket,
  type ItlStats,
  itlStats,
  latencyOf,
  type RunMetrics,
  tpotStats,
  ttftOf,
} from './metrics/runMetrics.js'
export {
  DEFAULT_SLO,
  meetsSlo,
  type SessionTask,
  sessionTasks,
  type Slo,
  tpotOf,
} from './metrics/slo.js'
export {
  type DecodeGapHistograms,
  DecodeGapRecorder,
  GAP_BUCKETS,
  GAP_BUCKETS_PER_OCTAVE,
  GAP_MIN_MS,
  gapBucket,
  gapBucketMs,
  gapHistogramQuantiles,
} from './metrics/decodeGaps.js'
export {
  CI_METRICS,
  type CiMetric,
  type ClusterLayout,
  type Estimate,
  higherIsBetter,
  type PackedLayout,
  type PairedEstimate,
  type PolicyColumns,
  pairedBootstrap,
  stratumBootstrap,
} from './protocol/bootstrap.js'
export { clusterLayout, policyColumns } from './protocol/columns.js'
export {
  buildWorkload,
  computeResampleShare,
  type ExperimentConfig,
  type ExperimentResult,
  executeTask,
  inProcessRunner,
  type PolicySummary,
  type Runner,
  type RunSummary,
  type RunTask,
  cheapToRebuild,
  prepareSummary,
  type ResampleShare,
  type ResampleShareJob,
  runExperiment,
  SIM_VERSION,
  type Stratum,
  type SummaryPrep,
  type SummaryPrepJob,
  type WorkloadSource,
} from './protocol/experiment.js'
export {
  type Crossover,
  type CrossoverSegment,
  runSweep,
  SWEEP_AXES,
  SWEEP_METRICS,
  type SweepAxis,
  type SweepConfig,
  type SweepPoint,
  type SweepPolicyPoint,
  type SweepResult,
  sweepCrossovers,
} from './protocol/sweep.js'
export { toStableJson } from './report/json.js'
export { renderHtmlReport } from './report/html.js'
export { renderSweepReport } from './report/sweepHtml.js'
export { renderComparisonTable, renderSweepTable } from './report/table.js'
export { experimentVerdict, sweepVerdict, type Verdict, verdictText } from './report/verdict.js'
export { parseCapacity, parseCount, parsePositive, parseSeeds, parseSlo } from './cli/args.js'
