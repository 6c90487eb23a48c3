export {
  DEFAULT_CONFIG,
  PROXY_POLICIES,
  readConfigFile,
  resolveConfig,
  stateStoreKind,
  type DefaultConfig,
  type KvEventsConfig,
  type ProxyConfig,
  type ProxyConfigInput,
  type ProxyPolicyName,
  type SessionSource,
  type StateStoreConfig,
  type TokenizerMode,
  type WorkerConfig,
} from './config.js'
export { ProxyError, type ProxyErrorCode } from './errors.js'
export {
  Gateway,
  classifyUpstreamError,
  connectStateStore,
  policyByName,
  type Completion,
  type GatewayOptions,
  type ServedBy,
  type StateStoreInfo,
  type StartedResponse,
  type TurnInput,
  type TurnResult,
  type TurnTransport,
} from './gateway.js'
export { DecisionLog, decisionLine, type DecisionLine } from './decisionLog.js'
export { ProxyMetrics } from './metrics.js'
export { WorkerPool, type WorkerHandle, type WorkerPoolOptions } from './workers.js'
export { BlockHashCache, createTokenizer, type ChatMessageLike, type PromptTokenizer } from './tokens.js'
export { SessionTable, identifySession, type SessionIdentity } from './sessions.js'
export {
  ChatTransport,
  CompletionTransport,
  PdPair,
  bootstrapFields,
  decodeFields,
  firstChunk,
  forwardRest,
  parseChat,
  parseCompletion,
  promptTokensOf,
  sendTurn,
  servedHeaders,
  streamedResponse,
  type KvcResponseInfo,
  type ParsedRequest,
  type WorkerStream,
} from './openai.js'
export { createProxy, type KvcProxy, type ProxyOptions } from './server.js'
export { LARGE_BODY_BYTES, checkJsonDepth, decodeJsonBody, promptChars } from './inputLimits.js'
export { promptTokensAsync } from './promptTokens.js'
export { TokenBucket, type TokenBucketOptions } from './limits/tokenBucket.js'
export { RequestLimiter, rateLimited, type LimitCause, type RequestLimiterOptions } from './limits/limiter.js'
export { readBody, type BodyLimits } from './limits/body.js'
export {
  DEFAULT_DEADLINES,
  armDeadline,
  deadlineExceeded,
  isDeadline,
  resolveDeadlines,
  type DeadlinesConfig,
} from './limits/deadlines.js'
export { PrefixSessions, type PrefixSessionLease } from './sessionIdentity/prefixSessions.js'
export { KeyTable, hashApiKey, isKeyHash, keyFingerprint, presentedKey } from './tenancy/keys.js'
export {
  DEFAULT_TENANT_DEFAULTS,
  NO_LIMITS,
  cacheSaltOf,
  clientSaltOf,
  implicitTenant,
  resolveTenantDefaults,
  resolveTenants,
  type CacheScope,
  type Tenant,
  type TenantDefaults,
  type TenantDefaultsInput,
  type TenantInput,
  type TenantLimits,
} from './tenancy/tenants.js'
export {
  DEFAULT_AUTH,
  authEnabled,
  checkExposure,
  isLoopback,
  maskSecrets,
  maskUrl,
  resolveAuth,
  type AuthConfig,
  type AuthConfigInput,
  type EndpointAccess,
} from './tenancy/authConfig.js'
export {
  TenantRegistry,
  type TenantRegistryOptions,
  type TenantReloadEvent,
} from './tenancy/registry.js'
export {
  OPEN_SCOPE,
  saltFields,
  visibleHeaders,
  visibleKvc,
  visibleUsage,
  type CacheSaltField,
  type RequestScope,
} from './tenancy/requestScope.js'
export { TenantMetrics } from './tenancy/tenantMetrics.js'
