/**
 * Dual dispatch of one request to a prefill (P) and a decode (D) worker, as SGLang's PD router
 * does it: the same body, with bootstrap fields, sent to both concurrently; the caller gets D's
 * answer or stream.
 *
 * @module
 */
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import type { SglangClient } from '../sglang/sglangClient.js'
import type { GenerateStream, GenerateStreamChunk } from '../sglang/streams.js'
import type {
  BootstrapRoom,
  ChatCompletion,
  ChatCompletionRequest,
  GenerateRequest,
  GenerateResponse,
} from '../sglang/types.js'
import type { CallOptions } from '../transport/httpTransport.js'
import { DEFAULT_BOOTSTRAP_PORT, bootstrapHostOf, injectBootstrap } from './bootstrap.js'

/**
 * Options of {@link PdDispatcher}.
 *
 * @example
 * ```ts
 * import { PdDispatcher, SglangClient, type PdDispatcherOptions } from '@kvc/worker-bindings'
 * const opts: PdDispatcherOptions = {
 *   prefill: new SglangClient({ baseURL: 'http://10.0.0.5:30000' }),
 *   decode: new SglangClient({ baseURL: 'http://10.0.0.6:30001' }),
 *   bootstrapPort: 8998,
 * }
 * const pd = new PdDispatcher(opts)
 * ```
 */
export interface PdDispatcherOptions {
  readonly prefill: SglangClient
  readonly decode: SglangClient
  /** `bootstrap_host` (default: the hostname of the prefill client's base URL). */
  readonly bootstrapHost?: string
  /** The prefill's bootstrap port (default 8998; `null` sends `null`). */
  readonly bootstrapPort?: number | null
  /** Source of random 64-bit values for rooms (default `crypto`). */
  readonly randomU64?: () => bigint
}

/**
 * D's answer, P's answer, and the room that paired them.
 *
 * @example
 * ```ts
 * import type { GenerateResponse, PdResult } from '@kvc/worker-bindings'
 * const text = (r: PdResult<GenerateResponse>) => r.decode.text
 * ```
 */
export interface PdResult<T> {
  /** The decode worker's answer (what the client gets). */
  readonly decode: T
  /** The prefill worker's answer (its input logprobs, if requested). */
  readonly prefill: T
  readonly bootstrapRoom: BootstrapRoom | BootstrapRoom[]
}

/**
 * Sends requests to a P/D pair the way SGLang's PD router does: bootstrap fields injected
 * (`bootstrap_host`, `bootstrap_port`, a fresh `bootstrap_room` in `[0, 2^63)`, per item for
 * batches), the identical body POSTed to P and D concurrently, D's answer returned.
 *
 * Failure coupling: if either side fails, the other is aborted and the call fails with
 * `PD_DISPATCH` whose `cause` is the failing side's error and whose `value` names the side
 * (`'prefill'` or `'decode'`). The caller's signal aborts both. Neither side is retried
 * (generation is not idempotent).
 *
 * P is always asked for a non-streaming answer (its body is otherwise the same), so that a
 * streaming call has exactly one stream to read: D's.
 *
 * @example
 * ```ts
 * import { PdDispatcher, SglangClient } from '@kvc/worker-bindings'
 * const pd = new PdDispatcher({
 *   prefill: new SglangClient({ baseURL: 'http://10.0.0.5:30000' }),
 *   decode: new SglangClient({ baseURL: 'http://10.0.0.6:30001' }),
 *   bootstrapPort: 8998,
 * })
 * const stream = await pd.generateStream({ text: 'Hello', sampling_params: { max_new_tokens: 16 } })
 * for await (const c of stream) process.stdout.write(c.delta)
 * ```
 */
export class PdDispatcher {
  readonly prefill: SglangClient
  readonly decode: SglangClient
  readonly bootstrapHost: string
  readonly bootstrapPort: number | null
  readonly #randomU64: (() => bigint) | undefined

  constructor(options: PdDispatcherOptions) {
    this.prefill = options.prefill
    this.decode = options.decode
    this.bootstrapHost = options.bootstrapHost ?? bootstrapHostOf(options.prefill.baseURL)
    this.bootstrapPort = options.bootstrapPort === undefined ? DEFAULT_BOOTSTRAP_PORT : options.bootstrapPort
    this.#randomU64 = options.randomU64
  }

  /** The request with bootstrap fields for this pair (a fresh room). */
  inject<T extends object>(request: T): ReturnType<typeof injectBootstrap<T>> {
    return injectBootstrap(request, {
      host: this.bootstrapHost,
      port: this.bootstrapPort,
      ...(this.#randomU64 === undefined ? {} : { randomU64: this.#randomU64 }),
    })
  }

  /** Non-streaming `/generate` on both; resolves with D's answer once both answered. */
  async generate(request: GenerateRequest, options: CallOptions = {}): Promise<PdResult<GenerateResponse>> {
    const body = this.inject(request)
    return this.#both(
      (o) => this.prefill.generate(body, o),
      (o) => this.decode.generate(body, o),
      options,
      body.bootstrap_room,
    )
  }

  /** Non-streaming chat completion on both; resolves with D's answer once both answered. */
  async chatCompletions(
    request: ChatCompletionRequest,
    options: CallOptions = {},
  ): Promise<PdResult<ChatCompletion>> {
    const body = this.inject(request) as ChatCompletionRequest & { bootstrap_room: BootstrapRoom }
    return this.#both(
      (o) => this.prefill.chatCompletions(body, o),
      (o) => this.decode.chatCompletions(body, o),
      options,
      body.bootstrap_room,
    )
  }

  /**
   * Streaming `/generate`: P gets the body non-streaming, D streams. Resolves once D's headers
   * arrived; a P failure after that aborts D's stream, whose iteration then throws `PD_DISPATCH`.
   */
  async generateStream(request: GenerateRequest, options: CallOptions = {}): Promise<PdGenerateStream> {
    const body = this.inject(request)
    const user = options.signal
    const { controller, unfollow } = followSignal(user)
    const o: CallOptions = { ...options, signal: controller.signal }
    let prefillError: unknown
    const prefill = this.prefill.generate(body, o).then(
      (r) => r,
      (err: unknown) => {
        prefillError = err
        controller.abort(err)
        throw err
      },
    )
    prefill.catch(() => {}) // observed through PdGenerateStream
    let decode: GenerateStream
    try {
      decode = await this.decode.generateStream(body, o)
    } catch (err) {
      controller.abort(err)
      unfollow()
      await prefill.catch(() => {})
      if (prefillError !== undefined && !isAbort(prefillError, user)) throw pdError('prefill', prefillError)
      if (user?.aborted) throw err
      throw pdError('decode', err)
    }
    return new PdGenerateStream(
      decode,
      prefill,
      body.bootstrap_room,
      () => prefillError,
      unfollow,
      controller,
    )
  }

  async #both<T>(
    p: (o: CallOptions) => Promise<T>,
    d: (o: CallOptions) => Promise<T>,
    options: CallOptions,
    room: BootstrapRoom | BootstrapRoom[],
  ): Promise<PdResult<T>> {
    const user = options.signal
    const { controller, unfollow } = followSignal(user)
    const o: CallOptions = { ...options, signal: controller.signal }
    let first: { side: 'prefill' | 'decode'; err: unknown } | undefined
    const wrap = (side: 'prefill' | 'decode', pr: Promise<T>): Promise<T> =>
      pr.catch((err: unknown) => {
        if (first === undefined) {
          first = { side, err }
          controller.abort(err)
        }
        throw err
      })
    try {
      const [prefill, decode] = await Promise.all([wrap('prefill', p(o)), wrap('decode', d(o))])
      return { decode, prefill, bootstrapRoom: room }
    } catch (err) {
      if (user?.aborted) throw err
      const f = first ?? { side: 'decode' as const, err }
      throw pdError(f.side, f.err)
    } finally {
      unfollow()
    }
  }
}

/**
 * A controller that aborts when `user` does (at once when it already has), and `unfollow` to stop
 * listening to `user` once the call is over.
 */
function followSignal(user: AbortSignal | undefined): { controller: AbortController; unfollow: () => void } {
  const controller = new AbortController()
  const onAbort = (): void => controller.abort(user?.reason)
  if (user?.aborted) controller.abort(user.reason)
  user?.addEventListener('abort', onAbort, { once: true })
  return { controller, unfollow: () => user?.removeEventListener('abort', onAbort) }
}

/**
 * D's stream of a {@link PdDispatcher.generateStream} call, plus P's answer. Iterating it yields
 * D's chunks; when P fails first, the iteration throws `PD_DISPATCH` naming the prefill.
 *
 * @example
 * ```ts
 * import type { PdGenerateStream } from '@kvc/worker-bindings'
 * async function text(s: PdGenerateStream) {
 *   let out = ''
 *   for await (const c of s) out += c.delta
 *   await s.prefill // P's answer (rejects if P failed)
 *   return out
 * }
 * ```
 */
export class PdGenerateStream implements AsyncIterable<GenerateStreamChunk> {
  /** P's answer. */
  readonly prefill: Promise<GenerateResponse>
  readonly bootstrapRoom: BootstrapRoom | BootstrapRoom[]
  readonly #decode: GenerateStream
  readonly #prefillError: () => unknown
  readonly #cleanup: () => void
  readonly #controller: AbortController

  /** @internal */
  constructor(
    decode: GenerateStream,
    prefill: Promise<GenerateResponse>,
    room: BootstrapRoom | BootstrapRoom[],
    prefillError: () => unknown,
    cleanup: () => void,
    controller: AbortController,
  ) {
    this.#decode = decode
    this.prefill = prefill
    this.bootstrapRoom = room
    this.#prefillError = prefillError
    this.#cleanup = cleanup
    this.#controller = controller
  }

  /** Aborts both sides. */
  abort(): void {
    this.#controller.abort()
    this.#decode.abort()
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<GenerateStreamChunk, void, undefined> {
    try {
      for await (const c of this.#decode) yield c
    } catch (err) {
      const pe = this.#prefillError()
      if (pe !== undefined && !(pe instanceof WorkerBindingsError && pe.code === 'ABORTED')) {
        throw pdError('prefill', pe)
      }
      throw err
    } finally {
      this.#cleanup()
    }
  }

  /** Consumes D's stream and returns D's whole answer. */
  async final(): Promise<GenerateResponse> {
    let last: GenerateStreamChunk | undefined
    for await (const c of this) last = c
    if (last === undefined)
      throw new WorkerBindingsError('SSE_TRUNCATED', 'the decode stream carried no chunk')
    return { ...last.raw, text: last.text, output_ids: [...last.outputIds], meta_info: last.metaInfo }
  }
}

function isAbort(err: unknown, user: AbortSignal | undefined): boolean {
  return user?.aborted === true || (err instanceof WorkerBindingsError && err.code === 'ABORTED')
}

function pdError(side: 'prefill' | 'decode', cause: unknown): WorkerBindingsError {
  if (cause instanceof WorkerBindingsError && cause.code === 'PD_DISPATCH') return cause
  const msg = cause instanceof Error ? cause.message : String(cause)
  return new WorkerBindingsError('PD_DISPATCH', `the ${side} side of the P/D dispatch failed: ${msg}`, {
    value: side,
    cause,
    endpoint: cause instanceof WorkerBindingsError ? cause.endpoint : undefined,
  })
}
