import { type RadixCache, RadixCacheError } from '@kvc/radix-cache'
import type { RequestState, Slot } from './state.js'
import type { KvPool, PoolAccounting, SessionStatus } from './types.js'

// Where a session's KV lives and who holds which pool slots: a session's device and host-only
// tokens, its status snapshot, its demotion to the host tier, and the pool accounting identity.
// `legacy` is the session mode (`granularity: 'session'`), whose slots park a row outside the tree.

/** `n` rounded up to a page. @internal */
export function ceilPage(n: number, pageSize: number): number {
  return Math.ceil(n / pageSize) * pageSize
}

/** Pool slots a session-mode slot holds outside the tree (its parked tail; 0 in block mode). @internal */
export function heldBySlot(s: Slot, legacy: boolean, pageSize: number): number {
  if (!legacy || s.row === undefined || s.activeRid !== undefined) return 0
  return ceilPage(s.allocatedLen, pageSize) - s.protectedLen
}

/** Device and host-only tokens the session retains. @internal */
export function slotResidency(cache: RadixCache, s: Slot, legacy: boolean): { device: number; host: number } {
  if (legacy) return { device: s.row === undefined ? 0 : s.committed.length, host: 0 }
  if (s.lastNode === undefined) return { device: 0, host: 0 }
  if (!s.pinned) return { device: cache.tokensUnder(s.lastNode), host: 0 }
  const r = cache.residencyOf(s.lastNode)
  return { device: r.deviceTokens, host: r.hostTokens }
}

/** The caller's snapshot of a session. @internal */
export function slotStatus(cache: RadixCache, s: Slot, legacy: boolean, pageSize: number): SessionStatus {
  const { device: residentTokens, host } = slotResidency(cache, s, legacy)
  return {
    sessionId: s.sessionId,
    resident: residentTokens > 0,
    residentTokens,
    hostResidentTokens: host,
    retainedTokens: residentTokens + host,
    demoted: s.pinned,
    committedTokens: s.committed.length,
    heldTokens: heldBySlot(s, legacy, pageSize),
    lastAccessTime: s.lastAccessTime,
    active: s.activeRid !== undefined,
    turns: s.turns,
  }
}

/**
 * Demote an idle block-mode session: keep its path on the host (`protectHost`, copying what has
 * no host copy yet), then drop its device lock, so the tree may move its pages off the device
 * without losing them. `false` (nothing changed) when the host cannot hold the path.
 * @internal
 */
export function demoteSlot(cache: RadixCache, v: Slot): boolean {
  try {
    cache.protectHost(v.lastNode!)
  } catch (e) {
    if (e instanceof RadixCacheError && e.code === 'HOST_OUT_OF_MEMORY') return false
    throw e
  }
  cache.decLockRef(v.lastNode!)
  v.pinned = true
  return true
}

/**
 * The pool accounting identity `free + evictable + protected + requestOwned + sessionHeld ==
 * poolSize`, and the host tier's `free + used == capacity`, with their terms.
 * @internal
 */
export function poolAccounting(
  pool: KvPool,
  cache: RadixCache,
  requests: Iterable<RequestState>,
  slots: Iterable<Slot>,
  legacy: boolean,
): PoolAccounting {
  const ps = pool.pageSize
  let requestOwned = 0
  for (const r of requests) requestOwned += ceilPage(r.kvAllocatedLen, ps) - r.cacheProtectedLen
  let sessionHeld = 0
  for (const s of slots) sessionHeld += heldBySlot(s, legacy, ps)
  const free = pool.availableSize()
  const evictable = cache.evictableSize()
  const prot = cache.protectedSize()
  const poolSize = pool.size
  const hostCapacity = cache.hostCapacity()
  const hostFree = cache.hostAvailableSize()
  const hostUsed = cache.hostSize()
  return {
    poolSize,
    free,
    evictable,
    protected: prot,
    requestOwned,
    sessionHeld,
    hostCapacity,
    hostFree,
    hostUsed,
    balanced:
      free + evictable + prot + requestOwned + sessionHeld === poolSize &&
      hostFree + hostUsed === hostCapacity,
  }
}
