import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_SLO,
  GAP_BUCKETS,
  type PolicyColumns,
  Prng,
  SIM_VERSION,
  higherIsBetter,
  latencyStats,
  pairedBootstrap,
  parseCapacity,
  parsePolicySpec,
  parseSeeds,
  parseSlo,
  quantileSorted,
  SimError,
  gapBucketMs,
  stratumBootstrap,
} from '../src/index.js'

const col = (t: number[], failed: number[] = []): PolicyColumns => ({
  ttft: Float64Array.from(t, (x, i) => (failed.includes(i) ? Number.POSITIVE_INFINITY : x)),
  e2e: Float64Array.from(t, (x, i) => (failed.includes(i) ? Number.POSITIVE_INFINITY : x)),
  elapsedTtft: Float64Array.from(t),
  elapsed: Float64Array.from(t),
  failed: Uint8Array.from(t, (_, i) => (failed.includes(i) ? 1 : 0)),
  fast: new Uint8Array(t.length),
})

describe('protocol', () => {
  it('paired bootstrap: a uniformly slower policy is worse in every resample, with a positive interval', () => {
    const base = Array.from({ length: 40 }, (_, i) => 0.1 + (i % 7) * 0.05)
    const layout = { seeds: [Array.from({ length: 40 }, (_, i) => Int32Array.of(i))] }
    const r = pairedBootstrap([col(base), col(base.map((x) => x + 0.5))], layout, 0, 200, 1)
    const d = r.paired[1]!.ttft_mean
    expect(d.diff).toBeCloseTo(0.5, 10)
    expect(d.lo).toBeCloseTo(0.5, 10)
    expect(d.pWorse).toBe(1)
    expect(r.estimates[0]!.ttft_p50.lo).toBeLessThanOrEqual(r.estimates[0]!.ttft_p50.value)
    expect(r.estimates[0]!.ttft_p50.hi).toBeGreaterThanOrEqual(r.estimates[0]!.ttft_p50.value)
  })

  it('failed turns are infinitely slow in percentiles and counted in the error rate', () => {
    const layout = { seeds: [Array.from({ length: 10 }, (_, i) => Int32Array.of(i))] }
    const r = pairedBootstrap([col(Array(10).fill(1), [3, 7])], layout, 0, 10, 1)
    expect(r.estimates[0]!.error_rate.value).toBeCloseTo(0.2)
    expect(r.estimates[0]!.ttft_p90.value).toBe(Number.POSITIVE_INFINITY)
    expect(r.estimates[0]!.ttft_p50.value).toBe(1)
    const s = latencyStats(Float64Array.of(1, 2, Number.POSITIVE_INFINITY), Float64Array.of(1, 2, 30))
    expect(s).toMatchObject({ n: 3, failed: 1, p50: 2, p99: Number.POSITIVE_INFINITY, mean: 11 })
  })

  it('parses policies, seeds and capacities, and refuses bad ones', () => {
    expect(parsePolicySpec('kvc:granularity=session:tauReject=5')).toMatchObject({
      name: 'kvc',
      granularity: 'session',
      routerParams: { tauReject: 5 },
    })
    expect(parsePolicySpec('dp-cache-aware:defaults=rust').baselineOptions).toEqual({ defaults: 'rust' })
    expect(() => parsePolicySpec('kvc:nonsense=1')).toThrow(SimError)
    expect(() => parsePolicySpec('kvc:defaults=rust')).toThrow(/unknown option/)
    expect(parseSeeds('1..3')).toEqual([1, 2, 3])
    expect(() => parseSeeds('1,1')).toThrow(/repeat/)
    expect(parseCapacity('1.5M')).toBe(1_500_000)
  })

  it('writes the package version into results', () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8'))
    expect(SIM_VERSION).toBe(pkg.version)
  })
})

/** The bootstrap as first written: every resample's turns gathered and sorted (the reference). */
function naiveBootstrap(
  values: number[],
  layout: { seeds: Int32Array[][] },
  resamples: number,
  seed: number,
) {
  const rng = new Prng(seed, 'bootstrap')
  const qs = [0.5, 0.9, 0.99]
  const samples = qs.map(() => new Float64Array(resamples))
  const means = new Float64Array(resamples)
  for (let b = 0; b < resamples; b++) {
    const idx: number[] = []
    for (const clusters of layout.seeds) {
      const k = clusters.length
      for (let j = 0; j < k; j++) idx.push(...clusters[rng.int(k)]!)
    }
    const v = Float64Array.from(idx, (i) => values[i]!).sort()
    qs.forEach((q, k) => {
      samples[k]![b] = quantileSorted(v, q)
    })
    means[b] = idx.reduce((a, i) => a + values[i]!, 0) / idx.length
  }
  const ci = (s: Float64Array) => {
    const x = Float64Array.from(s).sort()
    return [quantileSorted(x, 0.025), quantileSorted(x, 0.975)]
  }
  return { quantiles: samples.map(ci), mean: ci(means) }
}

describe('paired bootstrap (weighted walks over columns sorted once)', () => {
  it('gives exactly the intervals of sorting every resample (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 7 }), {
          minLength: 1,
          maxLength: 3,
        }),
        fc.array(
          fc.oneof(fc.double({ min: 0, max: 50, noNaN: true }), fc.constant(Number.POSITIVE_INFINITY)),
          {
            minLength: 200,
            maxLength: 200,
          },
        ),
        fc.integer({ min: 1, max: 1000 }),
        (seedsSizes, pool, seed) => {
          // Clusters of the given sizes, turn indices numbered seed after seed.
          let next = 0
          const layout = {
            seeds: seedsSizes.map((sizes) => sizes.map((n) => Int32Array.from({ length: n }, () => next++))),
          }
          const values = pool.slice(0, next)
          const failed = values.map((v) => (v === Number.POSITIVE_INFINITY ? 1 : 0))
          const elapsed = values.map((v) => (Number.isFinite(v) ? v : 60))
          const c: PolicyColumns = {
            ttft: Float64Array.from(values),
            e2e: Float64Array.from(values),
            elapsedTtft: Float64Array.from(elapsed),
            elapsed: Float64Array.from(elapsed),
            failed: Uint8Array.from(failed),
            fast: new Uint8Array(values.length),
          }
          const r = pairedBootstrap([c], layout, 0, 40, seed)
          const ref = naiveBootstrap(values, layout, 40, seed)
          const e = r.estimates[0]!
          expect([e.ttft_p50.lo, e.ttft_p50.hi]).toEqual(ref.quantiles[0])
          expect([e.ttft_p90.lo, e.ttft_p90.hi]).toEqual(ref.quantiles[1])
          expect([e.ttft_p99.lo, e.ttft_p99.hi]).toEqual(ref.quantiles[2])
          const naiveMean = naiveBootstrap(elapsed, layout, 40, seed).mean
          expect(e.ttft_mean.lo).toBeCloseTo(naiveMean[0]!, 9)
          expect(e.ttft_mean.hi).toBeCloseTo(naiveMean[1]!, 9)
          const sorted = Float64Array.from(values).sort()
          expect(e.ttft_p90.value).toBe(quantileSorted(sorted, 0.9))
        },
      ),
      { numRuns: 60 },
    )
  })

  it('columns with gaps (NaN TPOT), strata, task times and gap histograms equal sorting every resample (property)', () => {
    const interval95 = (s: Float64Array) => {
      const x = Float64Array.from(s).sort()
      return [quantileSorted(x, 0.025), quantileSorted(x, 0.975)]
    }
    fc.assert(
      fc.property(
        fc.array(fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 9 }), {
          minLength: 1,
          maxLength: 3,
        }),
        fc.array(
          fc.record({
            v: fc.oneof(
              fc.integer({ min: 0, max: 20 }).map((x) => x / 4),
              fc.constant(Number.NaN),
              fc.constant(Number.POSITIVE_INFINITY),
            ),
            inStratum: fc.boolean(),
            gaps: fc.array(
              fc.tuple(fc.integer({ min: 0, max: GAP_BUCKETS - 1 }), fc.integer({ min: 1, max: 4 })),
              {
                maxLength: 4,
              },
            ),
          }),
          { minLength: 60, maxLength: 60 },
        ),
        fc.integer({ min: 1, max: 1000 }),
        (seedsSizes, pool, seed) => {
          let next = 0
          const layout = {
            seeds: seedsSizes.map((sizes) => sizes.map((n) => Int32Array.from({ length: n }, () => next++))),
          }
          const turns = pool.slice(0, Math.min(next, pool.length))
          while (turns.length < next) turns.push({ v: 1, inStratum: true, gaps: [] })
          const tpot = Float64Array.from(turns, (t) => t.v)
          const finite = Float64Array.from(turns, (t) => (Number.isNaN(t.v) ? 0 : t.v))
          const offsets = new Int32Array(next + 1)
          const buckets: number[] = []
          const counts: number[] = []
          turns.forEach((t, i) => {
            for (const [b, c] of t.gaps) {
              buckets.push(b)
              counts.push(c)
            }
            offsets[i + 1] = buckets.length
          })
          const clusters = layout.seeds.flat()
          const span = Float64Array.from(clusters, (c) => finite[c[0]!]! + c.length)
          const c: PolicyColumns = {
            ttft: finite,
            e2e: finite,
            elapsedTtft: finite,
            elapsed: finite,
            failed: new Uint8Array(next),
            fast: new Uint8Array(next),
            tpot,
            gaps: { offsets, buckets: Uint16Array.from(buckets), counts: Float32Array.from(counts) },
            task: { span, spanElapsed: span, served: span, servedElapsed: span },
          }
          const R = 30
          const members = Int32Array.from(turns.flatMap((t, i) => (t.inStratum ? [i] : [])))
          const r = pairedBootstrap([c], layout, 0, R, seed).estimates[0]!
          const s = stratumBootstrap([tpot], members, layout, [0.25, 0.5, 0.75, 0.9], R, seed)[0]!
          // The reference: every resample's turns gathered and sorted.
          const rng = new Prng(seed, 'bootstrap')
          const q3 = [0.5, 0.9, 0.99]
          const qs = [0.25, 0.5, 0.75, 0.9]
          const tp = q3.map(() => new Float64Array(R))
          const st = qs.map(() => new Float64Array(R))
          const itl = q3.map(() => new Float64Array(R))
          const task = [0.5, 0.9].map(() => new Float64Array(R))
          const inStratum = new Set(members)
          for (let b = 0; b < R; b++) {
            const drawn: number[] = []
            const drawnClusters: number[] = []
            let base = 0
            for (const cl of layout.seeds) {
              for (let j = 0; j < cl.length; j++) {
                const k = rng.int(cl.length)
                drawn.push(...cl[k]!)
                drawnClusters.push(base + k)
              }
              base += cl.length
            }
            const sortedOf = (ids: number[]) => Float64Array.from(ids, (i) => tpot[i]!).sort()
            const a = sortedOf(drawn.filter((i) => !Number.isNaN(tpot[i]!)))
            q3.forEach((q, k) => {
              tp[k]![b] = quantileSorted(a, q)
            })
            const m = sortedOf(drawn.filter((i) => inStratum.has(i) && !Number.isNaN(tpot[i]!)))
            qs.forEach((q, k) => {
              st[k]![b] = quantileSorted(m, q)
            })
            const sp = Float64Array.from(drawnClusters, (k) => span[k]!).sort()
            ;[0.5, 0.9].forEach((q, k) => {
              task[k]![b] = quantileSorted(sp, q)
            })
            const h = new Float64Array(GAP_BUCKETS)
            let total = 0
            for (const i of drawn) {
              for (let e = offsets[i]!; e < offsets[i + 1]!; e++) {
                h[buckets[e]!]! += counts[e]!
                total += counts[e]!
              }
            }
            q3.forEach((q, k) => {
              let cum = 0
              let at = Number.NaN
              for (let x = 0; x < GAP_BUCKETS && total > 0; x++) {
                cum += h[x]!
                if (cum >= q * total * (1 - 1e-9)) {
                  at = gapBucketMs(x) / 1000
                  break
                }
              }
              itl[k]![b] = at
            })
          }
          expect([r.tpot_p50, r.tpot_p90, r.tpot_p99].map((e) => [e.lo, e.hi])).toEqual(tp.map(interval95))
          expect(s.map((e) => [e.lo, e.hi])).toEqual(st.map(interval95))
          expect([r.task_p50, r.task_p90].map((e) => [e.lo, e.hi])).toEqual(task.map(interval95))
          expect([r.itl_p50, r.itl_p90, r.itl_p99].map((e) => [e.lo, e.hi])).toEqual(itl.map(interval95))
          const all = Float64Array.from(tpot.filter((x) => !Number.isNaN(x))).sort()
          expect(r.tpot_p99.value).toBe(all.length === 0 ? Number.NaN : quantileSorted(all, 0.99))
        },
      ),
      { numRuns: 80 },
    )
  })

  it('pairs every policy with every other, and a stratum uses the same draws', () => {
    const base = Array.from({ length: 30 }, (_, i) => 0.1 + (i % 5) * 0.1)
    const layout = {
      seeds: [Array.from({ length: 10 }, (_, k) => Int32Array.of(3 * k, 3 * k + 1, 3 * k + 2))],
    }
    const cols = [col(base), col(base.map((x) => x * 2)), col(base.map((x) => x + 1))]
    const r = pairedBootstrap(cols, layout, 0, 100, 3)
    expect(r.pairwise[1]![0]!.ttft_mean.diff).toBeCloseTo(-r.pairwise[0]![1]!.ttft_mean.diff, 12)
    expect(r.pairwise[2]![1]!.ttft_p50.diff).toBeCloseTo(1.3 - 0.6, 12)
    expect(r.pairwise[0]![0]).toBeUndefined()
    expect(r.paired[2]).toBe(r.pairwise[2]![0])
    // Every turn as the stratum: the same intervals as the main bootstrap.
    const all = Int32Array.from({ length: 30 }, (_, i) => i)
    const s = stratumBootstrap(
      cols.map((c) => c.ttft),
      all,
      layout,
      [0.5, 0.9],
      100,
      3,
    )
    expect(s[1]![1]).toEqual(r.estimates[1]!.ttft_p90)
  })

  it('goodput is higher-is-better, decode and task metrics are NaN without their columns', () => {
    expect(higherIsBetter('goodput')).toBe(true)
    expect(higherIsBetter('tpot_p90')).toBe(false)
    const layout = { seeds: [Array.from({ length: 5 }, (_, i) => Int32Array.of(i))] }
    const r = pairedBootstrap([col([1, 2, 3, 4, 5])], layout, 0, 10, 1)
    expect(r.estimates[0]!.goodput.value).toBeNaN()
    expect(r.estimates[0]!.itl_p99.value).toBeNaN()
    expect(r.estimates[0]!.task_p50.value).toBeNaN()
  })

  it('parses SLOs and refuses bad ones', () => {
    expect(parseSlo('ttft=2s,tpot=25ms')).toEqual({ ttftS: 2, tpotS: 0.025 })
    expect(parseSlo('tpot=0.05')).toEqual({ ttftS: DEFAULT_SLO.ttftS, tpotS: 0.05 })
    expect(parseSlo(' TTFT = 500ms ')).toEqual({ ttftS: 0.5, tpotS: DEFAULT_SLO.tpotS })
    for (const bad of ['', 'ttft', 'ttft=2s,ttft=3s', 'e2e=3s', 'tpot=-1ms', 'ttft=0']) {
      expect(() => parseSlo(bad), bad).toThrow(SimError)
    }
  })
})
