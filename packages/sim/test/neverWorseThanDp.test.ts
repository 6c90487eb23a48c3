import { describe, expect, it } from 'vitest'
import {
  computeRunMetrics,
  generateAgenticWorkload,
  loadLmcacheTrace,
  type RunResult,
  runSimulation,
} from '../src/index.js'
import { tracePath } from './helpers.js'

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
/**
 * The adaptive path choice, hot-session retraction where another D has room, and pause or evict
 * by cost: asks the D first.
 */
const ASK_FIRST = 'kvc:pathChoice=adaptive:retract=room:pauseChoice=cost'
/**
 * The configuration the README recommends against data-parallel
 * (docs/guides/choosing-a-routing-policy.md): the same with admission on arrival.
 */
const KVC = `${ASK_FIRST}:admitOnArrival=true`
const DP = 'dp-cache-aware:defaults=rust'
/** Generous: the suite runs on a busy two-core machine; nothing here measures wall time. */
const LONG = 600_000

/**
 * Margins of "not worse" on one seed (the README's claim is on paired intervals over three seeds;
 * one seed is noisier): the mean within 5% of DP's, the p99 within 10%, goodput at most 1 point
 * below DP's. Measured, 52 sessions, seeds 1–3: mean 53.3 / 51.9 / 59.4 ms against DP's 67.6 /
 * 75.3 / 71.8 ms; p99 0.33 / 0.27 / 0.54 s against 0.71 / 1.04 / 1.07 s; goodput 89.7 / 97.6 /
 * 90.5% against 89.1 / 89.4 / 90.4% (pooled: +2.9 points [+2.0, +3.6]). With `--shared-prefix
 * 1024`, seed 1: 48.4 ms, 0.21 s, 99.5% against 68.0 ms, 1.31 s, 97.9%. With `retract=on` (the
 * D retracts without asking where the session goes), the recommendation before: 62.6 / 55.1 /
 * 61.4 ms, 0.47 / 0.27 / 0.52 s, 89.5 / 97.6 / 90.7%; that, asking the D first: 57 / 63 / 56
 * ms, goodput 0.3 points below DP's on seed 3. Plain `kvc` (remote
 * seeds, waits out pauses) fails the mean on every seed: 131 / 144 / 105 ms.
 */
const MEAN_MARGIN = 1.05
const P99_MARGIN = 1.1
const GOODPUT_MARGIN = 0.01

function run(policy: string, seed: number, sharedPrefixTokens?: number): RunResult {
  return runSimulation({
    workload: generateAgenticWorkload({
      seed,
      sessions: 52,
      ...(sharedPrefixTokens === undefined ? {} : { sharedPrefixTokens }),
    }),
    topology: { kind: 'pd', prefill: 2, decode: 6 },
    policy,
    seed,
    timeScale: 10,
    maxConcurrentSessions: 32,
  })
}

/** `KVC` against DP cache-aware on one seed: the same turns, none failed, every token accounted for, and the margins. */
function expectNotWorse(seed: number, sharedPrefixTokens?: number): void {
  const dpRun = run(DP, seed, sharedPrefixTokens)
  const kvcRun = run(KVC, seed, sharedPrefixTokens)
  const dp = computeRunMetrics(dpRun, 98_304)
  const kvc = computeRunMetrics(kvcRun, 98_304)
  expect(kvc.turns).toBe(dp.turns)
  for (const r of [dpRun, kvcRun]) {
    expect(r.accounting.failed).toBe(0)
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
  }
  const figures = `kvc mean ${kvc.ttft.mean} p99 ${kvc.ttft.p99} goodput ${kvc.goodput}; dp mean ${dp.ttft.mean} p99 ${dp.ttft.p99} goodput ${dp.goodput}`
  expect(kvc.ttft.mean, figures).toBeLessThanOrEqual(dp.ttft.mean * MEAN_MARGIN)
  expect(kvc.ttft.p99, figures).toBeLessThanOrEqual(dp.ttft.p99 * P99_MARGIN)
  expect(kvc.goodput, figures).toBeGreaterThanOrEqual(dp.goodput - GOODPUT_MARGIN)
  // It wins with the D workers doing most of the work: almost every turn is a fast-path append.
  expect(kvc.fastPathRate).toBeGreaterThan(0.9)
}

describe("the prototype's setting (52 sessions, time scale 10, 32 at once): kvc is not worse than DP cache-aware", () => {
  it.each(SEEDS)(
    `seed %i: ${KVC} on 2P6D ties or beats dp-cache-aware on 8×DP (TTFT mean, p99, goodput)`,
    { timeout: LONG },
    (seed) => expectNotWorse(seed),
  )

  // Where the adaptive router lost the mean before pause or evict (the README's decomposition is
  // of seed 1); one seed keeps the suite affordable, the README has all three.
  it('with --shared-prefix 1024, seed 1: the same', { timeout: LONG }, () => expectNotWorse(1, 1024))
})

/**
 * The LMCache agent trace (its three agents, 69 sessions, 1,566 calls), same setting: almost every
 * turn is a fast-path append and no D pauses, so what separates the two is the admission round
 * trip, which DP does not make. Asking the D before sending, the adaptive router lost the mean by
 * about 1 ms (44.7 against 43.7 ms; +1.1 ms [+0.6, +1.5] over seeds 1–3); with admission on
 * arrival the round trip goes and it wins (42.5 ms; −1.2 ms [−1.6, −0.9]). Here the mean may not
 * exceed DP's at all on any seed, goodput may lose at most one turn (one turn of 1,566 misses the
 * TPOT SLO: 23 output tokens behind a prefill), and the p99 keeps the margin above (it ties).
 */
describe('the LMCache agent trace (time scale 10, 32 at once): admission on arrival removes the round trip', () => {
  const dir = tracePath('lmcache-agent-trace')
  it.skipIf(dir === undefined).each(SEEDS)(
    `seed %i: ${KVC} ties or beats dp-cache-aware; asking first, the mean loses`,
    { timeout: LONG },
    (seed) => {
      const workload = loadLmcacheTrace(dir!)
      const one = (policy: string) => {
        const r = runSimulation({
          workload,
          topology: { kind: 'pd', prefill: 2, decode: 6 },
          policy,
          seed,
          timeScale: 10,
          maxConcurrentSessions: 32,
        })
        expect(r.accounting.failed).toBe(0)
        expect(r.accounting.balanced).toBe(true)
        return { r, m: computeRunMetrics(r, 98_304) }
      }
      const dp = one(DP).m
      const asked = one(ASK_FIRST).m
      const onArrival = one(KVC)
      const m = onArrival.m
      const figures = `on arrival mean ${m.ttft.mean} p99 ${m.ttft.p99} goodput ${m.goodput}; asking first mean ${asked.ttft.mean}; dp mean ${dp.ttft.mean} p99 ${dp.ttft.p99} goodput ${dp.goodput}`
      expect(m.ttft.mean, figures).toBeLessThanOrEqual(dp.ttft.mean)
      expect(asked.ttft.mean, figures).toBeGreaterThan(dp.ttft.mean)
      expect(m.ttft.p99, figures).toBeLessThanOrEqual(dp.ttft.p99 * P99_MARGIN)
      expect(m.goodput, figures).toBeGreaterThanOrEqual(dp.goodput - 1 / m.turns - 1e-12)
      // Most fast-path turns skipped the RPC: one attempt (the send) instead of two.
      const oneAttempt = onArrival.r.records.filter((x) => x.path === 'fast' && x.attempts === 1).length
      expect(oneAttempt / m.turns).toBeGreaterThan(0.9)
    },
  )
})

/**
 * Without compression (time scale 1, no session cap): the adaptive choice's local seeds hold back
 * the appends that arrive at their D while they prefill. Before the path choice priced that
 * head-of-line delay, plain `kvc` (remote seeds only) beat the recommended configuration here
 * (TTFT mean 74 against 80 ms over seeds 1–3, p99 0.95 against 1.22 s); with it the recommended
 * configuration is ahead: mean 77.3 / 66.1 / 63.9 ms against `kvc`'s 84.3 / 66.7 / 68.8 ms (paired
 * over the three seeds: −4.3 ms [−8.7, −0.7]). One seed is close (seed 2), so the check is on the
 * three seeds' turns pooled.
 */
describe('time scale 1: pricing the head-of-line delay of local seeds', () => {
  it(`${KVC} is not slower than plain kvc on the TTFT mean (seeds 1–3 pooled)`, { timeout: LONG }, () => {
    const total = { kvc: 0, rec: 0, turns: 0 }
    for (const seed of SEEDS) {
      const one = (policy: string) => {
        const r = runSimulation({
          workload: generateAgenticWorkload({ seed, sessions: 52 }),
          topology: { kind: 'pd', prefill: 2, decode: 6 },
          policy,
          seed,
        })
        expect(r.accounting.failed).toBe(0)
        expect(r.accounting.balanced).toBe(true)
        return computeRunMetrics(r, 98_304)
      }
      const plain = one('kvc')
      const rec = one(KVC)
      expect(rec.turns).toBe(plain.turns)
      total.kvc += plain.ttft.mean * plain.turns
      total.rec += rec.ttft.mean * rec.turns
      total.turns += rec.turns
    }
    const figures = `pooled TTFT mean: recommended ${total.rec / total.turns} s, kvc ${total.kvc / total.turns} s`
    expect(total.rec, figures).toBeLessThanOrEqual(total.kvc)
  })
})
