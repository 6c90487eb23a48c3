/**
 * SGLang's answers, field by field: `/generate` results and stream chunks, OpenAI chat
 * completions, server and model info, loads and the model list.
 *
 * @internal
 * @module
 */
import type { EmulatorConfig } from '../config/options.js'
import type { EngineLoad } from '../engine/engine.js'
import type { EngineOutput, Progress } from '../engine/types.js'

/** The version the emulator reports. @internal */
export const VERSION = '0.5.0-kvc-emulator'

/** How much of a stream was sent (incremental output sends only what is new). @internal */
export interface StreamState {
  ids: number
  text: number
}

/**
 * A `/generate` answer (or one stream chunk) for request `rid`: cumulative, or only what is new
 * since `state` with `--incremental-streaming-output`. @internal
 */
export function generateChunk(
  config: EmulatorConfig,
  rid: string,
  p: Progress,
  state?: StreamState,
): Record<string, unknown> {
  const incremental = config.incrementalStreamingOutput && state !== undefined
  const ids = incremental ? p.outputIds.slice(state.ids) : p.outputIds.slice()
  const text = incremental ? p.text.slice(state.text) : p.text
  if (incremental) {
    state.ids = p.outputIds.length
    state.text = p.text.length
  }
  const meta: Record<string, unknown> = {
    id: rid,
    finish_reason: p.finishReason,
    prompt_tokens: p.promptTokens,
    weight_version: config.weightVersion,
    completion_tokens: p.outputIds.length,
    cached_tokens: p.cachedTokens,
  }
  if (p.e2e !== undefined) meta.e2e_latency = p.e2e
  return { text, output_ids: ids, meta_info: meta }
}

/** The answer of a request aborted before it produced anything. @internal */
export function abortedProgress(promptTokens: number, finishReason: Record<string, unknown>): Progress {
  return { outputIds: [], text: '', promptTokens, cachedTokens: 0, finishReason }
}

/** The chat completion's identity, shared by its chunks. @internal */
export interface ChatIdentity {
  readonly id: string
  readonly created: number
  readonly model: string
}

function usage(config: EmulatorConfig, o: EngineOutput): Record<string, unknown> {
  return {
    prompt_tokens: o.promptTokens,
    total_tokens: o.promptTokens + o.outputIds.length,
    completion_tokens: o.outputIds.length,
    prompt_tokens_details:
      config.enableCacheReport && o.cachedTokens > 0 ? { cached_tokens: o.cachedTokens } : null,
    reasoning_tokens: 0,
  }
}

function finishName(fr: Record<string, unknown> | null): string | null {
  return fr === null ? null : fr.type === 'abort' ? 'abort' : (fr.type as string)
}

function matchedStop(fr: Record<string, unknown> | null): unknown {
  return fr?.type === 'stop' ? (fr.matched ?? null) : null
}

/** A non-streamed chat completion. @internal */
export function chatCompletion(
  config: EmulatorConfig,
  c: ChatIdentity,
  out: EngineOutput,
): Record<string, unknown> {
  return {
    id: c.id,
    object: 'chat.completion',
    created: c.created,
    model: c.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: out.text, reasoning_content: null, tool_calls: null },
        logprobs: null,
        finish_reason: finishName(out.finishReason),
        matched_stop: matchedStop(out.finishReason),
      },
    ],
    usage: usage(config, out),
    metadata: { weight_version: config.weightVersion },
  }
}

/** One chunk of a streamed chat completion: the text since `state` (the role with the first). @internal */
export function chatChunk(
  c: ChatIdentity,
  p: Progress,
  state: StreamState,
  first: boolean,
): Record<string, unknown> {
  const delta: Record<string, unknown> = {}
  if (first) delta.role = 'assistant'
  delta.content = p.text.slice(state.text)
  state.text = p.text.length
  return {
    id: c.id,
    object: 'chat.completion.chunk',
    created: c.created,
    model: c.model,
    choices: [
      {
        index: 0,
        delta,
        logprobs: null,
        finish_reason: finishName(p.finishReason),
        matched_stop: matchedStop(p.finishReason),
      },
    ],
    usage: null,
  }
}

/** The usage chunk that ends a streamed chat completion with `stream_options.include_usage`. @internal */
export function chatUsageChunk(
  config: EmulatorConfig,
  c: ChatIdentity,
  out: EngineOutput,
): Record<string, unknown> {
  return {
    id: c.id,
    object: 'chat.completion.chunk',
    created: c.created,
    model: c.model,
    choices: [],
    usage: usage(config, out),
  }
}

/** `/model_info`. @internal */
export function modelInfo(config: EmulatorConfig): Record<string, unknown> {
  return {
    model_path: config.modelName,
    tokenizer_path: config.modelName,
    is_generation: true,
    preferred_sampling_params: null,
    weight_version: config.weightVersion,
  }
}

/** Where the worker publishes: the bootstrap port and the KV-event sockets. @internal */
export interface Endpoints {
  readonly bootstrapPort: number | undefined
  /** `kv_events_config` as SGLang reports it (a JSON string), `null` without KV events. */
  readonly kvEventsConfig: string | null
}

/** `/server_info`. @internal */
export function serverInfo(config: EmulatorConfig, endpoints: Endpoints): Record<string, unknown> {
  return {
    model_path: config.modelName,
    tokenizer_path: config.modelName,
    served_model_name: config.modelName,
    page_size: config.pageSize,
    context_length: config.contextLength,
    disaggregation_mode: config.role === 'colocated' ? 'null' : config.role,
    disaggregation_bootstrap_port: endpoints.bootstrapPort ?? 8998,
    disaggregation_transfer_backend: 'mooncake',
    tp_size: 1,
    dp_size: 1,
    enable_metrics: true,
    incremental_streaming_output: config.incrementalStreamingOutput,
    enable_cache_report: config.enableCacheReport,
    enable_streaming_session: config.enableStreamingSession,
    kv_events_config: endpoints.kvEventsConfig,
    max_total_num_tokens: config.capacityTokens,
    max_req_input_len: config.contextLength - 1,
    internal_states: [
      {
        last_gen_throughput: 0,
        avg_spec_accept_length: null,
        max_total_num_tokens: config.capacityTokens,
      },
    ],
    version: VERSION,
  }
}

/** `/get_load`. @internal */
export function getLoad(load: EngineLoad): unknown[] {
  return [
    {
      dp_rank: 0,
      num_reqs: load.running + load.waiting,
      num_waiting_reqs: load.waiting,
      num_tokens: load.usedTokens,
    },
  ]
}

/** `/v1/loads` (`include`, `dp_rank`, `format=prometheus`): a JSON body, or Prometheus text. @internal */
export function v1Loads(
  url: URL,
  config: EmulatorConfig,
  load: EngineLoad,
  cacheHitRate: number,
): { readonly json: unknown } | { readonly text: string } {
  const include = new Set((url.searchParams.get('include') ?? 'core').split(',').map((s) => s.trim()))
  const all = include.has('all')
  const dpRank = url.searchParams.get('dp_rank')
  const cap = config.capacityTokens
  const used = load.usedTokens
  const usage = used / cap
  const item: Record<string, unknown> = {
    dp_rank: 0,
    num_running_reqs: load.running,
    num_waiting_reqs: load.waiting,
    num_total_reqs: load.running + load.waiting,
    num_used_tokens: used,
    num_total_tokens: used,
    max_total_num_tokens: cap,
    token_usage: usage,
    gen_throughput: 0,
    cache_hit_rate: cacheHitRate,
    utilization: usage,
    max_running_requests: 4096,
    num_waiting_uncached_tokens: 0,
  }
  const cost = config.timing.cost
  if (all || include.has('memory')) {
    item.memory = {
      weight_gb: 0,
      kv_cache_gb: (cap * cost.kvBytesPerToken) / 2 ** 30,
      graph_gb: 0,
      token_capacity: cap,
    }
  }
  if (all || include.has('spec')) item.speculative = { accept_length: 0, accept_rate: 0 }
  if (all || include.has('lora')) item.lora = { slots_used: 0, slots_total: 0, utilization: 0 }
  if (all || include.has('disagg')) {
    item.disaggregation = {
      mode: config.role === 'colocated' ? 'null' : config.role,
      prefill_prealloc_queue_reqs: 0,
      prefill_inflight_queue_reqs: config.role === 'prefill' ? load.running : 0,
      decode_prealloc_queue_reqs: 0,
      decode_transfer_queue_reqs: load.transferQueueDepth,
      decode_retracted_queue_reqs: 0,
      kv_transfer_speed_gb_s: cost.linkGbps / 8,
      kv_transfer_latency_ms: cost.transferSetupS * 1000,
    }
  }
  if (all || include.has('queues'))
    item.queues = { waiting: load.waiting, grammar: 0, paused: 0, retracted: 0 }
  const loads = dpRank !== null && Number(dpRank) !== 0 ? [] : [item]
  if (url.searchParams.get('format') === 'prometheus') {
    let text = ''
    for (const l of loads) {
      for (const [k, v] of Object.entries(l)) {
        if (typeof v === 'number' && k !== 'dp_rank') text += `sglang_${k}{dp_rank="${l.dp_rank}"} ${v}\n`
      }
    }
    return { text }
  }
  return {
    json: {
      timestamp: new Date().toISOString(),
      version: VERSION,
      dp_rank_count: 1,
      loads,
      aggregate: {
        total_running_reqs: load.running,
        total_waiting_reqs: load.waiting,
        total_reqs: load.running + load.waiting,
        avg_token_usage: usage,
        avg_throughput: 0,
        avg_utilization: usage,
      },
    },
  }
}

/** `/v1/models`. @internal */
export function v1Models(config: EmulatorConfig): Record<string, unknown> {
  return {
    object: 'list',
    data: [
      {
        id: config.modelName,
        object: 'model',
        created: Math.floor(Date.now() / 1000),
        owned_by: 'sglang',
        root: config.modelName,
        max_model_len: config.contextLength,
      },
    ],
  }
}
