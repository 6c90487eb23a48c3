import type { ServerResponse } from 'node:http'
import { SLO_CLASSES, type SloClass } from '@kvc/kvc-router'
import {
  type CallOptions,
  type ChatCompletion,
  type ChatCompletionChunk,
  type GenerateRequest,
  type GenerateResponse,
  type GenerateStreamChunk,
  WorkerBindingsError,
  generateBootstrapRoom,
} from '@kvc/worker-bindings'
import type { ProxyConfig } from './config.js'
import { badRequest } from './errors.js'
import type { Completion, ServedBy, StartedResponse, TurnTransport } from './gateway.js'
import {
  OPEN_SCOPE,
  type RequestScope,
  saltFields,
  visibleHeaders,
  visibleKvc,
  visibleUsage,
} from './tenancy/requestScope.js'
import type { ChatMessageLike, PromptTokenizer } from './tokens.js'

/** A validated OpenAI request (chat or completion), ready to dispatch. */
export interface ParsedRequest {
  readonly kind: 'chat' | 'completion'
  /** The client's body (unknown fields are passed to the worker for chat). */
  readonly body: Record<string, unknown>
  readonly stream: boolean
  /** The client asked for a final usage chunk (`stream_options.include_usage`). */
  readonly includeUsage: boolean
  readonly maxTokens: number
  readonly model: string | undefined
  readonly sloClass: SloClass
  readonly messages: readonly ChatMessageLike[] | undefined
  readonly promptText: string | undefined
  readonly promptIds: readonly number[] | undefined
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function'])
/**
 * Fields the proxy owns: a client may not set them (bootstrap fields from clients are a known SGLang
 * hazard, #36855). The client's `cache_salt` / `extra_key` are folded into its tenant's salt.
 */
const PROXY_OWNED = [
  'rid',
  'session_id',
  'cache_salt',
  'extra_key',
  'bootstrap_host',
  'bootstrap_port',
  'bootstrap_room',
  'bootstrap_pair_key',
]

function intField(body: Record<string, unknown>, key: string, min: number, max: number): number | undefined {
  const v = body[key]
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw badRequest(`${key} must be an integer in [${min}, ${max}], got ${JSON.stringify(v)}`, 400, key)
  return v
}

function common(
  body: Record<string, unknown>,
  headerSlo: string | undefined,
  config: ProxyConfig,
): Pick<ParsedRequest, 'stream' | 'includeUsage' | 'maxTokens' | 'model' | 'sloClass'> {
  if (body.stream !== undefined && typeof body.stream !== 'boolean')
    throw badRequest('stream must be a boolean', 400, 'stream')
  const so = body.stream_options
  if (so !== undefined && so !== null && (typeof so !== 'object' || Array.isArray(so)))
    throw badRequest('stream_options must be an object', 400, 'stream_options')
  if (body.n !== undefined && body.n !== null && body.n !== 1)
    throw badRequest('n must be 1 (one choice per turn)', 400, 'n')
  if (body.model !== undefined && typeof body.model !== 'string')
    throw badRequest('model must be a string', 400, 'model')
  const lim = config.limits
  const maxTokens =
    intField(body, 'max_completion_tokens', 0, lim.maxMaxTokens) ??
    intField(body, 'max_tokens', 0, lim.maxMaxTokens) ??
    lim.defaultMaxTokens
  const slo = headerSlo ?? (body.kvc_slo_class as string | undefined) ?? config.defaultSloClass
  if (!(SLO_CLASSES as readonly string[]).includes(slo))
    throw badRequest(`SLO class must be one of ${SLO_CLASSES.join(', ')}`, 400, 'x-kvc-slo-class')
  return {
    stream: body.stream === true,
    includeUsage: (so as { include_usage?: unknown } | undefined)?.include_usage === true,
    maxTokens,
    model: body.model as string | undefined,
    sloClass: slo as SloClass,
  }
}

/** Validates a `/v1/chat/completions` body (400 naming the bad field). */
export function parseChat(
  body: Record<string, unknown>,
  headerSlo: string | undefined,
  config: ProxyConfig,
): ParsedRequest {
  const m = body.messages
  if (!Array.isArray(m) || m.length === 0)
    throw badRequest('messages must be a non-empty array', 400, 'messages')
  m.forEach((x: unknown, i) => {
    if (typeof x !== 'object' || x === null || Array.isArray(x))
      throw badRequest(`messages[${i}] must be an object`, 400, `messages[${i}]`)
    const role = (x as { role?: unknown }).role
    if (typeof role !== 'string' || !ROLES.has(role))
      throw badRequest(
        `messages[${i}].role must be one of ${[...ROLES].join(', ')}`,
        400,
        `messages[${i}].role`,
      )
    const c = (x as { content?: unknown }).content
    if (c !== undefined && c !== null && typeof c !== 'string' && !Array.isArray(c))
      throw badRequest(
        `messages[${i}].content must be a string or an array of parts`,
        400,
        `messages[${i}].content`,
      )
  })
  return {
    kind: 'chat',
    body,
    ...common(body, headerSlo, config),
    messages: m as ChatMessageLike[],
    promptText: undefined,
    promptIds: undefined,
  }
}

/** Validates a `/v1/completions` body: one prompt, text or token ids (400 naming the bad field). */
export function parseCompletion(
  body: Record<string, unknown>,
  headerSlo: string | undefined,
  config: ProxyConfig,
): ParsedRequest {
  const p = body.prompt
  let promptText: string | undefined
  let promptIds: number[] | undefined
  if (typeof p === 'string') {
    if (p.length === 0) throw badRequest('prompt must not be empty', 400, 'prompt')
    promptText = p
  } else if (Array.isArray(p) && p.length > 0 && p.every((t) => typeof t === 'number')) {
    if (!p.every((t) => Number.isInteger(t) && t >= 0 && t <= 0x7fffffff))
      throw badRequest('prompt token ids must be integers in [0, 2^31)', 400, 'prompt')
    promptIds = p as number[]
  } else if (Array.isArray(p) && p.length > 0) {
    throw badRequest('batched prompts are not supported: send one prompt per request', 400, 'prompt')
  } else {
    throw badRequest('prompt must be a non-empty string or a non-empty array of token ids', 400, 'prompt')
  }
  for (const k of ['echo', 'best_of', 'logprobs', 'suffix']) {
    if (body[k] !== undefined && body[k] !== null && body[k] !== false && !(k === 'best_of' && body[k] === 1))
      throw badRequest(`${k} is not supported by this proxy`, 400, k)
  }
  return {
    kind: 'completion',
    body,
    ...common(body, headerSlo, config),
    messages: undefined,
    promptText,
    promptIds,
  }
}

/** The prompt's token ids as the proxy counts them. */
export function promptTokensOf(req: ParsedRequest, tokenizer: PromptTokenizer): Uint32Array {
  if (req.promptIds !== undefined) return Uint32Array.from(req.promptIds)
  if (req.promptText !== undefined) return tokenizer.text(req.promptText)
  return tokenizer.chat(req.messages!)
}

// ---------------------------------------------------------------------------------------------
// Sending to the workers

/**
 * P and D of a seed, sent the way SGLang's PD router does (both at once, paired by a bootstrap
 * room) but with a body of their own each (P gets no session id and no stream). P's call runs
 * beside D's; a P failure aborts D and is reported as P's (`PD_DISPATCH`, `value: 'prefill'`).
 */
export class PdPair {
  readonly controller = new AbortController()
  prefill: Promise<unknown> | undefined
  #prefillError: unknown
  readonly #cleanup: () => void

  constructor(signal: AbortSignal) {
    const onAbort = (): void => this.controller.abort(signal.reason)
    if (signal.aborted) this.controller.abort(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    this.#cleanup = () => signal.removeEventListener('abort', onAbort)
  }

  get signal(): AbortSignal {
    return this.controller.signal
  }

  startPrefill<T>(call: Promise<T>): void {
    this.prefill = call.then(
      (r) => r,
      (err: unknown) => {
        this.#prefillError = err
        this.controller.abort(err)
        throw err
      },
    )
    this.prefill.catch(() => {})
  }

  /** The error to report for a failure of D's side: P's if P failed first. */
  wrap(err: unknown): unknown {
    const side = this.#prefillError !== undefined ? 'prefill' : 'decode'
    const cause = side === 'prefill' ? this.#prefillError : err
    if (cause instanceof WorkerBindingsError && cause.code === 'PD_DISPATCH') return cause
    return new WorkerBindingsError(
      'PD_DISPATCH',
      `the ${side} side of the P/D dispatch failed: ${(cause as Error)?.message ?? String(cause)}`,
      { value: side, cause, endpoint: cause instanceof WorkerBindingsError ? cause.endpoint : undefined },
    )
  }

  done(): void {
    this.#cleanup()
  }
}

/** `bootstrap_host`, `bootstrap_port` and a fresh `bootstrap_room` for a seed's P. */
export function bootstrapFields(served: ServedBy): Record<string, unknown> {
  const p = served.prefill!
  return {
    bootstrap_host: p.bootstrapHost,
    bootstrap_port: p.bootstrapPort,
    bootstrap_room: generateBootstrapRoom(),
  }
}

/** D's own fields of a turn's body: its request id and, when the session is retained, the session id. */
export function decodeFields(served: ServedBy): { rid: string; session_id?: string } {
  return { rid: served.rid, ...(served.retainSession ? { session_id: served.sessionId } : {}) }
}

/**
 * Starts a turn's send: `send` calls D (P's call, on a seed, already runs beside it in `pair`).
 * When it fails, P's call is aborted too and the error is reported the way {@link PdPair.wrap}
 * says (P's failure when P failed first).
 */
export async function sendTurn(
  pair: PdPair | undefined,
  send: () => Promise<StartedResponse>,
): Promise<StartedResponse> {
  try {
    return await send()
  } catch (err) {
    pair?.controller.abort(err)
    pair?.done()
    throw pair === undefined ? err : pair.wrap(err)
  }
}

/** A worker's answer stream as the transports read it: iterable once, and closable. */
export interface WorkerStream<C> extends AsyncIterable<C> {
  abort(): void
}

/**
 * Reads the first chunk of D's stream. A stream that fails before it, carries none
 * (`SSE_TRUNCATED`), or whose first chunk `abortError` names an abort (it returns the error to
 * throw), is closed and the error thrown.
 */
export async function firstChunk<C>(
  stream: WorkerStream<C>,
  abortError: (chunk: C) => Error | undefined,
): Promise<{ first: C; rest: AsyncIterator<C> }> {
  const rest = stream[Symbol.asyncIterator]()
  let first: IteratorResult<C>
  try {
    first = await rest.next()
  } catch (err) {
    stream.abort()
    throw err
  }
  if (first.done === true) throw new WorkerBindingsError('SSE_TRUNCATED', 'the stream carried no chunk')
  const aborted = abortError(first.value)
  if (aborted !== undefined) {
    stream.abort()
    throw aborted
  }
  return { first: first.value, rest }
}

/** Reads the rest of D's stream into `forward`; a chunk that `abortError` names an abort throws its error. */
export async function forwardRest<C>(
  rest: AsyncIterator<C>,
  abortError: (chunk: C) => Error | undefined,
  forward: (chunk: C) => void,
): Promise<void> {
  for (;;) {
    const r = await rest.next()
    if (r.done === true) return
    const aborted = abortError(r.value)
    if (aborted !== undefined) throw aborted
    forward(r.value)
  }
}

/**
 * The response of a streamed turn: `cancel` closes D's stream; `finish` runs `pipe` (a failure
 * reported as P's when P failed first); either ends the P/D pair.
 */
export function streamedResponse(
  stream: WorkerStream<unknown>,
  pair: PdPair | undefined,
  pipe: () => Promise<Completion>,
): StartedResponse {
  return {
    cancel: () => {
      stream.abort()
      pair?.done()
    },
    finish: async () => {
      try {
        return await pipe()
      } catch (err) {
        throw pair === undefined ? err : pair.wrap(err)
      } finally {
        pair?.done()
      }
    },
  }
}

/** The `kvc` extension object added to responses (unknown to OpenAI clients, which ignore it). */
export interface KvcResponseInfo {
  readonly session_id: string
  readonly turn_id: string
  readonly path: string
  readonly worker: string
  readonly prefill: string | null
  readonly migrated_from: string | null
  readonly cached_tokens: number
  readonly transferred_tokens: number
  readonly attempt: number
  /** Completions with a token-id prompt: the generated token ids. */
  readonly output_ids?: readonly number[]
}

function kvcInfo(served: ServedBy, c: Completion, outputIds?: readonly number[]): KvcResponseInfo {
  return {
    session_id: served.sessionId,
    turn_id: served.turnId,
    path: served.path,
    worker: served.decode.id,
    prefill: served.prefill?.id ?? null,
    migrated_from: served.migratedFrom ?? null,
    cached_tokens: c.cachedTokens,
    transferred_tokens: c.transferredTokens,
    attempt: served.attempt,
    ...(outputIds === undefined ? {} : { output_ids: outputIds }),
  }
}

/** Response headers naming where the turn went. */
export function servedHeaders(served: ServedBy): Record<string, string> {
  const h: Record<string, string> = {
    'x-kvc-session': encodeURIComponent(served.sessionId),
    'x-kvc-turn': encodeURIComponent(served.turnId),
    'x-kvc-path': served.path,
    'x-kvc-worker': served.decode.id,
  }
  if (served.prefill !== undefined) h['x-kvc-prefill'] = served.prefill.id
  if (served.migratedFrom !== undefined) h['x-kvc-migrated-from'] = served.migratedFrom
  return h
}

function writeSseHead(res: ServerResponse, served: ServedBy, scope: RequestScope): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    ...visibleHeaders(servedHeaders(served), scope),
  })
}

function writeJson(res: ServerResponse, served: ServedBy, body: unknown, scope: RequestScope): void {
  const text = JSON.stringify(body)
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(text)),
    ...visibleHeaders(servedHeaders(served), scope),
  })
  res.end(text)
}

function sse(res: ServerResponse, obj: unknown): void {
  if (!res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`)
}

function cachedOf(x: unknown): number {
  const u = (x as { usage?: { prompt_tokens_details?: { cached_tokens?: unknown } | null } } | undefined)
    ?.usage
  const c = u?.prompt_tokens_details?.cached_tokens
  if (typeof c === 'number') return c
  const m = (x as { meta_info?: { cached_tokens?: unknown } } | undefined)?.meta_info?.cached_tokens
  return typeof m === 'number' ? m : 0
}

function stats(served: ServedBy, promptTokens: number, output: number, d: unknown, p: unknown): Completion {
  if (served.path !== 'seed') return { outputTokens: output, cachedTokens: cachedOf(d), transferredTokens: 0 }
  return {
    outputTokens: output,
    cachedTokens: cachedOf(p),
    transferredTokens: Math.max(0, promptTokens - cachedOf(d)),
  }
}

async function prefillAnswer(pair: PdPair | undefined): Promise<unknown> {
  if (pair?.prefill === undefined) return undefined
  try {
    return await pair.prefill
  } catch {
    return undefined
  }
}

class AbortFinish extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'WorkerAbort'
  }
}

function abortChunkError(reason: unknown, endpoint: string): WorkerBindingsError {
  return new WorkerBindingsError(
    'STREAM_ERROR',
    `the worker aborted the request: ${JSON.stringify(reason)}`,
    {
      endpoint,
      cause: new AbortFinish(JSON.stringify(reason)),
    },
  )
}

/** The error of a chat chunk that ends in an abort, else `undefined`. */
function chatAbort(c: ChatCompletionChunk, endpoint: string): WorkerBindingsError | undefined {
  return c.choices[0]?.finish_reason === 'abort' ? abortChunkError(c.choices[0], endpoint) : undefined
}

/** Sends a chat completion: straight to D (fast/direct) or to a P/D pair (seed), streaming or not. */
export class ChatTransport implements TurnTransport {
  readonly #req: ParsedRequest
  readonly #res: ServerResponse
  readonly #promptTokens: number
  readonly #defaultModel: string
  readonly #scope: RequestScope
  #reply = ''

  constructor(
    req: ParsedRequest,
    res: ServerResponse,
    promptTokens: number,
    defaultModel: string,
    scope: RequestScope = OPEN_SCOPE,
  ) {
    this.#req = req
    this.#res = res
    this.#promptTokens = promptTokens
    this.#defaultModel = defaultModel
    this.#scope = scope
  }

  /** The assistant's text delivered to the client (the last send's; empty before one). */
  get reply(): string {
    return this.#reply
  }

  #bodies(served: ServedBy): { d: Record<string, unknown>; p: Record<string, unknown> | undefined } {
    const base: Record<string, unknown> = { ...this.#req.body }
    for (const k of PROXY_OWNED) delete base[k]
    delete base.kvc_slo_class
    base.model = this.#req.model ?? this.#defaultModel
    base.max_tokens = this.#req.maxTokens
    delete base.max_completion_tokens
    Object.assign(base, saltFields(this.#scope))
    const d: Record<string, unknown> = { ...base, ...decodeFields(served) }
    if (this.#req.stream) d.stream_options = { include_usage: true }
    if (served.path !== 'seed') return { d, p: undefined }
    const boot = bootstrapFields(served)
    Object.assign(d, boot)
    const p: Record<string, unknown> = { ...base, ...boot, rid: `${served.rid}:p`, stream: false }
    delete p.stream_options
    return { d, p }
  }

  async start(served: ServedBy, signal: AbortSignal): Promise<StartedResponse> {
    const { d, p } = this.#bodies(served)
    const dc = served.decode.client
    const pair = p === undefined ? undefined : new PdPair(signal)
    const opts: CallOptions = { signal: pair?.signal ?? signal }
    if (pair !== undefined) pair.startPrefill(served.prefill!.client.chatCompletions(p as never, opts))
    return sendTurn(pair, async () => {
      if (!this.#req.stream) {
        const answer = await dc.chatCompletions(d as never, opts)
        if (answer.choices[0]?.finish_reason === 'abort') throw abortChunkError(answer.choices[0], dc.baseURL)
        const pa = await (pair?.prefill ?? Promise.resolve(undefined))
        pair?.done()
        return this.#whole(served, answer, pa)
      }
      const stream = await dc.chatCompletionsStream(d as never, opts)
      const { first, rest } = await firstChunk(stream, (c) => chatAbort(c, dc.baseURL))
      return streamedResponse(stream, pair, () => this.#pipe(served, first, rest, pair))
    })
  }

  #whole(served: ServedBy, answer: ChatCompletion, pa: unknown): StartedResponse {
    return {
      cancel: () => {},
      finish: async () => {
        const out = answer.usage?.completion_tokens ?? 0
        const c = stats(served, this.#promptTokens, out, answer, pa)
        const content = answer.choices[0]?.message?.content
        this.#reply = typeof content === 'string' ? content : ''
        const scope = this.#scope
        const body = {
          ...answer,
          usage: visibleUsage(answer.usage, scope),
          kvc: visibleKvc(kvcInfo(served, c), scope),
        }
        writeJson(this.#res, served, body, scope)
        return c
      },
    }
  }

  async #pipe(
    served: ServedBy,
    first: ChatCompletionChunk,
    it: AsyncIterator<ChatCompletionChunk>,
    pair: PdPair | undefined,
  ): Promise<Completion> {
    const res = this.#res
    const scope = this.#scope
    writeSseHead(res, served, scope)
    this.#reply = ''
    let usage: ChatCompletionChunk['usage'] = null
    let last: ChatCompletionChunk | undefined
    let pieces = 0
    const forward = (c: ChatCompletionChunk): void => {
      if (c.usage) usage = c.usage
      if (c.choices.length === 0) return // the usage chunk the proxy asked for: re-sent at the end if wanted
      pieces++
      last = c
      const delta = c.choices[0]?.delta?.content
      if (typeof delta === 'string') this.#reply += delta
      sse(res, c.usage ? { ...c, usage: this.#req.includeUsage ? visibleUsage(c.usage, scope) : null } : c)
    }
    forward(first)
    await forwardRest(it, (c) => chatAbort(c, served.decode.url), forward)
    const u = usage as ChatCompletionChunk['usage']
    const out = u?.completion_tokens ?? Math.max(0, pieces - 1)
    const pa = await prefillAnswer(pair)
    const c = stats(served, this.#promptTokens, out, { usage: u }, pa)
    if (this.#req.includeUsage) {
      sse(res, {
        id: last?.id ?? first.id,
        object: 'chat.completion.chunk',
        created: last?.created ?? first.created,
        model: last?.model ?? first.model,
        choices: [],
        usage: visibleUsage(u, scope),
        kvc: visibleKvc(kvcInfo(served, c), scope),
      })
    }
    if (!res.destroyed) res.end('data: [DONE]\n\n')
    return c
  }
}

const SAMPLING_KEYS = [
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'stop',
  'stop_token_ids',
  'frequency_penalty',
  'presence_penalty',
  'repetition_penalty',
  'ignore_eos',
  'seed',
]

function finishName(fr: unknown): string | null {
  if (fr === null || fr === undefined) return null
  const t = (fr as { type?: unknown }).type
  return t === 'length' ? 'length' : t === 'stop' ? 'stop' : String(t)
}

/** The error of a `/generate` chunk that ends in an abort, else `undefined`. */
function generateAbort(c: GenerateStreamChunk, endpoint: string): WorkerBindingsError | undefined {
  return c.finished && finishName(c.metaInfo.finish_reason) === 'abort'
    ? abortChunkError(c.metaInfo.finish_reason, endpoint)
    : undefined
}

/**
 * Sends an OpenAI completion as SGLang's native `/generate` (`text` or `input_ids`, the sampling
 * parameters mapped into `sampling_params`) and answers in OpenAI's `text_completion` shape.
 */
export class CompletionTransport implements TurnTransport {
  readonly #req: ParsedRequest
  readonly #res: ServerResponse
  readonly #promptTokens: number
  readonly #model: string
  readonly #created = Math.floor(Date.now() / 1000)
  readonly #scope: RequestScope
  /** The response id's suffix: the D request id of the send that answered. */
  #idSuffix = ''

  constructor(
    req: ParsedRequest,
    res: ServerResponse,
    promptTokens: number,
    defaultModel: string,
    scope: RequestScope = OPEN_SCOPE,
  ) {
    this.#req = req
    this.#res = res
    this.#promptTokens = promptTokens
    this.#model = req.model ?? defaultModel
    this.#scope = scope
  }

  #bodies(served: ServedBy): { d: GenerateRequest; p: GenerateRequest | undefined } {
    const b = this.#req.body
    const sampling: Record<string, unknown> = { max_new_tokens: this.#req.maxTokens }
    for (const k of SAMPLING_KEYS) if (b[k] !== undefined && b[k] !== null) sampling[k] = b[k]
    const input =
      this.#req.promptIds !== undefined
        ? { input_ids: [...this.#req.promptIds] }
        : { text: this.#req.promptText! }
    const base = { ...input, sampling_params: sampling, ...saltFields(this.#scope) } as GenerateRequest
    const d = { ...base, ...decodeFields(served) } as GenerateRequest
    if (served.path !== 'seed') return { d, p: undefined }
    const boot = bootstrapFields(served)
    return {
      d: { ...d, ...boot } as GenerateRequest,
      p: { ...base, ...boot, rid: `${served.rid}:p` } as GenerateRequest,
    }
  }

  async start(served: ServedBy, signal: AbortSignal): Promise<StartedResponse> {
    const { d, p } = this.#bodies(served)
    const dc = served.decode.client
    const pair = p === undefined ? undefined : new PdPair(signal)
    const opts: CallOptions = { signal: pair?.signal ?? signal }
    if (pair !== undefined) pair.startPrefill(served.prefill!.client.generate(p!, opts))
    return sendTurn(pair, async () => {
      if (!this.#req.stream) {
        const answer = await dc.generate(d, opts)
        if (finishName(answer.meta_info.finish_reason) === 'abort')
          throw abortChunkError(answer.meta_info.finish_reason, dc.baseURL)
        const pa = await (pair?.prefill ?? Promise.resolve(undefined))
        pair?.done()
        return this.#whole(served, answer, pa)
      }
      const stream = await dc.generateStream(d, opts)
      const { first, rest } = await firstChunk(stream, (c) => generateAbort(c, dc.baseURL))
      return streamedResponse(stream, pair, () => this.#pipe(served, first, rest, pair))
    })
  }

  #chunk(text: string, finish: string | null): Record<string, unknown> {
    return {
      id: `cmpl-${this.#idSuffix}`,
      object: 'text_completion',
      created: this.#created,
      model: this.#model,
      choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
    }
  }

  #usage(prompt: number, completion: number, cached: number): Record<string, unknown> {
    const usage = {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: cached },
    }
    return visibleUsage(usage, this.#scope)
  }

  #whole(served: ServedBy, answer: GenerateResponse, pa: unknown): StartedResponse {
    return {
      cancel: () => {},
      finish: async () => {
        this.#idSuffix = served.rid
        const m = answer.meta_info
        const out = answer.output_ids?.length ?? m.completion_tokens ?? 0
        const c = stats(served, this.#promptTokens, out, answer, pa)
        const body = {
          ...this.#chunk(answer.text, finishName(m.finish_reason)),
          usage: this.#usage(m.prompt_tokens ?? this.#promptTokens, out, c.cachedTokens),
          kvc: visibleKvc(
            kvcInfo(served, c, this.#req.promptIds === undefined ? undefined : answer.output_ids),
            this.#scope,
          ),
        }
        writeJson(this.#res, served, body, this.#scope)
        return c
      },
    }
  }

  async #pipe(
    served: ServedBy,
    first: GenerateStreamChunk,
    it: AsyncIterator<GenerateStreamChunk>,
    pair: PdPair | undefined,
  ): Promise<Completion> {
    const res = this.#res
    this.#idSuffix = served.rid
    writeSseHead(res, served, this.#scope)
    let last = first
    const forward = (c: GenerateStreamChunk): void => {
      last = c
      const fin = c.finished ? finishName(c.metaInfo.finish_reason) : null
      if (c.delta.length > 0 || fin !== null) sse(res, this.#chunk(c.delta, fin))
    }
    forward(first)
    await forwardRest(it, (c) => generateAbort(c, served.decode.url), forward)
    const out = last.outputIds.length
    const pa = await prefillAnswer(pair)
    const c = stats(served, this.#promptTokens, out, { meta_info: last.metaInfo }, pa)
    if (this.#req.includeUsage) {
      sse(res, {
        id: `cmpl-${this.#idSuffix}`,
        object: 'text_completion',
        created: this.#created,
        model: this.#model,
        choices: [],
        usage: this.#usage(last.metaInfo.prompt_tokens ?? this.#promptTokens, out, c.cachedTokens),
        kvc: visibleKvc(
          kvcInfo(served, c, this.#req.promptIds === undefined ? undefined : last.outputIds),
          this.#scope,
        ),
      })
    }
    if (!res.destroyed) res.end('data: [DONE]\n\n')
    return c
  }
}
