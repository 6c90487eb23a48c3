/**
 * Server-sent events: bytes → lines → events, per the WHATWG EventSource parsing rules, robust to
 * chunks split anywhere (inside a multi-byte UTF-8 character, between `\r` and `\n`).
 *
 * @module
 */
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * One dispatched event.
 *
 * @example
 * ```ts
 * import { SseDecoder, type SseEvent } from '@kvc/worker-bindings'
 * const events: SseEvent[] = new SseDecoder().push(new TextEncoder().encode('event: ping\ndata: 1\n\n'))
 * events[0]?.event // 'ping'
 * ```
 */
export interface SseEvent {
  /** The `event:` field (default `'message'`). */
  readonly event: string
  /** The `data:` lines joined with `\n`. */
  readonly data: string
  /** The last `id:` seen so far in the stream, if any. */
  readonly id: string | undefined
  /** The `retry:` field of this event, if any. */
  readonly retry: number | undefined
}

/**
 * Options of {@link SseDecoder}.
 *
 * @example
 * ```ts
 * import { SseDecoder, type SseDecoderOptions } from '@kvc/worker-bindings'
 * const opts: SseDecoderOptions = { maxLineLength: 1 << 20 }
 * const dec = new SseDecoder(opts)
 * ```
 */
export interface SseDecoderOptions {
  /** Longest accepted line, in characters (default 16 Mi). A longer one fails with `SSE_PARSE`. */
  readonly maxLineLength?: number
}

/**
 * Incremental event-stream decoder. Feed it byte chunks with {@link SseDecoder.push}; each call
 * returns the events completed by that chunk. {@link SseDecoder.end} checks that the stream
 * stopped on an event boundary.
 *
 * Errors (`WorkerBindingsError`): `SSE_PARSE` for invalid UTF-8 or an over-long line,
 * `SSE_TRUNCATED` from `end()` when a line or an event was left unfinished. After an error the
 * decoder refuses further input.
 *
 * @example
 * ```ts
 * import { SseDecoder } from '@kvc/worker-bindings'
 * const dec = new SseDecoder()
 * const bytes = new TextEncoder().encode('data: {"text":"hi"}\n\ndata: [DONE]\n\n')
 * const events = [...dec.push(bytes.subarray(0, 7)), ...dec.push(bytes.subarray(7)), ...dec.end()]
 * events.map((e) => e.data) // ['{"text":"hi"}', '[DONE]']
 * ```
 */
export class SseDecoder {
  readonly #maxLine: number
  readonly #utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false })
  #line = ''
  #skipLf = false
  #data: string[] = []
  #hasData = false
  #event = ''
  #id: string | undefined = undefined
  #retry: number | undefined = undefined
  #fieldsSeen = false
  #failed = false
  #ended = false

  constructor(options: SseDecoderOptions = {}) {
    const m = options.maxLineLength ?? 16 * 1024 * 1024
    if (!Number.isInteger(m) || m < 1) {
      throw new WorkerBindingsError('INVALID_OPTION', `maxLineLength must be an integer >= 1, got ${m}`, {
        value: m,
      })
    }
    this.#maxLine = m
  }

  /** Decodes one chunk; returns the events it completed. */
  push(chunk: Uint8Array): SseEvent[] {
    this.#checkUsable()
    let text: string
    try {
      text = this.#utf8.decode(chunk, { stream: true })
    } catch (cause) {
      this.#failed = true
      throw new WorkerBindingsError('SSE_PARSE', 'the event stream is not valid UTF-8', { cause })
    }
    return this.#feed(text)
  }

  /** Ends the stream: returns nothing new, or throws `SSE_TRUNCATED` / `SSE_PARSE`. */
  end(): SseEvent[] {
    this.#checkUsable()
    this.#ended = true
    let tail: string
    try {
      tail = this.#utf8.decode()
    } catch (cause) {
      this.#failed = true
      throw new WorkerBindingsError('SSE_TRUNCATED', 'the event stream ended inside a UTF-8 character', {
        cause,
      })
    }
    const events = tail.length > 0 ? this.#feed(tail) : []
    if (this.#line.length > 0 || this.#fieldsSeen) {
      this.#failed = true
      throw new WorkerBindingsError('SSE_TRUNCATED', 'the event stream ended in the middle of an event', {
        value: this.#line.slice(0, 200),
      })
    }
    return events
  }

  #checkUsable(): void {
    if (this.#failed) throw new WorkerBindingsError('SSE_PARSE', 'the decoder already failed')
    if (this.#ended) throw new WorkerBindingsError('SSE_PARSE', 'the decoder already ended')
  }

  #feed(text: string): SseEvent[] {
    const out: SseEvent[] = []
    let start = 0
    const n = text.length
    let i = 0
    if (this.#skipLf && n > 0) {
      this.#skipLf = false
      if (text.charCodeAt(0) === 10) {
        start = 1
        i = 1
      }
    }
    for (; i < n; i++) {
      const c = text.charCodeAt(i)
      if (c !== 10 && c !== 13) continue
      const line = this.#line.length > 0 ? this.#line + text.slice(start, i) : text.slice(start, i)
      this.#line = ''
      this.#checkLength(line.length)
      this.#processLine(line, out)
      if (c === 13) {
        if (i + 1 < n) {
          if (text.charCodeAt(i + 1) === 10) i++
        } else {
          this.#skipLf = true
        }
      }
      start = i + 1
    }
    if (start < n) {
      this.#line += text.slice(start)
      this.#checkLength(this.#line.length)
    }
    return out
  }

  #checkLength(len: number): void {
    if (len > this.#maxLine) {
      this.#failed = true
      throw new WorkerBindingsError(
        'SSE_PARSE',
        `an event-stream line is longer than ${this.#maxLine} characters`,
        {
          value: len,
        },
      )
    }
  }

  #processLine(line: string, out: SseEvent[]): void {
    if (line.length === 0) {
      if (this.#hasData) {
        out.push({
          event: this.#event === '' ? 'message' : this.#event,
          data: this.#data.join('\n'),
          id: this.#id,
          retry: this.#retry,
        })
      }
      this.#data = []
      this.#hasData = false
      this.#event = ''
      this.#retry = undefined
      this.#fieldsSeen = false
      return
    }
    if (line.charCodeAt(0) === 58 /* ':' */) return // comment
    const colon = line.indexOf(':')
    let field: string
    let value: string
    if (colon === -1) {
      field = line
      value = ''
    } else {
      field = line.slice(0, colon)
      value = line.charCodeAt(colon + 1) === 32 ? line.slice(colon + 2) : line.slice(colon + 1)
    }
    this.#fieldsSeen = true
    switch (field) {
      case 'data':
        this.#data.push(value)
        this.#hasData = true
        break
      case 'event':
        this.#event = value
        break
      case 'id':
        if (!value.includes('\u0000')) this.#id = value
        break
      case 'retry':
        if (/^\d+$/.test(value)) this.#retry = Number.parseInt(value, 10)
        break
      default:
        break // unknown fields are ignored, as the spec says
    }
  }
}

/**
 * Decodes an async byte stream into events. Ends when the source ends (after checking the
 * stream stopped on an event boundary); a source error propagates unchanged.
 *
 * @example
 * ```ts
 * import { parseSseStream } from '@kvc/worker-bindings'
 * async function* source() {
 *   yield new TextEncoder().encode('data: 1\n\ndata: 2\n\n')
 * }
 * for await (const ev of parseSseStream(source())) console.log(ev.data) // 1, then 2
 * ```
 */
export async function* parseSseStream(
  source: AsyncIterable<Uint8Array>,
  options: SseDecoderOptions = {},
): AsyncGenerator<SseEvent, void, undefined> {
  const dec = new SseDecoder(options)
  for await (const chunk of source) {
    for (const ev of dec.push(chunk)) yield ev
  }
  for (const ev of dec.end()) yield ev
}
