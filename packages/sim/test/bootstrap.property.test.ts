import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  CI_METRICS,
  type ClusterLayout,
  type PolicyColumns,
  Prng,
  higherIsBetter,
  pairedBootstrap,
  quantileSorted,
} from '../src/index.js'

/**
 * The bootstrap as it was first written: every resample's latencies copied and sorted. The
 * simulator's counts each resample's turns per rank instead; both must give the same numbers.
 */
function naiveBootstrap(
  policies: readonly PolicyColumns[],
  layout: ClusterLayout,
  reference: number,
  resamples: number,
  seed: number,
) {
  const metrics = (c: PolicyColumns, idx: readonly number[]): number[] => {
    const n = idx.length
    let sumT = 0
    let sumE = 0
    let failed = 0
    let fast = 0
    for (const i of idx) {
      sumT += c.elapsedTtft[i]!
      sumE += c.elapsed[i]!
      failed += c.failed[i]!
      fast += c.fast[i]!
    }
    const t = Float64Array.from(idx, (i) => c.ttft[i]!).sort()
    const e = Float64Array.from(idx, (i) => c.e2e[i]!).sort()
    const nan = Number.NaN
    return [
      n === 0 ? nan : sumT / n,
      quantileSorted(t, 0.5),
      quantileSorted(t, 0.9),
      quantileSorted(t, 0.99),
      n === 0 ? nan : sumE / n,
      quantileSorted(e, 0.5),
      quantileSorted(e, 0.9),
      quantileSorted(e, 0.99),
      n === 0 ? nan : failed / n,
      n === 0 ? nan : fast / n,
    ]
  }
  const all = layout.seeds.flatMap((s) => s.flatMap((c) => Array.from(c)))
  const point = policies.map((c) => metrics(c, all))
  const rng = new Prng(seed, 'bootstrap')
  const samples = policies.map(() => CI_METRICS.map(() => [] as number[]))
  for (let b = 0; b < resamples; b++) {
    const idx: number[] = []
    for (const clusters of layout.seeds) {
      for (let j = 0; j < clusters.length; j++) idx.push(...clusters[rng.int(clusters.length)]!)
    }
    policies.forEach((c, p) => {
      metrics(c, idx).forEach((v, m) => samples[p]![m]!.push(v))
    })
  }
  const diff = (a: number, b: number) => (a === b ? 0 : a - b)
  return {
    estimates: policies.map((_, p) =>
      Object.fromEntries(
        CI_METRICS.map((name, m) => {
          const s = Float64Array.from(samples[p]![m]!).sort()
          return [name, { value: point[p]![m]!, lo: quantileSorted(s, 0.025), hi: quantileSorted(s, 0.975) }]
        }),
      ),
    ),
    paired: policies.map((_, p) =>
      p === reference
        ? undefined
        : Object.fromEntries(
            CI_METRICS.map((name, m) => {
              const d = new Float64Array(resamples)
              let better = 0
              let worse = 0
              for (let b = 0; b < resamples; b++) {
                const x = samples[p]![m]![b]!
                const y = samples[reference]![m]![b]!
                d[b] = diff(x, y)
                const hib = higherIsBetter(name)
                if (hib ? x > y : x < y) better++
                else if (hib ? x < y : x > y) worse++
              }
              d.sort()
              return [
                name,
                {
                  diff: diff(point[p]![m]!, point[reference]![m]!),
                  lo: quantileSorted(d, 0.025),
                  hi: quantileSorted(d, 0.975),
                  pBetter: resamples === 0 ? Number.NaN : better / resamples,
                  pWorse: resamples === 0 ? Number.NaN : worse / resamples,
                },
              ]
            }),
          ),
    ),
  }
}

describe('pairedBootstrap agrees with sorting every resample', () => {
  it('estimates and paired differences, cluster and request layouts', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 3 }),
        fc.nat(1000),
        fc.boolean(),
        (turns, policiesN, seedsN, seed, sessions) => {
          const rng = new Prng(seed, 'test')
          const pick = (xs: readonly number[]) => xs[rng.int(xs.length)]!
          const pool = [0, -0, 1, 2, 0.5, 3.25, Number.POSITIVE_INFINITY]
          const n = turns * seedsN
          const col = (): PolicyColumns => {
            const ttft = Float64Array.from({ length: n }, () =>
              rng.next() < 0.5 ? pick(pool) : rng.next() * 10,
            )
            const e2e = Float64Array.from(ttft, (t) => (t === Number.POSITIVE_INFINITY ? t : t + pick(pool)))
            return {
              ttft,
              e2e,
              elapsedTtft: Float64Array.from(ttft, (t) => (t === Number.POSITIVE_INFINITY ? 30 : t)),
              elapsed: Float64Array.from(e2e, (t) => (t === Number.POSITIVE_INFINITY ? 31 : t)),
              failed: Uint8Array.from(ttft, (t) => (t === Number.POSITIVE_INFINITY ? 1 : 0)),
              fast: Uint8Array.from({ length: n }, () => (rng.next() < 0.6 ? 1 : 0)),
            }
          }
          const cols = Array.from({ length: policiesN }, col)
          const layout: ClusterLayout = {
            seeds: Array.from({ length: seedsN }, (_, s) => {
              const ids = Array.from({ length: turns }, (_, i) => s * turns + i)
              if (!sessions) return ids.map((i) => Int32Array.of(i))
              const groups: number[][] = []
              for (const i of ids) {
                if (groups.length === 0 || rng.next() < 0.4) groups.push([])
                groups[groups.length - 1]!.push(i)
              }
              return groups.map((g) => Int32Array.from(g))
            }),
          }
          const resamples = 1 + (seed % 40)
          expect(pairedBootstrap(cols, layout, 0, resamples, seed)).toEqual(
            naiveBootstrap(cols, layout, 0, resamples, seed),
          )
        },
      ),
      { numRuns: 200, seed: 9 },
    )
  })

  it('orders −0 before +0 and keeps Infinity last, as a Float64Array sort does', () => {
    // Sorted: −0, −0, 0, Infinity; the median (position 1) is −0.
    const ttft = Float64Array.of(0, -0, Number.POSITIVE_INFINITY, -0)
    const c: PolicyColumns = {
      ttft,
      e2e: ttft,
      elapsedTtft: Float64Array.of(0, 0, 30, 0),
      elapsed: Float64Array.of(0, 0, 30, 0),
      failed: Uint8Array.of(0, 0, 1, 0),
      fast: Uint8Array.of(1, 1, 0, 1),
    }
    const layout: ClusterLayout = { seeds: [[0, 1, 2, 3].map((i) => Int32Array.of(i))] }
    const r = pairedBootstrap([c], layout, 0, 5, 3)
    expect(Object.is(r.estimates[0]!.ttft_p50.value, -0)).toBe(true)
    expect(r.estimates[0]!.ttft_p99.value).toBe(Number.POSITIVE_INFINITY)
    expect(r).toEqual(naiveBootstrap([c], layout, 0, 5, 3))
  })
})
