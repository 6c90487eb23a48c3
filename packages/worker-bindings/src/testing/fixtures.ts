/**
 * Upstream payloads written from the documented formats (SGLang `http_server.py` /
 * `io_struct.py` / `v1_loads.py`, vLLM and SGLang `kv_events.py`, Mooncake's master admin and
 * Conductor docs, SGLang's `CommonKVBootstrapServer`), for contract tests: decode them with this
 * package's clients and check that every documented field name is read.
 *
 * @module
 */

/**
 * Recorded-format payloads, by endpoint. Bodies are the exact text an upstream server sends.
 *
 * @example
 * ```ts
 * import { upstreamFixtures } from '@kvc/worker-bindings/testing'
 * JSON.parse(upstreamFixtures.sglang.generate).meta_info.cached_tokens // 96
 * ```
 */
export const upstreamFixtures = {
  sglang: {
    /** `POST /generate`, non-streaming. */
    generate:
      '{"text":" Paris. It is","output_ids":[12366,13,1084,374],"meta_info":{"id":"5f1c9f2a","finish_reason":{"type":"length","length":4},"prompt_tokens":128,"weight_version":"default","completion_tokens":4,"cached_tokens":96,"e2e_latency":0.0731}}',
    /** `POST /generate` with `stream: true`, default (cumulative) mode: bytes of the whole stream. */
    generateStreamCumulative:
      'data: {"text":" Paris","output_ids":[12366],"meta_info":{"id":"r1","finish_reason":null,"prompt_tokens":7,"weight_version":"default","completion_tokens":1,"cached_tokens":0}}\n\n' +
      'data: {"text":" Paris.","output_ids":[12366,13],"meta_info":{"id":"r1","finish_reason":null,"prompt_tokens":7,"weight_version":"default","completion_tokens":2,"cached_tokens":0}}\n\n' +
      'data: {"text":" Paris. It","output_ids":[12366,13,1084],"meta_info":{"id":"r1","finish_reason":{"type":"length","length":3},"prompt_tokens":7,"weight_version":"default","completion_tokens":3,"cached_tokens":0,"e2e_latency":0.05}}\n\n' +
      'data: [DONE]\n\n',
    /** The same answer with `--incremental-streaming-output`. */
    generateStreamIncremental:
      'data: {"text":" Paris","output_ids":[12366],"meta_info":{"id":"r1","finish_reason":null,"prompt_tokens":7,"completion_tokens":1,"cached_tokens":0}}\n\n' +
      'data: {"text":".","output_ids":[13],"meta_info":{"id":"r1","finish_reason":null,"prompt_tokens":7,"completion_tokens":2,"cached_tokens":0}}\n\n' +
      'data: {"text":" It","output_ids":[1084],"meta_info":{"id":"r1","finish_reason":{"type":"length","length":3},"prompt_tokens":7,"completion_tokens":3,"cached_tokens":0,"e2e_latency":0.05}}\n\n' +
      'data: [DONE]\n\n',
    /** A stream that failed with a ValueError inside the server. */
    generateStreamError:
      'data: {"error":{"message":"The input (9000 tokens) is longer than the model\'s context length (8192 tokens)."}}\n\ndata: [DONE]\n\n',
    /** 400 from `_create_error_response` (unknown session). */
    errorUnknownSession: '{"error":{"message":"Invalid request: session id s-404 does not exist"}}',
    /** 400 from the request-validation handler (malformed JSON). */
    errorValidation:
      "{\"object\":\"error\",\"message\":\"1 validation error:\\n  {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'Expecting value'}}\",\"type\":\"Bad Request\",\"param\":null,\"code\":400}",
    /** FastAPI's default 422 (servers before the 400 handler). */
    errorFastapi422:
      '{"detail":[{"type":"missing","loc":["body","capacity_of_str_len"],"msg":"Field required","input":{}}]}',
    /** `POST /open_session`: the id as a bare JSON string. */
    openSession: '"3f0c2b1e9d8a4c7fb6e5d4c3b2a19080"',
    /** `POST /v1/chat/completions`, non-streaming, with `--enable-cache-report`. */
    chatCompletion:
      '{"id":"8c1d","object":"chat.completion","created":1767000000,"model":"qwen3","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":{"prompt_tokens":20,"total_tokens":23,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16},"reasoning_tokens":0},"metadata":{"weight_version":"default"}}',
    /** A streaming chat completion (with `stream_options.include_usage`). */
    chatStream:
      'data: {"id":"8c1d","object":"chat.completion.chunk","created":1767000000,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n' +
      'data: {"id":"8c1d","object":"chat.completion.chunk","created":1767000000,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n' +
      'data: {"id":"8c1d","object":"chat.completion.chunk","created":1767000000,"model":"qwen3","choices":[{"index":0,"delta":{"content":"lo!"},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":null}\n\n' +
      'data: {"id":"8c1d","object":"chat.completion.chunk","created":1767000000,"model":"qwen3","choices":[],"usage":{"prompt_tokens":20,"total_tokens":23,"completion_tokens":3}}\n\n' +
      'data: [DONE]\n\n',
    /** `GET /get_load`. */
    getLoad: '[{"dp_rank":0,"num_reqs":3,"num_waiting_reqs":1,"num_tokens":20480}]',
    /** `GET /v1/loads?include=all`. */
    v1Loads:
      '{"timestamp":"2026-01-05T10:00:00.000000","version":"0.5.7","dp_rank_count":1,"loads":[{"dp_rank":0,"num_running_reqs":3,"num_waiting_reqs":1,"num_total_reqs":4,"num_used_tokens":20480,"num_total_tokens":24576,"max_total_num_tokens":200000,"token_usage":0.1024,"gen_throughput":812.5,"cache_hit_rate":0.62,"utilization":0.1024,"max_running_requests":256,"num_waiting_uncached_tokens":4096,"memory":{"weight_gb":56.9,"kv_cache_gb":18.3,"graph_gb":1.2,"token_capacity":200000},"speculative":{"accept_length":0,"accept_rate":0},"lora":{"slots_used":0,"slots_total":8,"utilization":0},"disaggregation":{"mode":"decode","prefill_prealloc_queue_reqs":0,"prefill_inflight_queue_reqs":0,"decode_prealloc_queue_reqs":1,"decode_transfer_queue_reqs":2,"decode_retracted_queue_reqs":0,"kv_transfer_speed_gb_s":41.2,"kv_transfer_latency_ms":3.4},"queues":{"waiting":1,"grammar":0,"paused":0,"retracted":0}}],"aggregate":{"total_running_reqs":3,"total_waiting_reqs":1,"total_reqs":4,"avg_token_usage":0.1024,"avg_throughput":812.5,"avg_utilization":0.1024}}',
    /** `GET /get_server_info` (a selection of the server args plus scheduler info). */
    serverInfo:
      '{"model_path":"Qwen/Qwen3-30B-A3B","served_model_name":"Qwen/Qwen3-30B-A3B","page_size":64,"disaggregation_mode":"decode","disaggregation_bootstrap_port":8998,"tp_size":1,"dp_size":1,"max_total_num_tokens":200000,"max_req_input_len":40959,"context_length":40960,"internal_states":[{"last_gen_throughput":812.5,"avg_spec_accept_length":null}],"version":"0.5.7"}',
    /** `GET /metrics` (Python prometheus_client, `--enable-metrics`). */
    metrics:
      '# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{engine_type="unified",model_name="qwen3",pp_rank="0",tp_rank="0"} 3.0\n' +
      '# HELP sglang:token_usage The token usage.\n# TYPE sglang:token_usage gauge\nsglang:token_usage{engine_type="unified",model_name="qwen3",pp_rank="0",tp_rank="0"} 0.1024\n' +
      '# HELP sglang:cache_hit_rate The prefix cache hit rate.\n# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{engine_type="unified",model_name="qwen3",pp_rank="0",tp_rank="0"} 0.62\n' +
      '# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name="qwen3"} 1.048576e+06\nsglang:prompt_tokens_created{model_name="qwen3"} 1.767e+09\n' +
      '# HELP sglang:cached_tokens_total Number of cached prompt tokens.\n# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{model_name="qwen3"} 650000.0\n' +
      '# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.\n# TYPE sglang:time_to_first_token_seconds histogram\n' +
      'sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen3"} 10.0\nsglang:time_to_first_token_seconds_bucket{le="0.5",model_name="qwen3"} 18.0\nsglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen3"} 20.0\n' +
      'sglang:time_to_first_token_seconds_count{model_name="qwen3"} 20.0\nsglang:time_to_first_token_seconds_sum{model_name="qwen3"} 3.5\n',
  },
  bootstrap: {
    /** `GET /route` with every rank at −1 (current `CommonKVBootstrapServer`). */
    parallelInfo:
      '{"attn_tp_size":1,"attn_cp_size":1,"dp_size":1,"pp_size":1,"page_size":64,"kv_cache_dtype":"auto","follow_bootstrap_room":true,"enable_dsa_cache_layer_split":false,"prefill_http_port":30000}',
    /** `GET /route?engine_rank=-1&target_dp_group=-1` (older `MooncakeKVBootstrapServer`). */
    parallelInfoLegacy: '{"prefill_tp_size":8,"prefill_dp_size":1}',
    /** `GET /route?prefill_dp_rank=0&...` */
    rankAddress: '{"rank_ip":"10.0.0.5","rank_port":17000}',
  },
  mooncake: {
    /** Master `GET /query_key?key=` hit. */
    queryKey:
      '{"success":true,"data":[{"size_":65536,"buffer_address_":139872012345344,"protocol_":"rdma","transport_endpoint_":"10.0.0.5:15002"}]}',
    /** Master `GET /query_key?key=` miss (HTTP 404). */
    queryKeyMissing: '{"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}',
    /** Master `GET /batch_query_keys?keys=a,b`. */
    batchQueryKeys:
      '{"a":{"ok":true,"values":[{"size_":65536,"buffer_address_":1,"protocol_":"tcp","transport_endpoint_":"10.0.0.5:15002"}]},"b":{"ok":false,"values":[],"error":"OBJECT_NOT_FOUND"}}',
    /** Master `GET /get_segments_detail`. */
    segmentsDetail:
      '{"segments":[{"segment_name":"10.0.0.5:15002","segment_id":"7b1e","client_id":"c-1","base_address":139872012345344,"size_bytes":3355443200,"te_endpoint":"10.0.0.5:15002","protocol":"rdma","status":"OK","allocator_used_bytes":1048576,"allocator_capacity_bytes":3355443200,"allocator_usage_percent":0.03}]}',
    /** Conductor `POST /register`. */
    register: '{"status":"registered successfully","instance_id":"d0"}',
    /** Conductor `POST /query`. */
    query: '{"default":{"d0":{"longest_matched":1024,"GPU":16,"CPU":0,"DISK":0,"DP":{"0":16}}}}',
    /** Conductor `POST /unregister`. */
    unregister: '{"removed_instances":["d0|default|0"]}',
  },
} as const
