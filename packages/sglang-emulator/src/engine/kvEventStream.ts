/**
 * The engine's KV events: the radix cache's events, batched per turn of the event loop and
 * published in order on ZeroMQ (PUB plus a ROUTER replay socket).
 *
 * @internal
 * @module
 */
import { KvEventPublisher, type WireKvEvent } from '@kvc/worker-bindings'
import type { EmulatorKvEventsOptions } from '../config/options.js'

/** @internal */
export class KvEventStream {
  readonly publisher: KvEventPublisher
  readonly #pending: WireKvEvent[] = []
  readonly #takeDrop: () => boolean
  readonly #onBatch: () => void
  #timer: ReturnType<typeof setImmediate> | undefined
  #chain: Promise<unknown> = Promise.resolve()
  #stopped = false

  /**
   * @param takeDrop whether the next batch goes to the replay buffer only (a fault)
   * @param onBatch called for every batch published
   */
  constructor(options: EmulatorKvEventsOptions, takeDrop: () => boolean, onBatch: () => void) {
    this.publisher = new KvEventPublisher({
      ...(options.topic === undefined ? {} : { topic: options.topic }),
      ...(options.encoding === undefined ? {} : { encoding: options.encoding }),
      ...(options.bufferSteps === undefined ? {} : { bufferSteps: options.bufferSteps }),
    })
    this.#takeDrop = takeDrop
    this.#onBatch = onBatch
  }

  bind(): ReturnType<KvEventPublisher['bind']> {
    return this.publisher.bind()
  }

  /** Queues one event; the batch goes out on the next turn of the event loop. */
  push(event: WireKvEvent): void {
    this.#pending.push(event)
    if (this.#timer !== undefined || this.#stopped) return
    this.#timer = setImmediate(() => {
      this.#timer = undefined
      void this.#flush()
    })
  }

  /** No batch is scheduled any more (what is queued goes out at {@link close}). */
  stop(): void {
    this.#stopped = true
  }

  /** Publishes what is queued, waits for every publish, closes the sockets. */
  async close(): Promise<void> {
    this.#stopped = true
    if (this.#timer !== undefined) clearImmediate(this.#timer)
    this.#timer = undefined
    await this.#flush()
    await this.#chain.catch(() => {})
    await this.publisher.close()
  }

  #flush(): Promise<void> {
    if (this.#pending.length === 0) return Promise.resolve()
    const events = this.#pending.splice(0)
    const dropLive = this.#takeDrop()
    this.#onBatch()
    const pub = this.publisher
    const p = this.#chain.then(() =>
      pub.publish({ ts: Date.now() / 1000, events, dataParallelRank: null }, { dropLive }).catch(() => {}),
    )
    this.#chain = p
    return p.then(() => {})
  }
}
