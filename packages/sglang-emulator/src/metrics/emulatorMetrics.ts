/**
 * The emulated worker's counters and its `/metrics` page (SGLang's metric names).
 *
 * @internal
 * @module
 */
import { type PromFamily, PromHistogram, renderPrometheus } from './promText.js'

const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 30,
]
const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300]

/** Counters since start (SGLang's `*_total` counters and latency histograms). @internal */
export class EmulatorCounters {
  requests = 0
  promptTokens = 0
  generationTokens = 0
  cachedTokens = 0
  evictedTokens = 0
  kvEventBatches = 0
  /** Time to first token, seconds. */
  readonly ttft = new PromHistogram(TTFT_BUCKETS)
  /** End-to-end latency, seconds. */
  readonly e2e = new PromHistogram(E2E_BUCKETS)

  /** Cached prompt tokens over prompt tokens (0 before any). */
  cacheHitRate(): number {
    return this.promptTokens === 0 ? 0 : this.cachedTokens / this.promptTokens
  }
}

/** The gauges of the page, read from the engine when it is rendered. @internal */
export interface MetricsGauges {
  readonly runningRequests: number
  readonly waitingRequests: number
  /** KV slots holding tokens that cannot be evicted. */
  readonly usedTokens: number
  readonly capacityTokens: number
}

/** The `/metrics` page, as SGLang's `--enable-metrics` writes it. @internal */
export function renderMetrics(c: EmulatorCounters, g: MetricsGauges, modelName: string): string {
  const fams: PromFamily[] = [
    {
      name: 'sglang:num_running_reqs',
      help: 'The number of running requests.',
      type: 'gauge',
      value: g.runningRequests,
    },
    {
      name: 'sglang:num_queue_reqs',
      help: 'The number of requests in the waiting queue.',
      type: 'gauge',
      value: g.waitingRequests,
    },
    {
      name: 'sglang:num_used_tokens',
      help: 'The number of used tokens.',
      type: 'gauge',
      value: g.usedTokens,
    },
    {
      name: 'sglang:token_usage',
      help: 'The token usage.',
      type: 'gauge',
      value: g.usedTokens / g.capacityTokens,
    },
    {
      name: 'sglang:gen_throughput',
      help: 'The generation throughput (token/s).',
      type: 'gauge',
      value: 0,
    },
    {
      name: 'sglang:cache_hit_rate',
      help: 'The prefix cache hit rate.',
      type: 'gauge',
      value: c.cacheHitRate(),
    },
    {
      name: 'sglang:max_total_num_tokens',
      help: 'Maximum total number of tokens.',
      type: 'gauge',
      value: g.capacityTokens,
    },
    {
      name: 'sglang:num_retracted_reqs',
      help: 'The number of retracted requests.',
      type: 'gauge',
      value: 0,
    },
    {
      name: 'sglang:prompt_tokens_total',
      help: 'Number of prefill tokens processed.',
      type: 'counter',
      value: c.promptTokens,
    },
    {
      name: 'sglang:generation_tokens_total',
      help: 'Number of generation tokens processed.',
      type: 'counter',
      value: c.generationTokens,
    },
    {
      name: 'sglang:cached_tokens_total',
      help: 'Number of cached prompt tokens.',
      type: 'counter',
      value: c.cachedTokens,
    },
    {
      name: 'sglang:evicted_tokens_total',
      help: 'Number of evicted tokens.',
      type: 'counter',
      value: c.evictedTokens,
    },
    {
      name: 'sglang:num_requests_total',
      help: 'Number of requests processed.',
      type: 'counter',
      value: c.requests,
    },
    {
      name: 'sglang:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds.',
      type: 'histogram',
      histogram: c.ttft,
    },
    {
      name: 'sglang:e2e_request_latency_seconds',
      help: 'Histogram of End-to-end request latency in seconds',
      type: 'histogram',
      histogram: c.e2e,
    },
  ]
  return renderPrometheus(fams, { model_name: modelName })
}
