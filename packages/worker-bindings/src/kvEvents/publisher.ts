/**
 * A KV-event publisher speaking the vLLM / SGLang `ZmqEventPublisher` protocol: PUB socket plus a
 * ROUTER replay socket.
 *
 * @module
 */
import { Publisher, Router } from 'zeromq'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import { type KvEventBatch, type KvEventEncoding, encodeKvEventBatch } from './codec.js'
import { END_SEQ, decodeSeq, encodeSeq } from './seq.js'

/**
 * Options of {@link KvEventPublisher}.
 *
 * @example
 * ```ts
 * import { KvEventPublisher, type KvEventPublisherOptions } from '@kvc/worker-bindings'
 * const opts: KvEventPublisherOptions = { endpoint: 'tcp://127.0.0.1:5557', replayEndpoint: 'tcp://127.0.0.1:5558', encoding: 'array' }
 * const pub = new KvEventPublisher(opts)
 * ```
 */
export interface KvEventPublisherOptions {
  /** PUB endpoint to bind (default `tcp://127.0.0.1:*`, an ephemeral loopback port). */
  readonly endpoint?: string
  /** ROUTER replay endpoint to bind (default `tcp://127.0.0.1:*`; `null`: no replay socket). */
  readonly replayEndpoint?: string | null
  /** Topic frame (default `''`, SGLang's default). */
  readonly topic?: string
  /** Batches kept for replay (default 10,000, upstream's `buffer_steps`). */
  readonly bufferSteps?: number
  /** Send high-water mark (default 100,000, upstream's `hwm`). */
  readonly hwm?: number
  /** msgpack layout (default `'array'`). */
  readonly encoding?: KvEventEncoding
}

/**
 * Publishes KV-event batches as multipart messages `(topic, seq: 8-byte big-endian, msgpack
 * batch)` on a PUB socket, numbering them from 0, and keeps the last `bufferSteps` for replay: a
 * client sends the start sequence (8 bytes) to the ROUTER socket and receives every buffered
 * `(seq, payload)` with `seq >= start`, then the end marker `seq = −1` with an empty payload.
 * This is the protocol of vLLM's and SGLang's `ZmqEventPublisher`; the emulator uses it, and so
 * can any TypeScript engine that wants to feed routers.
 *
 * @example
 * ```ts
 * import { KvEventPublisher } from '@kvc/worker-bindings'
 * const pub = new KvEventPublisher()
 * const { endpoint, replayEndpoint } = await pub.bind()
 * await pub.publish({ ts: Date.now() / 1000, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null })
 * await pub.close()
 * ```
 */
export class KvEventPublisher {
  readonly topic: string
  readonly encoding: KvEventEncoding
  readonly bufferSteps: number
  readonly #pub: Publisher
  readonly #router: Router | undefined
  readonly #endpoint: string
  readonly #replayEndpoint: string | null
  readonly #buffer: { seq: bigint; payload: Uint8Array }[] = []
  #seq = 0n
  #sendChain: Promise<void> = Promise.resolve()
  #bound: Promise<{ endpoint: string; replayEndpoint: string | undefined }> | undefined
  #closed = false
  #replayLoop: Promise<void> | undefined

  constructor(options: KvEventPublisherOptions = {}) {
    this.topic = options.topic ?? ''
    this.encoding = options.encoding ?? 'array'
    const steps = options.bufferSteps ?? 10_000
    if (!Number.isInteger(steps) || steps < 0) {
      throw new WorkerBindingsError('INVALID_OPTION', `bufferSteps must be an integer >= 0`, { value: steps })
    }
    this.bufferSteps = steps
    this.#endpoint = options.endpoint ?? 'tcp://127.0.0.1:*'
    this.#replayEndpoint = options.replayEndpoint === undefined ? 'tcp://127.0.0.1:*' : options.replayEndpoint
    this.#pub = new Publisher({ linger: 0, sendHighWaterMark: options.hwm ?? 100_000 })
    this.#router = this.#replayEndpoint === null ? undefined : new Router({ linger: 0 })
  }

  /** Binds the sockets; resolves with the actual endpoints (ephemeral ports resolved). Idempotent. */
  bind(): Promise<{ endpoint: string; replayEndpoint: string | undefined }> {
    this.#bound ??= (async () => {
      this.#checkOpen()
      await this.#pub.bind(this.#endpoint)
      let replay: string | undefined
      if (this.#router !== undefined && this.#replayEndpoint !== null) {
        await this.#router.bind(this.#replayEndpoint)
        replay = this.#router.lastEndpoint ?? undefined
        this.#replayLoop = this.#serveReplay(this.#router)
      }
      return { endpoint: this.#pub.lastEndpoint ?? this.#endpoint, replayEndpoint: replay }
    })()
    return this.#bound
  }

  /** Sequence number the next batch will get. */
  get nextSeq(): bigint {
    return this.#seq
  }

  /**
   * Publishes one batch; resolves with its sequence number once it is queued. With `dropLive`
   * the batch is numbered and buffered for replay but not sent live (a fault injection: the
   * subscribers see a sequence gap).
   */
  async publish(batch: KvEventBatch, options: { readonly dropLive?: boolean } = {}): Promise<bigint> {
    this.#checkOpen()
    await this.bind()
    const payload = encodeKvEventBatch(batch, this.encoding)
    const seq = this.#seq++
    if (this.bufferSteps > 0) {
      this.#buffer.push({ seq, payload })
      if (this.#buffer.length > this.bufferSteps) this.#buffer.shift()
    }
    if (!options.dropLive) {
      const frames = [this.topic, encodeSeq(seq), payload]
      const next = this.#sendChain.then(() => this.#pub.send(frames))
      this.#sendChain = next.catch(() => {})
      await next
    }
    return seq
  }

  /** Closes both sockets (pending replay answers are dropped). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.#sendChain
    this.#pub.close()
    this.#router?.close()
    await this.#replayLoop?.catch(() => {})
  }

  #checkOpen(): void {
    if (this.#closed) throw new WorkerBindingsError('CLOSED', 'the KV-event publisher is closed')
  }

  async #serveReplay(router: Router): Promise<void> {
    for (;;) {
      let frames: Buffer[]
      try {
        frames = await router.receive()
      } catch {
        return // closed
      }
      const [identity, ...rest] = frames
      let startFrame: Buffer | undefined
      for (const f of rest) if (f.length === 8) startFrame = f
      if (identity === undefined || startFrame === undefined) continue
      const start = decodeSeq(startFrame)!
      const delimited = rest.length > 1 && rest[0]!.length === 0
      const head = delimited ? [identity, Buffer.alloc(0)] : [identity]
      try {
        for (const { seq, payload } of this.#buffer) {
          if (seq >= start) await router.send([...head, encodeSeq(seq), payload])
        }
        await router.send([...head, encodeSeq(END_SEQ), Buffer.alloc(0)])
      } catch {
        if (this.#closed) return
      }
    }
  }
}
