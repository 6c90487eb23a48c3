import { beforeAll, describe, expect, it } from 'vitest'
import {
  CI_METRICS,
  type CiMetric,
  type Estimate,
  type ExperimentConfig,
  type ExperimentResult,
  type PairedEstimate,
  SimError,
  type SweepAxis,
  type SweepPoint,
  experimentVerdict,
  runExperiment,
  runSweep,
  type SweepResult,
  sweepCrossovers,
  sweepVerdict,
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

  it('a lead with ties but no change of hands is no crossover', () => {
    const some = points(
      [1, 2, 3],
      [{ goodput: [0.1, 0.05, 0.15] }, { goodput: [0.01, -0.02, 0.04] }, { goodput: [0.2, 0.1, 0.3] }],
    )
    const g = sweepCrossovers('time-scale', some, 'kvc').find((x) => x.metric === 'goodput')!
    expect(g.segments.map((s) => s.leader)).toEqual(['kvc', undefined, 'kvc'])
    expect(g.crossings).toEqual([])
    expect(g.text).toBe(
      'On goodput, kvc ≥ dp across time scale 1–3: kvc leads at time scale 1 by 10.0 pp; no significant ' +
        'difference at time scale 2; kvc leads at time scale 3 by 20.0 pp.',
    )
  })

  it('counts every change of hands', () => {
    const flips = points(
      [1, 2, 3, 4],
      [
        { ttft_p90: [-0.2, -0.3, -0.1] },
        { ttft_p90: [0.5, 0.2, 0.8] },
        { ttft_p90: [0.1, -0.1, 0.3] },
        { ttft_p90: [-2, -3, -1] },
      ],
    )
    const t = sweepCrossovers('time-scale', flips, 'kvc').find((x) => x.metric === 'ttft_p90')!
    expect(t.crossings).toEqual([
      { after: 0, before: 1, from: 'kvc', to: 'dp' },
      { after: 1, before: 3, from: 'dp', to: 'kvc' },
    ])
    expect(t.text).toBe(
      'On TTFT p90, the lead between kvc and dp changes hands 2 times: kvc leads at time scale 1 by 200 ms; ' +
        'dp leads at time scale 2 by 500 ms; no significant difference at time scale 3; kvc leads at time ' +
        'scale 4 by 2.0 s.',
    )
  })

  it('names points in the units of their axis', () => {
    const caps = points(
      [100_000, 400_000],
      [{ goodput: [0.1, 0.05, 0.15] }, { goodput: [-0.1, -0.15, -0.05] }],
    )
    const g = sweepCrossovers('capacity', caps, 'kvc').find((x) => x.metric === 'goodput')!
    expect(g.text).toBe(
      'On goodput, kvc ≥ dp up to capacity 100K (kvc leads at capacity 100K by 10.0 pp); beyond it dp leads ' +
        'at capacity 400K by 10.0 pp.',
    )
    const conc = sweepCrossovers('max-concurrent-sessions', points([4, 8], [{}, {}]), 'kvc')
    expect(conc[0]!.text).toBe(
      'On goodput, kvc and dp do not differ significantly anywhere in 4–8 concurrent sessions.',
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

describe('every axis sets its own option at each point', () => {
  const base = {
    workload: { kind: 'agentic' as const, options: { sessions: 4, maxTurnsPerSession: 3 } },
    topology: '1P2D',
    policies: ['kvc', 'dp-cache-aware'],
    seeds: [1],
    bootstrapResamples: 10,
  }
  const cases: [SweepAxis, readonly (number | string)[], Partial<ExperimentConfig>, string[], number[]][] = [
    [
      'max-concurrent-sessions',
      [1, 4],
      { maxConcurrentSessions: 1 },
      ['1 concurrent sessions', '4 concurrent sessions'],
      [1, 4],
    ],
    [
      'sessions',
      [2, 4],
      { workload: { kind: 'agentic', options: { sessions: 2, maxTurnsPerSession: 3 } } },
      ['2 sessions', '4 sessions'],
      [2, 4],
    ],
    [
      'capacity',
      [12_000, 200_000],
      { costModel: { capacityTokens: 12_000 } },
      ['capacity 12K', 'capacity 200K'],
      [12_000, 200_000],
    ],
    ['pd-ratio', ['1P2D', '2P1D'], { topology: '1P2D' }, ['1P2D', '2P1D'], [1, 2]],
  ]
  for (const [axis, values, first, labels, xs] of cases) {
    it(`${axis}: the first point is the experiment run with that setting`, async () => {
      const r = await runSweep({ ...base, axis, values })
      expect(r.points.map((p) => p.label)).toEqual(labels)
      expect(r.points.map((p) => p.x)).toEqual(xs)
      const alone = await runExperiment({ ...base, ...first })
      for (const [i, p] of alone.policies.entries()) {
        expect(r.points[0]!.policies[i]!.estimates).toEqual(p.estimates)
        expect(r.points[0]!.policies[i]!.turns).toBe(p.turns)
      }
      // The axis changes what runs: the two points differ somewhere.
      expect(JSON.stringify(r.points[1]!.policies)).not.toBe(JSON.stringify(r.points[0]!.policies))
      if (axis === 'pd-ratio') {
        expect(r.points.map((p) => p.policies.map((q) => q.topology))).toEqual([
          ['1P2D', '3xDP'],
          ['2P1D', '3xDP'],
        ])
        expect(r.config.topology).toBe('1P2D, 2P1D')
      }
    })
  }
  it('the sessions axis refuses a trace workload', async () => {
    await expect(
      runSweep({ ...base, workload: { kind: 'trace', path: 'x.jsonl' }, axis: 'sessions', values: [2, 4] }),
    ).rejects.toThrow(/the sessions axis applies to the built-in workload only/)
  })
})

describe('the verdict is generated from the numbers', () => {
  let base: ExperimentResult
  beforeAll(async () => {
    base = await runExperiment({
      workload: { kind: 'agentic', options: { sessions: 4, maxTurnsPerSession: 6 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin'],
      seeds: [1, 2, 3],
      bootstrapResamples: 30,
    })
  })

  it('names the goodput leader, or says nobody wins when the paired interval includes zero', () => {
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

  /** `base` with TTFT p90 of kvc and round-robin set, and their paired difference kvc − rr. */
  const withTtft = (kvc: number, rr: number, d: D): ExperimentResult => ({
    ...base,
    policies: base.policies.map((p, i) => ({
      ...p,
      estimates: { ...p.estimates, ttft_p90: { value: i === 0 ? kvc : rr, lo: 0, hi: 1 } },
    })),
    pairwise: base.pairwise.map((x) => ({
      ...x,
      metrics: { ...x.metrics, ttft_p90: pairs({ ttft_p90: x.policy === 'kvc' ? d : neg(d) }).ttft_p90 },
    })),
  })

  it('says who is fastest at TTFT p90 only when the paired interval excludes zero', () => {
    const fast = experimentVerdict(withTtft(0.1, 0.5, [-0.4, -0.5, -0.3])).details[0]
    expect(fast).toMatch(
      /^On TTFT p90, kvc is fastest: 100\.0\u00a0ms against 500\.0\u00a0ms for round-robin \(-400\.0\u00a0ms \[-500\.0, -300\.0\]\)\.$/,
    )
    const slow = experimentVerdict(withTtft(3, 1.5, [1.5, 1, 2])).details[0]
    expect(slow).toMatch(/^On TTFT p90, round-robin is fastest: 1\.50\u00a0s against 3\.00\u00a0s for kvc/)
    const tie = experimentVerdict(withTtft(0.1, 0.11, [-0.01, -0.05, 0.03])).details[0]
    expect(tie).toBe(
      'On TTFT p90, kvc (100.0\u00a0ms) and round-robin (110.0\u00a0ms) do not differ significantly.',
    )
    const inf = Number.POSITIVE_INFINITY
    const failed = experimentVerdict(withTtft(inf, inf, [0, 0, 0])).details[0]
    expect(failed).toBe(
      'On TTFT p90, failed turns reach the percentile under every policy (more than 10% failed).',
    )
  })

  it('names each failing policy with its main cause, or says no turn failed', () => {
    const clean: ExperimentResult = {
      ...base,
      policies: base.policies.map((p) => ({ ...p, failed: 0, failedByCause: {} })),
    }
    expect(experimentVerdict(clean).details).toContain('No turn failed.')
    const some: ExperimentResult = {
      ...clean,
      policies: clean.policies.map((p, i) =>
        i === 1
          ? {
              ...p,
              failed: 3,
              failedByCause: { all_paused: 1, transfer_timeout: 2 },
              estimates: { ...p.estimates, error_rate: { value: 0.125, lo: 0.05, hi: 0.2 } },
            }
          : p,
      ),
    }
    expect(experimentVerdict(some).details).toContain(
      'Failed turns: round-robin 12.5% (mostly transfer_timeout); the others none.',
    )
  })

  it('a sweep verdict names the goodput leader at both ends and whether the lead changes hands', () => {
    // Point estimates consistent with the paired differences: kvc 95% vs 90% at 1, 90% vs 95% at 8.
    const pts = points([1, 8], [{ goodput: [0.05, 0.02, 0.08] }, { goodput: [-0.05, -0.08, -0.02] }]).map(
      (pt, i) => ({
        ...pt,
        policies: pt.policies.map((q, j) => ({
          ...q,
          estimates: estimates({ goodput: (i === 0) === (j === 0) ? 0.95 : 0.9 }),
        })),
      }),
    )
    const crossovers = sweepCrossovers('time-scale', pts, 'kvc')
    const s = {
      config: {
        axis: 'time-scale',
        axisLabel: 'time scale',
        values: [1, 8],
        workload: { name: 'agentic', kind: 'agentic', sessions: 4 },
        topology: '2P6D',
        policies: ['kvc', 'dp'],
        reference: 'kvc',
        seeds: [1, 2, 3],
        timeScale: 1,
        capacityTokens: 200_000,
        slo: { ttftS: 2, tpotS: 0.025 },
        faults: 'none',
      },
      points: pts,
      crossovers,
    } as unknown as SweepResult
    const v = sweepVerdict(s)
    expect(v.headline).toBe(
      'At time scale 1, kvc leads on goodput (95.0%); at time scale 8, dp leads on goodput (95.0%); ' +
        'the goodput lead changes hands between kvc and dp (below).',
    )
    expect(v.crossovers).toEqual(crossovers.map((x) => x.text))
    expect(v.conditions).toMatch(
      /time scale varied over 1, 8; topology 2P6D for kvc, 8xDP for dp: 2P6D and 8xDP use the same 8 GPUs/,
    )
    expect(v.conditions).not.toMatch(/, time scale 1/)
    const flat = sweepVerdict({
      ...s,
      crossovers: sweepCrossovers('time-scale', points([1, 8], [{}, {}]), 'kvc'),
    })
    expect(flat.headline).toMatch(/never changes hands along the time scale axis\.$/)
  })
})
