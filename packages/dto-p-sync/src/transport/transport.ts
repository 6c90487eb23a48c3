/**
 * A submitted transfer.
 *
 * @example
 * ```ts
 * import type { TransferTicket } from '@kvc/dto-p-sync'
 * const show = (t: TransferTicket) => `#${t.id}: ${t.bytes} B at ${t.submittedAt} ms`
 * ```
 */
export interface TransferTicket {
  readonly id: number
  readonly bytes: number
  readonly submittedAt: number
}

/**
 * What the receiving side sees. A transfer **begins** when its first bytes land (P allocates
 * target slots then) and **ends** when its last bytes land, whole (`complete`) or broken off
 * after `units` units (blocks, for sync messages). A transfer that hangs begins and never ends; a
 * lost one neither begins nor ends. A network duplicate is a second begin/end pair with another
 * `deliveryId` for the same ticket.
 *
 * @example
 * ```ts
 * import type { Delivery } from '@kvc/dto-p-sync'
 * const onDeliver = (d: Delivery<string>) => {
 *   if (d.phase === 'end' && !d.complete) console.log(`broke off after ${d.units} units`)
 * }
 * ```
 */
export type Delivery<M> =
  | {
      readonly phase: 'begin'
      readonly deliveryId: number
      readonly ticketId: number
      readonly message: M
      readonly at: number
    }
  | {
      readonly phase: 'end'
      readonly deliveryId: number
      readonly ticketId: number
      readonly message: M
      readonly at: number
      /** The whole message arrived. */
      readonly complete: boolean
      /** Units that arrived intact (all of them when `complete`). */
      readonly units: number
    }

/**
 * What the sending side learns about a transfer, as from Mooncake's `getTransferStatus`: success
 * when it ended whole, failure when it broke off, or after the timeout when it was lost or hung.
 *
 * @example
 * ```ts
 * import type { TransferStatus } from '@kvc/dto-p-sync'
 * const failed = (s: TransferStatus<unknown>) => !s.ok
 * ```
 */
export interface TransferStatus<M> {
  readonly ticketId: number
  readonly message: M
  readonly ok: boolean
  readonly at: number
  readonly reason: 'delivered' | 'partial' | 'lost' | 'timeout'
}

/**
 * Receiver and sender callbacks of a {@link Transport}.
 *
 * @example
 * ```ts
 * import type { TransportHandlers } from '@kvc/dto-p-sync'
 * const handlers: TransportHandlers<string> = { deliver: (d) => console.log(d.phase, d.message) }
 * ```
 */
export interface TransportHandlers<M> {
  deliver(delivery: Delivery<M>): void
  status?(status: TransferStatus<M>): void
}

/**
 * A one-way message transport (one direction of a D↔P link), modelled on Mooncake's transfer
 * engine: batches are submitted, progress comes back as statuses, the receiver sees data land.
 * {@link InMemoryLink} implements it for tests and simulators; `@kvc/worker-bindings` provides
 * the network adapter.
 *
 * @example
 * ```ts
 * import { InMemoryNetwork, type Transport } from '@kvc/dto-p-sync'
 * const t: Transport<string> = new InMemoryNetwork().link({ bytesPerSecond: 1e9 })
 * t.connect({ deliver: (d) => console.log(d.phase, d.message) })
 * t.send('hello', 5)
 * ```
 */
export interface Transport<M> {
  /** Submit a message of `bytes` bytes. Never throws for network reasons: failures come back as statuses. */
  send(message: M, bytes: number): TransferTicket
  /** Register the callbacks (replacing earlier ones). */
  connect(handlers: TransportHandlers<M>): void
  /** Bytes submitted and not yet serialised onto the wire (capacity already spoken for). */
  backlogBytes(): number
}
