import type { RunResult } from '../metrics/runResult.js'

/**
 * What a run's host tier bought, from its records and counters: the prefills that loaded part
 * of their prompt back and the tokens they loaded, and what the sessions' later turns computed
 * again of their own history (`reprefilledTokens`: per turn after the first, the tokens it
 * prefilled, on its D or on a P, beyond the tokens new since the previous turn), plus the
 * reseeds (later turns seeded through a P).
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
  readonly reseeds: number
}

/** {@link HostTierFigures} of one run. */
export function hostTierFigures(r: RunResult): HostTierFigures {
  let reprefilled = 0
  let reseeds = 0
  for (const x of r.records) {
    if (x.turnIndex === 0 || x.session < 0) continue
    reprefilled += Math.max(0, x.computedTokens - x.appendTokens)
    if (x.path === 'seed') reseeds++
  }
  return {
    loadBacks: r.counters.loadBacks,
    loadedBackTokens: r.counters.loadedBackTokens,
    reprefilledTokens: reprefilled,
    reseeds,
  }
}
