import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_RETRACTION_PARAMS,
  RouterError,
  type RetractionSignals,
  planRetraction,
} from '../src/index.js'
import { RETRACTION_CAP, retractionSignals } from './arbitraries.js'

const CAP = RETRACTION_CAP

const signals = retractionSignals(0.85, true)

const room = fc.array(fc.integer({ min: -20_000, max: 120_000 }), { maxLength: 6 })

/** Can the retracted sessions be charged to the rooms, each to the one with the most left? */
function fits(s: RetractionSignals, retracted: readonly string[], rooms: readonly number[]): boolean {
  const left = rooms.slice()
  for (const id of retracted) {
    const x = s.sessions.find((y) => y.sessionId === id)!
    let at = -1
    for (let i = 0; i < left.length; i++) if (at < 0 || left[i]! > left[at]!) at = i
    if (at < 0 || left[at]! < x.residentTokens) return false
    left[at] = left[at]! - x.residentTokens
  }
  return true
}

describe('planRetraction with placeableTokens', () => {
  const three = {
    capacityTokens: CAP,
    tokenUsageAfter: 0.95,
    requester: 'a',
    sessions: [
      { sessionId: 'a', residentTokens: 60_000, idle: false, lastAccessTime: 30 },
      { sessionId: 'b', residentTokens: 60_000, idle: false, lastAccessTime: 10 },
      { sessionId: 'c', residentTokens: 20_000, idle: false, lastAccessTime: 20 },
    ],
  }

  it('skips a session no other D can take and takes the next that fits', () => {
    expect(planRetraction(three).sessions).toEqual(['b'])
    const plan = planRetraction({ ...three, placeableTokens: [40_000, 25_000] })
    // b (60K) fits nowhere; c (20K) goes to the D with 40K; 0.95 − 0.10 = 0.85 > 0.80, nothing else.
    expect(plan.sessions).toEqual(['c'])
    expect(plan.reason).toContain('1 left')
    expect(planRetraction({ ...three, placeableTokens: [] }).sessions).toEqual([])
    expect(planRetraction({ ...three, placeableTokens: [60_000] }).sessions).toEqual(['b'])
  })

  it('never retracts a session that just moved here', () => {
    const moved = {
      ...three,
      sessions: three.sessions.map((x) => (x.sessionId === 'b' ? { ...x, recentlyMoved: true } : x)),
    }
    expect(planRetraction({ ...moved, placeableTokens: [100_000] }).sessions).toEqual(['c'])
    // Without room signals the flag is not read: the plan of retract=on.
    expect(planRetraction(moved).sessions).toEqual(['b'])
  })

  it('rejects bad room signals with a typed error naming the value', () => {
    expect(() => planRetraction({ ...three, placeableTokens: [Number.NaN] })).toThrow(RouterError)
    expect(() => planRetraction({ ...three, placeableTokens: 'x' as unknown as number[] })).toThrow(
      /placeableTokens/,
    )
    const bad = { ...three, sessions: [{ ...three.sessions[1]!, recentlyMoved: 1 as unknown as boolean }] }
    expect(() => planRetraction({ ...bad, placeableTokens: [1] })).toThrow(/recentlyMoved/)
  })

  it('properties: what it retracts fits the room and never just moved; no room, nothing', () => {
    fc.assert(
      fc.property(signals, room, (s, rooms) => {
        const plan = planRetraction({ ...s, placeableTokens: rooms })
        const byId = new Map(s.sessions.map((x) => [x.sessionId, x]))
        for (const id of plan.sessions) expect(byId.get(id)!.recentlyMoved).not.toBe(true)
        expect(fits(s, plan.sessions, rooms)).toBe(true)
        const none = planRetraction({ ...s, placeableTokens: rooms.map((r) => Math.min(r, 0)) })
        expect(none.sessions.filter((id) => byId.get(id)!.residentTokens > 0)).toEqual([])
        // Every retracted session is still one the plan without room would consider: hot, not the requester.
        for (const id of plan.sessions) {
          expect(byId.get(id)!.idle).toBe(false)
          expect(id).not.toBe(s.requester)
        }
      }),
    )
  })

  it('properties: unbounded room and no moved session give the plan of retract=on', () => {
    fc.assert(
      fc.property(signals, fc.integer({ min: 1, max: 4 }), (s0, n) => {
        const s = { ...s0, sessions: s0.sessions.map((x) => ({ ...x, recentlyMoved: false })) }
        const big = Array.from({ length: n }, () => 1e9)
        expect(planRetraction({ ...s, placeableTokens: big }, DEFAULT_RETRACTION_PARAMS).sessions).toEqual(
          planRetraction(s, DEFAULT_RETRACTION_PARAMS).sessions,
        )
      }),
    )
  })

  it('properties: monotone in room for a single D: more room never retracts fewer tokens of one session size', () => {
    // With sessions of one size the greedy charge is exact: more room on the other D never lowers
    // how many sessions can go (up to what the usage needs).
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1_000, max: 60_000 }),
        fc.double({ min: 0.9, max: 1.3, noNaN: true }),
        fc.integer({ min: 0, max: 300_000 }),
        fc.integer({ min: 0, max: 300_000 }),
        (n, size, usage, r1, r2) => {
          const s: RetractionSignals = {
            capacityTokens: CAP,
            tokenUsageAfter: usage,
            sessions: Array.from({ length: n }, (_, i) => ({
              sessionId: `s${i}`,
              residentTokens: size,
              idle: false,
              lastAccessTime: i,
            })),
          }
          const lo = planRetraction({ ...s, placeableTokens: [Math.min(r1, r2)] }).sessions.length
          const hi = planRetraction({ ...s, placeableTokens: [Math.max(r1, r2)] }).sessions.length
          expect(hi).toBeGreaterThanOrEqual(lo)
        },
      ),
    )
  })
})
