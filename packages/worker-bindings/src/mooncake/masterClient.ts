/**
 * Mooncake master admin HTTP client (`--metrics_port`, default 9003).
 *
 * @module
 */
import { WorkerApiError } from '../errors/workerBindingsError.js'
import { type MetricFamily, parsePrometheusText } from '../metrics/prometheusText.js'
import {
  type CallOptions,
  type ClientOptions,
  HttpTransport,
  parseJsonBody,
} from '../transport/httpTransport.js'

/**
 * One replica descriptor of `/query_key`.
 *
 * @example
 * ```ts
 * import type { MooncakeReplicaInfo } from '@kvc/worker-bindings'
 * const where = (r: MooncakeReplicaInfo) => r.transport_endpoint_
 * ```
 */
export interface MooncakeReplicaInfo {
  size_: number
  buffer_address_: number
  protocol_: string
  transport_endpoint_: string
  [key: string]: unknown
}

/**
 * Per-key answer of `/batch_query_keys`.
 *
 * @example
 * ```ts
 * import type { MooncakeBatchKeyInfo } from '@kvc/worker-bindings'
 * const present = (k: MooncakeBatchKeyInfo) => k.ok && k.values.length > 0
 * ```
 */
export interface MooncakeBatchKeyInfo {
  ok: boolean
  values: MooncakeReplicaInfo[]
  disk_values?: unknown[]
  local_disk_values?: unknown[]
  nof_values?: unknown[]
  error?: string
  [key: string]: unknown
}

/**
 * One segment of `/get_segments_detail`.
 *
 * @example
 * ```ts
 * import type { MooncakeSegmentDetail } from '@kvc/worker-bindings'
 * const free = (s: MooncakeSegmentDetail) => s.allocator_capacity_bytes - s.allocator_used_bytes
 * ```
 */
export interface MooncakeSegmentDetail {
  segment_name: string
  segment_id: string
  client_id: string
  base_address: number
  size_bytes: number
  te_endpoint: string
  protocol: string
  status: string
  allocator_used_bytes: number
  allocator_capacity_bytes: number
  allocator_usage_percent: number
  [key: string]: unknown
}

/**
 * Client of the Mooncake master's admin HTTP server (the `metrics_port`, 9003 by default; the
 * docs' examples show 8080, but the code binds the admin routes to `metrics_port`). Read-only
 * lookups (`/batch_query_keys` takes no lease and triggers no promotion: the cheapest way for a
 * router to ask "is this block in the pool?").
 *
 * `queryKey` answers `undefined` for a missing key (404, `error_code: -704 OBJECT_NOT_FOUND`);
 * other failures (503 with `-1011` when the service plane is inactive) throw {@link WorkerApiError}.
 *
 * @example
 * ```ts
 * import { MooncakeMasterClient } from '@kvc/worker-bindings'
 * const master = new MooncakeMasterClient({ baseURL: 'http://10.0.0.2:9003' })
 * const hits = await master.batchQueryKeys(['12345', '67890'])
 * ```
 */
export class MooncakeMasterClient {
  readonly http: HttpTransport

  constructor(options: ClientOptions) {
    this.http = new HttpTransport(options)
  }

  get baseURL(): string {
    return this.http.baseURL
  }

  /** `GET /health`: `true` when the master answers 200. */
  async health(options?: CallOptions): Promise<boolean> {
    try {
      await this.http.text({ method: 'GET', path: '/health', idempotent: true }, options)
      return true
    } catch (err) {
      if (err instanceof WorkerApiError) return false
      throw err
    }
  }

  /** `GET /metrics` (Prometheus text 0.0.4), parsed. */
  async metrics(options?: CallOptions): Promise<MetricFamily[]> {
    const res = await this.http.text({ method: 'GET', path: '/metrics', idempotent: true }, options)
    return parsePrometheusText(res.text)
  }

  /** `GET /metrics/summary` (human-readable text). */
  async metricsSummary(options?: CallOptions): Promise<string> {
    return (await this.http.text({ method: 'GET', path: '/metrics/summary', idempotent: true }, options)).text
  }

  /** `GET /query_key?key=`: the replicas of `key`, or `undefined` when it is not stored. */
  async queryKey(key: string, options?: CallOptions): Promise<MooncakeReplicaInfo[] | undefined> {
    const res = await this.http.text(
      { method: 'GET', path: '/query_key', query: { key }, idempotent: true, acceptStatus: [404] },
      options,
    )
    if (res.status === 404) return undefined
    const json = parseJsonBody<{
      success?: boolean
      data?: MooncakeReplicaInfo[]
      error_code?: number
    }>(res.text, 'GET /query_key', this.http.baseURL)
    if (json.success === false) return undefined
    return json.data ?? []
  }

  /** `GET /batch_query_keys?keys=a,b,c`: per key, the replicas (read-only: no lease). */
  async batchQueryKeys(
    keys: readonly string[],
    options?: CallOptions,
  ): Promise<Record<string, MooncakeBatchKeyInfo>> {
    const json = await this.http.json<Record<string, unknown>>(
      { method: 'GET', path: '/batch_query_keys', query: { keys: keys.join(',') }, idempotent: true },
      options,
    )
    // Answers either map keys directly, or wrap them as {success, data: {...}}.
    const data = (typeof json.data === 'object' && json.data !== null ? json.data : json) as Record<
      string,
      MooncakeBatchKeyInfo
    >
    return data
  }

  /** `GET /get_all_keys` (newline-separated). */
  async getAllKeys(options?: CallOptions): Promise<string[]> {
    const res = await this.http.text({ method: 'GET', path: '/get_all_keys', idempotent: true }, options)
    return res.text
      .split('\n')
      .map((s) => s.trim())
      .filter((s) => s.length > 0)
  }

  /** `GET /get_all_segments` (newline-separated segment names). */
  async getAllSegments(options?: CallOptions): Promise<string[]> {
    const res = await this.http.text({ method: 'GET', path: '/get_all_segments', idempotent: true }, options)
    return res.text
      .split('\n')
      .map((s) => s.trim())
      .filter((s) => s.length > 0)
  }

  /** `GET /query_segment?segment=` (used and capacity bytes, as text). */
  async querySegment(segment: string, options?: CallOptions): Promise<string> {
    return (
      await this.http.text(
        { method: 'GET', path: '/query_segment', query: { segment }, idempotent: true },
        options,
      )
    ).text
  }

  /** `GET /get_segments_detail`. */
  async getSegmentsDetail(options?: CallOptions): Promise<MooncakeSegmentDetail[]> {
    const json = await this.http.json<unknown>(
      { method: 'GET', path: '/get_segments_detail', idempotent: true },
      options,
    )
    if (Array.isArray(json)) return json as MooncakeSegmentDetail[]
    const o = json as Record<string, unknown>
    const list = o.segments ?? o.data
    return Array.isArray(list) ? (list as MooncakeSegmentDetail[]) : []
  }
}
