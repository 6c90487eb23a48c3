/**
 * A KV-event subscriber: ZeroMQ SUB of vLLM / SGLang / Mooncake event batches, with gap detection
 * by sequence number and replay from the publisher's ROUTER socket.
 *
 * @module
 */
import type { KvEvent } from '@kvc/radix-cache'
import { Dealer, Subscriber } from 'zeromq'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import {
  KV_TIERS,
  type KvEventBatch,
  type KvTier,
  type WireKvEvent,
  decodeKvEventBatch,
  kvEventTier,
  toRadixKvEvents,
} from './codec.js'
import { END_SEQ, decodeSeq, encodeSeq } from './seq.js'

/**
 * One received batch.
 *
 * @example
 * ```ts
 * import type { ReceivedKvBatch } from '@kvc/worker-bindings'
 * const log = (m: ReceivedKvBatch) => console.log(m.seq, m.replayed, m.batch.events.length)
 * ```
 */
export interface ReceivedKvBatch {
  readonly topic: string
  readonly seq: bigint
  readonly batch: KvEventBatch
  /** Delivered from the replay socket (after a gap) rather than live. */
  readonly replayed: boolean
}

/**
 * A detected sequence gap and what replay made of it.
 *
 * @example
 * ```ts
 * import type { KvEventGap } from '@kvc/worker-bindings'
 * const onGap = (g: KvEventGap) => { if (!g.recovered) console.warn('lost', g.missing, 'batches: resync') }
 * ```
 */
export interface KvEventGap {
  /** First missing sequence number. */
  readonly from: bigint
  /** Last missing sequence number. */
  readonly to: bigint
  /** Every missing batch was replayed. */
  readonly recovered: boolean
  /** Batches still missing after replay (0 when recovered). */
  readonly missing: number
  /** Why it was not recovered: no replay endpoint, the publisher's buffer no longer had them, or a timeout. */
  readonly reason: 'no-replay-endpoint' | 'not-buffered' | 'replay-timeout' | undefined
}

/**
 * Counters of a {@link KvEventSubscriber}.
 *
 * @example
 * ```ts
 * import type { KvEventSubscriber } from '@kvc/worker-bindings'
 * const lossy = (sub: KvEventSubscriber) => sub.stats.unrecoveredGaps > 0
 * ```
 */
export interface KvEventSubscriberStats {
  /** Messages received on the SUB socket. */
  readonly received: number
  /** Batches handed to `onBatch` (live and replayed). */
  readonly delivered: number
  /** Batches delivered from replay. */
  readonly replayed: number
  /** Messages dropped because their sequence was already delivered. */
  readonly duplicates: number
  readonly gaps: number
  readonly unrecoveredGaps: number
  readonly decodeErrors: number
  /**
   * Delivered `BlockStored` / `BlockRemoved` events per tier of their `medium` (see
   * `kvEventTier`); `unknown` counts media no tier table knows.
   */
  readonly eventsByTier: Readonly<Record<KvTier | 'unknown', number>>
}

/**
 * Options of {@link KvEventSubscriber}.
 *
 * @example
 * ```ts
 * import { KvEventSubscriber, type KvEventSubscriberOptions } from '@kvc/worker-bindings'
 * const opts: KvEventSubscriberOptions = {
 *   endpoint: 'tcp://127.0.0.1:5557',
 *   replayEndpoint: 'tcp://127.0.0.1:5558',
 *   onBatch: ({ seq, batch }) => console.log(seq, batch.events.length),
 * }
 * const sub = new KvEventSubscriber(opts)
 * ```
 */
export interface KvEventSubscriberOptions {
  /** PUB endpoint to connect to (e.g. `tcp://10.0.0.6:5557`). */
  readonly endpoint: string
  /** The publisher's ROUTER replay endpoint; without it gaps are reported, not filled. */
  readonly replayEndpoint?: string
  /** Topic prefix to subscribe to (default `''`: everything). */
  readonly topic?: string
  /** Receives every batch in sequence order. An `await`ed promise holds the next delivery back. */
  readonly onBatch: (message: ReceivedKvBatch) => void | Promise<void>
  /** Receives every detected gap, after the replay attempt. */
  readonly onGap?: (gap: KvEventGap) => void
  /** Receives errors that do not stop the subscriber (an undecodable batch, an `onBatch` that threw). */
  readonly onError?: (error: unknown) => void
  /**
   * Sequence to start from: the subscriber replays `[startSeq, first live seq)` before the first
   * live batch (default: start at the first live batch; set `0n` to catch up on everything the
   * publisher still buffers).
   */
  readonly startSeq?: bigint
  /** How long a replay may take before it is abandoned (default 1,000 ms). */
  readonly replayTimeoutMs?: number
  /** Receive high-water mark (default 100,000). */
  readonly hwm?: number
}

/**
 * Subscribes to a worker's KV-event stream: multipart `(topic, seq: 8-byte big-endian, msgpack
 * batch)` messages in the array or map encoding ({@link decodeKvEventBatch}). It tracks the last
 * delivered sequence number:
 *
 * - a duplicate (`seq <= last`) is dropped;
 * - a gap (`seq > last + 1`) triggers a replay request to the publisher's ROUTER socket for
 *   `[last + 1, seq)`; replayed batches are delivered in order before the live one. What replay
 *   could not fill (the publisher's buffer had moved on, or it timed out) is reported to `onGap`
 *   with `recovered: false`: the consumer must then resynchronize that worker (for example drop
 *   its residency and rebuild), because this protocol has no tree dump;
 * - batches are delivered to `onBatch` one at a time, in sequence order.
 *
 * @example
 * ```ts
 * import { KvEventSubscriber, toRadixKvEvents } from '@kvc/worker-bindings'
 * let nextId = 0
 * const sub = new KvEventSubscriber({
 *   endpoint: 'tcp://10.0.0.6:5557',
 *   replayEndpoint: 'tcp://10.0.0.6:5558',
 *   onBatch: ({ batch }) => {
 *     for (const e of toRadixKvEvents(batch, nextId)) nextId = e.eventId + 1 // feed a residency index here
 *   },
 *   onGap: (gap) => console.warn('gap', gap),
 * })
 * await sub.start()
 * // ...
 * await sub.close()
 * ```
 */
export class KvEventSubscriber {
  readonly endpoint: string
  readonly replayEndpoint: string | undefined
  readonly topic: string
  readonly #opts: KvEventSubscriberOptions
  readonly #sub: Subscriber
  readonly #replayTimeout: number
  #dealer: Dealer | undefined
  #last: bigint | undefined
  #loop: Promise<void> | undefined
  #closed = false
  #stats = {
    received: 0,
    delivered: 0,
    replayed: 0,
    duplicates: 0,
    gaps: 0,
    unrecoveredGaps: 0,
    decodeErrors: 0,
  }
  readonly #byTier: Record<KvTier | 'unknown', number> = {
    device: 0,
    host: 0,
    disk: 0,
    external: 0,
    unknown: 0,
  }

  constructor(options: KvEventSubscriberOptions) {
    if (typeof options.onBatch !== 'function') {
      throw new WorkerBindingsError('INVALID_OPTION', 'onBatch must be a function', {
        value: options.onBatch,
      })
    }
    const t = options.replayTimeoutMs ?? 1_000
    if (!(t > 0)) throw new WorkerBindingsError('INVALID_OPTION', 'replayTimeoutMs must be > 0', { value: t })
    this.endpoint = options.endpoint
    this.replayEndpoint = options.replayEndpoint
    this.topic = options.topic ?? ''
    this.#opts = options
    this.#replayTimeout = t
    this.#sub = new Subscriber({ linger: 0, receiveHighWaterMark: options.hwm ?? 100_000 })
    if (options.startSeq !== undefined) this.#last = options.startSeq - 1n
  }

  /** The last delivered sequence number (`undefined` before the first batch). */
  get lastSeq(): bigint | undefined {
    return this.#last
  }

  /** Counters since construction. */
  get stats(): KvEventSubscriberStats {
    return { ...this.#stats, eventsByTier: { ...this.#byTier } }
  }

  /** Connects and starts receiving. Resolves once connected (messages may still be in flight). */
  async start(): Promise<void> {
    if (this.#closed) throw new WorkerBindingsError('CLOSED', 'the KV-event subscriber is closed')
    if (this.#loop !== undefined) return
    try {
      this.#sub.connect(this.endpoint)
    } catch (cause) {
      throw new WorkerBindingsError('INVALID_OPTION', `cannot connect to ${this.endpoint}`, {
        value: this.endpoint,
        cause,
        endpoint: this.endpoint,
      })
    }
    this.#sub.subscribe(this.topic)
    this.#loop = this.#run()
  }

  /** Stops receiving and closes the sockets. Idempotent; resolves once the receive loop ended. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#sub.close()
    this.#dealer?.close()
    this.#dealer = undefined
    await this.#loop
  }

  /**
   * Asks the publisher's replay socket for every buffered batch from `start` on (up to and
   * excluding `before`, when given). Resolves with what arrived before the end marker.
   *
   * @throws WorkerBindingsError `REPLAY_FAILED` without a replay endpoint or on timeout.
   */
  async replay(start: bigint, before?: bigint): Promise<{ seq: bigint; payload: Uint8Array }[]> {
    if (this.replayEndpoint === undefined) {
      throw new WorkerBindingsError('REPLAY_FAILED', 'no replay endpoint configured')
    }
    if (this.#closed) throw new WorkerBindingsError('CLOSED', 'the KV-event subscriber is closed')
    let dealer = this.#dealer
    if (dealer === undefined) {
      dealer = new Dealer({ linger: 0, receiveTimeout: this.#replayTimeout })
      dealer.connect(this.replayEndpoint)
      this.#dealer = dealer
    }
    const out: { seq: bigint; payload: Uint8Array }[] = []
    try {
      await dealer.send([Buffer.alloc(0), encodeSeq(start)])
      for (;;) {
        const frames = await dealer.receive()
        const body = frames.length > 0 && frames[0]!.length === 0 ? frames.slice(1) : frames
        const seq = body[0] === undefined ? undefined : decodeSeq(body[0])
        if (seq === undefined) continue
        if (seq === END_SEQ) break
        if (before !== undefined && seq >= before) continue
        out.push({ seq, payload: body[1] ?? new Uint8Array(0) })
      }
    } catch (cause) {
      // A late answer to an abandoned request must not be read as the next one's: drop the socket.
      dealer.close()
      if (this.#dealer === dealer) this.#dealer = undefined
      throw new WorkerBindingsError('REPLAY_FAILED', `replay from ${start} failed or timed out`, {
        value: start,
        cause,
        endpoint: this.replayEndpoint,
      })
    }
    return out
  }

  async #run(): Promise<void> {
    for (;;) {
      let frames: Buffer[]
      try {
        frames = await this.#sub.receive()
      } catch (err) {
        if (this.#closed) return
        this.#opts.onError?.(err)
        return
      }
      this.#stats.received++
      if (frames.length < 3) {
        this.#stats.decodeErrors++
        this.#opts.onError?.(
          new WorkerBindingsError('KV_EVENT_DECODE', `expected 3 frames, got ${frames.length}`, {
            value: frames.length,
          }),
        )
        continue
      }
      const topic = frames[0]!.toString('utf8')
      const seq = decodeSeq(frames[1]!)
      if (seq === undefined) {
        this.#stats.decodeErrors++
        this.#opts.onError?.(
          new WorkerBindingsError('KV_EVENT_DECODE', 'the sequence frame is not 8 bytes', {
            value: frames[1],
          }),
        )
        continue
      }
      await this.#handle(topic, seq, frames[2]!)
      if (this.#closed) return
    }
  }

  async #handle(topic: string, seq: bigint, payload: Uint8Array): Promise<void> {
    const last = this.#last
    if (last !== undefined && seq <= last) {
      this.#stats.duplicates++
      return
    }
    if (last !== undefined && seq > last + 1n) await this.#fillGap(topic, last + 1n, seq)
    await this.#deliver(topic, seq, payload, false)
  }

  async #fillGap(topic: string, from: bigint, before: bigint): Promise<void> {
    this.#stats.gaps++
    let reason: KvEventGap['reason']
    let filled = 0
    if (this.replayEndpoint === undefined) {
      reason = 'no-replay-endpoint'
    } else {
      try {
        const items = await this.replay(from, before)
        for (const it of items) {
          if (this.#closed) return
          if (it.seq < from || (this.#last !== undefined && it.seq <= this.#last)) continue
          await this.#deliver(topic, it.seq, it.payload, true)
          filled++
        }
      } catch (err) {
        if (this.#closed) return
        reason = 'replay-timeout'
        this.#opts.onError?.(err)
      }
    }
    const missing = Number(before - from) - filled
    if (missing > 0) reason ??= 'not-buffered'
    else reason = undefined
    if (reason !== undefined) this.#stats.unrecoveredGaps++
    this.#opts.onGap?.({ from, to: before - 1n, recovered: reason === undefined, missing, reason })
  }

  async #deliver(topic: string, seq: bigint, payload: Uint8Array, replayed: boolean): Promise<void> {
    let batch: KvEventBatch
    this.#last = seq
    try {
      batch = decodeKvEventBatch(payload)
    } catch (err) {
      this.#stats.decodeErrors++
      this.#opts.onError?.(err)
      return
    }
    this.#stats.delivered++
    if (replayed) this.#stats.replayed++
    for (const e of batch.events) {
      if (e.type !== 'AllBlocksCleared') this.#byTier[kvEventTier(e.medium) ?? 'unknown']++
    }
    try {
      await this.#opts.onBatch({ topic, seq, batch, replayed })
    } catch (err) {
      this.#opts.onError?.(err)
    }
  }
}

/**
 * Anything with `ingest(workerId, event)`, such as `kvc-router`'s `ResidencyIndex`.
 *
 * @example
 * ```ts
 * import type { KvEventSink } from '@kvc/worker-bindings'
 * const log: KvEventSink = { ingest: (worker, e) => console.log(worker, e.type, e.eventId) }
 * ```
 */
export interface KvEventSink {
  ingest(workerId: string, event: KvEvent): void
}

/**
 * Options of {@link residencyFeeder}.
 *
 * @example
 * ```ts
 * import type { ResidencyFeederOptions } from '@kvc/worker-bindings'
 * const hostOnly: ResidencyFeederOptions = { tiers: ['host'] }
 * ```
 */
export interface ResidencyFeederOptions {
  /**
   * Feed only events of these tiers (default `['device']`: a residency index of what is on the
   * GPU; a host tier's events would otherwise read as device stores and removals). Use one feeder
   * per tier to keep one index per tier (a host index is built with `tier: 'host'`).
   * `AllBlocksCleared` goes to every feeder.
   */
  readonly tiers?: readonly KvTier[]
  /** Receives each event left out (another tier, or a medium no tier table knows). */
  readonly onSkipped?: (event: WireKvEvent, tier: KvTier | undefined) => void
  /**
   * Receives each event the sink refuses (a corrupt one: a hash past 64 bits, a block size the
   * index does not use, an id out of order), which is then skipped: its id is used up, leaving a
   * hole the sink's gap check reports in turn, and the rest of the batch is applied. Without it
   * the refusal is thrown (to the subscriber's `onError`) and the rest of the batch is lost.
   */
  readonly onRefused?: (error: unknown, event: KvEvent) => void
}

/**
 * An `onBatch` callback that feeds every event of a worker's stream, of the chosen tiers, into a
 * sink (the router's residency index), numbering them consecutively from `firstEventId` across
 * batches. Batches whose sequence numbers follow each other (live, or filled by replay) give a
 * contiguous event stream; a batch that arrives after unrecovered missing batches skips one event
 * id per missing batch, so the sink's own gap check sees the loss (the residency index then flags
 * the worker for a resync) instead of silently carrying on.
 *
 * By default only device events are fed (`medium` absent or `GPU`): a worker with a host tier
 * (SGLang HiCache, vLLM's offloading connector) also announces host stores and removals, which a
 * single-tier index must not mix in. Events of other tiers go to `onSkipped`.
 *
 * @example
 * ```ts
 * import { KvEventSubscriber, residencyFeeder } from '@kvc/worker-bindings'
 * const seen: string[] = []
 * const device = residencyFeeder({ ingest: (w, e) => seen.push(`${w}:${e.type}`) }, 'd0')
 * const host = residencyFeeder({ ingest: (w, e) => seen.push(`${w}:host:${e.type}`) }, 'd0', 0, { tiers: ['host'] })
 * const sub = new KvEventSubscriber({
 *   endpoint: 'tcp://127.0.0.1:5557',
 *   onBatch: (m) => {
 *     device(m)
 *     host(m)
 *   },
 * })
 * ```
 */
export function residencyFeeder(
  sink: KvEventSink,
  workerId: string,
  firstEventId = 0,
  options: ResidencyFeederOptions = {},
): (message: ReceivedKvBatch) => void {
  const tiers = options.tiers ?? ['device']
  for (const t of tiers) {
    if (!KV_TIERS.includes(t)) {
      throw new WorkerBindingsError('INVALID_OPTION', `tiers: unknown tier ${String(t)}`, { value: t })
    }
  }
  const onSkipped = options.onSkipped
  const onRefused = options.onRefused
  let next = firstEventId
  let lastSeq: bigint | undefined
  return ({ batch, seq }) => {
    if (lastSeq !== undefined && seq > lastSeq + 1n) next += Number(seq - lastSeq - 1n)
    if (lastSeq === undefined || seq > lastSeq) lastSeq = seq
    const kept = batch.events.filter((e) => {
      if (e.type === 'AllBlocksCleared') return true
      const tier = kvEventTier(e.medium)
      if (tier !== undefined && tiers.includes(tier)) return true
      onSkipped?.(e, tier)
      return false
    })
    for (const e of toRadixKvEvents({ ...batch, events: kept }, next)) {
      // The event's id is used up either way: an event the sink refuses (a corrupt one) leaves a
      // hole in the ids, which the sink's gap check reports, and the rest of the batch goes on.
      next = e.eventId + 1
      try {
        sink.ingest(workerId, e)
      } catch (err) {
        if (onRefused === undefined) throw err
        onRefused(err, e)
      }
    }
  }
}
