import type { RunResult } from '../metrics/runResult.js'

/**
 * Where a run's re-prefilled tokens come from, by how the turn was served (tokens a later turn
 * computed again of its own history, {@link HostTierFigures.reprefilledTokens}):
 * - `sameDecodeReseed`: seeded through a P onto the session's previous D;
 * - `migration`: seeded through a P onto another D (the session moved);
 * - `localSeed`: prefilled by a D that did not hold the prefix (the adaptive path choice);
 * - `fastPath`: served by the session's D, recomputing the part of its history it lost (evicted
 *   from the device and not loaded back: not on the host tier, or below the break-even).
 *
 * @example
 * ```ts
 * import type { ReprefillCauses } from '@kvc/sim'
 * const total = (c: ReprefillCauses) => c.sameDecodeReseed + c.migration + c.localSeed + c.fastPath
 * ```
 */
export interface ReprefillCauses {
  readonly sameDecodeReseed: number
  readonly migration: number
  readonly localSeed: number
  readonly fastPath: number
}

/**
 * What a run's host tier bought, from its records and counters: the prefills that loaded part
 * of their prompt back and the tokens they loaded, and what the sessions' later turns computed
 * again of their own history (`reprefilledTokens`: per turn after the first, the tokens it
 * prefilled, on its D or on a P, beyond the tokens new since the previous turn), by cause, plus
 * the reseeds (later turns seeded through a P) and how many of them moved the session.
 *
 * @example
 * ```ts
 * import { generateAgenticWorkload, hostTierFigures, runSimulation } from '@kvc/sim'
 * const r = runSimulation({
 *   workload: generateAgenticWorkload({ seed: 1, sessions: 4, maxTurnsPerSession: 6 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 2 },
 *   policy: 'kvc',
 *   seed: 1,
 *   hostTier: { ratio: 2 },
 * })
 * hostTierFigures(r).reprefilledTokens // 0 when nothing was ever evicted
 * ```
 */
export interface HostTierFigures {
  readonly loadBacks: number
  readonly loadedBackTokens: number
  readonly reprefilledTokens: number
  readonly reprefilledBy: ReprefillCauses
  readonly reseeds: number
  /** Reseeds onto another D than the session's previous turn's. */
  readonly migrations: number
  /** Peer fetch (`--host-tier …:peer`): seeds whose P read part of the prompt from the old D, and the tokens read. */
  readonly peerFetches: number
  readonly peerFetchedTokens: number
}

/** {@link HostTierFigures} of one run. */
export function hostTierFigures(r: RunResult): HostTierFigures {
  let reprefilled = 0
  let reseeds = 0
  let migrations = 0
  let same = 0
  let moved = 0
  let local = 0
  let fast = 0
  // The D of each session's last completed turn.
  const lastD = new Map<number, string>()
  const recs = [...r.records].sort((a, b) => a.session - b.session || a.turnIndex - b.turnIndex)
  for (const x of recs) {
    if (x.session < 0) continue
    const prev = lastD.get(x.session)
    if (x.status === 'completed' && x.workerId !== undefined) lastD.set(x.session, x.workerId)
    if (x.turnIndex === 0) continue
    const extra = Math.max(0, x.computedTokens - x.appendTokens)
    reprefilled += extra
    const movedNow = x.migrated || (prev !== undefined && x.workerId !== undefined && x.workerId !== prev)
    if (x.path === 'seed') {
      reseeds++
      if (movedNow) {
        migrations++
        moved += extra
      } else same += extra
    } else if (x.path === 'local') local += extra
    else fast += extra
  }
  return {
    loadBacks: r.counters.loadBacks,
    loadedBackTokens: r.counters.loadedBackTokens,
    reprefilledTokens: reprefilled,
    reprefilledBy: { sameDecodeReseed: same, migration: moved, localSeed: local, fastPath: fast },
    reseeds,
    migrations,
    peerFetches: r.counters.peerFetches,
    peerFetchedTokens: r.counters.peerFetchedTokens,
  }
}
