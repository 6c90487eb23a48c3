/**
 * An SGLang-compatible worker emulator: the same HTTP paths, fields and errors as an SGLang
 * server, backed by the real `RadixCache` and `SessionCache`, with KV events on ZeroMQ and a
 * deterministic fake model.
 *
 * @module
 */
import { randomUUID } from 'node:crypto'
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  ADMIT_HTTP_PATH,
  type AdmitOptions,
  type AdmitRequest,
  type AdmitResponse,
  type AdmitSession,
  DEFAULT_ADMIT_OPTIONS,
  LeaseBook,
  admit,
} from '@kvc/kvc-router'
import { type BlockHasher, type EvictionPolicy, PagedAllocator, RadixCache } from '@kvc/radix-cache'
import { SessionCache, SessionCacheError, type SessionRequest } from '@kvc/session-cache'
import { createAdmissionHandler } from '../admission/admissionHandler.js'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import { BodyTooLargeError, mediaType, readBody, sendJson, sendText } from '../http/serverUtils.js'
import { readBigIntField } from '../json/json.js'
import { type KvEventEncoding, type WireKvEvent, fromRadixKvEvent } from '../kvEvents/codec.js'
import { KvEventPublisher } from '../kvEvents/publisher.js'
import { FAKE_BOOTSTRAP_HOST } from '../pd/bootstrap.js'
import { EmulatedBootstrapServer } from './bootstrapServer.js'
import { fakeChatTemplate, fakeDetokenize, fakeNextToken, fakePromptHash, fakeTokenize } from './fakeModel.js'
import { PrefillRooms, prefillRegistry } from './pdRegistry.js'
import { type PromFamily, PromHistogram, renderPrometheus } from './promText.js'
import {
  type EmulatorTiming,
  type ResolvedTiming,
  decodeStepMs,
  prefillMs,
  resolveTiming,
  transferMs,
} from './timing.js'

/**
 * What the emulated worker is: SGLang's `--disaggregation-mode prefill|decode`, or `null` (colocated).
 *
 * @example
 * ```ts
 * import type { EmulatorRole } from '@kvc/worker-bindings'
 * const roles: EmulatorRole[] = ['prefill', 'decode', 'colocated']
 * ```
 */
export type EmulatorRole = 'prefill' | 'decode' | 'colocated'

/**
 * KV-event publishing of the emulator.
 *
 * @example
 * ```ts
 * import { createSglangEmulator, type EmulatorKvEventsOptions } from '@kvc/worker-bindings'
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
 * Options of {@link createSglangEmulator}.
 *
 * @example
 * ```ts
 * import { createSglangEmulator, type SglangEmulatorOptions } from '@kvc/worker-bindings'
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
  /** Decode role: how long to wait for the prefill's KV (default 32,000 ms, Mooncake's timeout; not scaled). */
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
}

/**
 * One injected HTTP fault (see {@link EmulatorFaults.inject}).
 *
 * @example
 * ```ts
 * import { createSglangEmulator, type EmulatorFault } from '@kvc/worker-bindings'
 * const emu = await createSglangEmulator({ timing: { scale: 0 } })
 * const fault: EmulatorFault = { path: '/generate', status: 429, retryAfter: '1', times: 2 }
 * emu.faults.inject(fault)
 * await emu.close()
 * ```
 */
export interface EmulatorFault {
  /** Path it applies to (exact match, e.g. `/get_load`). */
  readonly path: string
  /** Answer with this status instead of serving the request (omit: serve it, after `delayMs`). */
  readonly status?: number
  /** Wait this long (real ms) first. */
  readonly delayMs?: number
  /** How many requests it applies to (default 1). */
  readonly times?: number
  /** `retry-after` header value to send with `status`. */
  readonly retryAfter?: string
  /** Body to send with `status` (default an SGLang-style JSON error). */
  readonly body?: string
}

/**
 * Fault injection for tests and demos.
 *
 * @example
 * ```ts
 * import { createSglangEmulator } from '@kvc/worker-bindings'
 * const emu = await createSglangEmulator({ timing: { scale: 0 } })
 * emu.faults.setHealthy(false) // /health answers 503
 * emu.faults.clear()
 * await emu.close()
 * ```
 */
export interface EmulatorFaults {
  /** Makes the next `times` requests to `path` fail or stall. */
  inject(fault: EmulatorFault): void
  /** The next `count` KV-event batches are buffered for replay but not sent live (a sequence gap). */
  dropKvEvents(count: number): void
  /** `/health` and `/health_generate` answer 503 while unhealthy. */
  setHealthy(healthy: boolean): void
  /** Removes every pending fault. */
  clear(): void
}

/**
 * Counters and state of an emulator.
 *
 * @example
 * ```ts
 * import { createSglangEmulator } from '@kvc/worker-bindings'
 * const emu = await createSglangEmulator({ timing: { scale: 0 } })
 * const { treeTokens, freeTokens, balanced } = emu.stats()
 * await emu.close()
 * ```
 */
export interface EmulatorStats {
  readonly runningRequests: number
  readonly waitingRequests: number
  readonly requestsTotal: number
  readonly promptTokensTotal: number
  readonly generationTokensTotal: number
  readonly cachedTokensTotal: number
  readonly evictedTokensTotal: number
  /** Tokens in the radix tree. */
  readonly treeTokens: number
  readonly evictableTokens: number
  readonly freeTokens: number
  readonly capacityTokens: number
  readonly openSessions: number
  readonly activeLeases: number
  readonly transferQueueDepth: number
  readonly kvEventBatches: number
  /** The pool accounting identity holds (no leaked KV slot). */
  readonly balanced: boolean
}

/**
 * A running emulator.
 *
 * @example
 * ```ts
 * import { createSglangEmulator, SglangClient } from '@kvc/worker-bindings'
 * const emu = await createSglangEmulator({ capacityTokens: 8192, pageSize: 16, timing: { scale: 0 } })
 * const client = new SglangClient({ baseURL: emu.url })
 * await client.generate({ text: 'hello', sampling_params: { max_new_tokens: 4 } })
 * await emu.close()
 * ```
 */
export interface SglangEmulator {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string
  readonly port: number
  readonly role: EmulatorRole
  readonly pageSize: number
  readonly capacityTokens: number
  /** PUB endpoint of the KV events (undefined when disabled). */
  readonly kvEventsEndpoint: string | undefined
  /** ROUTER replay endpoint of the KV events. */
  readonly kvReplayEndpoint: string | undefined
  /** Prefill role: the bootstrap server's URL and port. */
  readonly bootstrapUrl: string | undefined
  readonly bootstrapPort: number | undefined
  /** The real session cache (and through it the radix cache and pool) behind the emulator. */
  readonly sessionCache: SessionCache
  readonly faults: EmulatorFaults
  stats(): EmulatorStats
  /** Marks the worker draining (admission answers `draining`) or not. */
  setDraining(draining: boolean): void
  /** Aborts every request, closes the server, the bootstrap server and the ZeroMQ sockets. Idempotent. */
  close(): Promise<void>
}

/**
 * Starts an SGLang-compatible worker on `127.0.0.1` with an ephemeral port.
 *
 * What it serves (paths and fields as SGLang's `http_server.py`): `POST|PUT /generate`
 * (text or `input_ids`, non-streaming and SSE streaming, cumulative or incremental, batches
 * non-streaming, `session_params`, top-level `session_id`, `extra_key`/`cache_salt`, bootstrap
 * fields), `POST /v1/chat/completions` (streaming too), `/open_session`, `/close_session`,
 * `/abort_request`, `/server_info` + `/get_server_info`, `/model_info` + `/get_model_info`,
 * `/get_load`, `/v1/loads`, `/flush_cache`, `/health`, `/health_generate`, `/metrics`,
 * `/v1/models`, and the kvc admission RPC at `ADMIT_HTTP_PATH` answered by `kvc-router`'s
 * `admit` over the worker's real state. A prefill emulator also runs a bootstrap server; a decode
 * emulator in the same process receives the prefill's KV through an in-process rendezvous keyed
 * by `bootstrap_room`.
 *
 * Errors have SGLang's status and shape: `{"error": {"message"}}` (400) for generate-level
 * failures (unknown session, prompt too long), `{"object": "error", "message", "type", "param",
 * "code"}` (400) for bodies that fail validation (malformed JSON), `{"detail": "Not Found"}` for
 * unknown paths, and 413 with the `ErrorResponse` shape for bodies above `maxBodyBytes` (SGLang's
 * own server has no limit; its router answers 413). Refused requests change no state.
 *
 * @example
 * ```ts
 * import { createSglangEmulator, SglangClient } from '@kvc/worker-bindings'
 * const emu = await createSglangEmulator({ role: 'decode', capacityTokens: 32_768, pageSize: 16, timing: { scale: 0.01 } })
 * const worker = new SglangClient({ baseURL: emu.url })
 * const a = await worker.generate({ text: 'a long shared prefix ...', sampling_params: { max_new_tokens: 8 } })
 * const b = await worker.generate({ text: 'a long shared prefix ... and more', sampling_params: { max_new_tokens: 8 } })
 * console.log(b.meta_info.cached_tokens) // the true prefix hit
 * await emu.close()
 * ```
 */
export async function createSglangEmulator(options: SglangEmulatorOptions = {}): Promise<SglangEmulator> {
  const emu = new Emulator(options)
  try {
    await emu.start()
  } catch (err) {
    await emu.close()
    throw err
  }
  return emu
}

interface SamplingSpec {
  readonly maxNewTokens: number
  readonly stop: readonly string[]
  readonly stopTokenIds: ReadonlySet<number>
  readonly noStopTrim: boolean
}

interface ExecItem {
  readonly rid: string
  readonly tokens: number[]
  readonly sampling: SamplingSpec
  readonly extraKey: string | undefined
  readonly priority: number
  /** SessionCache session of the turn (tried; falls back to a plain request on prefix mismatch). */
  readonly sessionId: string | undefined
  /** Emulator-side session history to append this turn to. */
  readonly historySession: string | undefined
  readonly bootstrap:
    | { readonly host: string; readonly port: number | null; readonly room: string }
    | undefined
}

interface ExecOutput {
  readonly outputIds: number[]
  readonly text: string
  readonly finishReason: Record<string, unknown>
  readonly promptTokens: number
  readonly cachedTokens: number
  readonly e2eLatency: number
}

type ChunkSink = (partial: {
  outputIds: number[]
  text: string
  promptTokens: number
  cachedTokens: number
  finishReason: Record<string, unknown> | null
}) => void

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(typeof body === 'string' ? body : JSON.stringify(body))
  }
}

const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 30,
]
const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300]

const VERSION = '0.5.0-kvc-emulator'
const EMPTY_TOKENS = new Uint32Array(0)

class Emulator implements SglangEmulator {
  readonly role: EmulatorRole
  readonly pageSize: number
  readonly capacityTokens: number
  readonly sessionCache: SessionCache
  readonly faults: EmulatorFaults
  readonly #opts: SglangEmulatorOptions
  readonly #timing: ResolvedTiming
  readonly #contextLength: number
  readonly #maxBody: number
  readonly #modelName: string
  readonly #server: Server
  readonly #cache: RadixCache
  readonly #pool: PagedAllocator
  readonly #publisher: KvEventPublisher | undefined
  readonly #pendingEvents: WireKvEvent[] = []
  readonly #admissionHandler: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>
  readonly #admitOptions: AdmitOptions
  readonly #leases = new LeaseBook()
  readonly #inflight = new Map<string, AbortController>()
  readonly #history = new Map<
    string,
    { tokens: number[]; byRid: Map<string, number[]>; timeoutMs: number | undefined }
  >()
  readonly #memoryWaiters = new Set<() => void>()
  readonly #ttft = new PromHistogram(TTFT_BUCKETS)
  readonly #e2e = new PromHistogram(E2E_BUCKETS)
  readonly #faultList: (EmulatorFault & { remaining: number })[] = []
  readonly #rooms: PrefillRooms | undefined
  readonly #bootstrap: EmulatedBootstrapServer | undefined
  #bootstrapKey: string | undefined
  #flushTimer: ReturnType<typeof setImmediate> | undefined
  #dropKv = 0
  #healthy = true
  #draining = false
  #closed = false
  #closing: Promise<void> | undefined
  #port = 0
  #bootPort: number | undefined
  #kvEndpoint: string | undefined
  #kvReplay: string | undefined
  #running = 0
  #waiting = 0
  #batchTokens = 0
  #reservedSlots = 0
  #transferQueue = 0
  #requestsTotal = 0
  #promptTotal = 0
  #genTotal = 0
  #cachedTotal = 0
  #evictedTotal = 0
  #kvBatches = 0
  #publishChain: Promise<unknown> = Promise.resolve()

  constructor(options: SglangEmulatorOptions) {
    this.#opts = options
    const role = options.role ?? 'colocated'
    if (role !== 'prefill' && role !== 'decode' && role !== 'colocated') {
      throw new WorkerBindingsError('INVALID_OPTION', `role must be prefill, decode or colocated`, {
        value: role,
      })
    }
    this.role = role
    const pageSize = options.pageSize ?? 16
    if (!Number.isInteger(pageSize) || pageSize < 1) {
      throw new WorkerBindingsError('INVALID_OPTION', 'pageSize must be an integer >= 1', { value: pageSize })
    }
    const cap = options.capacityTokens ?? 65_536
    if (!Number.isInteger(cap) || cap < pageSize) {
      throw new WorkerBindingsError('INVALID_OPTION', `capacityTokens must be an integer >= pageSize`, {
        value: cap,
      })
    }
    this.pageSize = pageSize
    this.capacityTokens = cap - (cap % pageSize)
    this.#timing = resolveTiming(options.timing)
    this.#contextLength = options.contextLength ?? this.capacityTokens
    this.#maxBody = options.maxBodyBytes ?? 32 * 1024 * 1024
    this.#modelName = options.modelName ?? 'kvc-emulator'
    this.#admitOptions = { ...DEFAULT_ADMIT_OPTIONS, ...options.admission }
    this.#pool = new PagedAllocator({ size: this.capacityTokens, pageSize })
    const kv = options.kvEvents === false ? undefined : (options.kvEvents ?? {})
    this.#cache = new RadixCache({
      pageSize,
      allocator: this.#pool,
      ...(options.evictionPolicy === undefined ? {} : { evictionPolicy: options.evictionPolicy }),
      ...(kv === undefined
        ? {}
        : {
            onEvent: (e) => {
              this.#pendingEvents.push(fromRadixKvEvent(e))
              this.#scheduleFlush()
            },
            ...(kv.blockHasher === undefined ? {} : { blockHasher: kv.blockHasher }),
          }),
    })
    this.sessionCache = new SessionCache({
      cache: this.#cache,
      pool: this.#pool,
      granularity: options.granularity ?? 'block',
      onEviction: (e) => {
        this.#evictedTotal += e.freedTokens
      },
    })
    this.#publisher =
      kv === undefined
        ? undefined
        : new KvEventPublisher({
            ...(kv.topic === undefined ? {} : { topic: kv.topic }),
            ...(kv.encoding === undefined ? {} : { encoding: kv.encoding }),
            ...(kv.bufferSteps === undefined ? {} : { bufferSteps: kv.bufferSteps }),
          })
    this.#admissionHandler = createAdmissionHandler({ admit: (r) => this.#admit(r) })
    if (role === 'prefill') {
      this.#rooms = new PrefillRooms()
      this.#bootstrap = new EmulatedBootstrapServer({
        pageSize,
        expectedRanks: options.bootstrapRanks ?? 1,
        httpPort: () => this.#port,
      })
    }
    this.#server = createServer((req, res) => {
      this.#route(req, res).catch((err: unknown) => {
        if (err instanceof HttpError) sendJson(res, err.status, err.body)
        else
          sendJson(
            res,
            500,
            errorResponse(500, `Internal Server Error: ${(err as Error)?.message ?? String(err)}`),
          )
      })
    })
    this.#server.keepAliveTimeout = 5_000
    const self = this
    this.faults = {
      inject(f: EmulatorFault): void {
        self.#faultList.push({ ...f, remaining: f.times ?? 1 })
      },
      dropKvEvents(count: number): void {
        self.#dropKv += count
      },
      setHealthy(h: boolean): void {
        self.#healthy = h
      },
      clear(): void {
        self.#faultList.length = 0
        self.#dropKv = 0
        self.#healthy = true
      },
    }
  }

  get url(): string {
    return `http://${this.#opts.host ?? '127.0.0.1'}:${this.#port}`
  }
  get port(): number {
    return this.#port
  }
  get kvEventsEndpoint(): string | undefined {
    return this.#kvEndpoint
  }
  get kvReplayEndpoint(): string | undefined {
    return this.#kvReplay
  }
  get bootstrapPort(): number | undefined {
    return this.#bootPort
  }
  get bootstrapUrl(): string | undefined {
    return this.#bootPort === undefined
      ? undefined
      : `http://${this.#opts.host ?? '127.0.0.1'}:${this.#bootPort}`
  }

  async start(): Promise<void> {
    const host = this.#opts.host ?? '127.0.0.1'
    this.#port = await listen(this.#server, this.#opts.port ?? 0, host)
    if (this.#bootstrap !== undefined) {
      this.#bootPort = await listen(this.#bootstrap.server, this.#opts.bootstrapPort ?? 0, host)
      this.#bootstrap.register({
        attn_tp_size: 1,
        attn_tp_rank: 0,
        attn_cp_size: 1,
        attn_cp_rank: 0,
        attn_dp_size: 1,
        attn_dp_rank: 0,
        pp_size: 1,
        pp_rank: 0,
        system_dp_size: 1,
        system_dp_rank: 0,
        rank_ip: host,
        rank_port: this.#port,
        page_size: this.pageSize,
        kv_cache_dtype: 'auto',
      })
      this.#bootstrapKey = `${host}:${this.#bootPort}`
      prefillRegistry.set(this.#bootstrapKey, this.#rooms!)
    }
    if (this.#publisher !== undefined) {
      const ep = await this.#publisher.bind()
      this.#kvEndpoint = ep.endpoint
      this.#kvReplay = ep.replayEndpoint
    }
  }

  setDraining(draining: boolean): void {
    this.#draining = draining
  }

  stats(): EmulatorStats {
    const acc = this.sessionCache.poolAccounting()
    return {
      runningRequests: this.#running,
      waitingRequests: this.#waiting,
      requestsTotal: this.#requestsTotal,
      promptTokensTotal: this.#promptTotal,
      generationTokensTotal: this.#genTotal,
      cachedTokensTotal: this.#cachedTotal,
      evictedTokensTotal: this.#evictedTotal,
      treeTokens: this.#cache.totalSize(),
      evictableTokens: this.#cache.evictableSize(),
      freeTokens: this.#pool.availableSize(),
      capacityTokens: this.capacityTokens,
      openSessions: this.sessionCache.stats().sessionsHeld,
      activeLeases: this.#leases.live(Math.floor(performance.now())).length,
      transferQueueDepth: this.#transferQueue,
      kvEventBatches: this.#kvBatches,
      balanced: acc.balanced,
    }
  }

  close(): Promise<void> {
    this.#closing ??= this.#doClose()
    return this.#closing
  }

  async #doClose(): Promise<void> {
    this.#closed = true
    for (const c of this.#inflight.values()) c.abort(new Error('emulator closed'))
    for (const w of this.#memoryWaiters) w()
    this.#memoryWaiters.clear()
    if (this.#bootstrapKey !== undefined) prefillRegistry.delete(this.#bootstrapKey)
    this.#rooms?.close()
    await Promise.all([
      closeServer(this.#server),
      this.#bootstrap ? closeServer(this.#bootstrap.server) : undefined,
    ])
    if (this.#flushTimer !== undefined) clearImmediate(this.#flushTimer)
    this.#flushTimer = undefined
    await this.#flushEvents()
    await this.#publishChain.catch(() => {})
    await this.#publisher?.close()
  }

  // ------------------------------------------------------------------------------------------
  // KV events

  #scheduleFlush(): void {
    if (this.#flushTimer !== undefined || this.#closed) return
    this.#flushTimer = setImmediate(() => {
      this.#flushTimer = undefined
      void this.#flushEvents()
    })
  }

  #flushEvents(): Promise<void> {
    if (this.#pendingEvents.length === 0 || this.#publisher === undefined) return Promise.resolve()
    const events = this.#pendingEvents.splice(0)
    const dropLive = this.#dropKv > 0
    if (dropLive) this.#dropKv--
    this.#kvBatches++
    const pub = this.#publisher
    const p = this.#publishChain.then(() =>
      pub.publish({ ts: Date.now() / 1000, events, dataParallelRank: null }, { dropLive }).catch(() => {}),
    )
    this.#publishChain = p
    return p.then(() => {})
  }

  // ------------------------------------------------------------------------------------------
  // HTTP

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost')
    const path = url.pathname
    const method = req.method ?? 'GET'
    const fault = this.#takeFault(path)
    if (fault !== undefined) {
      if (fault.delayMs) await realDelay(fault.delayMs, res)
      if (fault.status !== undefined) {
        req.resume()
        const headers: Record<string, string> = { 'content-type': 'application/json' }
        if (fault.retryAfter !== undefined) headers['retry-after'] = fault.retryAfter
        sendJson(
          res,
          fault.status,
          fault.body ?? errorResponse(fault.status, `injected fault on ${path}`),
          headers,
        )
        return
      }
      if (res.destroyed) return
    }
    if (path === ADMIT_HTTP_PATH) {
      await this.#admissionHandler(req, res)
      return
    }
    const legacy = this.#opts.legacyApi === true
    const allow = (...methods: string[]): boolean => {
      if (methods.includes(method)) return true
      req.resume()
      sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: methods.join(', ') })
      return false
    }
    switch (path) {
      case '/health':
      case '/health_generate':
        if (!allow('GET')) return
        req.resume()
        res.writeHead(this.#healthy && !this.#closed ? 200 : 503).end()
        return
      case '/ping':
        if (!allow('GET')) return
        req.resume()
        res.writeHead(200).end()
        return
      case '/get_model_info':
      case '/model_info':
        if (path === '/model_info' && legacy) break
        if (!allow('GET')) return
        req.resume()
        sendJson(res, 200, {
          model_path: this.#modelName,
          tokenizer_path: this.#modelName,
          is_generation: true,
          preferred_sampling_params: null,
          weight_version: this.#opts.weightVersion ?? 'default',
        })
        return
      case '/get_server_info':
      case '/server_info':
        if (path === '/server_info' && legacy) break
        if (!allow('GET')) return
        req.resume()
        sendJson(res, 200, this.#serverInfo())
        return
      case '/get_load':
        if (!allow('GET')) return
        req.resume()
        sendJson(res, 200, [
          {
            dp_rank: 0,
            num_reqs: this.#running + this.#waiting,
            num_waiting_reqs: this.#waiting,
            num_tokens: this.capacityTokens - this.#pool.availableSize() - this.#cache.evictableSize(),
          },
        ])
        return
      case '/v1/loads':
        if (legacy) break
        if (!allow('GET')) return
        req.resume()
        this.#v1Loads(url, res)
        return
      case '/v1/models':
        if (!allow('GET')) return
        req.resume()
        sendJson(res, 200, {
          object: 'list',
          data: [
            {
              id: this.#modelName,
              object: 'model',
              created: Math.floor(Date.now() / 1000),
              owned_by: 'sglang',
              root: this.#modelName,
              max_model_len: this.#contextLength,
            },
          ],
        })
        return
      case '/metrics':
        if (!allow('GET')) return
        req.resume()
        sendText(res, 200, this.#metricsText(), 'text/plain; version=0.0.4; charset=utf-8')
        return
      case '/flush_cache':
        if (!allow('GET', 'POST')) return
        req.resume()
        this.#flushCache(res)
        return
      case '/open_session':
        if (!allow('GET', 'POST')) return
        await this.#openSession(await this.#jsonBody(req), res)
        return
      case '/close_session':
        if (!allow('GET', 'POST')) return
        await this.#closeSession(await this.#jsonBody(req), res)
        return
      case '/abort_request':
        if (!allow('POST')) return
        this.#abortRequest(await this.#jsonBody(req), res)
        return
      case '/generate':
        if (!allow('POST', 'PUT')) return
        await this.#generate(req, res)
        return
      case '/v1/chat/completions':
        if (!allow('POST')) return
        await this.#chat(req, res)
        return
      default:
        break
    }
    req.resume()
    sendJson(res, 404, { detail: 'Not Found' })
  }

  #takeFault(path: string): (EmulatorFault & { remaining: number }) | undefined {
    const i = this.#faultList.findIndex((f) => f.path === path && f.remaining > 0)
    if (i < 0) return undefined
    const f = this.#faultList[i]!
    f.remaining--
    if (f.remaining <= 0) this.#faultList.splice(i, 1)
    return f
  }

  /** Reads and parses a JSON body like FastAPI: 413 above the limit, 400 ErrorResponse when malformed. */
  async #jsonBody(
    req: IncomingMessage,
    requireJsonType = false,
  ): Promise<{ text: string; json: Record<string, unknown> }> {
    if (requireJsonType && mediaType(req) !== 'application/json') {
      req.resume()
      throw validationError(
        "[{'loc': ('header', 'content-type'), 'msg': \"Unsupported Media Type: Only 'application/json' is allowed\", 'type': 'value_error'}]",
      )
    }
    let text: string
    try {
      text = await readBody(req, this.#maxBody)
    } catch (err) {
      if (err instanceof BodyTooLargeError) {
        throw new HttpError(413, errorResponse(413, `Request body exceeds the limit of ${err.limit} bytes`))
      }
      throw err
    }
    if (text.trim().length === 0) {
      throw validationError(
        "1 validation error:\n  {'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}",
      )
    }
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch (err) {
      throw validationError(
        `1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': '${(err as Error).message.replace(/'/g, '"')}'}}`,
      )
    }
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw validationError(
        "1 validation error:\n  {'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from'}",
      )
    }
    return { text, json: json as Record<string, unknown> }
  }

  #serverInfo(): Record<string, unknown> {
    return {
      model_path: this.#modelName,
      tokenizer_path: this.#modelName,
      served_model_name: this.#modelName,
      page_size: this.pageSize,
      context_length: this.#contextLength,
      disaggregation_mode: this.role === 'colocated' ? 'null' : this.role,
      disaggregation_bootstrap_port: this.#bootPort ?? 8998,
      disaggregation_transfer_backend: 'mooncake',
      tp_size: 1,
      dp_size: 1,
      enable_metrics: true,
      incremental_streaming_output: this.#opts.incrementalStreamingOutput === true,
      enable_cache_report: this.#opts.enableCacheReport === true,
      enable_streaming_session: this.#opts.enableStreamingSession === true,
      kv_events_config:
        this.#kvEndpoint === undefined
          ? null
          : JSON.stringify({
              publisher: 'zmq',
              endpoint: this.#kvEndpoint,
              replay_endpoint: this.#kvReplay,
              topic: this.#publisher?.topic ?? '',
              buffer_steps: this.#publisher?.bufferSteps ?? 0,
            }),
      max_total_num_tokens: this.capacityTokens,
      max_req_input_len: this.#contextLength - 1,
      internal_states: [
        {
          last_gen_throughput: 0,
          avg_spec_accept_length: null,
          max_total_num_tokens: this.capacityTokens,
        },
      ],
      version: VERSION,
    }
  }

  #v1Loads(url: URL, res: ServerResponse): void {
    const include = new Set((url.searchParams.get('include') ?? 'core').split(',').map((s) => s.trim()))
    const all = include.has('all')
    const dpRank = url.searchParams.get('dp_rank')
    const used = this.capacityTokens - this.#pool.availableSize() - this.#cache.evictableSize()
    const usage = used / this.capacityTokens
    const item: Record<string, unknown> = {
      dp_rank: 0,
      num_running_reqs: this.#running,
      num_waiting_reqs: this.#waiting,
      num_total_reqs: this.#running + this.#waiting,
      num_used_tokens: used,
      num_total_tokens: used,
      max_total_num_tokens: this.capacityTokens,
      token_usage: usage,
      gen_throughput: 0,
      cache_hit_rate: this.#promptTotal === 0 ? 0 : this.#cachedTotal / this.#promptTotal,
      utilization: usage,
      max_running_requests: 4096,
      num_waiting_uncached_tokens: 0,
    }
    if (all || include.has('memory')) {
      item.memory = {
        weight_gb: 0,
        kv_cache_gb: (this.capacityTokens * 98_304) / 2 ** 30,
        graph_gb: 0,
        token_capacity: this.capacityTokens,
      }
    }
    if (all || include.has('spec')) item.speculative = { accept_length: 0, accept_rate: 0 }
    if (all || include.has('lora')) item.lora = { slots_used: 0, slots_total: 0, utilization: 0 }
    if (all || include.has('disagg')) {
      item.disaggregation = {
        mode: this.role === 'colocated' ? 'null' : this.role,
        prefill_prealloc_queue_reqs: 0,
        prefill_inflight_queue_reqs: this.role === 'prefill' ? this.#running : 0,
        decode_prealloc_queue_reqs: 0,
        decode_transfer_queue_reqs: this.#transferQueue,
        decode_retracted_queue_reqs: 0,
        kv_transfer_speed_gb_s: this.#timing.linkGbps / 8,
        kv_transfer_latency_ms: this.#timing.transferSetupMs,
      }
    }
    if (all || include.has('queues'))
      item.queues = { waiting: this.#waiting, grammar: 0, paused: 0, retracted: 0 }
    const loads = dpRank !== null && Number(dpRank) !== 0 ? [] : [item]
    if (url.searchParams.get('format') === 'prometheus') {
      let text = ''
      for (const l of loads) {
        for (const [k, v] of Object.entries(l)) {
          if (typeof v === 'number' && k !== 'dp_rank') text += `sglang_${k}{dp_rank="${l.dp_rank}"} ${v}\n`
        }
      }
      sendText(res, 200, text, 'text/plain; version=0.0.4; charset=utf-8')
      return
    }
    sendJson(res, 200, {
      timestamp: new Date().toISOString(),
      version: VERSION,
      dp_rank_count: 1,
      loads,
      aggregate: {
        total_running_reqs: this.#running,
        total_waiting_reqs: this.#waiting,
        total_reqs: this.#running + this.#waiting,
        avg_token_usage: usage,
        avg_throughput: 0,
        avg_utilization: usage,
      },
    })
  }

  #metricsText(): string {
    const used = this.capacityTokens - this.#pool.availableSize() - this.#cache.evictableSize()
    const fams: PromFamily[] = [
      {
        name: 'sglang:num_running_reqs',
        help: 'The number of running requests.',
        type: 'gauge',
        value: this.#running,
      },
      {
        name: 'sglang:num_queue_reqs',
        help: 'The number of requests in the waiting queue.',
        type: 'gauge',
        value: this.#waiting,
      },
      { name: 'sglang:num_used_tokens', help: 'The number of used tokens.', type: 'gauge', value: used },
      {
        name: 'sglang:token_usage',
        help: 'The token usage.',
        type: 'gauge',
        value: used / this.capacityTokens,
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
        value: this.#promptTotal === 0 ? 0 : this.#cachedTotal / this.#promptTotal,
      },
      {
        name: 'sglang:max_total_num_tokens',
        help: 'Maximum total number of tokens.',
        type: 'gauge',
        value: this.capacityTokens,
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
        value: this.#promptTotal,
      },
      {
        name: 'sglang:generation_tokens_total',
        help: 'Number of generation tokens processed.',
        type: 'counter',
        value: this.#genTotal,
      },
      {
        name: 'sglang:cached_tokens_total',
        help: 'Number of cached prompt tokens.',
        type: 'counter',
        value: this.#cachedTotal,
      },
      {
        name: 'sglang:evicted_tokens_total',
        help: 'Number of evicted tokens.',
        type: 'counter',
        value: this.#evictedTotal,
      },
      {
        name: 'sglang:num_requests_total',
        help: 'Number of requests processed.',
        type: 'counter',
        value: this.#requestsTotal,
      },
      {
        name: 'sglang:time_to_first_token_seconds',
        help: 'Histogram of time to first token in seconds.',
        type: 'histogram',
        histogram: this.#ttft,
      },
      {
        name: 'sglang:e2e_request_latency_seconds',
        help: 'Histogram of End-to-end request latency in seconds',
        type: 'histogram',
        histogram: this.#e2e,
      },
    ]
    return renderPrometheus(fams, { model_name: this.#modelName })
  }

  #flushCache(res: ServerResponse): void {
    const text =
      'Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n'
    if (this.#running > 0 || this.#waiting > 0 || this.#inflight.size > 0) {
      sendText(res, 400, text)
      return
    }
    const sessions = this.sessionCache.listSessionStatuses().map((s) => s.sessionId)
    for (const id of sessions) this.sessionCache.releaseSession(id)
    this.#cache.reset()
    this.#committed.clear()
    for (const id of sessions) this.sessionCache.openSession(id)
    this.#notifyMemory()
    sendText(res, 200, text)
  }

  async #openSession(body: { json: Record<string, unknown> }, res: ServerResponse): Promise<void> {
    const j = body.json
    if (typeof j.capacity_of_str_len !== 'number' || !Number.isInteger(j.capacity_of_str_len)) {
      throw validationError(
        '1 validation error for OpenSessionReqInput\ncapacity_of_str_len\n  Field required [type=missing, input_value={}, input_type=dict]',
      )
    }
    if (j.session_id !== undefined && j.session_id !== null && typeof j.session_id !== 'string') {
      throw validationError(
        '1 validation error for OpenSessionReqInput\nsession_id\n  Input should be a valid string',
      )
    }
    if (j.streaming === true && this.#opts.enableStreamingSession !== true) {
      sendJson(res, 400, {
        error: {
          message: 'Streaming sessions are disabled. Launch the server with --enable-streaming-session.',
        },
      })
      return
    }
    const id =
      typeof j.session_id === 'string' && j.session_id.length > 0
        ? j.session_id
        : randomUUID().replace(/-/g, '')
    if (this.#history.has(id) || this.sessionCache.hasSession(id)) {
      sendJson(res, 400, {
        error: { message: 'Failed to open the session. Check if a session with the same id is still open.' },
      })
      return
    }
    this.sessionCache.openSession(id)
    const timeoutMs = typeof j.timeout === 'number' && j.timeout > 0 ? j.timeout * 1000 : undefined
    this.#history.set(id, { tokens: [], byRid: new Map(), timeoutMs })
    sendJson(res, 200, id)
  }

  async #closeSession(body: { json: Record<string, unknown> }, res: ServerResponse): Promise<void> {
    const id = body.json.session_id
    if (typeof id !== 'string') {
      throw validationError(
        '1 validation error for CloseSessionReqInput\nsession_id\n  Field required [type=missing]',
      )
    }
    this.#history.delete(id)
    this.#committed.delete(id)
    if (this.sessionCache.hasSession(id)) {
      const st = this.sessionCache.getSessionStatus(id)
      if (st?.active !== true) this.sessionCache.releaseSession(id)
      else this.#deferredClose.add(id)
    }
    this.#notifyMemory()
    res.writeHead(200).end()
  }

  readonly #deferredClose = new Set<string>()

  #abortRequest(body: { json: Record<string, unknown> }, res: ServerResponse): void {
    const { rid, abort_all } = body.json
    if (abort_all === true) {
      for (const c of this.#inflight.values()) c.abort(new Error('aborted by /abort_request'))
    } else if (typeof rid === 'string') {
      this.#inflight.get(rid)?.abort(new Error('aborted by /abort_request'))
    }
    res.writeHead(200).end()
  }

  #reapSessions(): void {
    const now = performance.now()
    for (const [id, h] of this.#history) {
      if (h.timeoutMs === undefined) continue
      const st = this.sessionCache.getSessionStatus(id)
      if (st !== undefined && !st.active && now - st.lastAccessTime > h.timeoutMs) {
        this.sessionCache.releaseSession(id)
        this.#history.delete(id)
      }
    }
  }

  // ------------------------------------------------------------------------------------------
  // Admission (Algorithm 2, answered by kvc-router's admit over this worker's real state)

  #admit(request: AdmitRequest): AdmitResponse {
    // Whole milliseconds: admit() answers leaseMs = expiresAt − now, which the contract wants integral.
    const now = Math.floor(performance.now())
    for (const id of this.#leases.expire(now)) void id
    const sessions = new Map<string, AdmitSession>()
    for (const s of this.sessionCache.listSessionStatuses()) {
      sessions.set(s.sessionId, {
        sessionId: s.sessionId,
        residentTokens: s.residentTokens,
        lastAccessTime: s.lastAccessTime,
        idle: !s.active,
      })
    }
    const used = this.capacityTokens - this.#pool.availableSize()
    const decision = admit(
      {
        capacityTokens: this.capacityTokens,
        usedTokens: used,
        evictableTokens: Math.min(used, this.#cache.evictableSize()),
        sessions,
        leases: this.#leases.live(now),
        transferQueueDepth: this.#transferQueue,
        retractedQueueDepth: 0,
        draining: this.#draining || this.#closed,
      },
      request,
      { now },
      this.#admitOptions,
    )
    for (const id of decision.expiredLeases) this.#leases.release(id)
    if (decision.lease !== undefined) this.#leases.take(decision.lease)
    for (const id of decision.releaseSessions) {
      // Only the KV lock goes: the session stays open for its client (it re-seeds on its next turn).
      if (this.sessionCache.hasSession(id)) this.sessionCache.releaseSession(id)
      this.#committed.delete(id)
    }
    if (decision.releaseSessions.length > 0) this.#notifyMemory()
    return decision.response
  }

  // ------------------------------------------------------------------------------------------
  // Generation

  async #generate(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { text, json } = await this.#jsonBody(req)
    this.#reapSessions()
    const stream = json.stream === true
    const isBatch =
      Array.isArray(json.text) || (Array.isArray(json.input_ids) && Array.isArray(json.input_ids[0]))
    const inputs = [json.text, json.input_ids, json.input_embeds].filter((x) => x !== undefined && x !== null)
    if (inputs.length === 0) throw generateError('Either text, input_ids or input_embeds should be provided.')
    if (inputs.length > 1) throw generateError('Either text or input_ids should be provided, not both.')
    if (json.input_embeds !== undefined && json.input_embeds !== null) {
      throw generateError('input_embeds is not supported by the emulator.')
    }
    if (isBatch) {
      if (stream) throw generateError('Streaming batch requests are not supported by the emulator.')
      const n = Array.isArray(json.text)
        ? (json.text as unknown[]).length
        : (json.input_ids as unknown[]).length
      const rooms = readBigIntField(text, 'bootstrap_room')
      const items: ExecItem[] = []
      for (let i = 0; i < n; i++)
        items.push(this.#parseItem(json, i, Array.isArray(rooms) ? rooms[i] : undefined))
      this.#checkRids(items)
      const outs = await Promise.all(items.map((it) => this.#runNonStream(it, req, res)))
      if (outs.some((o) => o === undefined)) return
      sendJson(res, 200, outs)
      return
    }
    const room = readBigIntField(text, 'bootstrap_room')
    const item = this.#parseItem(json, undefined, Array.isArray(room) ? undefined : room)
    this.#checkRids([item])
    try {
      this.#checkSession(item, json)
    } catch (err) {
      if (!stream || !(err instanceof HttpError)) throw err
      // Upstream streams a scheduler abort as a chunk with finish_reason abort (status_code 400).
      const message = (err.body as { error?: { message?: string } }).error?.message ?? err.message
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      const chunk = this.#generateChunk(item, {
        outputIds: [],
        text: '',
        promptTokens: item.tokens.length,
        cachedTokens: 0,
        finishReason: { type: 'abort', message, status_code: 400, err_type: 'BadRequestError' },
      })
      res.end(`data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`)
      return
    }
    if (!stream) {
      const out = await this.#runNonStream(item, req, res)
      if (out !== undefined) sendJson(res, 200, out)
      return
    }
    this.#runStream(item, req, res, (p, state) => this.#generateChunk(item, p, state))
  }

  #generateChunk(
    item: ExecItem,
    p: {
      outputIds: number[]
      text: string
      promptTokens: number
      cachedTokens: number
      finishReason: Record<string, unknown> | null
      e2e?: number
    },
    state?: { ids: number; text: number },
  ): Record<string, unknown> {
    const incremental = this.#opts.incrementalStreamingOutput === true && state !== undefined
    const ids = incremental ? p.outputIds.slice(state.ids) : p.outputIds.slice()
    const text = incremental ? p.text.slice(state.text) : p.text
    if (incremental) {
      state.ids = p.outputIds.length
      state.text = p.text.length
    }
    const meta: Record<string, unknown> = {
      id: item.rid,
      finish_reason: p.finishReason,
      prompt_tokens: p.promptTokens,
      weight_version: this.#opts.weightVersion ?? 'default',
      completion_tokens: p.outputIds.length,
      cached_tokens: p.cachedTokens,
    }
    if (p.e2e !== undefined) meta.e2e_latency = p.e2e
    return { text, output_ids: ids, meta_info: meta }
  }

  #checkRids(items: readonly ExecItem[]): void {
    const seen = new Set<string>()
    for (const it of items) {
      if (this.#inflight.has(it.rid) || seen.has(it.rid))
        throw generateError(`Duplicate request id: ${it.rid}`)
      seen.add(it.rid)
    }
  }

  /** Session checks that SGLang answers with a 400 before any work. */
  #checkSession(item: ExecItem, json: Record<string, unknown>): void {
    const sp = json.session_params as Record<string, unknown> | undefined
    if (sp !== undefined && sp !== null && typeof sp.id === 'string') {
      if (!this.#history.has(sp.id))
        throw generateError(`Invalid request: session id ${sp.id} does not exist`)
      if (this.sessionCache.getSessionStatus(sp.id)?.active === true) {
        throw generateError(`Invalid request: session ${sp.id} already has a request in flight`)
      }
    }
    void item
  }

  #parseItem(json: Record<string, unknown>, index: number | undefined, room: bigint | undefined): ExecItem {
    const pick = <T>(v: unknown): T | undefined =>
      (index !== undefined && Array.isArray(v) ? v[index] : v) as T | undefined
    let tokens: number[]
    const text = pick<unknown>(json.text)
    if (text !== undefined) {
      if (typeof text !== 'string') throw validationError('text: Input should be a valid string')
      tokens = fakeTokenize(text)
    } else {
      const ids = pick<unknown>(json.input_ids)
      if (
        !Array.isArray(ids) ||
        ids.some((t) => typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > 0x7fffffff)
      ) {
        throw validationError('input_ids: Input should be a list of non-negative integers')
      }
      tokens = ids as number[]
    }
    const sp = (pick<Record<string, unknown>>(json.sampling_params) ?? {}) as Record<string, unknown>
    if (typeof sp !== 'object' || sp === null)
      throw validationError('sampling_params: Input should be a valid dictionary')
    const maxNew = sp.max_new_tokens ?? 128
    if (typeof maxNew !== 'number' || !Number.isInteger(maxNew) || maxNew < 0) {
      throw generateError(`max_new_tokens must be at least 0, got ${String(maxNew)}.`)
    }
    const stop = sp.stop === undefined || sp.stop === null ? [] : Array.isArray(sp.stop) ? sp.stop : [sp.stop]
    const stopIds = Array.isArray(sp.stop_token_ids) ? (sp.stop_token_ids as number[]) : []
    const ridRaw = pick<unknown>(json.rid)
    const rid = typeof ridRaw === 'string' && ridRaw.length > 0 ? ridRaw : randomUUID().replace(/-/g, '')
    const extra = pick<unknown>(json.extra_key)
    const salt = pick<unknown>(json.cache_salt)
    const extraKey =
      typeof extra === 'string' || typeof salt === 'string'
        ? [typeof salt === 'string' ? salt : '', typeof extra === 'string' ? extra : '']
            .filter((s) => s)
            .join('|')
        : undefined
    // Sessions: classic session_params (prompt rebuilt from the session's history) or the top-level tag.
    let sessionId: string | undefined
    let historySession: string | undefined
    const params = json.session_params as Record<string, unknown> | undefined
    if (params !== undefined && params !== null && typeof params.id === 'string') {
      const h = this.#history.get(params.id)
      if (h !== undefined) {
        let base = typeof params.rid === 'string' ? (h.byRid.get(params.rid) ?? h.tokens) : h.tokens
        if (params.drop_previous_output === true && typeof params.rid !== 'string') base = h.tokens
        if (typeof params.offset === 'number' && params.offset >= 0) base = base.slice(0, params.offset)
        tokens = [...base, ...(tokens[0] === 1 && base.length > 0 ? tokens.slice(1) : tokens)]
      }
      sessionId = params.id
      historySession = params.id
    } else if (typeof json.session_id === 'string' && json.session_id.length > 0) {
      sessionId = json.session_id
    }
    if (tokens.length === 0) throw generateError('The input_ids should not be empty.')
    if (tokens.length >= this.#contextLength) {
      throw generateError(
        `The input (${tokens.length} tokens) is longer than the model's context length (${this.#contextLength} tokens).`,
      )
    }
    if (tokens.length + maxNew > this.#contextLength) {
      throw generateError(
        `Requested token count exceeds the model's maximum context length of ${this.#contextLength} tokens. You requested a total of ${tokens.length + maxNew} tokens: ${tokens.length} tokens from the input messages and ${maxNew} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.`,
      )
    }
    const host = pick<unknown>(json.bootstrap_host)
    const port = pick<unknown>(json.bootstrap_port)
    const roomRaw = room ?? pick<unknown>(json.bootstrap_room)
    let bootstrap: ExecItem['bootstrap']
    if (roomRaw !== undefined && roomRaw !== null) {
      bootstrap = {
        host: typeof host === 'string' ? host : '127.0.0.1',
        port: typeof port === 'number' ? port : null,
        room: String(roomRaw),
      }
    } else if (this.role === 'prefill' || (this.role === 'decode' && this.#opts.strictPd === true)) {
      throw generateError(
        `Invalid request: Disaggregated request received without boostrap room id. req.rid='${rid}'`,
      )
    }
    return {
      rid,
      tokens,
      sampling: {
        maxNewTokens: this.role === 'prefill' ? Math.min(1, maxNew) : maxNew,
        stop: stop.filter((s): s is string => typeof s === 'string' && s.length > 0),
        stopTokenIds: new Set(stopIds),
        noStopTrim: sp.no_stop_trim === true,
      },
      extraKey,
      priority: typeof json.priority === 'number' ? json.priority : 0,
      sessionId,
      historySession,
      bootstrap,
    }
  }

  async #runNonStream(
    item: ExecItem,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<Record<string, unknown> | undefined> {
    const controller = this.#track(item.rid, res)
    try {
      const out = await this.#execute(item, controller.signal, undefined)
      return this.#generateChunk(item, { ...out, e2e: out.e2eLatency })
    } catch (err) {
      if (err instanceof HttpError) throw err
      if (controller.signal.aborted) {
        const reason = controller.signal.reason
        if (res.destroyed || this.#closed) return undefined
        return this.#generateChunk(item, {
          outputIds: [],
          text: '',
          promptTokens: item.tokens.length,
          cachedTokens: 0,
          finishReason: { type: 'abort', message: reason instanceof Error ? reason.message : 'aborted' },
        })
      }
      throw err
    } finally {
      this.#untrack(item.rid)
      void req
    }
  }

  #runStream(
    item: ExecItem,
    req: IncomingMessage,
    res: ServerResponse,
    render: (p: Parameters<ChunkSink>[0] & { e2e?: number }, state: { ids: number; text: number }) => unknown,
    after?: (out: ExecOutput) => unknown[],
  ): void {
    const controller = this.#track(item.rid, res)
    const state = { ids: 0, text: 0 }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const write = (obj: unknown): void => {
      if (!res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`)
    }
    this.#execute(item, controller.signal, (p) => {
      if (p.finishReason === null) write(render(p, state))
    })
      .then(
        (out) => {
          write(render({ ...out, e2e: out.e2eLatency }, state))
          for (const extra of after?.(out) ?? []) write(extra)
        },
        (err: unknown) => {
          if (err instanceof HttpError) {
            const body = err.body as { error?: { message?: string }; message?: string }
            const message = body?.error?.message ?? body?.message ?? String(err.message)
            if (err.status === 400 && /session|Invalid request/.test(message)) {
              write(
                render(
                  {
                    outputIds: [],
                    text: '',
                    promptTokens: item.tokens.length,
                    cachedTokens: 0,
                    finishReason: { type: 'abort', message, status_code: 400, err_type: 'BadRequestError' },
                  },
                  state,
                ),
              )
            } else {
              write({ error: { message } })
            }
          } else if (!controller.signal.aborted) {
            write({ error: { message: (err as Error)?.message ?? String(err) } })
          }
        },
      )
      .finally(() => {
        this.#untrack(item.rid)
        if (!res.destroyed) res.end('data: [DONE]\n\n')
        void req
      })
  }

  #track(rid: string, res: ServerResponse): AbortController {
    const c = new AbortController()
    this.#inflight.set(rid, c)
    res.on('close', () => {
      if (!res.writableFinished) c.abort(new Error('the client disconnected'))
    })
    return c
  }

  #untrack(rid: string): void {
    this.#inflight.delete(rid)
  }

  /** Runs one request through the real caches, with the timing model's delays. */
  async #execute(item: ExecItem, signal: AbortSignal, onChunk: ChunkSink | undefined): Promise<ExecOutput> {
    const t0 = performance.now()
    const sc = this.sessionCache
    this.#requestsTotal++
    if (this.#leases.release(item.rid)) this.#notifyMemory()
    const fake = item.bootstrap?.host === FAKE_BOOTSTRAP_HOST
    const maxNew = item.sampling.maxNewTokens
    let sreq: SessionRequest | undefined
    let cached = 0
    let reserved = 0
    this.#waiting++
    let waiting = true
    try {
      // Admission into the batch: the uncached prompt plus the decode reserve must fit.
      for (;;) {
        throwIfAborted(signal)
        sreq = this.#createRequest(item)
        cached = sc.matchPrefix(sreq).length
        // Slots are handed out by page: the prompt's pages plus the decode tokens', rounded up.
        const need = this.#ceilPage(item.tokens.length + maxNew) - cached
        if (need > this.capacityTokens) {
          sc.abortReq(sreq)
          sreq = undefined
          throw generateError(
            `The request needs ${need} KV slots, more than the pool holds (${this.capacityTokens} tokens).`,
          )
        }
        if (sc.ensureFree(need + this.#reservedSlots).ok) {
          // Reserve every slot the request will take until it has allocated it.
          reserved = need
          this.#reservedSlots += reserved
          break
        }
        sc.abortReq(sreq)
        sreq = undefined
        await this.#waitMemory(signal)
      }
      this.#waiting--
      waiting = false
      this.#running++
      const target = this.#ceilPage(item.tokens.length + maxNew)
      const syncReserve = (r: SessionRequest): void => {
        const remaining = Math.max(0, target - this.#ceilPage(r.kvAllocatedLen))
        this.#reservedSlots += remaining - reserved
        reserved = remaining
      }
      const promptLen = item.tokens.length
      this.#batchTokens += promptLen
      const uncached = promptLen - cached
      // Prefill: computed here, or (decode with a bootstrap room) received from the prefill.
      if (this.role === 'decode' && item.bootstrap !== undefined && !fake) {
        await this.#receiveKv(item, uncached, signal)
      } else {
        await this.#sleep(prefillMs(this.#timing, uncached, cached), signal)
      }
      sc.prefill(sreq, uncached)
      syncReserve(sreq)
      this.#promptTotal += promptLen
      this.#cachedTotal += cached
      this.#ttft.observe((performance.now() - t0) / 1000)
      const hash = fakePromptHash(item.tokens)
      const out: number[] = []
      let finish: Record<string, unknown> = { type: 'length', length: maxNew }
      let textEnd: number | undefined
      for (let i = 0; i < maxNew; i++) {
        if (i > 0) await this.#sleep(decodeStepMs(this.#timing, this.#batchTokens), signal)
        throwIfAborted(signal)
        const tok = fakeNextToken(hash, i)
        sc.decode(sreq, tok)
        syncReserve(sreq) // what stays reserved: the decode pages not yet allocated
        out.push(tok)
        this.#batchTokens++
        this.#genTotal++
        if (item.sampling.stopTokenIds.has(tok)) {
          finish = { type: 'stop', matched: tok }
          break
        }
        const text = fakeDetokenize(out)
        const hit = item.sampling.stop.find((s) => text.endsWith(s))
        if (hit !== undefined) {
          finish = { type: 'stop', matched: hit }
          textEnd = item.sampling.noStopTrim ? undefined : text.length - hit.length
          break
        }
        if (i < maxNew - 1) {
          onChunk?.({
            outputIds: out.slice(),
            text,
            promptTokens: promptLen,
            cachedTokens: cached,
            finishReason: null,
          })
        }
      }
      if (maxNew === 0) finish = { type: 'length', length: 0 }
      // Finish: the committed tokens enter the tree (a fake bootstrap skips the insert, as upstream).
      if (fake) sc.abortReq(sreq)
      else sc.cacheFinishedReq(sreq)
      const finishedReq = sreq
      sreq = undefined
      this.#afterTurn(item, finishedReq)
      if (this.role === 'prefill' && item.bootstrap !== undefined) {
        this.#rooms?.settle(item.bootstrap.room, { ok: true, tokens: promptLen, message: undefined })
      }
      let text = fakeDetokenize(
        out.filter((t) => !item.sampling.stopTokenIds.has(t) || item.sampling.noStopTrim),
      )
      if (textEnd !== undefined) text = text.slice(0, textEnd)
      const e2e = (performance.now() - t0) / 1000
      this.#e2e.observe(e2e)
      return {
        outputIds: out,
        text,
        finishReason: finish,
        promptTokens: promptLen,
        cachedTokens: cached,
        e2eLatency: e2e,
      }
    } catch (err) {
      if (sreq !== undefined) sc.abortReq(sreq)
      if (this.role === 'prefill' && item.bootstrap !== undefined) {
        this.#rooms?.settle(item.bootstrap.room, { ok: false, tokens: 0, message: (err as Error)?.message })
      }
      if (err instanceof SessionCacheError) {
        if (err.code === 'OUT_OF_MEMORY') throw generateError(`Out of memory: ${err.message}`)
        throw generateError(`Invalid request: ${err.message}`)
      }
      throw err
    } finally {
      if (waiting) this.#waiting--
      else {
        this.#running--
        this.#batchTokens = Math.max(0, this.#batchTokens - item.tokens.length)
      }
      this.#reservedSlots -= reserved
      this.#notifyMemory()
      const sid = item.sessionId
      if (
        sid !== undefined &&
        this.#deferredClose.has(sid) &&
        this.sessionCache.getSessionStatus(sid)?.active !== true
      ) {
        this.#deferredClose.delete(sid)
        if (this.sessionCache.hasSession(sid)) this.sessionCache.releaseSession(sid)
      }
    }
  }

  #ceilPage(n: number): number {
    return Math.ceil(n / this.pageSize) * this.pageSize
  }

  /** A session turn when the prompt extends the session's committed tokens, else a plain request. */
  #createRequest(item: ExecItem): SessionRequest {
    const sc = this.sessionCache
    const sid = item.sessionId
    const plain = (): SessionRequest =>
      sc.createRequest({
        rid: item.rid,
        inputIds: item.tokens,
        priority: item.priority,
        ...(item.extraKey === undefined ? {} : { extraKey: item.extraKey }),
      })
    if (sid === undefined || this.#deferredClose.has(sid)) return plain()
    if (!sc.hasSession(sid)) {
      // First turn of a tagged session, or a session the cache released under pressure: (re)open it.
      sc.openSession(sid, item.extraKey === undefined ? {} : { extraKey: item.extraKey })
      this.#committed.delete(sid)
    }
    const slot = sc.getSessionSlot(sid)!
    if (slot.activeRid !== undefined) {
      throw generateError(`Invalid request: session ${sid} already has a request in flight`)
    }
    const committed = this.#committed.get(sid) ?? EMPTY_TOKENS
    const sameNs = item.extraKey === undefined || item.extraKey === slot.extraKey
    let extendsCommitted =
      sameNs && committed.length === slot.committedLen && item.tokens.length > committed.length
    for (let i = 0; extendsCommitted && i < committed.length; i++) {
      if (item.tokens[i] !== committed[i]) extendsCommitted = false
    }
    // A prompt that does not extend the session's KV (rewind, replace, dropped output) is served as
    // a plain request: KV reuse then goes through the radix tree only, as in upstream classic sessions.
    if (!extendsCommitted) return plain()
    return sc.createRequest({
      rid: item.rid,
      inputIds: item.tokens,
      sessionId: sid,
      priority: item.priority,
      ...(item.extraKey === undefined ? {} : { extraKey: item.extraKey }),
    })
  }

  readonly #committed = new Map<string, Uint32Array>()

  #afterTurn(item: ExecItem, req: SessionRequest): void {
    if (req.sessionId !== undefined) {
      const slot = this.sessionCache.getSessionSlot(req.sessionId)
      if (slot !== undefined) this.#committed.set(req.sessionId, req.tokenIds.slice(0, slot.committedLen))
    }
    const hs = item.historySession
    if (hs === undefined) return
    const h = this.#history.get(hs)
    if (h === undefined) return
    const full = [...item.tokens, ...req.outputIds]
    h.tokens = full
    h.byRid.set(item.rid, full)
  }

  async #receiveKv(item: ExecItem, uncached: number, signal: AbortSignal): Promise<void> {
    const b = item.bootstrap!
    this.#transferQueue++
    try {
      const local = b.host === '127.0.0.1' || b.host === 'localhost' || b.host === '::1'
      if (local && b.port !== null) {
        const rooms = prefillRegistry.get(`${b.host === 'localhost' ? '127.0.0.1' : b.host}:${b.port}`)
        const timeout = this.#opts.transferTimeoutMs ?? 32_000
        const r =
          rooms === undefined
            ? { ok: false, tokens: 0, message: 'prefill instance is gone' }
            : await rooms.wait(b.room, timeout, signal)
        throwIfAborted(signal)
        if (!r.ok) {
          throw new HttpError(
            500,
            errorResponse(
              500,
              `KVTransferError(bootstrap_room=${b.room}): Failed to get kvcache from prefill instance, it might be dead (${r.message ?? 'unknown'})`,
            ),
          )
        }
      }
      await this.#sleep(transferMs(this.#timing, uncached), signal)
    } finally {
      this.#transferQueue--
    }
  }

  async #chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { text, json } = await this.#jsonBody(req, true)
    const messages = json.messages
    if (!Array.isArray(messages) || messages.length === 0) {
      throw validationError(
        '1 validation error for ChatCompletionRequest\nmessages\n  Field required [type=missing]',
      )
    }
    for (const m of messages) {
      if (typeof m !== 'object' || m === null || typeof (m as { role?: unknown }).role !== 'string') {
        throw validationError(
          '1 validation error for ChatCompletionRequest\nmessages.role\n  Field required [type=missing]',
        )
      }
    }
    const prompt = fakeChatTemplate(messages as { role: string; content: unknown }[])
    const maxNew = json.max_completion_tokens ?? json.max_tokens ?? 128
    const body: Record<string, unknown> = {
      text: prompt,
      sampling_params: {
        max_new_tokens: maxNew,
        ...(json.stop === undefined ? {} : { stop: json.stop }),
      },
      ...pickKeys(json, [
        'rid',
        'session_params',
        'session_id',
        'extra_key',
        'cache_salt',
        'priority',
        'bootstrap_host',
        'bootstrap_port',
      ]),
    }
    const room = readBigIntField(text, 'bootstrap_room')
    const item = this.#parseItem(body, undefined, Array.isArray(room) ? undefined : room)
    this.#checkRids([item])
    this.#checkSession(item, body)
    const id = `chatcmpl-${item.rid}`
    const created = Math.floor(Date.now() / 1000)
    const model = typeof json.model === 'string' ? json.model : this.#modelName
    const usage = (o: {
      promptTokens: number
      cachedTokens: number
      outputIds: number[]
    }): Record<string, unknown> => ({
      prompt_tokens: o.promptTokens,
      total_tokens: o.promptTokens + o.outputIds.length,
      completion_tokens: o.outputIds.length,
      prompt_tokens_details:
        this.#opts.enableCacheReport === true && o.cachedTokens > 0
          ? { cached_tokens: o.cachedTokens }
          : null,
      reasoning_tokens: 0,
    })
    const finishName = (fr: Record<string, unknown> | null): string | null =>
      fr === null ? null : fr.type === 'abort' ? 'abort' : (fr.type as string)
    if (json.stream !== true) {
      const controller = this.#track(item.rid, res)
      try {
        const out = await this.#execute(item, controller.signal, undefined)
        sendJson(res, 200, {
          id,
          object: 'chat.completion',
          created,
          model,
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: out.text, reasoning_content: null, tool_calls: null },
              logprobs: null,
              finish_reason: finishName(out.finishReason),
              matched_stop: out.finishReason.type === 'stop' ? (out.finishReason.matched ?? null) : null,
            },
          ],
          usage: usage(out),
          metadata: { weight_version: this.#opts.weightVersion ?? 'default' },
        })
      } catch (err) {
        if (controller.signal.aborted && (res.destroyed || this.#closed)) return
        if (err instanceof HttpError) {
          const b = err.body as { error?: { message?: string } }
          if (b?.error?.message !== undefined)
            throw new HttpError(err.status, errorResponse(err.status, b.error.message))
        }
        throw err
      } finally {
        this.#untrack(item.rid)
      }
      return
    }
    const includeUsage =
      (json.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true
    let first = true
    this.#runStream(
      item,
      req,
      res,
      (p, state) => {
        const delta: Record<string, unknown> = {}
        if (first) {
          delta.role = 'assistant'
          first = false
        }
        delta.content = p.text.slice(state.text)
        state.text = p.text.length
        return {
          id,
          object: 'chat.completion.chunk',
          created,
          model,
          choices: [
            {
              index: 0,
              delta,
              logprobs: null,
              finish_reason: finishName(p.finishReason),
              matched_stop: p.finishReason?.type === 'stop' ? (p.finishReason.matched ?? null) : null,
            },
          ],
          usage: null,
        }
      },
      (out) =>
        includeUsage
          ? [{ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(out) }]
          : [],
    )
  }

  // ------------------------------------------------------------------------------------------
  // Waiting

  #notifyMemory(): void {
    const ws = [...this.#memoryWaiters]
    this.#memoryWaiters.clear()
    for (const w of ws) w()
  }

  #waitMemory(signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason)
        return
      }
      const done = (): void => {
        signal.removeEventListener('abort', onAbort)
        this.#memoryWaiters.delete(done)
        resolve()
      }
      const onAbort = (): void => {
        this.#memoryWaiters.delete(done)
        reject(signal.reason)
      }
      this.#memoryWaiters.add(done)
      signal.addEventListener('abort', onAbort, { once: true })
    })
  }

  #sleep(ms: number, signal: AbortSignal): Promise<void> {
    const scaled = ms * this.#timing.scale
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason)
        return
      }
      const onAbort = (): void => {
        if (timer !== undefined) clearTimeout(timer)
        if (imm !== undefined) clearImmediate(imm)
        reject(signal.reason)
      }
      const done = (): void => {
        signal.removeEventListener('abort', onAbort)
        resolve()
      }
      let timer: ReturnType<typeof setTimeout> | undefined
      let imm: ReturnType<typeof setImmediate> | undefined
      if (scaled >= 1) timer = setTimeout(done, scaled)
      else imm = setImmediate(done)
      signal.addEventListener('abort', onAbort, { once: true })
    })
  }
}

function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw signal.reason ?? new Error('aborted')
}

/** SGLang's `ErrorResponse` (the HTTPException / validation handlers). */
function errorResponse(code: number, message: string): Record<string, unknown> {
  return { object: 'error', message, type: httpPhrase(code), param: null, code }
}

function httpPhrase(code: number): string {
  const phrases: Record<number, string> = {
    400: 'Bad Request',
    404: 'Not Found',
    413: 'Payload Too Large',
    429: 'Too Many Requests',
    500: 'Internal Server Error',
    503: 'Service Unavailable',
  }
  return phrases[code] ?? String(code)
}

/** A body that fails FastAPI validation: 400 with `ErrorResponse`. */
function validationError(message: string): HttpError {
  return new HttpError(400, errorResponse(400, message))
}

/** A ValueError inside generate: 400 `{"error": {"message"}}` (`_create_error_response`). */
function generateError(message: string): HttpError {
  return new HttpError(400, { error: { message } })
}

function pickKeys(o: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k]
  return out
}

function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err)
    server.once('error', onError)
    server.listen(port, host, () => {
      server.off('error', onError)
      resolve((server.address() as AddressInfo).port)
    })
  })
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve()
      return
    }
    server.close(() => resolve())
    server.closeAllConnections()
  })
}

function realDelay(ms: number, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      res.off('close', done)
      resolve()
    }
    res.once('close', done)
  })
}
