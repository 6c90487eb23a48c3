import { describe, expect, it } from 'vitest'
import {
  CI_METRICS,
  type CiMetric,
  type Estimate,
  type ExperimentResult,
  type PairedEstimate,
  SimError,
  type SweepPoint,
  experimentVerdict,
  runExperiment,
  runSweep,
  sweepCrossovers,
} from '../src/index.js'

const NAN_EST: Estimate = { value: Number.NaN, lo: Number.NaN, hi: Number.NaN }
const NAN_PAIR: PairedEstimate = { diff: Number.NaN, lo: Number.NaN, hi: Number.NaN, pBetter: 0, pWorse: 0 }

function estimates(values: Partial<Record<CiMetric, number>>): Record<CiMetric, Estimate> {
  const out = {} as Record<CiMetric, Estimate>
  for (const m of CI_METRICS) {
    const v = values[m]
    out[m] = v === undefined ? NAN_EST : { value: v, lo: v, hi: v }
  }
  return out
}

/** A paired difference with its interval: `[diff, lo, hi]`. */
type D = readonly [number, number, number]

function pairs(d: Partial<Record<CiMetric, D>>): Record<CiMetric, PairedEstimate> {
  const out = {} as Record<CiMetric, PairedEstimate>
  for (const m of CI_METRICS) {
    const x = d[m]
    out[m] = x === undefined ? NAN_PAIR : { diff: x[0], lo: x[1], hi: x[2], pBetter: 0, pWorse: 0 }
  }
  return out
}

const neg = (x: D): D => [-x[0], -x[2], -x[1]]

/** Sweep points of kvc against dp at the given time scales, from kvc − dp differences per metric. */
function points(scales: readonly number[], diffs: readonly Partial<Record<CiMetric, D>>[]): SweepPoint[] {
  return scales.map((v, i) => {
    const d = diffs[i]!
    const rev: Partial<Record<CiMetric, D>> = {}
    for (const [k, x] of Object.entries(d)) rev[k as CiMetric] = neg(x)
    return {
      value: v,
      label: `time scale ${v}`,
      x: v,
      turnsPerTrial: [100],
      policies: [
        { policy: 'kvc', topology: '2P6D', turns: 100, failed: 0, estimates: estimates({ goodput: 0.9 }) },
        { policy: 'dp', topology: '8xDP', turns: 100, failed: 0, estimates: estimates({ goodput: 0.9 }) },
      ],
      pairwise: [
        { policy: 'kvc', other: 'dp', metrics: pairs(d) },
        { policy: 'dp', other: 'kvc', metrics: pairs(rev) },
      ],
    }
  })
}

describe('sweep crossovers come from the paired intervals', () => {
  const scales = [1, 2, 4, 6, 8]
  const pts = points(scales, [
    { goodput: [0.03, 0.01, 0.05], ttft_p90: [-0.2, -0.3, -0.1], tpot_p90: [0.001, -0.001, 0.003] },
    { goodput: [0.02, 0.005, 0.04], ttft_p90: [-0.1, -0.2, -0.05], tpot_p90: [0.001, -0.001, 0.003] },
    { goodput: [0.01, -0.01, 0.03], ttft_p90: [0.05, -0.02, 0.1], tpot_p90: [0.001, -0.001, 0.003] },
    { goodput: [-0.04, -0.06, -0.02], ttft_p90: [0.3, 0.2, 0.4], tpot_p90: [0.001, -0.001, 0.003] },
    { goodput: [-0.06, -0.08, -0.03], ttft_p90: [0.9, 0.5, 1.2], tpot_p90: [0.001, -0.001, 0.003] },
  ])
  const xs = sweepCrossovers('time-scale', pts, 'kvc')
  const by = (m: string) => xs.find((x) => x.metric === m)!

  it('finds where the lead changes hands, with ties in between', () => {
    const g = by('goodput')
    expect(g.segments.map((s) => [s.from, s.to, s.leader])).toEqual([
      [0, 1, 'kvc'],
      [2, 2, undefined],
      [3, 4, 'dp'],
    ])
    expect(g.crossings).toEqual([{ after: 1, before: 3, from: 'kvc', to: 'dp' }])
    expect(g.text).toBe(
      'On goodput, kvc ≥ dp up to time scale 4 (kvc leads at time scale 1–2 by 2.0–3.0 pp; no significant ' +
        'difference at time scale 4); beyond it dp leads at time scale 6–8 by 4.0–6.0 pp.',
    )
  })

  it('reads lower as better for latencies', () => {
    const t = by('ttft_p90')
    expect(t.segments.map((s) => s.leader)).toEqual(['kvc', undefined, 'dp'])
    expect(t.crossings).toHaveLength(1)
    expect(t.text).toMatch(
      /^On TTFT p90, kvc ≥ dp up to time scale 4 \(kvc leads at time scale 1–2 by 100–200 ms/,
    )
    expect(t.text).toMatch(/beyond it dp leads at time scale 6–8 by 300–900 ms\.$/)
  })

  it('says so when an interval always includes zero', () => {
    expect(by('tpot_p90').crossings).toEqual([])
    expect(by('tpot_p90').text).toBe(
      'On TPOT p90, kvc and dp do not differ significantly anywhere in time scale 1–8.',
    )
  })

  it('a lead kept everywhere is no crossover', () => {
    const one = points([1, 2], [{ goodput: [0.1, 0.05, 0.15] }, { goodput: [0.2, 0.1, 0.3] }])
    const g = sweepCrossovers('time-scale', one, 'kvc').find((x) => x.metric === 'goodput')!
    expect(g.crossings).toEqual([])
    expect(g.text).toBe('On goodput, kvc leads dp across time scale 1–2, by 10.0–20.0 pp.')
  })
})

describe('runSweep', () => {
  it('runs every point on the same seeds, deterministically, and refuses a bad grid before running', async () => {
    const config = {
      workload: { kind: 'agentic' as const, options: { sessions: 3, maxTurnsPerSession: 4 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin'],
      seeds: [1, 2],
      bootstrapResamples: 20,
      axis: 'time-scale' as const,
      values: [1, 8],
    }
    const a = await runSweep(config)
    expect(a.points).toHaveLength(2)
    // Pairing across points: the same sessions at every time scale.
    expect(a.points[0]!.turnsPerTrial).toEqual(a.points[1]!.turnsPerTrial)
    expect(a.crossovers).toHaveLength(3)
    // A point equals the experiment run on its own.
    const alone = await runExperiment({ ...config, timeScale: 8 })
    expect(a.points[1]!.policies[1]!.estimates.goodput).toEqual(alone.policies[1]!.estimates.goodput)
    const b = await runSweep(config)
    expect(JSON.stringify(b)).toBe(JSON.stringify(a))
    await expect(runSweep({ ...config, values: [1] })).rejects.toThrow(SimError)
    await expect(runSweep({ ...config, axis: 'sessions', values: [2, 2.5] })).rejects.toThrow(
      /positive integer/,
    )
    await expect(runSweep({ ...config, axis: 'pd-ratio', values: ['1P2D', '2P2D'] })).rejects.toThrow(
      /same number of GPUs/,
    )
  })
})

describe('the verdict is generated from the numbers', () => {
  let base: ExperimentResult
  it('names the goodput leader, or says nobody wins when the paired interval includes zero', async () => {
    base = await runExperiment({
      workload: { kind: 'agentic', options: { sessions: 4, maxTurnsPerSession: 6 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin'],
      seeds: [1, 2, 3],
      bootstrapResamples: 30,
    })
    const withGoodput = (kvc: number, rr: number, d: D): ExperimentResult => ({
      ...base,
      policies: base.policies.map((p, i) => ({
        ...p,
        estimates: { ...p.estimates, goodput: { value: i === 0 ? kvc : rr, lo: 0, hi: 1 } },
      })),
      pairwise: base.pairwise.map((x) => ({
        ...x,
        metrics: {
          ...x.metrics,
          goodput: pairs({ goodput: x.policy === 'kvc' ? d : neg(d) }).goodput,
        },
      })),
    })
    const win = experimentVerdict(withGoodput(0.95, 0.8, [0.15, 0.1, 0.2]))
    expect(win.headline).toMatch(/^kvc serves this workload best: 95\.0% of its turns meet TTFT/)
    expect(win.headline).toMatch(
      /against 80\.0% for round-robin, the runner-up \(\+15\.0\u00a0pp \[10\.0, 20\.0\]/,
    )
    const lose = experimentVerdict(withGoodput(0.8, 0.95, [-0.15, -0.2, -0.1]))
    expect(lose.headline).toMatch(/^round-robin serves this workload best/)
    const tie = experimentVerdict(withGoodput(0.9, 0.89, [0.01, -0.02, 0.04]))
    expect(tie.headline).toMatch(/^No policy wins on goodput: kvc \(90\.0%\), round-robin \(89\.0%\)/)
    expect(tie.conditions).toMatch(/topology 1P2D \(3 GPUs\)/)
    expect(tie.conditions).toMatch(/3 seeds \(1, 2, 3\)/)
    expect(tie.details.at(-1)).toMatch(/one operating point: kvc-sim sweep/)
  })
})
