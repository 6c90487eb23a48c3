import {
  type Completion,
  type KvcResponseInfo,
  PdPair,
  type ServedBy,
  type StartedResponse,
  type TurnTransport,
  bootstrapFields,
  decodeFields,
  firstChunk,
  forwardRest,
  sendTurn,
  streamedResponse,
} from '@kvc/example-proxy'
import {
  type CallOptions,
  type GenerateRequest,
  type GenerateStreamChunk,
  WorkerBindingsError,
} from '@kvc/worker-bindings'

/** What the replay measures on one turn besides the router's outcome. */
export interface TurnObservation {
  /** Clock time of the first streamed token (ms, the replay's clock). */
  firstTokenAt: number | undefined
  /** The generated token ids (spliced into the session's next prompt). */
  outputIds: readonly number[] | undefined
}

function finishType(fr: unknown): string | undefined {
  return (fr as { type?: string } | null | undefined)?.type
}

/** The error of a first `/generate` chunk that ends in an abort, else `undefined`. */
function abortedFirst(c: GenerateStreamChunk): WorkerBindingsError | undefined {
  if (finishType(c.metaInfo.finish_reason) !== 'abort') return undefined
  return new WorkerBindingsError(
    'STREAM_ERROR',
    `the worker aborted: ${JSON.stringify(c.metaInfo.finish_reason)}`,
  )
}

/** The error of a later `/generate` chunk that ends in an abort, else `undefined`. */
function abortedMidStream(c: GenerateStreamChunk): WorkerBindingsError | undefined {
  if (finishType(c.metaInfo.finish_reason) !== 'abort') return undefined
  return new WorkerBindingsError('STREAM_ERROR', 'the worker aborted the request mid-stream')
}

/**
 * The direct-policy transport: a turn's token ids as SGLang's native `/generate` with
 * `input_ids`, streamed (the first chunk is the TTFT), to D alone (fast / direct path) or to a
 * P/D pair paired by a bootstrap room (seed path). `ignore_eos` makes the worker generate the
 * trace's output length.
 */
export class GenerateTransport implements TurnTransport {
  readonly observation: TurnObservation = { firstTokenAt: undefined, outputIds: undefined }
  readonly #prompt: readonly number[]
  readonly #maxTokens: number
  readonly #now: () => number

  constructor(prompt: Uint32Array, maxTokens: number, now: () => number) {
    this.#prompt = Array.from(prompt)
    this.#maxTokens = maxTokens
    this.#now = now
  }

  async start(served: ServedBy, signal: AbortSignal): Promise<StartedResponse> {
    const base: GenerateRequest = {
      input_ids: this.#prompt as number[],
      sampling_params: { max_new_tokens: this.#maxTokens, ignore_eos: true },
    }
    const d = { ...base, ...decodeFields(served) } as GenerateRequest
    const seed = served.path === 'seed'
    const boot = seed ? bootstrapFields(served) : {}
    const pair = seed ? new PdPair(signal) : undefined
    const opts: CallOptions = { signal: pair?.signal ?? signal }
    if (pair !== undefined)
      pair.startPrefill(
        served.prefill!.client.generate(
          { ...base, ...boot, rid: `${served.rid}:p` } as GenerateRequest,
          opts,
        ),
      )
    return sendTurn(pair, async () => {
      const stream = await served.decode.client.generateStream({ ...d, ...boot } as GenerateRequest, opts)
      const { first, rest } = await firstChunk(stream, abortedFirst)
      const firstAt = this.#now()
      return streamedResponse(stream, pair, async (): Promise<Completion> => {
        let last = first
        await forwardRest(rest, abortedMidStream, (c) => {
          last = c
        })
        let pa: unknown
        if (pair?.prefill !== undefined) pa = await pair.prefill.catch(() => undefined)
        this.observation.firstTokenAt = firstAt
        this.observation.outputIds = last.outputIds
        const dCached = last.metaInfo.cached_tokens ?? 0
        const pCached =
          (pa as { meta_info?: { cached_tokens?: number } } | undefined)?.meta_info?.cached_tokens ?? 0
        return {
          outputTokens: last.outputIds.length,
          cachedTokens: seed ? pCached : dCached,
          transferredTokens: seed ? Math.max(0, this.#prompt.length - dCached) : 0,
        }
      })
    })
  }
}

/** What the proxy reported about a turn (its `kvc` response extension), or why it failed. */
export interface ProxyTurn {
  readonly ok: boolean
  readonly status: number
  readonly firstTokenAt: number | undefined
  readonly cause: string | undefined
  readonly message: string | undefined
  /** The proxy's record of the turn, as it writes it ({@link KvcResponseInfo}). */
  readonly kvc:
    | (Omit<KvcResponseInfo, 'session_id' | 'turn_id' | 'path'> & {
        readonly path: 'fast' | 'seed' | 'direct'
      })
    | undefined
}

/**
 * One turn through a kvc proxy (this repository's `examples/proxy`, in process or at a URL): an
 * OpenAI `/v1/completions` request with the token ids as the prompt, streamed with
 * `stream_options.include_usage`, whose final usage chunk carries the proxy's `kvc` record (path,
 * worker, cached tokens, output ids).
 */
export async function proxyTurn(
  url: string,
  sessionId: string | undefined,
  prompt: Uint32Array,
  maxTokens: number,
  now: () => number,
  signal?: AbortSignal,
): Promise<ProxyTurn> {
  let res: Response
  try {
    res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(sessionId === undefined ? {} : { 'x-session-id': sessionId }),
      },
      body: JSON.stringify({
        prompt: Array.from(prompt),
        max_tokens: maxTokens,
        stream: true,
        stream_options: { include_usage: true },
        ignore_eos: true,
      }),
      ...(signal === undefined ? {} : { signal }),
    })
  } catch (err) {
    return {
      ok: false,
      status: 0,
      firstTokenAt: undefined,
      cause: 'proxy_unreachable',
      message: String(err),
      kvc: undefined,
    }
  }
  if (res.status !== 200) {
    const body = (await res.json().catch(() => ({}))) as {
      error?: { message?: string; code?: string; kvc?: { cause?: string } }
    }
    return {
      ok: false,
      status: res.status,
      firstTokenAt: undefined,
      cause: body.error?.kvc?.cause ?? body.error?.code ?? `http_${res.status}`,
      message: body.error?.message,
      kvc: undefined,
    }
  }
  let firstTokenAt: number | undefined
  let kvc: ProxyTurn['kvc']
  let cause: string | undefined
  let message: string | undefined
  let done = false
  let buf = ''
  const decoder = new TextDecoder()
  try {
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(bytes, { stream: true })
      for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
        const ev = buf.slice(0, i).trim()
        buf = buf.slice(i + 2)
        if (!ev.startsWith('data: ')) continue
        const data = ev.slice(6)
        if (data === '[DONE]') {
          done = true
          continue
        }
        const j = JSON.parse(data) as {
          choices?: unknown[]
          kvc?: ProxyTurn['kvc']
          error?: { message?: string; kvc?: { cause?: string } }
        }
        if (j.error !== undefined) {
          cause = j.error.kvc?.cause ?? 'stream_error'
          message = j.error.message
        } else if ((j.choices?.length ?? 0) > 0) firstTokenAt ??= now()
        if (j.kvc !== undefined) kvc = j.kvc
      }
    }
  } catch (err) {
    cause ??= 'stream_interrupted'
    message ??= String(err)
  }
  if (cause === undefined && (!done || kvc === undefined)) cause = 'stream_truncated'
  return { ok: cause === undefined, status: 200, firstTokenAt, cause, message, kvc }
}
