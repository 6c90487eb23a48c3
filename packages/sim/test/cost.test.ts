import { describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  SimError,
  decodeStepSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
} from '../src/index.js'

describe('cost model (calibrated to the research prototype: docs/design/cost-model.md)', () => {
  const cm = DEFAULT_COST_MODEL
  it('a 5K append takes about 0.2 s and a 50K cold prefill about 3 s (docs/design/prototype.md#session-level-eviction)', () => {
    expect(prefillSeconds(cm, 5_000, 0)).toBeCloseTo(0.2, 2)
    expect(prefillSeconds(cm, 50_000, 0)).toBeCloseTo(3.0, 1)
  })
  it('50–90K reseeds take 3–7.5 s', () => {
    for (const n of [50_000, 70_000, 90_000]) {
      const t = prefillSeconds(cm, n, 0)
      expect(t).toBeGreaterThanOrEqual(2.9)
      expect(t).toBeLessThanOrEqual(7.5)
    }
  })
  it('costs grow with context and are zero for nothing to do', () => {
    expect(prefillSeconds(cm, 1_000, 40_000)).toBeGreaterThan(prefillSeconds(cm, 1_000, 0))
    expect(prefillSeconds(cm, 0, 40_000)).toBe(0)
    expect(decodeStepSeconds(cm, 1e6)).toBeGreaterThan(decodeStepSeconds(cm, 0))
    expect(transferSeconds(cm, 0)).toBe(0)
  })
  it('a 50K-token KV transfer takes about 0.1 s at 400 Gb/s (98,304 B/token)', () => {
    expect(transferSeconds(cm, 50_000)).toBeCloseTo(0.005 + (50_000 * 98_304 * 8) / 400e9, 6)
  })
  it('validates overrides', () => {
    expect(makeCostModel({ linkGbps: 100 }).linkGbps).toBe(100)
    expect(makeCostModel({ capacityTokens: Number.POSITIVE_INFINITY }).capacityTokens).toBe(
      Number.POSITIVE_INFINITY,
    )
    expect(() => makeCostModel({ linkGbps: 0 })).toThrow(SimError)
    expect(() => makeCostModel({ prefillFixedS: -1 })).toThrow(/prefillFixedS/)
    expect(() => makeCostModel({ admitRpcJitterS: 1 })).toThrow(/jitter/i)
  })
})
