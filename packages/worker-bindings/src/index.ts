/**
 * `@kvc/worker-bindings`: typed clients for the workers a KVC deployment talks to. SGLang's HTTP API
 * (generate and chat, SSE streams, sessions, loads, metrics), P/D bootstrap, the kvc admission RPC
 * (client and handler), Mooncake's metadata, master and conductor, and KV-event streams over ZeroMQ
 * into a residency index; retries, timeouts and endpoint health shared by all. Node 20+.
 *
 * @module
 */
export {
  BODY_EXCERPT_CHARS,
  WorkerApiError,
  WorkerBindingsError,
  WorkerBindingsErrorCode,
  extractServerMessage,
} from './errors/workerBindingsError.js'
export { readBigIntField, stringifyJson } from './json/json.js'
export {
  DEFAULT_RETRY_POLICY,
  isRetryableStatus,
  parseRetryAfter,
  type ResolvedRetryPolicy,
  type RetryPolicy,
} from './transport/retry.js'
export {
  DEFAULT_HEALTH_COOLDOWN_MS,
  EndpointHealthTracker,
  type EndpointCallPermit,
  type EndpointHealth,
  type EndpointHealthTrackerOptions,
  type EndpointLatency,
} from './transport/healthTracker.js'
export {
  HttpTransport,
  type CallOptions,
  type ClientOptions,
  type FetchLike,
  type HttpRequestSpec,
  type HttpStreamResponse,
  type HttpTextResponse,
} from './transport/httpTransport.js'
export { SseDecoder, parseSseStream, type SseDecoderOptions, type SseEvent } from './sse/sseDecoder.js'
export { jsonEventStream } from './sse/jsonEventStream.js'
export type {
  BootstrapRoom,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatMessage,
  FinishReason,
  GenerateRequest,
  GenerateResponse,
  GetLoadItem,
  MetaInfo,
  ModelInfo,
  OpenSessionRequest,
  SamplingParams,
  ServerInfo,
  SessionParams,
  Usage,
  V1LoadItem,
  V1LoadsInclude,
  V1LoadsResponse,
} from './sglang/types.js'
export {
  ChatCompletionStream,
  GenerateStream,
  type GenerateStreamChunk,
  type StreamOutputMode,
} from './sglang/streams.js'
export { SglangClient, type FlushCacheResult, type SglangClientOptions } from './sglang/sglangClient.js'
export {
  histogramOf,
  parsePrometheusText,
  type HistogramValue,
  type MetricFamily,
  type MetricSample,
  type MetricType,
} from './metrics/prometheusText.js'
export { toSglangMetrics, type SglangMetrics } from './metrics/sglangMetrics.js'
export {
  BOOTSTRAP_ROOM_LIMIT,
  DEFAULT_BOOTSTRAP_PORT,
  FAKE_BOOTSTRAP_HOST,
  batchSizeOf,
  bootstrapHostOf,
  generateBootstrapRoom,
  injectBootstrap,
  isBootstrapRoom,
  type BootstrapTarget,
} from './pd/bootstrap.js'
export {
  PdDispatcher,
  PdGenerateStream,
  type PdDispatcherOptions,
  type PdResult,
} from './pd/pdDispatcher.js'
export {
  PrefillBootstrapClient,
  type LegacyPrefillRankRegistration,
  type PrefillRankAddress,
  type PrefillRankRegistration,
  type PrefillServerInfo,
} from './pd/bootstrapClient.js'
export { AdmissionClient, type AdmissionClientOptions } from './admission/admissionClient.js'
export {
  createAdmissionHandler,
  type AdmissionErrorBody,
  type AdmissionHandlerOptions,
  type AdmitFunction,
} from './admission/admissionHandler.js'
export {
  MooncakeMetadataClient,
  mooncakeRpcMetaKey,
  mooncakeSegmentKey,
  type MooncakeRpcMeta,
} from './mooncake/metadataClient.js'
export {
  MooncakeMasterClient,
  type MooncakeBatchKeyInfo,
  type MooncakeReplicaInfo,
  type MooncakeSegmentDetail,
} from './mooncake/masterClient.js'
export {
  ConductorClient,
  type ConductorHashQuery,
  type ConductorInstanceMatch,
  type ConductorQuery,
  type ConductorQueryResult,
  type ConductorRegistration,
  type ConductorUnregistration,
} from './mooncake/conductorClient.js'
export {
  decodeKvEventBatch,
  encodeKvEventBatch,
  fromRadixKvEvent,
  KV_TIERS,
  kvEventTier,
  type KvTier,
  toRadixKvEvents,
  type KvEventBatch,
  type KvEventEncoding,
  type WireAllBlocksCleared,
  type WireBlockRemoved,
  type WireBlockStored,
  type WireKvEvent,
} from './kvEvents/codec.js'
export { END_SEQ, decodeSeq, encodeSeq } from './kvEvents/seq.js'
export { KvEventPublisher, type KvEventPublisherOptions } from './kvEvents/publisher.js'
export {
  KvEventSubscriber,
  residencyFeeder,
  type ResidencyFeederOptions,
  type KvEventGap,
  type KvEventSink,
  type KvEventSubscriberOptions,
  type KvEventSubscriberStats,
  type ReceivedKvBatch,
} from './kvEvents/subscriber.js'
export { BodyTooLargeError, mediaType, readBody, sendJson, sendText } from './http/serverUtils.js'
