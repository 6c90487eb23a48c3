/**
 * Wire types of the SGLang HTTP API, with upstream's field names (snake_case) exactly. Fields
 * this package does not interpret are still typed where upstream documents them and are passed
 * through untouched; unknown fields are allowed everywhere (`[key: string]: unknown`), so newer
 * servers keep working.
 *
 * @module
 */

/**
 * `sampling_params` of a generate request (SGLang `SamplingParams`).
 *
 * @example
 * ```ts
 * import type { SamplingParams } from '@kvc/worker-bindings'
 * const p: SamplingParams = { max_new_tokens: 64, temperature: 0, stop: ['\n\n'] }
 * ```
 */
export interface SamplingParams {
  max_new_tokens?: number
  min_new_tokens?: number
  temperature?: number
  top_p?: number
  top_k?: number
  min_p?: number
  frequency_penalty?: number
  presence_penalty?: number
  repetition_penalty?: number
  stop?: string | string[]
  stop_token_ids?: number[]
  ignore_eos?: boolean
  skip_special_tokens?: boolean
  no_stop_trim?: boolean
  json_schema?: string
  regex?: string
  ebnf?: string
  n?: number
  [key: string]: unknown
}

/**
 * `session_params` of a generate request (classic sessions, `session_controller.py`).
 *
 * @example
 * ```ts
 * import type { SessionParams } from '@kvc/worker-bindings'
 * const sp: SessionParams = { id: 'sess-1', rid: 'turn-3' } // continue from turn 3
 * ```
 */
export interface SessionParams {
  /** Session id from `/open_session`. */
  id?: string
  /** The request within the session to continue from (default: the last one). */
  rid?: string
  /** Keep `context[:offset]` and append the new tokens. */
  offset?: number
  /** Abort the `rid` node and clear its children. */
  replace?: boolean
  /** Exclude the previous output tokens from the new prompt. */
  drop_previous_output?: boolean
  [key: string]: unknown
}

/**
 * A 63-bit bootstrap room: a `bigint` (exact) or a safe-integer `number`.
 *
 * @example
 * ```ts
 * import type { BootstrapRoom } from '@kvc/worker-bindings'
 * const rooms: BootstrapRoom[] = [0, 9223372036854775807n]
 * ```
 */
export type BootstrapRoom = bigint | number

/**
 * Body of `POST /generate` (SGLang `GenerateReqInput`). Give `text` **or** `input_ids` (or
 * `input_embeds`). Batches (`text: string[]`, `input_ids: number[][]`) are passed through.
 *
 * @example
 * ```ts
 * import type { GenerateRequest } from '@kvc/worker-bindings'
 * const req: GenerateRequest = {
 *   input_ids: [1, 2, 3],
 *   sampling_params: { max_new_tokens: 16, temperature: 0 },
 *   rid: 'req-1',
 *   extra_key: 'tenant-a',
 * }
 * ```
 */
export interface GenerateRequest {
  text?: string | string[]
  input_ids?: number[] | number[][]
  input_embeds?: unknown
  sampling_params?: SamplingParams | SamplingParams[]
  /** Set by the stream methods; leave it out. */
  stream?: boolean
  rid?: string | string[]
  return_logprob?: boolean | boolean[]
  logprob_start_len?: number | number[]
  top_logprobs_num?: number | number[]
  token_ids_logprob?: number[] | number[][]
  return_text_in_logprobs?: boolean
  return_hidden_states?: boolean
  lora_path?: string | string[] | null
  priority?: number
  /** Classic session turn. */
  session_params?: SessionParams
  /** Session-radix-cache tag (no open step; `/close_session` releases the tagged KV). */
  session_id?: string
  /** Cache namespace (LoRA, tenant...): different keys never share KV. */
  extra_key?: string | string[]
  /** Cache salt (per-user isolation); mixed into the namespace like `extra_key`. */
  cache_salt?: string | string[]
  routing_key?: string
  conversation_id?: string
  bootstrap_host?: string | string[]
  bootstrap_port?: number | (number | null)[] | null
  bootstrap_room?: BootstrapRoom | BootstrapRoom[]
  bootstrap_pair_key?: string | string[]
  decode_tp_size?: number
  disagg_prefill_dp_rank?: number
  routed_dp_rank?: number
  /** Deprecated alias of `routed_dp_rank` (still injected by sgl-model-gateway). */
  data_parallel_rank?: number
  [key: string]: unknown
}

/**
 * `meta_info.finish_reason`: `{"type": "stop", "matched": ...}`, `{"type": "length",
 * "length": n}`, `{"type": "abort", "message", "status_code"?, "err_type"?}`; `null` while a
 * stream is running.
 *
 * @example
 * ```ts
 * import type { FinishReason } from '@kvc/worker-bindings'
 * const fr: FinishReason = { type: 'length', length: 16 }
 * ```
 */
export interface FinishReason {
  type: 'stop' | 'length' | 'abort' | (string & {})
  matched?: string | number | null
  length?: number
  message?: string
  status_code?: number
  err_type?: string
  [key: string]: unknown
}

/**
 * `meta_info` of a generate answer.
 *
 * @example
 * ```ts
 * import type { MetaInfo } from '@kvc/worker-bindings'
 * const hitRatio = (m: MetaInfo) => m.cached_tokens / Math.max(1, m.prompt_tokens)
 * ```
 */
export interface MetaInfo {
  /** The request id (`rid`). */
  id: string
  finish_reason: FinishReason | null
  prompt_tokens: number
  completion_tokens: number
  /** Prompt tokens served from the device prefix cache (≤ `prompt_tokens − 1`). */
  cached_tokens: number
  /** Newer builds: where the cached tokens came from. */
  cached_tokens_details?: Record<string, unknown> | null
  reasoning_tokens?: number
  /** End-to-end latency in seconds (final chunk only). */
  e2e_latency?: number
  weight_version?: string | null
  dp_rank?: number
  [key: string]: unknown
}

/**
 * Answer of a non-streaming `/generate` (one item; a batch answers an array of them).
 *
 * @example
 * ```ts
 * import type { GenerateResponse } from '@kvc/worker-bindings'
 * const show = (r: GenerateResponse) => `${r.text} (${r.meta_info.completion_tokens} tokens)`
 * ```
 */
export interface GenerateResponse {
  text: string
  output_ids: number[]
  meta_info: MetaInfo
  [key: string]: unknown
}

/**
 * A chat message of `/v1/chat/completions`.
 *
 * @example
 * ```ts
 * import type { ChatMessage } from '@kvc/worker-bindings'
 * const m: ChatMessage = { role: 'user', content: 'Hello' }
 * ```
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | 'developer' | (string & {})
  content: string | null | Array<{ type: string; text?: string; [key: string]: unknown }>
  name?: string
  tool_calls?: unknown[] | null
  tool_call_id?: string
  reasoning_content?: string | null
  [key: string]: unknown
}

/**
 * Body of `POST /v1/chat/completions` (OpenAI fields plus SGLang's extras: `rid`,
 * `session_params`, `bootstrap_*`, `extra_key`...).
 *
 * @example
 * ```ts
 * import type { ChatCompletionRequest } from '@kvc/worker-bindings'
 * const req: ChatCompletionRequest = { model: 'default', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 32 }
 * ```
 */
export interface ChatCompletionRequest {
  model: string
  messages: ChatMessage[]
  max_tokens?: number
  max_completion_tokens?: number
  temperature?: number
  top_p?: number
  n?: number
  stop?: string | string[]
  /** Set by the stream methods; leave it out. */
  stream?: boolean
  stream_options?: { include_usage?: boolean; continuous_usage_stats?: boolean }
  seed?: number
  user?: string
  tools?: unknown[]
  tool_choice?: unknown
  rid?: string
  session_params?: SessionParams
  extra_key?: string
  cache_salt?: string
  priority?: number
  bootstrap_host?: string
  bootstrap_port?: number | null
  bootstrap_room?: BootstrapRoom
  top_k?: number
  min_p?: number
  ignore_eos?: boolean
  separate_reasoning?: boolean
  chat_template_kwargs?: Record<string, unknown>
  [key: string]: unknown
}

/**
 * `usage` of an OpenAI-compatible answer. `prompt_tokens_details.cached_tokens` is present only
 * when the server runs with `--enable-cache-report` and the hit is > 0.
 *
 * @example
 * ```ts
 * import type { Usage } from '@kvc/worker-bindings'
 * const cached = (u: Usage) => u.prompt_tokens_details?.cached_tokens ?? 0
 * ```
 */
export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  prompt_tokens_details?: { cached_tokens?: number; [key: string]: unknown } | null
  reasoning_tokens?: number
  [key: string]: unknown
}

/**
 * Answer of a non-streaming chat completion.
 *
 * @example
 * ```ts
 * import type { ChatCompletion } from '@kvc/worker-bindings'
 * const first = (c: ChatCompletion) => c.choices[0]?.message.content
 * ```
 */
export interface ChatCompletion {
  id: string
  object: 'chat.completion'
  created: number
  model: string
  choices: Array<{
    index: number
    message: ChatMessage
    logprobs: unknown
    finish_reason: string | null
    matched_stop?: string | number | null
    [key: string]: unknown
  }>
  usage: Usage
  [key: string]: unknown
}

/**
 * One chunk of a streaming chat completion.
 *
 * @example
 * ```ts
 * import type { ChatCompletionChunk } from '@kvc/worker-bindings'
 * const delta = (c: ChatCompletionChunk) => c.choices[0]?.delta.content ?? ''
 * ```
 */
export interface ChatCompletionChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  choices: Array<{
    index: number
    delta: {
      role?: string
      content?: string | null
      reasoning_content?: string | null
      [key: string]: unknown
    }
    logprobs?: unknown
    finish_reason: string | null
    matched_stop?: string | number | null
    [key: string]: unknown
  }>
  usage?: Usage | null
  [key: string]: unknown
}

/**
 * Body of `/open_session`.
 *
 * @example
 * ```ts
 * import type { OpenSessionRequest } from '@kvc/worker-bindings'
 * const req: OpenSessionRequest = { capacity_of_str_len: 65536, session_id: 'agent-7' }
 * ```
 */
export interface OpenSessionRequest {
  /** Capacity hint of the session, in characters (required by upstream). */
  capacity_of_str_len: number
  /** The id to use (default: the server generates a uuid4 hex). */
  session_id?: string
  /** Streaming session (needs `--enable-streaming-session`). */
  streaming?: boolean
  /** Idle timeout in seconds. */
  timeout?: number
  [key: string]: unknown
}

/**
 * One item of `/get_load` (a list, one per DP rank). Versions add `num_pages`,
 * `num_pending_tokens`, `ts_tic`.
 *
 * @example
 * ```ts
 * import type { GetLoadItem } from '@kvc/worker-bindings'
 * const busy = (l: GetLoadItem) => l.num_reqs + l.num_waiting_reqs
 * ```
 */
export interface GetLoadItem {
  dp_rank: number
  num_reqs: number
  num_waiting_reqs: number
  num_tokens: number
  num_pages?: number
  num_pending_tokens?: number
  ts_tic?: number
  [key: string]: unknown
}

/**
 * One DP rank of `GET /v1/loads`.
 *
 * @example
 * ```ts
 * import type { V1LoadItem } from '@kvc/worker-bindings'
 * const free = (l: V1LoadItem) => l.max_total_num_tokens - l.num_used_tokens
 * ```
 */
export interface V1LoadItem {
  dp_rank: number
  num_running_reqs: number
  num_waiting_reqs: number
  num_total_reqs: number
  num_used_tokens: number
  /** Used plus pending-prefill tokens ("used for DP balance"). */
  num_total_tokens: number
  max_total_num_tokens: number
  /** Max over the KV / SWA / mamba pools. */
  token_usage: number
  gen_throughput: number
  cache_hit_rate: number
  utilization: number
  max_running_requests: number
  /** Newer builds. */
  num_waiting_uncached_tokens?: number
  memory?: { weight_gb: number; kv_cache_gb: number; graph_gb: number; token_capacity: number }
  speculative?: { accept_length: number; accept_rate: number }
  lora?: { slots_used: number; slots_total: number; utilization: number }
  disaggregation?: {
    mode: string
    prefill_prealloc_queue_reqs?: number
    prefill_inflight_queue_reqs?: number
    decode_prealloc_queue_reqs?: number
    decode_transfer_queue_reqs?: number
    decode_retracted_queue_reqs?: number
    kv_transfer_speed_gb_s?: number
    kv_transfer_latency_ms?: number
    [key: string]: unknown
  }
  queues?: { waiting: number; grammar: number; paused: number; retracted: number }
  [key: string]: unknown
}

/**
 * Answer of `GET /v1/loads`.
 *
 * @example
 * ```ts
 * import type { V1LoadsResponse } from '@kvc/worker-bindings'
 * const usage = (r: V1LoadsResponse) => Math.max(...r.loads.map((l) => l.token_usage))
 * ```
 */
export interface V1LoadsResponse {
  timestamp: number | string
  version: string
  dp_rank_count: number
  loads: V1LoadItem[]
  aggregate: {
    total_running_reqs: number
    total_waiting_reqs: number
    total_reqs: number
    avg_token_usage: number
    avg_throughput: number
    avg_utilization: number
    [key: string]: unknown
  }
  [key: string]: unknown
}

/**
 * `include=` sections of `/v1/loads`.
 *
 * @example
 * ```ts
 * import type { V1LoadsInclude } from '@kvc/worker-bindings'
 * const include: V1LoadsInclude[] = ['core', 'disagg', 'queues']
 * ```
 */
export type V1LoadsInclude = 'core' | 'memory' | 'spec' | 'lora' | 'disagg' | 'queues' | 'all'

/**
 * Answer of `/server_info` (`/get_server_info` on older builds): the server arguments merged with
 * the scheduler info, plus `internal_states` (per DP rank) and `version`.
 *
 * @example
 * ```ts
 * import type { ServerInfo } from '@kvc/worker-bindings'
 * const pageSize = (s: ServerInfo) => s.page_size ?? 1
 * ```
 */
export interface ServerInfo {
  model_path?: string
  served_model_name?: string
  page_size?: number
  disaggregation_mode?: 'null' | 'prefill' | 'decode' | (string & {})
  disaggregation_bootstrap_port?: number
  max_total_num_tokens?: number
  max_req_input_len?: number
  context_length?: number | null
  internal_states?: Array<Record<string, unknown>>
  version?: string
  [key: string]: unknown
}

/**
 * Answer of `/model_info` (`/get_model_info` on older builds).
 *
 * @example
 * ```ts
 * import type { ModelInfo } from '@kvc/worker-bindings'
 * const isLm = (m: ModelInfo) => m.is_generation
 * ```
 */
export interface ModelInfo {
  model_path: string
  tokenizer_path?: string | null
  is_generation: boolean
  preferred_sampling_params?: unknown
  weight_version?: string | null
  [key: string]: unknown
}
