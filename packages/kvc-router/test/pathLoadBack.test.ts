import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  DEFAULT_PATH_PARAMS,
  type PathSignals,
  RouterError,
  choosePath,
  estimateLocal,
  makeCostModel,
  pathParams,
  planPrefix,
} from '../src/index.js'

/** A turn on a D holding part of its prompt on the device and part on its host tier. */
const tiered = fc
  .record({
    prompt: fc.integer({ min: 1, max: 120_000 }),
    dev: fc.double({ min: 0, max: 1, noNaN: true }),
    hostShare: fc.double({ min: 0, max: 1, noNaN: true }),
    dq: fc.double({ min: 0, max: 20, noNaN: true }),
    running: fc.integer({ min: 0, max: 64 }),
    pq: fc.double({ min: 0, max: 20, noNaN: true }),
    hostGBps: fc.constantFrom(0.001, 0.5, 6, 50, 200),
  })
  .map(({ prompt, dev, hostShare, dq, running, pq, hostGBps }) => {
    const d = Math.floor(prompt * dev)
    const s: PathSignals = {
      promptTokens: prompt,
      decodeHeldTokens: d,
      decodeHostTokens: Math.floor((prompt - d) * hostShare),
      decodeQueueS: dq,
      runningDecodes: running,
      prefill: { queueS: pq, heldTokens: 0 },
    }
    return { s, params: pathParams(makeCostModel({ hostLoadGBps: hostGBps })) }
  })

const withoutHost = (s: PathSignals): PathSignals => {
  const { decodeHostTokens: _h, ...rest } = s
  return rest
}

describe('path choice: load-back from the D’s host tier as an option', () => {
  it('never loads back when recomputing is estimated cheaper, and never costs more than recomputing', () => {
    fc.assert(
      fc.property(tiered, ({ s, params }) => {
        const withTier = estimateLocal(s, params)
        const plain = estimateLocal(withoutHost(s), params)
        expect(withTier.costS).toBeLessThanOrEqual(plain.costS)
        const plan = planPrefix(params.cost, {
          promptTokens: s.promptTokens,
          deviceTokens: s.decodeHeldTokens,
          hostTokens: s.decodeHostTokens!,
        })
        if (withTier.loadBackTokens !== undefined) {
          // Chosen only when strictly cheaper than recomputing the same tokens.
          expect(plan.seconds).toBeLessThan(plan.recomputeS)
          expect(withTier.stallS).toBeLessThan(plain.stallS)
          expect(withTier.newTokens).toBe(s.promptTokens - s.decodeHeldTokens - withTier.loadBackTokens)
        } else {
          expect(withTier).toEqual(plain)
        }
      }),
      { numRuns: 300 },
    )
  })
  it('no host tokens: the same estimates and the same choice as before', () => {
    fc.assert(
      fc.property(tiered, ({ s, params }) => {
        const zero = { ...s, decodeHostTokens: 0 }
        expect(choosePath(zero, params)).toEqual(choosePath(withoutHost(s), params))
      }),
      { numRuns: 200 },
    )
  })
  it('a host part only ever moves the choice toward the D (local), never away from it', () => {
    fc.assert(
      fc.property(tiered, ({ s, params }) => {
        const plain = choosePath(withoutHost(s), params)
        const withTier = choosePath(s, params)
        if (plain.site === 'local') expect(withTier.site).toBe('local')
      }),
      { numRuns: 300 },
    )
  })
  it('a demoted session on a busy D: loading back beats a reseed that recomputing locally would lose to', () => {
    const s: PathSignals = {
      promptTokens: 40_500,
      decodeHeldTokens: 6_000,
      decodeHostTokens: 34_000,
      decodeQueueS: 0,
      runningDecodes: 5,
      prefill: { queueS: 0.5, heldTokens: 6_000 },
    }
    expect(choosePath(withoutHost(s), DEFAULT_PATH_PARAMS).site).toBe('remote')
    const c = choosePath(s, DEFAULT_PATH_PARAMS)
    expect(c.site).toBe('local')
    expect(c.local.loadBackTokens).toBe(34_000)
    expect(c.local.newTokens).toBe(500)
    expect(c.reason).toMatch(/34000 tokens loaded back/)
    // Over a link too slow to pay, the D recomputes (and the P wins again).
    const slow = pathParams(makeCostModel({ ...DEFAULT_COST_MODEL, hostLoadGBps: 0.001 }))
    expect(choosePath(s, slow).local.loadBackTokens).toBeUndefined()
  })
  it('refuses a negative or non-finite host part, naming it', () => {
    const s: PathSignals = { promptTokens: 10, decodeHeldTokens: 0, decodeQueueS: 0, runningDecodes: 0 }
    expect(() => estimateLocal({ ...s, decodeHostTokens: -1 }, DEFAULT_PATH_PARAMS)).toThrow(RouterError)
    expect(() => estimateLocal({ ...s, decodeHostTokens: Number.NaN }, DEFAULT_PATH_PARAMS)).toThrow(
      /decodeHostTokens/,
    )
  })
})
