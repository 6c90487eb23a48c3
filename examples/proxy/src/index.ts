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
export { createProxy, type KvcProxy } from './server.js'
export { LARGE_BODY_BYTES, checkJsonDepth, decodeJsonBody, promptChars } from './inputLimits.js'
export { promptTokensAsync } from './promptTokens.js'
