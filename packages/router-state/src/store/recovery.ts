import type { BackendSnapshot, FlagOp, StateBackend } from './backend.js'
import { type LocalView, toBinding, withoutRevision } from './localView.js'

// Outage recovery: after an outage (or at start) a replica reads the server's whole state and
// reconciles its local view with it. The server's bindings win over the replica's settled ones;
// its pending writes are kept for the flusher to settle against the server's versions; a server
// that came back empty gets the replica's view republished.

// Longest and shortest wait between reconcile attempts while degraded.
const RETRY_MAX_MS = 2_000
const RETRY_MIN_MS = 50

/** The next retry delay after a failure (doubling, from 50 ms up to 2 s). @internal */
export function nextRetryMs(retryMs: number): number {
  return Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, retryMs * 2))
}

/**
 * Read the server's state, giving up after `max(2 s, 10 op timeouts)`: a snapshot interrupted by
 * another outage may never end (the caller retries).
 * @internal
 */
export async function readSnapshot(backend: StateBackend, opTimeoutMs: number): Promise<BackendSnapshot> {
  let timer: NodeJS.Timeout | undefined
  return Promise.race([
    backend.snapshot(),
    new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error('reading the server state timed out')),
        Math.max(2_000, 10 * opTimeoutMs),
      )
    }),
  ]).finally(() => clearTimeout(timer))
}

/** When and how a snapshot is applied. @internal */
export interface ReconcileClock {
  /** When the snapshot was asked for (local entries taken before it and absent from it are gone). */
  readonly started: number
  /** When it arrived. */
  readonly now: number
  /** Idle TTL of bindings. */
  readonly ttl: number
  /** The server lost its state after this replica had reconciled once: republish the view. */
  readonly republish: boolean
}

/**
 * Reconcile the local view with a server snapshot: take the server's bindings and flags (or,
 * when it lost its state, mark the live local ones for writing again), take its seed slots and
 * mark for writing the replica's own slot counts that differ, and give every peer a fresh
 * liveness grace (the replica could not hear them meanwhile).
 * @internal
 */
export function applySnapshot(view: LocalView, snap: BackendSnapshot, c: ReconcileClock): void {
  const { now, started, ttl } = c
  if (c.republish) {
    for (const [s, e] of view.bindings) {
      if (e.exp <= now && !e.dirty) continue
      e.b = withoutRevision(e.b)
      e.dirty = true
      view.dirtyBindings.add(s)
    }
    for (const [s, f] of view.flags) {
      if (view.flagOps.has(s)) continue
      const ops: FlagOp[] = []
      for (const [d, n] of f.rejects) for (let i = 0; i < n; i++) ops.push({ t: 'reject', d })
      for (const d of f.excluded) ops.push({ t: 'exclude', d })
      if (ops.length > 0) view.flagOps.set(s, ops)
    }
  } else {
    for (const [s, v] of snap.bindings) {
      // A pending local write is settled by the flusher, against the server's version; an
      // update that arrived while the snapshot was read is newer than the snapshot.
      const e = view.bindings.get(s)
      if (e?.dirty || (e?.b.revision !== undefined && e.b.revision >= v.revision)) continue
      view.bindings.set(s, {
        b: toBinding(v.value, v.revision),
        exp: now + ttl,
        at: now,
        dirty: false,
      })
    }
    for (const [s, e] of view.bindings) {
      if (!e.dirty && e.at < started && !snap.bindings.has(s)) view.bindings.delete(s)
    }
    for (const s of [...view.flags.keys()]) {
      if (!view.flagOps.has(s) && !snap.flags.has(s)) view.flags.delete(s)
    }
    for (const [s, v] of snap.flags) if (!view.flagOps.has(s)) view.setFlags(s, v)
  }
  for (const [d, entries] of snap.seeds) view.seeds.set(d, entries)
  for (const [d, o] of view.own) {
    const onServer = view.seeds.get(d)?.[view.replicaId] ?? 0
    if (onServer !== o.pendingSeeds || snap.lost) view.dirtySeeds.add(d)
  }
  for (const p of view.peers.values()) p.seen = now // we could not hear them: a fresh grace
}
