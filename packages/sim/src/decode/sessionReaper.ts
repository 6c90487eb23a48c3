import type { SimContext, SimHost } from '../cluster/context.js'
import { EV_REAP } from '../cluster/events.js'
import type { ReaperConfig } from '../config/runConfig.js'

/**
 * `EV_REAP` (`release=reaper`): every D releases the sessions idle for the TTL, then retries what
 * waits; the next sweep follows after the reaper's interval while turns remain.
 */
export function reapIdleSessions(ctx: SimContext, host: SimHost, reaper: ReaperConfig): void {
  for (const w of ctx.decodeWorkers) {
    if (!w.alive || w.retention !== 'sessions' || w.cache === undefined) continue
    const { released } = w.cache.evictIdleSessions({ idleMs: reaper.idleMs })
    if (released.length === 0) continue
    ctx.counters.sessionsReaped += released.length
    ctx.touch(w)
    host.kick(w)
  }
  if (ctx.unfinished()) ctx.q.push(ctx.now + reaper.intervalMs, EV_REAP, 0, 0)
}
