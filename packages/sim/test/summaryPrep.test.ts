import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { summaryHelper } from '../src/cli/parallel.js'
import {
  type ExperimentConfig,
  type ResampleShare,
  type ResampleShareJob,
  type SummaryPrep,
  type SummaryPrepJob,
  cheapToRebuild,
  computeResampleShare,
  inProcessRunner,
  computeTraceStats,
  loadTrace,
  prepareSummary,
  runExperiment,
  toStableJson,
} from '../src/index.js'
import { planExperiment, summarizeExperiment } from '../src/protocol/experiment.js'

// The summary's workload statistics and (for traces) bootstrap draws can be computed before the
// runs end, on another thread. Property of the design: an experiment's result is the same with a
// preparation, without one, with one that does not match, and with one that fails.

const tmp = mkdtempSync(join(tmpdir(), 'kvc-sim-prep-'))
const trace = join(tmp, 'small.jsonl')
writeFileSync(
  trace,
  Array.from({ length: 40 }, (_, i) =>
    JSON.stringify({
      timestamp: i * 150,
      input_length: 512 * (1 + (i % 3)),
      output_length: 4 + (i % 7),
      hash_ids: Array.from({ length: 1 + (i % 3) }, (_, b) => (b === 0 ? i % 4 : 100 + i * 3 + b)),
    }),
  ).join('\n'),
)

const configs: Record<string, ExperimentConfig> = {
  trace: {
    workload: { kind: 'trace', path: trace, granularity: 'block' },
    topology: '1P2D',
    policies: ['kvc', 'round-robin'],
    seeds: [1, 2],
    bootstrapResamples: 25,
  },
  agentic: {
    workload: { kind: 'agentic', options: { sessions: 4, maxTurnsPerSession: 4 } },
    topology: '1P2D',
    policies: ['kvc', 'round-robin'],
    seeds: [3, 4],
    bootstrapResamples: 25,
  },
}

describe('summary preparation', { timeout: 180_000 }, () => {
  for (const [name, config] of Object.entries(configs)) {
    it(`${name}: the same result with a preparation, a mismatched one, a failing one, and none`, async () => {
      const plain = toStableJson(await runExperiment(config))
      const jobs: SummaryPrepJob[] = []
      const prepared = await runExperiment(config, {
        prepare: async (job) => {
          jobs.push(job)
          return prepareSummary(job)
        },
      })
      expect(toStableJson(prepared)).toBe(plain)
      expect(jobs).toHaveLength(1)
      // Draws only where every trial has the same clusters (a trace's requests).
      expect(jobs[0]!.clustersPerSeed).toEqual(name === 'trace' ? [40, 40] : undefined)
      // A matching preparation is what the summary uses (a marked one shows in the result) ...
      const marked = await runExperiment(config, {
        prepare: async (job) => {
          const p = prepareSummary(job)
          return { ...p, stats: { ...p.stats, name: 'prepared' } }
        },
      })
      expect(marked.config.workload.name).toBe('prepared')
      if (name === 'trace') {
        // Prepared draws are the bootstrap's: every cluster drawn once, every interval a point.
        const ones = await runExperiment(config, {
          prepare: async (job) => {
            const p = prepareSummary(job)
            return { ...p, draws: p.draws!.map((d) => d.fill(1)) }
          },
        })
        const e = ones.policies[0]!.estimates.ttft_p90
        expect([e.lo, e.hi]).toEqual([e.value, e.value])
        expect(ones.strata.overlap[0]!.policies.kvc!.ttftP50.lo).toBe(
          ones.strata.overlap[0]!.policies.kvc!.ttftP50.value,
        )
      }
      // ... and one made for another experiment (seed, page size) is not.
      const otherSeed = async (job: SummaryPrepJob) => prepareSummary({ ...job, seed: job.seed + 1 })
      expect(toStableJson(await runExperiment(config, { prepare: otherSeed }))).toBe(plain)
      const otherPage = async (job: SummaryPrepJob) => prepareSummary({ ...job, pageSize: 1 })
      expect(toStableJson(await runExperiment(config, { prepare: otherPage }))).toBe(plain)
      const failing = async (): Promise<SummaryPrep> => {
        throw new Error('no thread')
      }
      expect(toStableJson(await runExperiment(config, { prepare: failing }))).toBe(plain)
    })
  }

  for (const [name, config] of Object.entries(configs)) {
    it(`${name}: the same result with half the bootstrap shared out, a failing share, a malformed one, and none`, async () => {
      const plain = toStableJson(await runExperiment(config))
      const jobs: ResampleShareJob[] = []
      const shared = await runExperiment(config, {
        share: async (job) => {
          jobs.push(job)
          return computeResampleShare(job)
        },
      })
      expect(toStableJson(shared)).toBe(plain)
      // One share per policy: the first half of the resamples, every stratum that is not all turns.
      expect(jobs).toHaveLength(config.policies.length)
      for (const job of jobs) {
        expect(job.to).toBe(Math.floor(config.bootstrapResamples! / 2))
        expect(job.strata.length).toBeGreaterThan(0)
      }
      // With a preparation too (its draws, drawn once; the share draws them again: the same).
      const both = await runExperiment(config, {
        prepare: async (job) => prepareSummary(job),
        share: async (job) => computeResampleShare(job),
      })
      expect(toStableJson(both)).toBe(plain)
      // A share's resamples are what the summary uses: a marked one shows in the intervals ...
      const marked = await runExperiment(config, {
        share: async (job) => {
          const s = computeResampleShare(job)
          return { ...s, metrics: s.metrics.map((x) => x.fill(-1)) }
        },
      })
      expect(marked.policies[0]!.estimates.ttft_p90.lo).toBe(-1)
      // ... and a failing or malformed one is not.
      const failing = async (): Promise<ResampleShare> => {
        throw new Error('no thread')
      }
      expect(toStableJson(await runExperiment(config, { share: failing }))).toBe(plain)
      const malformed = async (): Promise<ResampleShare> => ({ metrics: [], strata: [[]] })
      expect(toStableJson(await runExperiment(config, { share: malformed }))).toBe(plain)
      // A share that never comes: this thread takes all of it back instead of waiting; a late one
      // (some of it taken back meanwhile) gives the same result too.
      const never = (): Promise<ResampleShare> => new Promise(() => {})
      expect(toStableJson(await runExperiment(config, { share: never }))).toBe(plain)
      const late = (job: ResampleShareJob): Promise<ResampleShare> =>
        new Promise((resolve) => setTimeout(() => resolve(computeResampleShare(job)), 5))
      expect(toStableJson(await runExperiment(config, { share: late }))).toBe(plain)
    })
  }

  it('prepares statistics equal to the summary own, and draws of the layout shape', () => {
    const job: SummaryPrepJob = {
      workload: { kind: 'trace', path: trace },
      seed: 1,
      pageSize: 512,
      resamples: 7,
      bootSeed: 9,
      clustersPerSeed: [40, 40],
    }
    const p = prepareSummary(job)
    expect(p.stats).toEqual(computeTraceStats(loadTrace(trace), 512))
    expect(p.draws).toHaveLength(7)
    for (const d of p.draws!) {
      expect(d).toHaveLength(80)
      // Whole trials resampled separately: each seed's 40 clusters drawn 40 times.
      expect(d.subarray(0, 40).reduce((a, x) => a + x, 0)).toBe(40)
      expect(d.subarray(40).reduce((a, x) => a + x, 0)).toBe(40)
    }
  })

  it('on a thread of its own (one run in process), the same preparation', async () => {
    const helper = summaryHelper(2, 1, { kind: 'trace', path: trace })!
    const job: SummaryPrepJob = {
      workload: { kind: 'trace', path: trace },
      seed: 1,
      pageSize: 512,
      resamples: 5,
      bootSeed: 3,
      clustersPerSeed: [40],
    }
    const there = await helper.prepare(job)
    const here = prepareSummary(job)
    expect(there.stats).toEqual(here.stats)
    expect(there.draws).toEqual(here.draws)
    // The same thread computes a share of a bootstrap as this one would.
    const ones = Float64Array.from({ length: 40 }, (_, i) => i % 7)
    const flags = Uint8Array.from({ length: 40 }, (_, i) => i & 1)
    const shareJob: ResampleShareJob = {
      columns: { ttft: ones, e2e: ones, elapsedTtft: ones, elapsed: ones, failed: flags, fast: flags },
      layout: {
        clustersPerSeed: [40],
        starts: Int32Array.from({ length: 41 }, (_, i) => i),
        all: Int32Array.from({ length: 40 }, (_, i) => i),
      },
      strata: [Int32Array.of(1, 3, 5, 7)],
      resamples: 5,
      bootSeed: 3,
      to: 2,
    }
    const sharedThere = await helper.share!(shareJob)
    expect(sharedThere).toEqual(computeResampleShare(shareJob))
    expect(sharedThere.metrics[0]).toHaveLength(2)
    helper.close()
    await expect(helper.prepare(job)).rejects.toThrow()
    expect(summaryHelper(1, 1, { kind: 'agentic' })).toBeUndefined()
    // An LMCache trace (text to tokenize again) is not built twice; beside worker threads it
    // is this thread's own workload, so it is prepared here.
    const lmcache = { kind: 'trace' as const, path: tmp, format: 'lmcache' as const }
    expect(cheapToRebuild(lmcache)).toBe(false)
    expect(cheapToRebuild({ kind: 'trace', path: trace })).toBe(true)
    expect(summaryHelper(2, 1, lmcache)).toBeUndefined()
    expect(summaryHelper(2, 4, lmcache)).toBeDefined()
    // Beside threads that run the tasks: on this thread.
    const beside = await summaryHelper(2, 4, job.workload)!.prepare(job)
    expect(beside.draws).toEqual(here.draws)
  })
})

describe('run metrics computed as each run ends', { timeout: 180_000 }, () => {
  it('give the same experiment as a runner that hands over nothing before the end', async () => {
    const config: ExperimentConfig = {
      workload: { kind: 'agentic', options: { sessions: 4, maxTurnsPerSession: 3 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin'],
      seeds: [1, 2],
      bootstrapResamples: 20,
      slo: { ttftS: 0.5, tpotS: 0.02 },
    }
    let handedOver = 0
    const early = await runExperiment(config, {
      runner: (tasks, onProgress, onResult) =>
        inProcessRunner(tasks, onProgress, (t, r) => {
          handedOver++
          onResult?.(t, r)
        }),
    })
    expect(handedOver).toBe(4)
    // A runner that ignores `onResult` and returns every result at the end.
    const late = await runExperiment(config, {
      runner: (tasks, onProgress) => inProcessRunner(tasks, onProgress),
    })
    expect(toStableJson(early)).toBe(toStableJson(late))
  })
})

describe('policy parts of the summary computed as runs end', { timeout: 180_000 }, () => {
  // Once the reference policy's runs and a policy's runs have ended, that policy's columns,
  // bootstrap, strata and summary are computed while the other runs go. Property: the experiment
  // is the same whatever order the runs end in, whichever of them the runner hands over early,
  // and whenever the preparation arrives.
  const cases: Record<string, ExperimentConfig> = {
    agentic: {
      workload: { kind: 'agentic', options: { sessions: 5, maxTurnsPerSession: 4 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin', 'sglang-cache-aware'],
      seeds: [5, 6],
      bootstrapResamples: 15,
    },
    trace: { ...configs.trace!, policies: ['round-robin', 'kvc', 'random'] },
  }
  for (const [name, config] of Object.entries(cases)) {
    it(`${name}: any order of ends, any runs handed over early, any time of the preparation`, async () => {
      const plan = planExperiment(config)
      const results = await inProcessRunner(plan.tasks, () => {})
      const plain = toStableJson(summarizeExperiment(plan, results))
      const T = plan.tasks.length
      await fc.assert(
        fc.asyncProperty(
          fc.shuffledSubarray(
            Array.from({ length: T }, (_, i) => i),
            { minLength: 0, maxLength: T },
          ),
          fc.array(fc.nat(3), { minLength: T, maxLength: T }),
          fc.option(fc.nat(T), { nil: undefined }),
          async (order, yields, prepAfter) => {
            let handed = 0
            let release: () => void = () => {}
            const gate = new Promise<void>((r) => {
              release = r
            })
            const r = await runExperiment(config, {
              ...(prepAfter === undefined
                ? {}
                : {
                    prepare: async (job: SummaryPrepJob) => {
                      await gate
                      return prepareSummary(job)
                    },
                  }),
              runner: async (tasks, _onProgress, onResult) => {
                for (const t of order) {
                  if (handed++ === prepAfter) release()
                  for (let y = 0; y < yields[t]!; y++) await null
                  onResult?.(t, results[t]!)
                }
                release()
                return tasks.map((_, i) => results[i]!)
              },
            })
            expect(toStableJson(r)).toBe(plain)
          },
        ),
        { numRuns: 25 },
      )
    })
  }
})

describe('computeResampleShare refuses a job it cannot compute', () => {
  const ones = Float64Array.of(1, 2)
  const good: ResampleShareJob = {
    columns: {
      ttft: ones,
      e2e: ones,
      elapsedTtft: ones,
      elapsed: ones,
      failed: new Uint8Array(2),
      fast: new Uint8Array(2),
    },
    layout: { clustersPerSeed: [2], starts: Int32Array.of(0, 1, 2), all: Int32Array.of(0, 1) },
    strata: [Int32Array.of(1)],
    resamples: 10,
    bootSeed: 1,
    to: 5,
  }
  it('computes a well-formed job', () => {
    expect(computeResampleShare(good).metrics[0]!.length).toBe(5)
  })
  const bad: [string, ResampleShareJob][] = [
    ['to beyond the resamples', { ...good, to: 11 }],
    ['a fractional to', { ...good, to: 2.5 }],
    ['no resamples', { ...good, resamples: 0, to: 0 }],
    [
      'a request index outside the columns',
      { ...good, layout: { ...good.layout, all: Int32Array.of(0, 2) } },
    ],
    [
      'bounds that do not end at all.length',
      { ...good, layout: { ...good.layout, starts: Int32Array.of(0, 1, 3) } },
    ],
    ['too few bounds', { ...good, layout: { ...good.layout, starts: Int32Array.of(0, 2) } }],
    ['a stratum index outside the columns', { ...good, strata: [Int32Array.of(-1)] }],
    ['a column of another length', { ...good, columns: { ...good.columns, e2e: Float64Array.of(1) } }],
  ]
  it.each(bad)('%s: a typed error naming it', (_, job) => {
    expect(() => computeResampleShare(job)).toThrow(expect.objectContaining({ code: 'INVALID_OPTION' }))
  })
})
