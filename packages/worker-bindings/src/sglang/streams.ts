/**
 * Streaming answers of the SGLang client.
 *
 * @module
 */
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import { jsonEventStream } from '../sse/jsonEventStream.js'
import type { SseDecoderOptions } from '../sse/sseDecoder.js'
import type { HttpStreamResponse } from '../transport/httpTransport.js'
import type { ChatCompletionChunk, GenerateResponse, MetaInfo } from './types.js'

/**
 * How `/generate` streams `text` and `output_ids`: `'cumulative'` (SGLang's default: every
 * chunk carries everything so far) or `'incremental'` (servers started with
 * `--incremental-streaming-output`, formerly `--stream-output`: every chunk carries only the new
 * part).
 *
 * @example
 * ```ts
 * import { SglangClient, type StreamOutputMode } from '@kvc/worker-bindings'
 * const mode: StreamOutputMode = 'incremental' // the server runs with --incremental-streaming-output
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:30000', streamOutput: mode })
 * ```
 */
export type StreamOutputMode = 'cumulative' | 'incremental'

/**
 * One chunk of a `/generate` stream, normalized: both the running totals and the deltas, whatever
 * mode the server streams in.
 *
 * @example
 * ```ts
 * import type { GenerateStreamChunk } from '@kvc/worker-bindings'
 * const print = (c: GenerateStreamChunk) => process.stdout.write(c.delta)
 * ```
 */
export interface GenerateStreamChunk {
  /** All text so far. */
  readonly text: string
  /** The text this chunk added. */
  readonly delta: string
  /** All output token ids so far. */
  readonly outputIds: readonly number[]
  /** The token ids this chunk added. */
  readonly deltaOutputIds: readonly number[]
  readonly metaInfo: MetaInfo
  /** `meta_info.finish_reason !== null`: the last chunk. Check `finish_reason.type === 'abort'`. */
  readonly finished: boolean
  /** The chunk as the server sent it. */
  readonly raw: GenerateResponse
}

/**
 * A `/generate` stream: iterate it with `for await`. Breaking out of the loop (or
 * {@link GenerateStream.abort}) closes the connection, and SGLang aborts the request. It can be
 * iterated once.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:30000' })
 * const stream = await client.generateStream({ text: 'Once upon', sampling_params: { max_new_tokens: 32 } })
 * for await (const chunk of stream) process.stdout.write(chunk.delta)
 * ```
 */
export class GenerateStream implements AsyncIterable<GenerateStreamChunk> {
  /** Response headers. */
  readonly headers: Readonly<Record<string, string>>
  readonly #res: HttpStreamResponse
  readonly #mode: StreamOutputMode
  readonly #sse: SseDecoderOptions & { endpoint?: string }
  #used = false
  #last: GenerateStreamChunk | undefined

  /** @internal */
  constructor(
    res: HttpStreamResponse,
    mode: StreamOutputMode,
    sse: SseDecoderOptions & { endpoint?: string },
  ) {
    this.#res = res
    this.headers = res.headers
    this.#mode = mode
    this.#sse = sse
  }

  /** The last chunk received so far. */
  get last(): GenerateStreamChunk | undefined {
    return this.#last
  }

  /** Closes the connection (the server aborts the request). */
  abort(): void {
    this.#res.cancel()
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<GenerateStreamChunk, void, undefined> {
    if (this.#used) throw new WorkerBindingsError('INVALID_ARGUMENT', 'a stream can be iterated only once')
    this.#used = true
    let text = ''
    let ids: number[] = []
    try {
      for await (const raw of jsonEventStream<GenerateResponse>(this.#res.body, this.#sse)) {
        if (typeof raw !== 'object' || raw === null || typeof raw.meta_info !== 'object') {
          throw new WorkerBindingsError('BAD_RESPONSE', 'a /generate chunk without meta_info', {
            value: raw,
            endpoint: this.#sse.endpoint,
          })
        }
        const chunkText = typeof raw.text === 'string' ? raw.text : ''
        const chunkIds = Array.isArray(raw.output_ids) ? raw.output_ids : []
        let delta: string
        let deltaIds: number[]
        if (this.#mode === 'incremental') {
          delta = chunkText
          deltaIds = chunkIds
          text += chunkText
          ids = ids.concat(chunkIds)
        } else {
          delta = chunkText.startsWith(text) ? chunkText.slice(text.length) : chunkText
          deltaIds = chunkIds.slice(Math.min(ids.length, chunkIds.length))
          text = chunkText
          ids = chunkIds
        }
        const chunk: GenerateStreamChunk = {
          text,
          delta,
          outputIds: ids,
          deltaOutputIds: deltaIds,
          metaInfo: raw.meta_info,
          finished: raw.meta_info.finish_reason !== null && raw.meta_info.finish_reason !== undefined,
          raw,
        }
        this.#last = chunk
        yield chunk
      }
    } finally {
      this.#res.cancel()
    }
  }

  /**
   * Consumes the rest of the stream and returns the whole answer in the non-streaming shape.
   *
   * @throws WorkerBindingsError `SSE_TRUNCATED` when the stream carried no chunk at all.
   */
  async final(): Promise<GenerateResponse> {
    for await (const _ of this) {
      // drain
    }
    const last = this.#last
    if (last === undefined) {
      throw new WorkerBindingsError('SSE_TRUNCATED', 'the stream carried no chunk', {
        endpoint: this.#sse.endpoint,
      })
    }
    return { ...last.raw, text: last.text, output_ids: [...last.outputIds], meta_info: last.metaInfo }
  }
}

/**
 * A `/v1/chat/completions` stream of {@link ChatCompletionChunk}s, ending at `data: [DONE]`.
 * Breaking out of the loop (or {@link ChatCompletionStream.abort}) closes the connection.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * const client = new SglangClient({ baseURL: 'http://127.0.0.1:30000' })
 * const stream = await client.chatCompletionsStream({ model: 'default', messages: [{ role: 'user', content: 'Hi' }] })
 * for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta.content ?? '')
 * ```
 */
export class ChatCompletionStream implements AsyncIterable<ChatCompletionChunk> {
  /** Response headers. */
  readonly headers: Readonly<Record<string, string>>
  readonly #res: HttpStreamResponse
  readonly #sse: SseDecoderOptions & { endpoint?: string }
  #used = false

  /** @internal */
  constructor(res: HttpStreamResponse, sse: SseDecoderOptions & { endpoint?: string }) {
    this.#res = res
    this.headers = res.headers
    this.#sse = sse
  }

  /** Closes the connection. */
  abort(): void {
    this.#res.cancel()
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ChatCompletionChunk, void, undefined> {
    if (this.#used) throw new WorkerBindingsError('INVALID_ARGUMENT', 'a stream can be iterated only once')
    this.#used = true
    try {
      yield* jsonEventStream<ChatCompletionChunk>(this.#res.body, this.#sse)
    } finally {
      this.#res.cancel()
    }
  }

  /** Consumes the stream and returns the concatenated content of choice 0 and the last usage. */
  async collect(): Promise<{
    content: string
    finishReason: string | null
    usage: ChatCompletionChunk['usage']
  }> {
    let content = ''
    let finishReason: string | null = null
    let usage: ChatCompletionChunk['usage'] = null
    for await (const c of this) {
      const ch = c.choices[0]
      if (ch !== undefined) {
        content += ch.delta.content ?? ''
        if (ch.finish_reason !== null && ch.finish_reason !== undefined) finishReason = ch.finish_reason
      }
      if (c.usage) usage = c.usage
    }
    return { content, finishReason, usage }
  }
}
