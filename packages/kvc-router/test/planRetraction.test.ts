import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_RETRACTION_PARAMS,
  RouterError,
  type RetractionSession,
  type RetractionSignals,
  planRetraction,
} from '../src/index.js'
import { RETRACTION_CAP, retractionSignals } from './arbitraries.js'

const CAP = RETRACTION_CAP

const signals = retractionSignals(0)

const params = fc
  .record({
    above: fc.double({ min: 0.5, max: 1, noNaN: true }),
    gap: fc.double({ min: 0.01, max: 0.5, noNaN: true }),
    keepHot: fc.integer({ min: 1, max: 4 }),
  })
  .map(({ above, gap, keepHot }) => ({ retractAbove: above, retractTo: Math.max(0, above - gap), keepHot }))

function byId(s: RetractionSignals): Map<string, RetractionSession> {
  return new Map(s.sessions.map((x) => [x.sessionId, x]))
}

describe('planRetraction', () => {
  it('retracts the coldest hot session, never the requester', () => {
    const plan = planRetraction(
      {
        capacityTokens: CAP,
        tokenUsageAfter: 0.95,
        requester: 'b',
        sessions: [
          { sessionId: 'a', residentTokens: 60_000, idle: false, lastAccessTime: 30 },
          { sessionId: 'b', residentTokens: 60_000, idle: false, lastAccessTime: 5 },
          { sessionId: 'c', residentTokens: 60_000, idle: false, lastAccessTime: 20 },
          { sessionId: 'd', residentTokens: 60_000, idle: true, lastAccessTime: 1 },
        ],
      },
      DEFAULT_RETRACTION_PARAMS,
    )
    expect(plan.sessions).toEqual(['c'])
    expect(plan.usageAfter).toBeCloseTo(0.65)
    expect(plan.reason).toContain('retract 1')
  })

  it('takes as many as it needs, down to keepHot', () => {
    const sessions = [1, 2, 3].map((i) => ({
      sessionId: `s${i}`,
      residentTokens: 10_000,
      idle: false,
      lastAccessTime: i,
    }))
    const s = { capacityTokens: CAP, tokenUsageAfter: 0.99, sessions }
    // Each frees 0.05: two reach 0.89, not 0.80; keepHot 1 stops at two of three.
    expect(planRetraction(s).sessions).toEqual(['s1', 's2'])
    expect(planRetraction(s, { ...DEFAULT_RETRACTION_PARAMS, keepHot: 3 }).sessions).toEqual([])
    expect(planRetraction({ ...s, tokenUsageAfter: 0.89 }).sessions).toEqual([])
  })

  it('rejects bad parameters and signals with a typed error', () => {
    const s = { capacityTokens: CAP, tokenUsageAfter: 0.95, sessions: [] }
    for (const bad of [
      { ...DEFAULT_RETRACTION_PARAMS, retractAbove: 0 },
      { ...DEFAULT_RETRACTION_PARAMS, retractTo: 0.95 },
      { ...DEFAULT_RETRACTION_PARAMS, keepHot: 0 },
    ]) {
      expect(() => planRetraction(s, bad)).toThrow(RouterError)
    }
    expect(() => planRetraction({ ...s, capacityTokens: 0 })).toThrow(/capacityTokens/)
    expect(() => planRetraction({ ...s, tokenUsageAfter: Number.NaN })).toThrow(/tokenUsageAfter/)
    expect(() =>
      planRetraction({
        ...s,
        sessions: [{ sessionId: 'x', residentTokens: -1, idle: false, lastAccessTime: 0 }],
      }),
    ).toThrow(/residentTokens of x/)
  })

  it('properties: threshold, eligibility, keepHot, coldest first, minimal', () => {
    fc.assert(
      fc.property(signals, params, (s, p) => {
        const plan = planRetraction(s, p)
        const m = byId(s)
        if (s.tokenUsageAfter < p.retractAbove) expect(plan.sessions).toEqual([])
        expect(new Set(plan.sessions).size).toBe(plan.sessions.length)
        for (const id of plan.sessions) {
          const x = m.get(id)!
          expect(x.idle).toBe(false)
          expect(id).not.toBe(s.requester)
        }
        const hot = new Set(s.sessions.filter((x) => !x.idle).map((x) => x.sessionId))
        if (s.requester !== undefined) hot.add(s.requester)
        if (plan.sessions.length > 0)
          expect(hot.size - plan.sessions.length).toBeGreaterThanOrEqual(p.keepHot)
        // Coldest first: a kept hot candidate with tokens is never colder than a retracted one.
        const gone = plan.sessions.map((id) => m.get(id)!)
        const latest = Math.max(...gone.map((x) => x.lastAccessTime))
        for (const x of s.sessions) {
          if (x.idle || x.sessionId === s.requester || plan.sessions.includes(x.sessionId)) continue
          if (x.residentTokens > 0 && gone.length > 0) expect(x.lastAccessTime).toBeGreaterThanOrEqual(latest)
        }
        // Minimal: without its last session the plan is still above retractTo.
        if (gone.length > 0) {
          const freed = gone.slice(0, -1).reduce((a, x) => a + x.residentTokens, 0)
          expect(s.tokenUsageAfter - freed / CAP).toBeGreaterThan(p.retractTo)
        }
        const sum = gone.reduce((a, x) => a + x.residentTokens, 0)
        expect(plan.usageAfter).toBeCloseTo(Math.max(0, s.tokenUsageAfter - sum / CAP), 9)
      }),
    )
  })

  it('property: a higher usage retracts a superset', () => {
    fc.assert(
      fc.property(signals, params, fc.double({ min: 0, max: 0.5, noNaN: true }), (s, p, more) => {
        const lo = planRetraction(s, p).sessions
        const hi = planRetraction({ ...s, tokenUsageAfter: s.tokenUsageAfter + more }, p).sessions
        for (const id of lo) expect(hi).toContain(id)
      }),
    )
  })
})
