import { RouterError } from '@kvc/kvc-router'
import type { KvEvent } from '@kvc/radix-cache'
import type { Prng } from '../engine/prng.js'
import type { SimWorker } from '../cluster/worker.js'
import { type FaultSpec, defaultFaultDuration } from './faults.js'

/** A fault in force over `[fromMs, toMs)`, for `target` (undefined: every target). */
export interface FaultWindow {
  readonly kind: FaultSpec['kind']
  readonly target: string | undefined
  readonly fromMs: number
  readonly toMs: number
}

/**
 * Which faults hold at the current simulated time: the windows of the timed faults in force, and
 * the per-opportunity draws of the probabilistic ones (all from the run's `faults` random stream).
 */
export class ActiveFaults {
  readonly specs: readonly FaultSpec[]
  readonly rng: Prng
  readonly windows: FaultWindow[] = []
  readonly #clock: { readonly now: number }

  /** `clock.now`: the simulated time, ms. */
  constructor(specs: readonly FaultSpec[], rng: Prng, clock: { readonly now: number }) {
    this.specs = specs
    this.rng = rng
    this.#clock = clock
  }

  /** A window of `kind` for `target` (or for every target) is open now. */
  inWindow(kind: FaultSpec['kind'], target: string | undefined): boolean {
    const now = this.#clock.now
    for (const w of this.windows) {
      if (w.kind !== kind || now < w.fromMs || now >= w.toMs) continue
      if (w.target === undefined || target === undefined || w.target === target) return true
    }
    return false
  }

  /** The largest probability given for `kind` (0: none). */
  probability(kind: FaultSpec['kind']): number {
    let p = 0
    for (const f of this.specs)
      if (f.kind === kind && f.probability !== undefined) p = Math.max(p, f.probability)
    return p
  }

  /** How long a probabilistic fault of `kind` lasts, ms. */
  durationOf(kind: FaultSpec['kind']): number {
    for (const f of this.specs)
      if (f.kind === kind && f.probability !== undefined && f.forS !== undefined) return f.forS * 1000
    return (kind === 'router-pause' ? 0.2 : defaultFaultDuration(kind)) * 1000
  }

  /** One opportunity for a probabilistic fault of `kind`: true when it strikes (no draw at probability 0). */
  strikes(kind: FaultSpec['kind']): boolean {
    const p = this.probability(kind)
    return p > 0 && this.rng.next() < p
  }

  /** An admission RPC to `d` sent now times out. */
  admitTimesOut(d: SimWorker): boolean {
    if (this.inWindow('admit-timeout', d.id)) return true
    return this.strikes('admit-timeout')
  }

  /** A KV event `w` publishes now is lost. */
  lostEvent(w: SimWorker): boolean {
    if (this.inWindow('lost-kv-events', w.id)) return true
    return this.strikes('lost-kv-events')
  }

  #corruptions = 0

  /**
   * Delivers KV event `e` of `w` through `ingest`, corrupted when a `corrupt-kv-events` fault
   * strikes: in turn a hash past 64 bits, a parent the worker does not hold, an id already used.
   * Returns false when the receiver refused it (a typed `RouterError`: the event is lost to it,
   * and the id it leaves unused flags the worker's gap); any other error is a simulator bug and
   * propagates.
   */
  deliverKvEvent(w: SimWorker, e: KvEvent, ingest: (e: KvEvent) => void): boolean {
    if (!this.inWindow('corrupt-kv-events', w.id) && !this.strikes('corrupt-kv-events')) {
      ingest(e)
      return true
    }
    const variant = this.#corruptions++ % 3
    const bad: KvEvent =
      variant === 0 && e.type !== 'AllBlocksCleared'
        ? { ...e, blockHashes: [...e.blockHashes.slice(0, -1), 2n ** 64n + BigInt(e.eventId)] }
        : variant === 1 && e.type === 'BlockStored'
          ? { ...e, parentBlockHash: 0x7fff_ffff_0000_0000n + BigInt(e.eventId) }
          : { ...e, eventId: Math.max(0, e.eventId - 1) }
    try {
      ingest(bad)
      return true
    } catch (err) {
      if (err instanceof RouterError) return false
      throw err
    }
  }

  /** A KV transfer to `d` ending now delivered only part of its pages. */
  partialTransfer(d: SimWorker): boolean {
    if (this.inWindow('partial-transfer', d.id)) return true
    return this.strikes('partial-transfer')
  }
}
