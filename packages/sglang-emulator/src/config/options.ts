/**
 * Options of the emulator and their validation.
 *
 * @module
 */
import { type AdmitOptions, DEFAULT_ADMIT_OPTIONS, DEFAULT_COST_MODEL } from '@kvc/kvc-router'
import type { BlockHasher, EvictionPolicy } from '@kvc/radix-cache'
import type { KvEventEncoding } from '@kvc/worker-bindings'
import { checkOption } from '../errors/emulatorError.js'
import { type EmulatorTiming, type Timing, resolveTiming } from '../timing/timing.js'

/**
 * What the emulated worker is: SGLang's `--disaggregation-mode prefill|decode`, or `colocated`
 * (SGLang's `null`).
 *
 * @example
 * ```ts
 * import type { EmulatorRole } from '@kvc/sglang-emulator'
 * const roles: EmulatorRole[] = ['prefill', 'decode', 'colocated']
 * ```
 */
export type EmulatorRole = 'prefill' | 'decode' | 'colocated'

/**
 * KV-event publishing of the emulator.
 *
 * @example
 * ```ts
 * import { createSglangEmulator, type EmulatorKvEventsOptions } from '@kvc/sglang-emulator'
 * const kvEvents: EmulatorKvEventsOptions = { encoding: 'map', bufferSteps: 1_000 }
 * const emu = await createSglangEmulator({ kvEvents, timing: { scale: 0 } })
 * await emu.close()
 * ```
 */
export interface EmulatorKvEventsOptions {
  /** Topic frame (default `''`). */
  readonly topic?: string
  /** msgpack layout (default `'array'`, as SGLang sends it). */
  readonly encoding?: KvEventEncoding
  /** Batches kept for replay (default 10,000). */
  readonly bufferSteps?: number
  /** Block hasher of the event hashes (default: SGLang's SHA-256 chain). */
  readonly blockHasher?: BlockHasher
}

/**
 * Options of `createSglangEmulator`.
 *
 * @example
 * ```ts
 * import { createSglangEmulator, type SglangEmulatorOptions } from '@kvc/sglang-emulator'
 * const opts: SglangEmulatorOptions = { role: 'prefill', capacityTokens: 32_768, pageSize: 16, timing: { scale: 0.01 } }
 * const emu = await createSglangEmulator(opts)
 * await emu.close()
 * ```
 */
export interface SglangEmulatorOptions {
  /** Default `'colocated'`. */
  readonly role?: EmulatorRole
  /** KV pool size in tokens (rounded down to a page multiple; default 65,536). */
  readonly capacityTokens?: number
  /** Tokens per page (default 16). */
  readonly pageSize?: number
  /** Latency model (default real time; pass `{ scale: 0 }` or a small scale in tests). */
  readonly timing?: EmulatorTiming
  /** Longest prompt (`context_len`, default `capacityTokens`). */
  readonly contextLength?: number
  /** Model name served (`served_model_name`, default `'kvc-emulator'`). */
  readonly modelName?: string
  /** Default `'127.0.0.1'`. */
  readonly host?: string
  /** Default 0 (an ephemeral port). */
  readonly port?: number
  /** Largest request body (default 32 MiB); larger ones get 413. */
  readonly maxBodyBytes?: number
  /** Stream deltas instead of cumulative text (`--incremental-streaming-output`; default false). */
  readonly incrementalStreamingOutput?: boolean
  /** Add `prompt_tokens_details.cached_tokens` to OpenAI usage (`--enable-cache-report`; default false). */
  readonly enableCacheReport?: boolean
  /** Accept `open_session` with `streaming: true` (`--enable-streaming-session`; default false). */
  readonly enableStreamingSession?: boolean
  /** KV events on a ZeroMQ PUB socket plus a ROUTER replay socket (default on); `false` to disable. */
  readonly kvEvents?: false | EmulatorKvEventsOptions
  /** Prefill role: port of the bootstrap server (default 0, ephemeral). */
  readonly bootstrapPort?: number
  /** Prefill role: ranks the bootstrap server waits for before `GET /route` answers (default 1: itself). */
  readonly bootstrapRanks?: number
  /**
   * Refuse a decode request without `bootstrap_room`, as upstream does (default false: the decode
   * emulator then serves it directly, append-prefilling what it does not hold — the kvc fast path).
   */
  readonly strictPd?: boolean
  /**
   * Decode role: how long to wait for the prefill's KV (default the cost model's
   * `transferTimeoutS`, 32,000 ms, Mooncake's timeout; not scaled).
   */
  readonly transferTimeoutMs?: number
  /** Admission parameters (default `kvc-router`'s `DEFAULT_ADMIT_OPTIONS`). */
  readonly admission?: Partial<AdmitOptions>
  /** Serve only the older paths (`/get_server_info`, `/get_model_info`; no `/server_info`, `/model_info`, `/v1/loads`). */
  readonly legacyApi?: boolean
  /** Session cache granularity (default `'block'`). */
  readonly granularity?: 'block' | 'session'
  /** Radix eviction policy (default `'lru'`). */
  readonly evictionPolicy?: EvictionPolicy
  /** `weight_version` reported (default `'default'`). */
  readonly weightVersion?: string
  /**
   * SGLang's `--chunked-prefill-size`: a prompt's uncached tokens are computed in chunks of at
   * most this many tokens, each chunk's pages entering the radix tree before the next is computed
   * (`cacheUnfinishedReq` with `chunked`, then the request re-matches). Default: off (one chunk).
   */
  readonly chunkedPrefillSize?: number
}

/** Every option resolved and validated. @internal */
export interface EmulatorConfig {
  readonly role: EmulatorRole
  readonly pageSize: number
  readonly capacityTokens: number
  readonly timing: Timing
  readonly contextLength: number
  readonly modelName: string
  readonly host: string
  readonly port: number
  readonly maxBodyBytes: number
  readonly incrementalStreamingOutput: boolean
  readonly enableCacheReport: boolean
  readonly enableStreamingSession: boolean
  readonly kvEvents: EmulatorKvEventsOptions | undefined
  readonly bootstrapPort: number
  readonly bootstrapRanks: number
  readonly strictPd: boolean
  readonly transferTimeoutMs: number
  readonly admission: AdmitOptions
  readonly legacyApi: boolean
  readonly granularity: 'block' | 'session'
  readonly evictionPolicy: EvictionPolicy | undefined
  readonly weightVersion: string
  /** `undefined`: one chunk. */
  readonly chunkedPrefillSize: number | undefined
}

const isInt = (v: unknown, min: number): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= min

/** @internal Resolves the options; `INVALID_OPTION` naming the first bad one. */
export function resolveOptions(options: SglangEmulatorOptions): EmulatorConfig {
  checkOption(typeof options === 'object' && options !== null, 'options must be an object', options)
  const role = options.role ?? 'colocated'
  checkOption(
    role === 'prefill' || role === 'decode' || role === 'colocated',
    'role must be prefill, decode or colocated',
    role,
  )
  const pageSize = options.pageSize ?? 16
  checkOption(isInt(pageSize, 1), 'pageSize must be an integer >= 1', pageSize)
  const cap = options.capacityTokens ?? 65_536
  checkOption(isInt(cap, pageSize), 'capacityTokens must be an integer >= pageSize', cap)
  const capacityTokens = cap - (cap % pageSize)
  const timing = resolveTiming(options.timing)
  const contextLength = options.contextLength ?? capacityTokens
  checkOption(isInt(contextLength, 2), 'contextLength must be an integer >= 2', contextLength)
  const maxBodyBytes = options.maxBodyBytes ?? 32 * 1024 * 1024
  checkOption(isInt(maxBodyBytes, 1), 'maxBodyBytes must be an integer >= 1', maxBodyBytes)
  const port = options.port ?? 0
  checkOption(isInt(port, 0) && port <= 65_535, 'port must be an integer in [0, 65535]', port)
  const bootstrapPort = options.bootstrapPort ?? 0
  checkOption(
    isInt(bootstrapPort, 0) && bootstrapPort <= 65_535,
    'bootstrapPort must be an integer in [0, 65535]',
    bootstrapPort,
  )
  const bootstrapRanks = options.bootstrapRanks ?? 1
  checkOption(isInt(bootstrapRanks, 1), 'bootstrapRanks must be an integer >= 1', bootstrapRanks)
  const transferTimeoutMs = options.transferTimeoutMs ?? DEFAULT_COST_MODEL.transferTimeoutS * 1000
  checkOption(
    typeof transferTimeoutMs === 'number' && Number.isFinite(transferTimeoutMs) && transferTimeoutMs >= 0,
    'transferTimeoutMs must be a finite number >= 0',
    transferTimeoutMs,
  )
  const granularity = options.granularity ?? 'block'
  checkOption(
    granularity === 'block' || granularity === 'session',
    "granularity must be 'block' or 'session'",
    granularity,
  )
  const chunk = options.chunkedPrefillSize
  checkOption(
    chunk === undefined || isInt(chunk, pageSize),
    'chunkedPrefillSize must be an integer >= pageSize',
    chunk,
  )
  return {
    role,
    pageSize,
    capacityTokens,
    timing,
    contextLength,
    modelName: options.modelName ?? 'kvc-emulator',
    host: options.host ?? '127.0.0.1',
    port,
    maxBodyBytes,
    incrementalStreamingOutput: options.incrementalStreamingOutput === true,
    enableCacheReport: options.enableCacheReport === true,
    enableStreamingSession: options.enableStreamingSession === true,
    kvEvents: options.kvEvents === false ? undefined : (options.kvEvents ?? {}),
    bootstrapPort,
    bootstrapRanks,
    strictPd: options.strictPd === true,
    transferTimeoutMs,
    admission: { ...DEFAULT_ADMIT_OPTIONS, ...options.admission },
    legacyApi: options.legacyApi === true,
    granularity,
    evictionPolicy: options.evictionPolicy,
    weightVersion: options.weightVersion ?? 'default',
    chunkedPrefillSize: chunk,
  }
}
