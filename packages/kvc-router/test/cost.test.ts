import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  RouterError,
  decodeStepSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
} from '../src/index.js'

describe('cost model', () => {
  const cm = DEFAULT_COST_MODEL
  it('calibration: a 5K append ≈ 0.2 s, a 50K cold prefill ≈ 3 s, a 90K one ≈ 7.3 s', () => {
    expect(prefillSeconds(cm, 5_000, 0)).toBeCloseTo(0.2, 2)
    expect(prefillSeconds(cm, 50_000, 0)).toBeCloseTo(3.0, 1)
    expect(prefillSeconds(cm, 90_000, 0)).toBeCloseTo(7.3, 1)
  })

  it('the formulas, term by term, and zero work costs nothing', () => {
    fc.assert(
      fc.property(fc.nat({ max: 200_000 }), fc.nat({ max: 200_000 }), (n, c) => {
        const want = n === 0 ? 0 : 0.02 + n / 30_000 + 1.05e-9 * n * (c + n / 2)
        expect(prefillSeconds(cm, n, c)).toBeCloseTo(want, 12)
        expect(decodeStepSeconds(cm, c)).toBeCloseTo(0.012 + 2.93e-8 * c, 12)
        const t = n === 0 ? 0 : 0.005 + (n * 98_304 * 8) / 400e9
        expect(transferSeconds(cm, n)).toBeCloseTo(t, 12)
      }),
    )
    expect(prefillSeconds(cm, 0, 40_000)).toBe(0)
    expect(transferSeconds(cm, 0)).toBe(0)
  })

  it('costs grow with new tokens, context and batch', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 100_000 }), fc.nat({ max: 100_000 }), (n, c) => {
        expect(prefillSeconds(cm, n + 1, c)).toBeGreaterThan(prefillSeconds(cm, n, c))
        expect(prefillSeconds(cm, n, c + 1)).toBeGreaterThan(prefillSeconds(cm, n, c))
        expect(decodeStepSeconds(cm, c + 1)).toBeGreaterThan(decodeStepSeconds(cm, c))
        expect(transferSeconds(cm, n + 1)).toBeGreaterThan(transferSeconds(cm, n))
      }),
    )
  })

  it('makeCostModel replaces and validates, naming the parameter', () => {
    const m = makeCostModel({ linkGbps: 100 })
    expect(m.linkGbps).toBe(100)
    expect(m.prefillFixedS).toBe(cm.prefillFixedS)
    expect(Object.isFrozen(m)).toBe(true)
    expect(makeCostModel({ capacityTokens: Number.POSITIVE_INFINITY }).capacityTokens).toBe(
      Number.POSITIVE_INFINITY,
    )
    const bad: [Partial<typeof cm>, RegExp, unknown][] = [
      [{ linkGbps: 0 }, /linkGbps/, 0],
      [{ prefillTokensPerS: 0 }, /prefillTokensPerS/, 0],
      [{ prefillFixedS: -1 }, /prefillFixedS/, -1],
      [{ decodeStepS: Number.NaN }, /decodeStepS/, Number.NaN],
      [{ transferSetupS: Number.POSITIVE_INFINITY }, /transferSetupS/, Number.POSITIVE_INFINITY],
      [{ capacityTokens: 0.5 }, /capacityTokens/, 0.5],
      [{ admitRpcJitterS: 1 }, /admitRpcJitterS/, 1],
    ]
    for (const [o, msg, value] of bad) {
      let err: unknown
      try {
        makeCostModel(o)
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(RouterError)
      expect(err).toMatchObject({ code: 'INVALID_OPTION', value })
      expect((err as Error).message).toMatch(msg)
    }
  })
})
