/**
 * SGLang's `/metrics` read into typed values.
 *
 * @module
 */
import { type HistogramValue, type MetricFamily, histogramOf } from './prometheusText.js'

/**
 * SGLang's Prometheus metrics as numbers. Every field is `undefined` when the server does not
 * export it (names drift between versions; both the colon form `sglang:x` and the underscore form
 * `sglang_x` are read). Values are summed over label sets (model names, DP ranks, extra labels),
 * except the ratios (`tokenUsage`, `cacheHitRate`), which take the maximum.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * const m = await new SglangClient({ baseURL: 'http://127.0.0.1:30000' }).metrics()
 * console.log(m.numRunningReqs, m.tokenUsage, m.cachedTokensTotal, m.timeToFirstToken?.count)
 * ```
 */
export interface SglangMetrics {
  /** `sglang:num_running_reqs`. */
  readonly numRunningReqs: number | undefined
  /** `sglang:num_queue_reqs`. */
  readonly numQueueReqs: number | undefined
  /** `sglang:num_used_tokens`. */
  readonly numUsedTokens: number | undefined
  /** `sglang:token_usage` (max over label sets). */
  readonly tokenUsage: number | undefined
  /** `sglang:gen_throughput` (tokens/s). */
  readonly genThroughput: number | undefined
  /** `sglang:cache_hit_rate`: windowed per batch, 0 when idle; prefer the counters for rates. */
  readonly cacheHitRate: number | undefined
  /** `sglang:max_total_num_tokens`. */
  readonly maxTotalNumTokens: number | undefined
  /** `sglang:num_retracted_reqs`. */
  readonly numRetractedReqs: number | undefined
  /** `sglang:prompt_tokens_total`. */
  readonly promptTokensTotal: number | undefined
  /** `sglang:generation_tokens_total`. */
  readonly generationTokensTotal: number | undefined
  /** `sglang:cached_tokens_total`. */
  readonly cachedTokensTotal: number | undefined
  /** `sglang:evicted_tokens_total`. */
  readonly evictedTokensTotal: number | undefined
  /** `sglang:time_to_first_token_seconds`. */
  readonly timeToFirstToken: HistogramValue | undefined
  /** `sglang:e2e_request_latency_seconds`. */
  readonly e2eRequestLatency: HistogramValue | undefined
  /** `sglang:time_per_output_token_seconds` (or `inter_token_latency_seconds` on newer builds). */
  readonly timePerOutputToken: HistogramValue | undefined
  /** Every family, as parsed. */
  readonly families: readonly MetricFamily[]
}

/**
 * Reads SGLang's metrics out of parsed families.
 *
 * @example
 * ```ts
 * import { parsePrometheusText, toSglangMetrics } from '@kvc/worker-bindings'
 * const m = toSglangMetrics(parsePrometheusText('sglang:num_running_reqs{model_name="m"} 3\n'))
 * m.numRunningReqs // 3
 * ```
 */
export function toSglangMetrics(families: readonly MetricFamily[]): SglangMetrics {
  const index = new Map<string, MetricFamily>()
  for (const f of families) {
    index.set(f.name, f)
    for (const s of f.samples) if (!index.has(s.name)) index.set(s.name, f)
  }
  const find = (...names: string[]): MetricFamily | undefined => {
    for (const n of names) {
      for (const v of [n, n.replace('sglang:', 'sglang_')]) {
        const f = index.get(v)
        if (f !== undefined) return f
      }
    }
    return undefined
  }
  const sumOf = (...names: string[]): number | undefined => {
    const f = find(...names)
    if (f === undefined) return undefined
    let acc: number | undefined
    for (const s of f.samples) {
      if (s.name.endsWith('_created')) continue
      acc = (acc ?? 0) + s.value
    }
    return acc
  }
  const maxOf = (name: string): number | undefined => {
    const f = find(name)
    if (f === undefined) return undefined
    let acc: number | undefined
    for (const s of f.samples) acc = acc === undefined ? s.value : Math.max(acc, s.value)
    return acc
  }
  const hist = (...names: string[]): HistogramValue | undefined => {
    const f = find(...names)
    return f === undefined ? undefined : histogramOf(f)
  }
  return {
    numRunningReqs: sumOf('sglang:num_running_reqs'),
    numQueueReqs: sumOf('sglang:num_queue_reqs'),
    numUsedTokens: sumOf('sglang:num_used_tokens'),
    tokenUsage: maxOf('sglang:token_usage'),
    genThroughput: sumOf('sglang:gen_throughput'),
    cacheHitRate: maxOf('sglang:cache_hit_rate'),
    maxTotalNumTokens: sumOf('sglang:max_total_num_tokens'),
    numRetractedReqs: sumOf('sglang:num_retracted_reqs'),
    promptTokensTotal: sumOf('sglang:prompt_tokens_total', 'sglang:prompt_tokens'),
    generationTokensTotal: sumOf('sglang:generation_tokens_total', 'sglang:generation_tokens'),
    cachedTokensTotal: sumOf('sglang:cached_tokens_total', 'sglang:cached_tokens'),
    evictedTokensTotal: sumOf('sglang:evicted_tokens_total', 'sglang:evicted_tokens'),
    timeToFirstToken: hist('sglang:time_to_first_token_seconds'),
    e2eRequestLatency: hist('sglang:e2e_request_latency_seconds'),
    timePerOutputToken: hist('sglang:time_per_output_token_seconds', 'sglang:inter_token_latency_seconds'),
    families,
  }
}
