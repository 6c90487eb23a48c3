import type { SessionBinding } from '@kvc/kvc-router'
import type { BindingValue, FlagOp, FlagsValue } from './backend.js'

// What a replica holds of the cluster state between server round trips: its local view.

/** A binding in a replica's local view. @internal */
export interface LocalBinding {
  b: SessionBinding
  exp: number
  /** When the local view last took it from the server (for reconciles racing with updates). */
  at: number
  /** Written locally and not yet on the server (`b.revision` is the server version it replaces). */
  dirty: boolean
  /** The newest server version announced while the entry was dirty (applied once it is written). */
  seen?: { readonly value: BindingValue; readonly revision: number } | undefined
  /**
   * Decided on the last view while degraded (an unconfirmed claim, or a success written during an
   * outage): when it meets another binding on the server, the one for the later turn wins.
   */
  unconfirmed?: boolean
}

/** A session's rejects and exclusions in the local view. @internal */
export interface Flags {
  rejects: Map<string, number>
  excluded: Set<string>
  exp: number
}

/** A worker's load counters. @internal */
export interface MutableLoad {
  turns: number
  pendingSeeds: number
  prefillTokens: number
  decodeBlocks: number
}

/** Another replica as last heard: when, and its load per worker. @internal */
export interface Peer {
  seen: number
  loads: Map<string, readonly [number, number, number, number]>
}

/**
 * The parts of the local view that a reconcile with the server rewrites (the store's own maps).
 * @internal
 */
export interface LocalView {
  readonly replicaId: string
  readonly bindings: Map<string, LocalBinding>
  readonly flags: Map<string, Flags>
  readonly flagOps: Map<string, FlagOp[]>
  readonly own: Map<string, MutableLoad>
  readonly peers: Map<string, Peer>
  /** Per D: the seed slots per replica, as last read from the server. */
  readonly seeds: Map<string, Readonly<Record<string, number>>>
  readonly dirtyBindings: Set<string>
  readonly dirtySeeds: Set<string>
  /** Replace a session's flags by the server's value (or drop them). */
  readonly setFlags: (s: string, v: FlagsValue | undefined) => void
}

/** A server binding as a `SessionBinding` at `revision`. @internal */
export function toBinding(v: BindingValue, revision: number): SessionBinding {
  return { workerId: v.w, committedTokens: v.c, verifiedBlocks: v.v, updatedAt: v.u, revision }
}

/** The binding without its server revision (to be created anew). @internal */
export function withoutRevision(b: SessionBinding): SessionBinding {
  return {
    workerId: b.workerId,
    committedTokens: b.committedTokens,
    verifiedBlocks: b.verifiedBlocks,
    updatedAt: b.updatedAt,
  }
}
