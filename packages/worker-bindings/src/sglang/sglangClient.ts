/**
 * Typed client of one SGLang worker's HTTP API.
 *
 * @module
 */
import { WorkerApiError, WorkerBindingsError } from '../errors/workerBindingsError.js'
import { type SglangMetrics, toSglangMetrics } from '../metrics/sglangMetrics.js'
import { parsePrometheusText } from '../metrics/prometheusText.js'
import type { SseDecoderOptions } from '../sse/sseDecoder.js'
import {
  type CallOptions,
  type ClientOptions,
  HttpTransport,
  type HttpRequestSpec,
} from '../transport/httpTransport.js'
import { ChatCompletionStream, GenerateStream, type StreamOutputMode } from './streams.js'
import type {
  ChatCompletion,
  ChatCompletionRequest,
  GenerateRequest,
  GenerateResponse,
  GetLoadItem,
  ModelInfo,
  OpenSessionRequest,
  ServerInfo,
  V1LoadsInclude,
  V1LoadsResponse,
} from './types.js'

/**
 * Options of {@link SglangClient}.
 *
 * @example
 * ```ts
 * import { SglangClient, type SglangClientOptions } from '@kvc/worker-bindings'
 * const opts: SglangClientOptions = { baseURL: 'http://127.0.0.1:30000', timeout: 30_000, streamOutput: 'cumulative' }
 * const client = new SglangClient(opts)
 * ```
 */
export interface SglangClientOptions extends ClientOptions {
  /** How the server streams `/generate` (default `'cumulative'`, SGLang's default). */
  readonly streamOutput?: StreamOutputMode
  /** Limits of the event-stream decoder. */
  readonly sse?: SseDecoderOptions
}

/**
 * Answer of {@link SglangClient.flushCache}.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * const { success, message } = await new SglangClient({ baseURL: 'http://127.0.0.1:30000' }).flushCache()
 * if (!success) console.log('requests are running:', message)
 * ```
 */
export interface FlushCacheResult {
  /** `false` when the server refused (HTTP 400: requests were running or waiting). */
  readonly success: boolean
  /** The server's message. */
  readonly message: string
}

/**
 * Client of one SGLang worker (`python -m sglang.launch_server`), or of the emulator
 * (`createSglangEmulator`). Paths and fields are upstream's; where versions differ the client
 * probes the newer path first and falls back (`/server_info` → `/get_server_info`, `/model_info`
 * → `/get_model_info`), remembering which one answered.
 *
 * Retries: reads, `close_session`, `flush_cache` and `abort_request` are idempotent and retried
 * (see {@link HttpTransport}); `generate`, chat completions and `open_session` are sent once.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * const worker = new SglangClient({ baseURL: 'http://127.0.0.1:30000', timeout: 30_000 })
 * const out = await worker.generate({ text: 'The capital of France is', sampling_params: { max_new_tokens: 8 } })
 * console.log(out.text, out.meta_info.cached_tokens)
 * ```
 */
export class SglangClient {
  /** The transport (base URL, retries, timeouts) this client sends through. */
  readonly http: HttpTransport
  readonly #streamOutput: StreamOutputMode
  readonly #sse: SseDecoderOptions
  #serverInfoPath: string | undefined
  #modelInfoPath: string | undefined

  constructor(options: SglangClientOptions) {
    this.http = new HttpTransport(options)
    const mode = options.streamOutput ?? 'cumulative'
    if (mode !== 'cumulative' && mode !== 'incremental') {
      throw new WorkerBindingsError('INVALID_OPTION', `streamOutput must be 'cumulative' or 'incremental'`, {
        value: mode,
      })
    }
    this.#streamOutput = mode
    this.#sse = { ...options.sse }
  }

  /** Normalized base URL (the health tracker's key for this worker). */
  get baseURL(): string {
    return this.http.baseURL
  }

  /**
   * `POST /generate`, non-streaming, one prompt. Never retried. An abort finish that SGLang turns
   * into HTTP 400 (unknown session, prompt longer than the context) throws {@link WorkerApiError}.
   */
  async generate(request: GenerateRequest, options?: CallOptions): Promise<GenerateResponse> {
    checkGenerate(request, false)
    const out = await this.http.json<GenerateResponse | GenerateResponse[]>(
      { method: 'POST', path: '/generate', body: { ...request, stream: false }, idempotent: false },
      options,
    )
    if (Array.isArray(out) || typeof out !== 'object' || out === null || typeof out.meta_info !== 'object') {
      throw new WorkerBindingsError('BAD_RESPONSE', '/generate did not answer one result', {
        value: out,
        endpoint: this.baseURL,
      })
    }
    return out
  }

  /** `POST /generate` with a batch (`text: string[]` or `input_ids: number[][]`); one result per item. */
  async generateBatch(request: GenerateRequest, options?: CallOptions): Promise<GenerateResponse[]> {
    checkGenerate(request, true)
    const out = await this.http.json<GenerateResponse[]>(
      { method: 'POST', path: '/generate', body: { ...request, stream: false }, idempotent: false },
      options,
    )
    if (!Array.isArray(out)) {
      throw new WorkerBindingsError('BAD_RESPONSE', '/generate did not answer a list for a batch', {
        value: out,
        endpoint: this.baseURL,
      })
    }
    return out
  }

  /**
   * `POST /generate` with `stream: true`. Resolves once the headers arrived (HTTP errors throw
   * here); the chunks come from iterating the {@link GenerateStream}. The call's `timeout` bounds
   * the wait for the headers and then each wait for the next chunk.
   */
  async generateStream(request: GenerateRequest, options?: CallOptions): Promise<GenerateStream> {
    checkGenerate(request, false)
    const res = await this.http.stream(
      { method: 'POST', path: '/generate', body: { ...request, stream: true }, idempotent: false },
      options,
    )
    return new GenerateStream(res, this.#streamOutput, { ...this.#sse, endpoint: this.baseURL })
  }

  /** `POST /v1/chat/completions`, non-streaming. Never retried. */
  async chatCompletions(request: ChatCompletionRequest, options?: CallOptions): Promise<ChatCompletion> {
    checkChat(request)
    return this.http.json<ChatCompletion>(
      {
        method: 'POST',
        path: '/v1/chat/completions',
        body: { ...request, stream: false },
        idempotent: false,
      },
      options,
    )
  }

  /** `POST /v1/chat/completions` with `stream: true`. Never retried. */
  async chatCompletionsStream(
    request: ChatCompletionRequest,
    options?: CallOptions,
  ): Promise<ChatCompletionStream> {
    checkChat(request)
    const res = await this.http.stream(
      { method: 'POST', path: '/v1/chat/completions', body: { ...request, stream: true }, idempotent: false },
      options,
    )
    return new ChatCompletionStream(res, { ...this.#sse, endpoint: this.baseURL })
  }

  /**
   * `POST /open_session` → the session id (upstream answers it as a bare JSON string). Not
   * retried: a retry after a lost answer would fail with "a session with the same id is still
   * open". `capacity_of_str_len` defaults to 65,536.
   */
  async openSession(request: Partial<OpenSessionRequest> = {}, options?: CallOptions): Promise<string> {
    const body = { capacity_of_str_len: 65_536, ...request }
    const out = await this.http.json<unknown>(
      { method: 'POST', path: '/open_session', body, idempotent: false },
      options,
    )
    if (typeof out !== 'string') {
      throw new WorkerBindingsError('BAD_RESPONSE', '/open_session did not answer a session id string', {
        value: out,
        endpoint: this.baseURL,
      })
    }
    return out
  }

  /** `POST /close_session` (an unknown id is not an error upstream: 200). */
  async closeSession(sessionId: string, options?: CallOptions): Promise<void> {
    await this.http.text(
      { method: 'POST', path: '/close_session', body: { session_id: sessionId }, idempotent: true },
      options,
    )
  }

  /** `POST /abort_request` for `rid` (or every request with `abortAll`). */
  async abortRequest(rid: string, options?: CallOptions & { readonly abortAll?: boolean }): Promise<void> {
    await this.http.text(
      {
        method: 'POST',
        path: '/abort_request',
        body: { rid, abort_all: options?.abortAll ?? false },
        idempotent: true,
      },
      options,
    )
  }

  /** `GET /server_info`, falling back to the older `/get_server_info` on 404. */
  async serverInfo(options?: CallOptions): Promise<ServerInfo> {
    const { value, path } = await this.#withFallback<ServerInfo>(
      this.#serverInfoPath,
      ['/server_info', '/get_server_info'],
      options,
    )
    this.#serverInfoPath = path
    return value
  }

  /** `GET /model_info`, falling back to the older `/get_model_info` on 404. */
  async modelInfo(options?: CallOptions): Promise<ModelInfo> {
    const { value, path } = await this.#withFallback<ModelInfo>(
      this.#modelInfoPath,
      ['/model_info', '/get_model_info'],
      options,
    )
    this.#modelInfoPath = path
    return value
  }

  /** `GET /get_load`: one item per DP rank. */
  async getLoad(options?: CallOptions): Promise<GetLoadItem[]> {
    const out = await this.http.json<GetLoadItem[] | GetLoadItem>(
      { method: 'GET', path: '/get_load', idempotent: true },
      options,
    )
    return Array.isArray(out) ? out : [out]
  }

  /** `GET /v1/loads?dp_rank=&include=` (JSON format). */
  async loads(
    query: { readonly dpRank?: number; readonly include?: readonly V1LoadsInclude[] } = {},
    options?: CallOptions,
  ): Promise<V1LoadsResponse> {
    return this.http.json<V1LoadsResponse>(
      {
        method: 'GET',
        path: '/v1/loads',
        query: {
          dp_rank: query.dpRank,
          include: query.include === undefined ? undefined : query.include.join(','),
          format: 'json',
        },
        idempotent: true,
      },
      options,
    )
  }

  /** `POST /flush_cache`: resets the radix cache, refused (`success: false`, HTTP 400) while requests run. */
  async flushCache(options?: CallOptions): Promise<FlushCacheResult> {
    const res = await this.http.text(
      { method: 'POST', path: '/flush_cache', idempotent: true, acceptStatus: [400] },
      options,
    )
    return { success: res.status === 200, message: res.text }
  }

  /** `GET /health`: resolves when the worker answers 200; throws {@link WorkerApiError} (503) otherwise. */
  async health(options?: CallOptions): Promise<void> {
    await this.http.text({ method: 'GET', path: '/health', idempotent: true }, options)
  }

  /** `GET /health_generate`: like {@link SglangClient.health} (both run a one-token generation upstream). */
  async healthGenerate(options?: CallOptions): Promise<void> {
    await this.http.text({ method: 'GET', path: '/health_generate', idempotent: true }, options)
  }

  /** `true` when `/health` answers 200, `false` on any failure (for probes). */
  async isHealthy(options?: CallOptions): Promise<boolean> {
    try {
      await this.health({ maxRetries: 0, ...options })
      return true
    } catch {
      return false
    }
  }

  /** `GET /metrics` as text. */
  async metricsText(options?: CallOptions): Promise<string> {
    return (await this.http.text({ method: 'GET', path: '/metrics', idempotent: true }, options)).text
  }

  /** `GET /metrics` parsed into typed values (needs `--enable-metrics` upstream). */
  async metrics(options?: CallOptions): Promise<SglangMetrics> {
    return toSglangMetrics(parsePrometheusText(await this.metricsText(options)))
  }

  async #withFallback<T>(
    known: string | undefined,
    paths: readonly string[],
    options: CallOptions | undefined,
  ): Promise<{ value: T; path: string }> {
    const order = known === undefined ? paths : [known]
    let last: unknown
    for (const path of order) {
      const spec: HttpRequestSpec = { method: 'GET', path, idempotent: true }
      try {
        return { value: await this.http.json<T>(spec, options), path }
      } catch (err) {
        if (err instanceof WorkerApiError && (err.status === 404 || err.status === 405)) {
          last = err
          continue
        }
        throw err
      }
    }
    throw last
  }
}

function checkGenerate(req: GenerateRequest, batch: boolean): void {
  if (typeof req !== 'object' || req === null) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'a generate request must be an object', { value: req })
  }
  const inputs = [req.text, req.input_ids, req.input_embeds].filter((x) => x !== undefined && x !== null)
  if (inputs.length !== 1) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'give exactly one of text, input_ids, input_embeds', {
      value: req,
    })
  }
  const isBatch =
    Array.isArray(req.text) ||
    (Array.isArray(req.input_ids) && req.input_ids.length > 0 && Array.isArray(req.input_ids[0]))
  if (isBatch !== batch) {
    throw new WorkerBindingsError(
      'INVALID_ARGUMENT',
      batch ? 'generateBatch needs text: string[] or input_ids: number[][]' : 'use generateBatch for a batch',
      { value: req },
    )
  }
}

function checkChat(req: ChatCompletionRequest): void {
  if (typeof req !== 'object' || req === null || !Array.isArray(req.messages) || req.messages.length === 0) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'a chat request needs a non-empty messages array', {
      value: req,
    })
  }
  if (typeof req.model !== 'string') {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'a chat request needs a model name', {
      value: req.model,
    })
  }
}
