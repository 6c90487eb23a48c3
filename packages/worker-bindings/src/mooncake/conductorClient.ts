/**
 * Mooncake Conductor (KV indexer) HTTP client.
 *
 * @module
 */
import { type CallOptions, type ClientOptions, HttpTransport } from '../transport/httpTransport.js'

/**
 * Body of `POST /register`: an engine's KV-event stream for the Conductor to index.
 *
 * @example
 * ```ts
 * import type { ConductorRegistration } from '@kvc/worker-bindings'
 * const reg: ConductorRegistration = {
 *   endpoint: 'tcp://10.0.0.6:5557', type: 'SGLang', modelname: 'qwen3', instance_id: 'd0', block_size: 16, dp_rank: 0,
 * }
 * ```
 */
export interface ConductorRegistration {
  /** ZMQ PUB endpoint of the KV events. */
  endpoint: string
  replay_endpoint?: string
  type: 'vLLM' | 'SGLang' | 'Mooncake' | (string & {})
  modelname: string
  lora_name?: string
  tenant_id?: string
  instance_id: string
  block_size: number
  dp_rank: number
  additionalsalt?: string
  [key: string]: unknown
}

/**
 * Body of `POST /unregister`.
 *
 * @example
 * ```ts
 * import type { ConductorUnregistration } from '@kvc/worker-bindings'
 * const u: ConductorUnregistration = { type: 'SGLang', modelname: 'qwen3', instance_id: 'd0', dp_rank: 0 }
 * ```
 */
export interface ConductorUnregistration {
  type: string
  modelname: string
  lora_name?: string
  tenant_id?: string
  instance_id: string
  dp_rank: number
  [key: string]: unknown
}

/**
 * Body of `POST /query` (by tokens; only complete blocks count, the scan stops at the first miss).
 *
 * @example
 * ```ts
 * import type { ConductorQuery } from '@kvc/worker-bindings'
 * const q: ConductorQuery = { model: 'qwen3', token_ids: [1, 2, 3, 4], block_size: 2 }
 * ```
 */
export interface ConductorQuery {
  model: string
  lora_name?: string
  token_ids: number[]
  tenant_id?: string
  instance_id?: string
  block_size: number
  cache_salt?: string
  [key: string]: unknown
}

/**
 * Body of `POST /query_by_hash` (RFC #1527 rolling XXH3-64 `seq_hashes`).
 *
 * @example
 * ```ts
 * import type { ConductorHashQuery } from '@kvc/worker-bindings'
 * const q: ConductorHashQuery = { model: 'qwen3', seq_hashes: [123n, 456n], block_size: 16 }
 * ```
 */
export interface ConductorHashQuery {
  model: string
  lora_name?: string
  seq_hashes: (bigint | number | string)[]
  tenant_id?: string
  instance_id?: string
  block_size: number
  cache_salt?: string
  [key: string]: unknown
}

/**
 * Per-instance match of a Conductor query: `longest_matched` tokens, blocks per medium, and per
 * DP rank.
 *
 * @example
 * ```ts
 * import type { ConductorInstanceMatch } from '@kvc/worker-bindings'
 * const gpu = (m: ConductorInstanceMatch) => m.GPU ?? 0
 * ```
 */
export interface ConductorInstanceMatch {
  longest_matched: number
  GPU?: number
  CPU?: number
  DISK?: number
  DP?: Record<string, number>
  [key: string]: unknown
}

/**
 * Answer of `/query` and `/query_by_hash`: tenant → instance → match.
 *
 * @example
 * ```ts
 * import type { ConductorQueryResult } from '@kvc/worker-bindings'
 * const best = (r: ConductorQueryResult) =>
 *   Object.values(r).flatMap((t) => Object.entries(t)).sort((a, b) => b[1].longest_matched - a[1].longest_matched)[0]
 * ```
 */
export type ConductorQueryResult = Record<string, Record<string, ConductorInstanceMatch>>

/**
 * Client of Mooncake's Conductor indexer (Go, `mooncake-conductor/`; example config
 * `http_server_port: 13333`). Registration calls are idempotent for the same instance and are
 * retried; queries are read-only and retried.
 *
 * @example
 * ```ts
 * import { ConductorClient } from '@kvc/worker-bindings'
 * const conductor = new ConductorClient({ baseURL: 'http://10.0.0.2:13333' })
 * const matches = await conductor.query({ model: 'qwen3', token_ids: [1, 2, 3, 4], block_size: 2 })
 * ```
 */
export class ConductorClient {
  readonly http: HttpTransport

  constructor(options: ClientOptions) {
    this.http = new HttpTransport(options)
  }

  get baseURL(): string {
    return this.http.baseURL
  }

  /** `POST /register` → `{"status": "registered successfully", "instance_id": ...}`. */
  async register(
    registration: ConductorRegistration,
    options?: CallOptions,
  ): Promise<{ status: string; instance_id: string; [key: string]: unknown }> {
    return this.http.json(
      { method: 'POST', path: '/register', body: registration, idempotent: true },
      options,
    )
  }

  /** `POST /unregister` → `{"removed_instances": ["id|tenant|dp", ...]}`. */
  async unregister(
    body: ConductorUnregistration,
    options?: CallOptions,
  ): Promise<{ removed_instances: string[]; [key: string]: unknown }> {
    return this.http.json({ method: 'POST', path: '/unregister', body, idempotent: true }, options)
  }

  /** `POST /query`. */
  async query(query: ConductorQuery, options?: CallOptions): Promise<ConductorQueryResult> {
    return this.http.json({ method: 'POST', path: '/query', body: query, idempotent: true }, options)
  }

  /** `POST /query_by_hash` (`bigint` hashes are sent as exact JSON integers). */
  async queryByHash(query: ConductorHashQuery, options?: CallOptions): Promise<ConductorQueryResult> {
    return this.http.json({ method: 'POST', path: '/query_by_hash', body: query, idempotent: true }, options)
  }
}
