import { describe, expect, it } from 'vitest'
import { computeRunMetrics, generateAgenticWorkload, type RunResult, runSimulation } from '../src/index.js'

/**
 * The research prototype's own setting (docs/design/prototype.md#setup): 52 sessions of the
 * built-in agentic workload, time compressed 10×, at most 32 sessions at once, kvc on 2P6D against
 * DP cache-aware on 8×DP (a `direct` policy runs on P + D colocated workers). The README's
 * "Adaptive routing against data-parallel" section measures it with paired intervals; here each
 * workload seed must hold on its own.
 *
 * This is the full setting, not a scaled-down one: about 4–6 CPU seconds a run, 10 per seed. Fewer
 * turns (sessions capped at 30 turns), fewer sessions (32, all at once) or half the cluster (1P3D,
 * 16 at once) were tried first; none keeps the KV pressure on the D workers that makes plain `kvc`
 * lose here (each of them passes or fails these checks for other reasons), so they would not test
 * what this file is about.
 */
const SEEDS = [1, 2, 3] as const
/** The configuration the README recommends against data-parallel (docs/guides/choosing-a-routing-policy.md). */
const KVC = 'kvc:pathChoice=adaptive:retract=on'
const DP = 'dp-cache-aware:defaults=rust'
/** Generous: the suite runs on a busy two-core machine; nothing here measures wall time. */
const LONG = 600_000

/**
 * Margins of "not worse" on one seed (the README's claim is on paired intervals over three seeds;
 * a single seed is noisier): the mean within 5% of DP's, the p99 within 10%, goodput at least DP's.
 * Measured (seeds 1–3): mean 64 / 59 / 59 ms against DP's 68 / 75 / 72 ms; p99 0.65 / 0.39 / 0.41 s
 * against 0.70 / 1.02 / 1.07 s; goodput 91.7 / 97.6 / 93.4% against 89.1 / 89.4 / 90.4%. Plain
 * `kvc` (remote seeds only) fails the mean on every seed: 131 / 144 / 105 ms.
 */
const MEAN_MARGIN = 1.05
const P99_MARGIN = 1.1

function run(policy: string, seed: number): RunResult {
  return runSimulation({
    workload: generateAgenticWorkload({ seed, sessions: 52 }),
    topology: { kind: 'pd', prefill: 2, decode: 6 },
    policy,
    seed,
    timeScale: 10,
    maxConcurrentSessions: 32,
  })
}

/** Whether `policy` is no worse than DP cache-aware on one seed, with the figures for a failure message. */
function againstDp(policy: string, seed: number) {
  const dpRun = run(DP, seed)
  const kvcRun = run(policy, seed)
  const dp = computeRunMetrics(dpRun, 98_304)
  const kvc = computeRunMetrics(kvcRun, 98_304)
  return { dpRun, kvcRun, dp, kvc }
}

describe("the prototype's setting (52 sessions, time scale 10, 32 at once): kvc is not worse than DP cache-aware", () => {
  it.each(SEEDS)(
    `seed %i: ${KVC} on 2P6D ties or beats dp-cache-aware on 8×DP (TTFT mean, p99, goodput)`,
    { timeout: LONG },
    (seed) => {
      const { dpRun, kvcRun, dp, kvc } = againstDp(KVC, seed)
      // The same turns on both sides, every one served, every token accounted for.
      expect(kvc.turns).toBe(dp.turns)
      for (const r of [dpRun, kvcRun]) {
        expect(r.accounting.failed).toBe(0)
        expect(r.accounting.balanced).toBe(true)
        expect(r.accounting.poolsBalanced).toBe(true)
      }
      const figures = `kvc mean ${kvc.ttft.mean} p99 ${kvc.ttft.p99} goodput ${kvc.goodput}; dp mean ${dp.ttft.mean} p99 ${dp.ttft.p99} goodput ${dp.goodput}`
      expect(kvc.ttft.mean, figures).toBeLessThanOrEqual(dp.ttft.mean * MEAN_MARGIN)
      expect(kvc.ttft.p99, figures).toBeLessThanOrEqual(dp.ttft.p99 * P99_MARGIN)
      expect(kvc.goodput, figures).toBeGreaterThanOrEqual(dp.goodput)
      // It wins with the D workers doing most of the work: almost every turn is a fast-path append.
      expect(kvc.fastPathRate).toBeGreaterThan(0.9)
    },
  )
})
