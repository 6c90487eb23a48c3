import { DtoPSyncError, DtoPSyncErrorCode, invalidOption } from '../errors/dtoPSyncError.js'
import { checkFraction, checkNonNegative, checkPositive, describe } from '../protocol/validate.js'
import { EventQueue } from './eventQueue.js'
import type { Delivery, TransferStatus, TransferTicket, Transport, TransportHandlers } from './transport.js'

/**
 * Bandwidth, latency and fault model of one link direction. A transfer occupies the link for
 * `bytes / bytesPerSecond` (transfers queue FIFO behind each other), its first bytes land
 * `latencyMs` (+ a uniform jitter in `[0, jitterMs)`, which lets later transfers overtake it) after
 * it goes on the wire, its last bytes `bytes / bytesPerSecond` later. Faults, each drawn per
 * transfer: lost (never lands), partial (breaks off after a random number of units), hung (begins,
 * never ends), duplicated (lands twice). A transfer that would take longer than `timeoutMs` from
 * submission hangs (Mooncake's 32 s transfer timeout).
 *
 * @example
 * ```ts
 * import type { LinkModel } from '@kvc/dto-p-sync'
 * // 10% of a 400 Gb/s RDMA link, 20 µs latency, 1% of transfers lost
 * const model: LinkModel = { bytesPerSecond: 5e9, latencyMs: 0.02, lossRate: 0.01 }
 * ```
 */
export interface LinkModel<M = unknown> {
  readonly bytesPerSecond: number
  /** Fixed latency per transfer (setup + propagation), ms (default 0). */
  readonly latencyMs?: number
  /** Extra latency uniform in `[0, jitterMs)` per transfer: reordering (default 0). */
  readonly jitterMs?: number
  /** Probability that a transfer is lost (default 0). */
  readonly lossRate?: number
  /** Probability that a transfer breaks off part-way (default 0). */
  readonly partialRate?: number
  /** Probability that a transfer begins and never ends (default 0). */
  readonly hangRate?: number
  /** Probability that a delivered transfer is delivered a second time (default 0). */
  readonly duplicateRate?: number
  /** Sender-side timeout, ms (default 32,000). */
  readonly timeoutMs?: number
  /** Units of a message for partial deliveries (default 1; use the block count for sync messages). */
  readonly units?: (message: M) => number
}

/**
 * Time (ms) to move `bytes` over an idle link: `latencyMs + bytes / bytesPerSecond · 1000`. The
 * simulator's cost model for a KV transfer.
 *
 * @example
 * ```ts
 * import { transferTimeMs } from '@kvc/dto-p-sync'
 * // 5K tokens of Qwen3-30B-A3B KV over 400 Gb/s with 0.05 ms setup
 * transferTimeMs(5000 * 98_304, { bytesPerSecond: 50e9, latencyMs: 0.05 }) // ≈ 9.88 ms
 * ```
 */
export function transferTimeMs(
  bytes: number,
  model: { readonly bytesPerSecond: number; readonly latencyMs?: number },
): number {
  checkNonNegative('bytes', bytes)
  checkPositive('bytesPerSecond', model.bytesPerSecond)
  return checkNonNegative('latencyMs', model.latencyMs ?? 0) + (bytes / model.bytesPerSecond) * 1000
}

/**
 * Options of {@link InMemoryNetwork}.
 *
 * @example
 * ```ts
 * import { InMemoryNetwork } from '@kvc/dto-p-sync'
 * import { seededRandom } from '@kvc/dto-p-sync/testing'
 * const net = new InMemoryNetwork({ random: seededRandom(1), startTime: 0 })
 * ```
 */
export interface InMemoryNetworkOptions {
  /** Randomness in `[0, 1)` for jitter and faults (required by links that use them). */
  readonly random?: () => number
  /** Initial virtual time, ms (default 0). */
  readonly startTime?: number
}

/**
 * Counters of one {@link InMemoryLink}.
 *
 * @example
 * ```ts
 * import type { LinkStats } from '@kvc/dto-p-sync'
 * const lossRate = (s: LinkStats) => s.lost / Math.max(1, s.sent)
 * ```
 */
export interface LinkStats {
  readonly sent: number
  readonly bytesSent: number
  readonly delivered: number
  readonly partial: number
  readonly lost: number
  readonly hung: number
  readonly timedOut: number
  readonly duplicated: number
  /** Events that found no handler connected. */
  readonly undeliverable: number
}

/**
 * A deterministic in-memory network for tests and discrete-event simulators: links with a
 * bandwidth/latency/fault model ({@link LinkModel}) sharing one virtual clock and one event queue.
 * Nothing happens on its own (no timers): time moves only through {@link InMemoryNetwork.advanceTo},
 * {@link InMemoryNetwork.advanceBy} or {@link InMemoryNetwork.runUntilIdle}, which fire the due
 * events in time order (ties in submission order); a simulator schedules its next wake-up at
 * {@link InMemoryNetwork.nextEventAt}.
 *
 * @example
 * ```ts
 * import { InMemoryNetwork } from '@kvc/dto-p-sync'
 * const net = new InMemoryNetwork()
 * const link = net.link<string>({ bytesPerSecond: 1000, latencyMs: 5 })
 * link.connect({ deliver: (d) => console.log(d.phase, d.message, d.at) })
 * link.send('hi', 100)   // 100 ms on the wire
 * net.advanceTo(200)     // begin hi 5, end hi 105
 * ```
 */
export class InMemoryNetwork {
  readonly #random: (() => number) | undefined
  readonly #queue = new EventQueue<() => void>()
  #now: number
  #nextTicket = 1
  #nextDelivery = 1

  constructor(options: InMemoryNetworkOptions = {}) {
    if (options.random !== undefined && typeof options.random !== 'function') {
      throw invalidOption('random must be a function returning numbers in [0, 1)', options.random)
    }
    this.#random = options.random
    this.#now = checkNonNegative('startTime', options.startTime ?? 0)
  }

  /**
   * The virtual time, ms.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork({ startTime: 10 }).now() // 10
   * ```
   */
  now(): number {
    return this.#now
  }

  /**
   * A new link (one direction) with the given model. Throws `INVALID_OPTION` for a bad model, or
   * one that needs randomness (jitter, faults) on a network created without `random`.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * const net = new InMemoryNetwork({ random: Math.random })
   * const lossy = net.link({ bytesPerSecond: 1e9, lossRate: 0.1, duplicateRate: 0.05, jitterMs: 2 })
   * ```
   */
  link<M>(model: LinkModel<M>): InMemoryLink<M> {
    return new InMemoryLink<M>(this, model, this.#random)
  }

  /**
   * Time of the next pending event, `undefined` when none.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().nextEventAt() // undefined
   * ```
   */
  nextEventAt(): number | undefined {
    return this.#queue.peekTime()
  }

  /**
   * Number of pending events.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().pendingEvents() // 0
   * ```
   */
  pendingEvents(): number {
    return this.#queue.size
  }

  /**
   * Fire every event due at or before `time`, in order, then set the clock to `time`. Handlers may
   * send; what they send fires in the same call if it is due. Returns the number of events fired.
   * Throws `TIME_WENT_BACKWARDS` when `time` is before now.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().advanceTo(1000) // 0
   * ```
   */
  advanceTo(time: number): number {
    if (typeof time !== 'number' || !Number.isFinite(time)) {
      throw invalidOption(`time must be a finite number, got ${describe(time)}`, time)
    }
    if (time < this.#now) {
      throw new DtoPSyncError(
        DtoPSyncErrorCode.TimeWentBackwards,
        `advanceTo(${time}) is before now (${this.#now})`,
        time,
      )
    }
    let fired = 0
    for (;;) {
      const t = this.#queue.peekTime()
      if (t === undefined || t > time) break
      const fire = this.#queue.pop()!
      this.#now = t
      fired++
      fire()
    }
    this.#now = time
    return fired
  }

  /**
   * {@link InMemoryNetwork.advanceTo} `now() + ms`.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * const net = new InMemoryNetwork()
   * net.advanceBy(5)
   * net.now() // 5
   * ```
   */
  advanceBy(ms: number): number {
    checkNonNegative('ms', ms)
    return this.advanceTo(this.#now + ms)
  }

  /**
   * Fire events until none is pending or the next one is after `until` (default: no limit); the
   * clock stops at the last event fired. Returns the number of events fired.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().runUntilIdle() // 0
   * ```
   */
  runUntilIdle(until = Infinity): number {
    let fired = 0
    for (;;) {
      const t = this.#queue.peekTime()
      if (t === undefined || t > until) break
      fired += this.advanceTo(t)
    }
    return fired
  }

  /** @internal */
  _schedule(time: number, fire: () => void): void {
    this.#queue.push(time, fire)
  }

  /** @internal */
  _ticket(): number {
    return this.#nextTicket++
  }

  /** @internal */
  _delivery(): number {
    return this.#nextDelivery++
  }
}

/**
 * One direction of an in-memory link: a {@link Transport} with the {@link LinkModel}'s bandwidth,
 * latency and faults, driven by its {@link InMemoryNetwork}'s clock. Create it with
 * {@link InMemoryNetwork.link}.
 *
 * @example
 * ```ts
 * import { InMemoryNetwork } from '@kvc/dto-p-sync'
 * const net = new InMemoryNetwork()
 * const link = net.link<string>({ bytesPerSecond: 1e6 })
 * link.send('a', 1e6)   // one second on the wire
 * link.send('b', 1e6)   // queued behind 'a'
 * link.backlogBytes()   // 2e6: bytes still to serialise
 * net.advanceBy(500)
 * link.backlogBytes()   // 1.5e6
 * ```
 */
export class InMemoryLink<M> implements Transport<M> {
  readonly #net: InMemoryNetwork
  readonly #random: (() => number) | undefined
  readonly #bps: number
  readonly #latency: number
  readonly #jitter: number
  readonly #loss: number
  readonly #partial: number
  readonly #hang: number
  readonly #dup: number
  readonly #timeout: number
  readonly #units: ((m: M) => number) | undefined
  #handlers: TransportHandlers<M> | undefined
  #freeAt = 0
  #stats = {
    sent: 0,
    bytesSent: 0,
    delivered: 0,
    partial: 0,
    lost: 0,
    hung: 0,
    timedOut: 0,
    duplicated: 0,
    undeliverable: 0,
  }

  /** @internal Use {@link InMemoryNetwork.link}. */
  constructor(net: InMemoryNetwork, model: LinkModel<M>, random: (() => number) | undefined) {
    if (model === null || typeof model !== 'object')
      throw invalidOption('a link model must be an object', model)
    this.#net = net
    this.#bps = checkPositive('bytesPerSecond', model.bytesPerSecond)
    this.#latency = checkNonNegative('latencyMs', model.latencyMs ?? 0)
    this.#jitter = checkNonNegative('jitterMs', model.jitterMs ?? 0)
    this.#loss = checkFraction('lossRate', model.lossRate ?? 0)
    this.#partial = checkFraction('partialRate', model.partialRate ?? 0)
    this.#hang = checkFraction('hangRate', model.hangRate ?? 0)
    this.#dup = checkFraction('duplicateRate', model.duplicateRate ?? 0)
    if (this.#loss + this.#partial + this.#hang > 1) {
      throw invalidOption(
        'lossRate + partialRate + hangRate must not exceed 1',
        this.#loss + this.#partial + this.#hang,
      )
    }
    this.#timeout = checkPositive('timeoutMs', model.timeoutMs ?? 32_000)
    if (model.units !== undefined && typeof model.units !== 'function')
      throw invalidOption('units must be a function', model.units)
    this.#units = model.units
    const needsRandom =
      this.#jitter > 0 || this.#loss > 0 || this.#partial > 0 || this.#hang > 0 || this.#dup > 0
    if (needsRandom && random === undefined) {
      throw invalidOption('a link with jitter or faults needs a network created with random', model)
    }
    this.#random = random
  }

  /**
   * Submit `message` (`bytes` long) at the network's current time.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * const ticket = new InMemoryNetwork().link({ bytesPerSecond: 1e9 }).send('x', 1e6)
   * ticket.id // 1
   * ```
   */
  send(message: M, bytes: number): TransferTicket {
    if (typeof bytes !== 'number' || !Number.isFinite(bytes) || bytes < 0) {
      throw invalidOption(`bytes must be a finite non-negative number, got ${describe(bytes)}`, bytes)
    }
    const net = this.#net
    const now = net.now()
    const id = net._ticket()
    const start = Math.max(now, this.#freeAt)
    const ser = (bytes / this.#bps) * 1000
    this.#freeAt = start + ser
    this.#stats.sent++
    this.#stats.bytesSent += bytes
    const rnd = this.#random
    const jitter = this.#jitter > 0 ? rnd!() * this.#jitter : 0
    const beginAt = start + this.#latency + jitter
    const endAt = beginAt + ser
    const units = this.#units === undefined ? 1 : this.#units(message)
    const status = (at: number, ok: boolean, reason: TransferStatus<M>['reason']): void =>
      net._schedule(at, () => this.#fireStatus({ ticketId: id, message, ok, at, reason }))
    const deliver = (
      beginTime: number,
      endTime: number | undefined,
      complete: boolean,
      got: number,
    ): void => {
      const deliveryId = net._delivery()
      net._schedule(beginTime, () =>
        this.#fireDelivery({ phase: 'begin', deliveryId, ticketId: id, message, at: beginTime }),
      )
      if (endTime !== undefined) {
        net._schedule(endTime, () =>
          this.#fireDelivery({
            phase: 'end',
            deliveryId,
            ticketId: id,
            message,
            at: endTime,
            complete,
            units: got,
          }),
        )
      }
    }
    const deadline = now + this.#timeout
    if (endAt > deadline) {
      this.#stats.timedOut++
      if (beginAt <= deadline) deliver(beginAt, undefined, false, 0)
      status(deadline, false, 'timeout')
      return { id, bytes, submittedAt: now }
    }
    const faults = this.#loss + this.#partial + this.#hang
    const u = faults > 0 ? rnd!() : 1
    if (u < this.#loss) {
      this.#stats.lost++
      status(deadline, false, 'lost')
    } else if (u < this.#loss + this.#partial) {
      this.#stats.partial++
      const got = Math.min(units - 1, Math.floor(rnd!() * units))
      deliver(beginAt, endAt, false, Math.max(0, got))
      status(endAt, false, 'partial')
    } else if (u < faults) {
      this.#stats.hung++
      deliver(beginAt, undefined, false, 0)
      status(deadline, false, 'timeout')
    } else {
      this.#stats.delivered++
      deliver(beginAt, endAt, true, units)
      status(endAt, true, 'delivered')
      if (this.#dup > 0 && rnd!() < this.#dup) {
        this.#stats.duplicated++
        const d = rnd!() * (this.#jitter + this.#latency + ser + 1)
        deliver(beginAt + d, endAt + d, true, units)
      }
    }
    return { id, bytes, submittedAt: now }
  }

  /**
   * Register the receiver and sender callbacks.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().link<string>({ bytesPerSecond: 1e9 }).connect({ deliver: () => {} })
   * ```
   */
  connect(handlers: TransportHandlers<M>): void {
    if (handlers === null || typeof handlers !== 'object' || typeof handlers.deliver !== 'function') {
      throw invalidOption('handlers must have a deliver function', handlers)
    }
    if (handlers.status !== undefined && typeof handlers.status !== 'function') {
      throw invalidOption('handlers.status must be a function', handlers.status)
    }
    this.#handlers = handlers
  }

  /**
   * Bytes submitted and not yet serialised at the network's current time: the part of the link's
   * future capacity already spoken for (what a planner subtracts from its budget).
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().link({ bytesPerSecond: 1e9 }).backlogBytes() // 0
   * ```
   */
  backlogBytes(): number {
    return Math.max(0, ((this.#freeAt - this.#net.now()) * this.#bps) / 1000)
  }

  /**
   * When the link finishes serialising what it was given (ms).
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * const link = new InMemoryNetwork().link({ bytesPerSecond: 1000 })
   * link.send('x', 500)
   * link.busyUntil() // 500
   * ```
   */
  busyUntil(): number {
    return Math.max(this.#freeAt, this.#net.now())
  }

  /**
   * Counters since creation.
   *
   * @example
   * ```ts
   * import { InMemoryNetwork } from '@kvc/dto-p-sync'
   * new InMemoryNetwork().link({ bytesPerSecond: 1e9 }).stats().sent // 0
   * ```
   */
  stats(): LinkStats {
    return { ...this.#stats }
  }

  #fireDelivery(d: Delivery<M>): void {
    const h = this.#handlers
    if (h === undefined) this.#stats.undeliverable++
    else h.deliver(d)
  }

  #fireStatus(st: TransferStatus<M>): void {
    const h = this.#handlers
    if (h === undefined) this.#stats.undeliverable++
    else if (h.status !== undefined) h.status(st)
  }
}
