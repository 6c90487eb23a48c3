/**
 * Mooncake Transfer Engine HTTP metadata server client (`GET/PUT/DELETE /metadata?key=`).
 *
 * @module
 */
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import { type CallOptions, type ClientOptions, HttpTransport } from '../transport/httpTransport.js'

/**
 * Key of a Transfer Engine RAM segment: `mooncake/[<cluster>/]ram/<segment>`, or
 * `mooncake/[<cluster>/]<segment>` when the segment name already contains a `/`.
 *
 * @example
 * ```ts
 * import { mooncakeSegmentKey } from '@kvc/worker-bindings'
 * mooncakeSegmentKey('10.0.0.5:15002') // 'mooncake/ram/10.0.0.5:15002'
 * ```
 */
export function mooncakeSegmentKey(segmentName: string, clusterId?: string): string {
  const prefix = `mooncake/${clusterId ? `${clusterId}/` : ''}`
  return segmentName.includes('/') ? `${prefix}${segmentName}` : `${prefix}ram/${segmentName}`
}

/**
 * Key of a Transfer Engine RPC descriptor: `mooncake/[<cluster>/]rpc_meta/<server>`.
 *
 * @example
 * ```ts
 * import { mooncakeRpcMetaKey } from '@kvc/worker-bindings'
 * mooncakeRpcMetaKey('node-1', 'c1') // 'mooncake/c1/rpc_meta/node-1'
 * ```
 */
export function mooncakeRpcMetaKey(serverName: string, clusterId?: string): string {
  return `mooncake/${clusterId ? `${clusterId}/` : ''}rpc_meta/${serverName}`
}

/**
 * Value of an `rpc_meta` key.
 *
 * @example
 * ```ts
 * import type { MooncakeRpcMeta } from '@kvc/worker-bindings'
 * const meta: MooncakeRpcMeta = { ip_or_host_name: '10.0.0.5', rpc_port: 15002 }
 * ```
 */
export interface MooncakeRpcMeta {
  ip_or_host_name: string
  rpc_port: number
  [key: string]: unknown
}

/**
 * Client of Mooncake's HTTP metadata server (the C++ one embedded in `mooncake_master
 * --enable_http_metadata_server`, the Python `mooncake_http_metadata_server`, or the Go example:
 * same API). The base URL is the full metadata URL as Mooncake configures it
 * (`http://host:8080/metadata`); the key goes in `?key=`.
 *
 * `get` answers `undefined` on 404; `put` of an existing `rpc_meta` key with a different value is
 * refused upstream with 400 (a {@link WorkerApiError}); `delete` answers whether the key existed.
 *
 * @example
 * ```ts
 * import { MooncakeMetadataClient, mooncakeSegmentKey } from '@kvc/worker-bindings'
 * const meta = new MooncakeMetadataClient({ baseURL: 'http://10.0.0.2:8080/metadata' })
 * const seg = await meta.getJson(mooncakeSegmentKey('10.0.0.5:15002'))
 * ```
 */
export class MooncakeMetadataClient {
  readonly http: HttpTransport

  constructor(options: ClientOptions) {
    this.http = new HttpTransport(options)
  }

  get baseURL(): string {
    return this.http.baseURL
  }

  /** The raw value of `key`, or `undefined` when absent (404). */
  async get(key: string, options?: CallOptions): Promise<string | undefined> {
    checkKey(key)
    const res = await this.http.text(
      { method: 'GET', path: '', query: { key }, idempotent: true, acceptStatus: [404] },
      options,
    )
    return res.status === 404 ? undefined : res.text
  }

  /** The value of `key` decoded as JSON, or `undefined` when absent. */
  async getJson<T = unknown>(key: string, options?: CallOptions): Promise<T | undefined> {
    const text = await this.get(key, options)
    if (text === undefined) return undefined
    try {
      return JSON.parse(text) as T
    } catch (cause) {
      throw new WorkerBindingsError('BAD_RESPONSE', `metadata ${key} is not JSON`, {
        value: text.slice(0, 2048),
        cause,
        endpoint: this.baseURL,
      })
    }
  }

  /** Stores `value` (a string as-is, anything else as JSON) under `key`. */
  async put(key: string, value: unknown, options?: CallOptions): Promise<void> {
    checkKey(key)
    const body = typeof value === 'string' ? value : JSON.stringify(value)
    await this.http.text(
      {
        method: 'PUT',
        path: '',
        query: { key },
        body,
        rawBody: { contentType: 'application/json' },
        idempotent: true,
      },
      options,
    )
  }

  /** Deletes `key`; `false` when it did not exist (404). */
  async delete(key: string, options?: CallOptions): Promise<boolean> {
    checkKey(key)
    const res = await this.http.text(
      { method: 'DELETE', path: '', query: { key }, idempotent: true, acceptStatus: [404] },
      options,
    )
    return res.status !== 404
  }
}

function checkKey(key: string): void {
  if (typeof key !== 'string' || key.length === 0) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'metadata key must be a non-empty string', {
      value: key,
    })
  }
}
