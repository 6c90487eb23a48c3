import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  type PauseSignals,
  RouterError,
  chooseEvictOrWait,
  prefillSeconds,
} from '../src/index.js'

const CM = DEFAULT_COST_MODEL

const signals = fc.record({
  waitS: fc.double({ min: 0, max: 5, noNaN: true }),
  needTokens: fc.integer({ min: 0, max: 200_000 }),
  contextTokens: fc.integer({ min: 0, max: 200_000 }),
}) satisfies fc.Arbitrary<PauseSignals>

describe('pause or evict: chooseEvictOrWait', () => {
  it('a short append on a long session goes now rather than wait out a pause of 0.8 s; a seed-sized need waits', () => {
    const append = chooseEvictOrWait({ waitS: 0.8, needTokens: 2_500, contextTokens: 30_000 }, CM)
    expect(append.action).toBe('evict')
    expect(append.recomputeS).toBeCloseTo(prefillSeconds(CM, 2_500, 30_000), 12)
    expect(append.recomputeS).toBeLessThan(0.3)
    expect(append.reason).toMatch(/< pause 0.80 s/)
    const seed = chooseEvictOrWait({ waitS: 0.8, needTokens: 30_000, contextTokens: 0 }, CM)
    expect(seed.action).toBe('wait')
    expect(seed.recomputeS).toBeGreaterThan(0.8)
  })

  it('goes now exactly when recomputing the need costs less than the wait (and never with no wait)', () => {
    fc.assert(
      fc.property(signals, (s) => {
        const c = chooseEvictOrWait(s, CM)
        const r = prefillSeconds(CM, s.needTokens, s.contextTokens)
        expect(c.recomputeS).toBe(r)
        expect(c.waitS).toBe(s.waitS)
        expect(c.action).toBe(r < s.waitS ? 'evict' : 'wait')
        if (s.waitS === 0) expect(c.action).toBe('wait')
      }),
    )
  })

  it('monotone: a longer wait never turns evict into wait; a larger need or a deeper context never turns wait into evict', () => {
    const more = fc.double({ min: 0, max: 5, noNaN: true })
    const moreTokens = fc.integer({ min: 0, max: 100_000 })
    fc.assert(
      fc.property(signals, more, moreTokens, moreTokens, (s, dw, dn, dc) => {
        const c = chooseEvictOrWait(s, CM).action
        if (c === 'evict') expect(chooseEvictOrWait({ ...s, waitS: s.waitS + dw }, CM).action).toBe('evict')
        if (c === 'wait') {
          expect(chooseEvictOrWait({ ...s, needTokens: s.needTokens + dn }, CM).action).toBe('wait')
          expect(chooseEvictOrWait({ ...s, contextTokens: s.contextTokens + dc }, CM).action).toBe('wait')
        }
      }),
    )
  })

  it.each([
    ['waitS', -1],
    ['waitS', Number.NaN],
    ['needTokens', Number.POSITIVE_INFINITY],
    ['contextTokens', -5],
  ] as const)('%s = %s is an INVALID_OPTION naming the value', (key, value) => {
    const s = { waitS: 1, needTokens: 1, contextTokens: 1, [key]: value }
    try {
      chooseEvictOrWait(s, CM)
      expect.unreachable()
    } catch (e) {
      expect(e).toBeInstanceOf(RouterError)
      expect((e as RouterError).code).toBe('INVALID_OPTION')
      expect(Object.is((e as RouterError).value, value)).toBe(true)
      expect((e as Error).message).toContain(key)
    }
  })
})
