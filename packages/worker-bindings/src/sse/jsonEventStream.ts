import { WorkerBindingsError, extractServerMessage } from '../errors/workerBindingsError.js'
import { type SseDecoderOptions, parseSseStream } from './sseDecoder.js'

/**
 * Decodes the `data:` payloads of an SGLang / OpenAI-style event stream as JSON until
 * `data: [DONE]`. A payload `{"error": ...}` (or `{"object": "error"}`) fails with `STREAM_ERROR`;
 * a payload that is not JSON with `SSE_PARSE`; a stream that ends without `[DONE]` with
 * `SSE_TRUNCATED`. Ending the iteration early closes the source.
 *
 * @example
 * ```ts
 * import { jsonEventStream } from '@kvc/worker-bindings'
 * async function* source() {
 *   yield new TextEncoder().encode('data: {"n":1}\n\ndata: [DONE]\n\n')
 * }
 * for await (const obj of jsonEventStream<{ n: number }>(source())) console.log(obj.n) // 1
 * ```
 */
export async function* jsonEventStream<T>(
  source: AsyncIterable<Uint8Array>,
  options: SseDecoderOptions & { readonly endpoint?: string } = {},
): AsyncGenerator<T, void, undefined> {
  const endpoint = options.endpoint
  for await (const ev of parseSseStream(source, options)) {
    const data = ev.data
    if (data === '[DONE]') return
    let obj: unknown
    try {
      obj = JSON.parse(data)
    } catch (cause) {
      throw new WorkerBindingsError('SSE_PARSE', `an event's data is not JSON: ${data.slice(0, 200)}`, {
        value: data.slice(0, 2048),
        cause,
        endpoint,
      })
    }
    if (typeof obj === 'object' && obj !== null) {
      const o = obj as Record<string, unknown>
      if (o.error !== undefined || o.object === 'error') {
        throw new WorkerBindingsError(
          'STREAM_ERROR',
          `the server reported an error: ${extractServerMessage(o) ?? data.slice(0, 200)}`,
          {
            value: obj,
            endpoint,
          },
        )
      }
    }
    yield obj as T
  }
  throw new WorkerBindingsError('SSE_TRUNCATED', 'the event stream ended without data: [DONE]', { endpoint })
}
