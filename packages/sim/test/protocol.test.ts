import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  type PolicyColumns,
  SIM_VERSION,
  latencyStats,
  pairedBootstrap,
  parsePolicySpec,
  parseSeeds,
  parseCapacity,
  SimError,
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
