/**
 * Client of the prefill worker's bootstrap server (SGLang `CommonKVBootstrapServer`, aiohttp, on
 * `--disaggregation-bootstrap-port`, default 8998).
 *
 * @module
 */
import { WorkerApiError } from '../errors/workerBindingsError.js'
import {
  type CallOptions,
  type ClientOptions,
  HttpTransport,
  parseJsonBody,
} from '../transport/httpTransport.js'

/**
 * Body of `PUT /route` in current SGLang (`CommonKVBootstrapServer`): one call per prefill rank.
 *
 * @example
 * ```ts
 * import type { PrefillRankRegistration } from '@kvc/worker-bindings'
 * const reg: PrefillRankRegistration = {
 *   attn_tp_size: 1, attn_tp_rank: 0, attn_cp_size: 1, attn_cp_rank: 0, attn_dp_size: 1, attn_dp_rank: 0,
 *   pp_size: 1, pp_rank: 0, system_dp_size: 1, system_dp_rank: 0, rank_ip: '10.0.0.5', rank_port: 17000,
 *   page_size: 16, kv_cache_dtype: 'auto',
 * }
 * ```
 */
export interface PrefillRankRegistration {
  attn_tp_size: number
  attn_tp_rank: number
  attn_cp_size: number
  attn_cp_rank: number
  attn_dp_size: number
  attn_dp_rank: number
  pp_size: number
  pp_rank: number
  system_dp_size: number
  system_dp_rank: number
  /** IP of the rank's ZMQ PULL socket. */
  rank_ip: string
  /** The rank's ZMQ PULL port. */
  rank_port: number
  page_size: number
  kv_cache_dtype: string
  load_balance_method?: string
  enable_dsa_cache_layer_split?: boolean
  prefill_http_port?: number
  [key: string]: unknown
}

/**
 * Body of `PUT /route` in older SGLang (`MooncakeKVBootstrapServer`, early 2025).
 *
 * @example
 * ```ts
 * import type { LegacyPrefillRankRegistration } from '@kvc/worker-bindings'
 * const reg: LegacyPrefillRankRegistration = { role: 'Prefill', rank_ip: '10.0.0.5', rank_port: 17000, engine_rank: 0 }
 * ```
 */
export interface LegacyPrefillRankRegistration {
  role: 'Prefill' | (string & {})
  rank_ip: string
  rank_port: number
  engine_rank: number
  tp_size?: number
  dp_size?: number
  [key: string]: unknown
}

/**
 * The prefill's parallel layout: the answer of `GET /route` with every rank at `-1`. Current
 * builds send `{attn_tp_size, attn_cp_size, dp_size, pp_size, page_size, kv_cache_dtype,
 * follow_bootstrap_room, ...}`; older ones `{prefill_tp_size, prefill_dp_size}`.
 *
 * @example
 * ```ts
 * import type { PrefillServerInfo } from '@kvc/worker-bindings'
 * const dp = (i: PrefillServerInfo) => i.dp_size ?? i.prefill_dp_size ?? 1
 * ```
 */
export interface PrefillServerInfo {
  attn_tp_size?: number
  attn_cp_size?: number
  dp_size?: number
  pp_size?: number
  page_size?: number
  kv_cache_dtype?: string
  follow_bootstrap_room?: boolean
  enable_dsa_cache_layer_split?: boolean
  prefill_http_port?: number | null
  prefill_tp_size?: number
  prefill_dp_size?: number
  [key: string]: unknown
}

/**
 * Address of one prefill rank's ZMQ PULL socket.
 *
 * @example
 * ```ts
 * import type { PrefillRankAddress } from '@kvc/worker-bindings'
 * const zmqUrl = (a: PrefillRankAddress) => `tcp://${a.rank_ip}:${a.rank_port}`
 * ```
 */
export interface PrefillRankAddress {
  rank_ip: string
  rank_port: number
  [key: string]: unknown
}

/**
 * Client of a prefill worker's bootstrap server. `GET /route` answers 503 until every prefill
 * rank has registered, which makes {@link PrefillBootstrapClient.parallelInfo} a readiness probe;
 * `GET /health` is the liveness probe SGLang's decode side polls (every 5 s, failing rooms after 2
 * misses).
 *
 * Versions: the current query is `prefill_dp_rank`, `prefill_cp_rank`, `target_tp_rank`,
 * `target_pp_rank`; older servers take `engine_rank` and `target_dp_group`. `parallelInfo`
 * tries the current form and falls back on 400.
 *
 * @example
 * ```ts
 * import { PrefillBootstrapClient } from '@kvc/worker-bindings'
 * const boot = new PrefillBootstrapClient({ baseURL: 'http://10.0.0.5:8998' })
 * const info = await boot.parallelInfo() // throws WorkerApiError 503 until ready
 * const rank0 = await boot.rankAddress({ dpRank: 0, tpRank: 0 })
 * ```
 */
export class PrefillBootstrapClient {
  readonly http: HttpTransport
  #legacy: boolean | undefined

  constructor(options: ClientOptions) {
    this.http = new HttpTransport(options)
  }

  get baseURL(): string {
    return this.http.baseURL
  }

  /** `GET /route` with every rank at −1: the prefill's parallel layout. 503 (WorkerApiError) until ready. */
  async parallelInfo(options?: CallOptions): Promise<PrefillServerInfo> {
    if (this.#legacy !== true) {
      try {
        const info = await this.http.json<PrefillServerInfo>(
          {
            method: 'GET',
            path: '/route',
            query: { prefill_dp_rank: -1, prefill_cp_rank: -1, target_tp_rank: -1, target_pp_rank: -1 },
            idempotent: true,
          },
          options,
        )
        this.#legacy = false
        return info
      } catch (err) {
        if (!(err instanceof WorkerApiError && err.status === 400) || this.#legacy === false) throw err
      }
    }
    const info = await this.http.json<PrefillServerInfo>(
      { method: 'GET', path: '/route', query: { engine_rank: -1, target_dp_group: -1 }, idempotent: true },
      options,
    )
    this.#legacy = true
    return info
  }

  /** `true` once `GET /route` answers the layout (every rank registered). */
  async isReady(options?: CallOptions): Promise<boolean> {
    try {
      await this.parallelInfo({ maxRetries: 0, ...options })
      return true
    } catch (err) {
      if (err instanceof WorkerApiError && err.status === 503) return false
      throw err
    }
  }

  /** `GET /route?prefill_dp_rank=&prefill_cp_rank=&target_tp_rank=&target_pp_rank=`; `undefined` on 404. */
  async rankAddress(
    ranks: {
      readonly dpRank: number
      readonly cpRank?: number
      readonly tpRank: number
      readonly ppRank?: number
    },
    options?: CallOptions,
  ): Promise<PrefillRankAddress | undefined> {
    const res = await this.http.text(
      {
        method: 'GET',
        path: '/route',
        query: {
          prefill_dp_rank: ranks.dpRank,
          prefill_cp_rank: ranks.cpRank ?? 0,
          target_tp_rank: ranks.tpRank,
          target_pp_rank: ranks.ppRank ?? 0,
        },
        idempotent: true,
        acceptStatus: [404],
      },
      options,
    )
    return res.status === 404
      ? undefined
      : parseJsonBody<PrefillRankAddress>(res.text, 'GET /route', this.http.baseURL)
  }

  /** Older servers: `GET /route?engine_rank=&target_dp_group=`; `undefined` on 404. */
  async rankAddressLegacy(
    ranks: { readonly engineRank: number; readonly targetDpGroup: number },
    options?: CallOptions,
  ): Promise<PrefillRankAddress | undefined> {
    const res = await this.http.text(
      {
        method: 'GET',
        path: '/route',
        query: { engine_rank: ranks.engineRank, target_dp_group: ranks.targetDpGroup },
        idempotent: true,
        acceptStatus: [404],
      },
      options,
    )
    return res.status === 404
      ? undefined
      : parseJsonBody<PrefillRankAddress>(res.text, 'GET /route', this.http.baseURL)
  }

  /** `PUT /route`: registers one prefill rank (upstream answers `OK`). */
  async registerRank(
    registration: PrefillRankRegistration | LegacyPrefillRankRegistration,
    options?: CallOptions,
  ): Promise<void> {
    await this.http.text({ method: 'PUT', path: '/route', body: registration, idempotent: true }, options)
  }

  /** `POST /register_dp_rank {bootstrap_room, dp_rank}`. */
  async registerDpRank(bootstrapRoom: bigint | number, dpRank: number, options?: CallOptions): Promise<void> {
    await this.http.text(
      {
        method: 'POST',
        path: '/register_dp_rank',
        body: { bootstrap_room: bootstrapRoom, dp_rank: dpRank },
        idempotent: true,
      },
      options,
    )
  }

  /** `POST /query_dp_ranks {bootstrap_rooms}` → `{"<room>": dp_rank}` (rooms as decimal strings). */
  async queryDpRanks(
    bootstrapRooms: readonly (bigint | number)[],
    options?: CallOptions,
  ): Promise<Record<string, number>> {
    return this.http.json<Record<string, number>>(
      {
        method: 'POST',
        path: '/query_dp_ranks',
        body: { bootstrap_rooms: bootstrapRooms },
        idempotent: true,
      },
      options,
    )
  }

  /** `GET /health`: resolves on 200. */
  async health(options?: CallOptions): Promise<void> {
    await this.http.text({ method: 'GET', path: '/health', idempotent: true }, options)
  }
}
