import { DtoPSyncError, invalidOption } from '../errors/dtoPSyncError.js'
import { messageBytes, REPLY_BYTES } from '../protocol/bytes.js'
import type { SyncReply, TransferMessage } from '../protocol/types.js'
import { rejectedReply, type SyncSink } from '../sink/syncSink.js'
import type { SyncPlan } from '../planner/planSync.js'
import type { SyncSource } from '../source/syncSource.js'
import type { Transport } from '../transport/transport.js'

/**
 * What {@link wireSync} connects.
 *
 * @example
 * ```ts
 * import type { SyncWiringOptions } from '@kvc/dto-p-sync'
 * // wireSync({ source, sink, forward, backward } satisfies SyncWiringOptions)
 * ```
 */
export interface SyncWiringOptions {
  readonly source: SyncSource
  readonly sink: SyncSink
  /** D → P: transfer messages. */
  readonly forward: Transport<TransferMessage>
  /** P → D: replies. */
  readonly backward: Transport<SyncReply>
}

/**
 * Counters of a {@link SyncWiring}.
 *
 * @example
 * ```ts
 * import type { WiringStats } from '@kvc/dto-p-sync'
 * const broken = (s: WiringStats) => s.rejected + s.expired
 * ```
 */
export interface WiringStats {
  /** Replies sent back to D. */
  readonly repliesSent: number
  /** Messages P refused as malformed (answered `rejected`). */
  readonly rejected: number
  /** Transfer ends that found their reservation already expired or aborted. */
  readonly lateEnds: number
  /** Reservations of hung transfers freed by `sink.expire()`. */
  readonly expired: number
}

/**
 * A D→P sync connected over two transports, with the per-tick calls a driver makes.
 *
 * @example
 * ```ts
 * import type { SyncWiring } from '@kvc/dto-p-sync'
 * function tick(w: SyncWiring): void {
 *   w.expire()
 *   w.round(100)
 * }
 * ```
 */
export interface SyncWiring {
  /** Plan a round for the next `horizonMs` (minus the forward link's backlog) and send its messages. */
  round(horizonMs: number): SyncPlan
  /** `source.expire()` and `sink.expire()` at the current time. */
  expire(): void
  stats(): WiringStats
}

/**
 * Connect a {@link SyncSource} (D) and a {@link SyncSink} (P) over two transports:
 * - forward `begin` → `sink.begin` (KV slots reserved as the transfer starts landing); an
 *   immediate answer goes back at once;
 * - forward `end` → `sink.complete(id, units)`, or `sink.abort` when nothing usable arrived; the
 *   reply goes back on `backward`;
 * - forward failure statuses → `source.markFailed`;
 * - backward deliveries → `source.handleReply`.
 *
 * A malformed message (a {@link DtoPSyncError} from the sink) is answered `rejected` rather than
 * thrown into the transport. Hung transfers are freed by `sink.expire()` after its reservation
 * timeout.
 *
 * @example
 * ```ts
 * import { InMemoryNetwork, wireSync, type SyncReply, type TransferMessage } from '@kvc/dto-p-sync'
 * // given a SyncSource `source` and a SyncSink `sink`:
 * // const net = new InMemoryNetwork()
 * // const wiring = wireSync({
 * //   source, sink,
 * //   forward: net.link<TransferMessage>({ bytesPerSecond: 5e9, latencyMs: 0.02, units: (m) => m.blocks.length }),
 * //   backward: net.link<SyncReply>({ bytesPerSecond: 1e9, latencyMs: 0.02 }),
 * // })
 * // wiring.round(100); net.advanceBy(100); wiring.expire()
 * ```
 */
export function wireSync(options: SyncWiringOptions): SyncWiring {
  if (options === null || typeof options !== 'object')
    throw invalidOption('options must be an object', options)
  const { source, sink, forward, backward } = options
  for (const [name, t] of [
    ['forward', forward],
    ['backward', backward],
  ] as const) {
    if (
      t === null ||
      typeof t !== 'object' ||
      typeof t.send !== 'function' ||
      typeof t.connect !== 'function'
    ) {
      throw invalidOption(`${name} must be a Transport`, t)
    }
  }
  const reservations = new Map<number, number>()
  const stats = { repliesSent: 0, rejected: 0, lateEnds: 0, expired: 0 }
  const send = (r: SyncReply): void => {
    stats.repliesSent++
    backward.send(r, REPLY_BYTES)
  }
  forward.connect({
    deliver(d) {
      if (d.phase === 'begin') {
        let r: ReturnType<SyncSink['begin']>
        try {
          r = sink.begin(d.message)
        } catch (e) {
          if (!(e instanceof DtoPSyncError)) throw e
          stats.rejected++
          const rej = rejectedReply(d.message, e)
          if (rej !== undefined) send(rej)
          return
        }
        if (r.kind === 'reply') send(r.reply)
        else if (r.kind === 'reserved') reservations.set(d.deliveryId, r.reservation.id)
        return
      }
      const id = reservations.get(d.deliveryId)
      if (id === undefined) return
      reservations.delete(d.deliveryId)
      if (!sink.hasReservation(id)) {
        stats.lateEnds++
        return
      }
      send(sink.complete(id, d.complete ? undefined : d.units))
    },
    status(s) {
      if (!s.ok) source.markFailed(s.message.sessionId, s.message.seq)
    },
  })
  backward.connect({
    deliver(d) {
      if (d.phase === 'end' && d.complete) source.handleReply(d.message)
    },
  })
  const kvb = source.bandwidth.kvBytesPerToken
  return {
    round(horizonMs: number): SyncPlan {
      const { plan, messages } = source.plan(horizonMs, forward.backlogBytes())
      for (const m of messages) forward.send(m, messageBytes(m, kvb))
      return plan
    },
    expire(): void {
      source.expire()
      const before = sink.reservations().length
      sink.expire()
      stats.expired += before - sink.reservations().length
      for (const [k, id] of reservations) if (!sink.hasReservation(id)) reservations.delete(k)
    },
    stats(): WiringStats {
      return { ...stats }
    },
  }
}
