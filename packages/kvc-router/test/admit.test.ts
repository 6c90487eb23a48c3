import { describe, expect, it } from 'vitest'
import {
  type AdmitRequest,
  type AdmitSession,
  type AdmitWorkerState,
  ClusterView,
  LeaseBook,
  RouterError,
  admit,
  parseAdmitResponse,
  recommendedPauseMs,
} from '../src/index.js'

const sig = (tokenUsageAfter: number, transferQueueDepth = 0, retractedQueueDepth = 0) => ({
  tokenUsageAfter,
  transferQueueDepth,
  retractedQueueDepth,
})

describe('the pause-hint formula at its edges', () => {
  it('retracted requests win over everything', () => {
    expect(recommendedPauseMs(sig(0.1, 0, 1))).toBe(1500)
    expect(recommendedPauseMs(sig(0.99, 50, 3))).toBe(1500)
  })
  it('usage >= 0.90: 5 ms per basis point of overshoot, clamped to [200, 2000]', () => {
    expect(recommendedPauseMs(sig(0.9))).toBe(200) // 0 bps → clamped up
    expect(recommendedPauseMs(sig(0.9039))).toBe(200) // 39 bps = 195 ms → 200
    expect(recommendedPauseMs(sig(0.9041))).toBe(205)
    expect(recommendedPauseMs(sig(0.91))).toBe(500)
    expect(recommendedPauseMs(sig(0.92))).toBe(1000)
    expect(recommendedPauseMs(sig(0.94))).toBe(2000)
    expect(recommendedPauseMs(sig(1.5))).toBe(2000)
  })
  it('below 0.90 the transfer-queue rule applies from depth 8: min(2000, 100 × depth)', () => {
    expect(recommendedPauseMs(sig(0.8999, 7))).toBe(0)
    expect(recommendedPauseMs(sig(0.8999, 8))).toBe(800)
    expect(recommendedPauseMs(sig(0.5, 20))).toBe(2000)
    expect(recommendedPauseMs(sig(0.5, 25))).toBe(2000)
    expect(recommendedPauseMs(sig(0.95, 25))).toBe(2000) // the usage rule came first
    expect(recommendedPauseMs(sig(0.9, 25))).toBe(200)
  })
  it('otherwise no pause', () => {
    expect(recommendedPauseMs(sig(0))).toBe(0)
  })
})

const session = (
  sessionId: string,
  residentTokens: number,
  lastAccessTime: number,
  idle = true,
): AdmitSession => ({
  sessionId,
  residentTokens,
  lastAccessTime,
  idle,
})
function state(
  p: Omit<Partial<AdmitWorkerState>, 'sessions'> & { sessions?: AdmitSession[] } = {},
): AdmitWorkerState {
  return {
    capacityTokens: 100_000,
    usedTokens: 0,
    evictableTokens: 0,
    leases: [],
    transferQueueDepth: 0,
    retractedQueueDepth: 0,
    ...p,
    sessions: new Map((p.sessions ?? []).map((s) => [s.sessionId, s])),
  }
}
const req = (p: Partial<AdmitRequest> = {}): AdmitRequest => ({
  requestId: 'r1',
  sessionId: 's',
  path: 'fast',
  promptTokens: 1_000,
  appendTokens: 1_000,
  ...p,
})

describe('Algorithm 2: admit', () => {
  it('recomputes the append from its own residency and reserves append + decode reserve', () => {
    const d = admit(
      state({ usedTokens: 40_000, sessions: [session('s', 40_000, 5, false)] }),
      req({ promptTokens: 42_000, appendTokens: 99 }),
      {
        now: 10,
      },
    )
    expect(d.response).toMatchObject({
      admitted: true,
      reason: 'ok',
      residentTokens: 40_000,
      needTokens: 2_512,
      leaseMs: 5_000,
    })
    expect(d.lease).toEqual({
      leaseId: 'r1',
      sessionId: 's',
      tokens: 2_512,
      expiresAt: 5_010,
      sloClass: 'interactive',
    })
    expect(d.response.tokenUsageAfter).toBeCloseTo((40_000 + 2_512) / 100_000)
  })

  it('uses the prefix match on its tree when it exceeds the session residency (seed path)', () => {
    const d = admit(
      state(),
      req({ path: 'seed', promptTokens: 10_000, appendTokens: 10_000, expectedOutputTokens: 0 }),
      {
        now: 0,
        matchedTokens: 9_000,
      },
    )
    expect(d.response.needTokens).toBe(1_000)
  })

  it('rejects a fast-path append larger than maxAppendTokens (take the seed path), even with room', () => {
    const d = admit(state(), req({ promptTokens: 9_000, appendTokens: 9_000 }), { now: 0 })
    expect(d.response).toMatchObject({ admitted: false, reason: 'append_too_large' })
    expect(d.lease).toBeUndefined()
    const seed = admit(state(), req({ path: 'seed', promptTokens: 9_000, appendTokens: 9_000 }), { now: 0 })
    expect(seed.response.admitted).toBe(true)
  })

  it('releases idle sessions least recently used first, never the requester, only as many as needed', () => {
    const st = state({
      usedTokens: 100_000,
      evictableTokens: 0,
      sessions: [
        session('s', 20_000, 1),
        session('c', 30_000, 3),
        session('a', 30_000, 1),
        session('busy', 10_000, 0, false),
        session('b', 20_000, 2),
      ],
    })
    const d = admit(
      st,
      req({ path: 'seed', promptTokens: 60_000, appendTokens: 40_000, expectedOutputTokens: 488 }),
      {
        now: 0,
      },
    )
    // need = 60,000 − 20,000 + 488 = 40,488: 'a' (30k, t=1) then 'b' (20k, t=2); 'busy' is running, 's' is the requester.
    expect(d.response).toMatchObject({ admitted: true, releasedSessions: ['a', 'b'] })
    expect(d.releaseSessions).toEqual(['a', 'b'])
    // What idle sessions still hold after this answer ('c'), for the router to keep apart.
    expect(d.response.releasableTokens).toBe(30_000)
  })

  it('never releases a session whose admitted turn holds a live lease, even if reported idle', () => {
    const st = state({
      usedTokens: 100_000,
      evictableTokens: 0,
      sessions: [session('a', 30_000, 1), session('b', 30_000, 2)],
      leases: [
        { leaseId: 'a/t2', sessionId: 'a', tokens: 1_000, expiresAt: 10_000, sloClass: 'interactive' },
      ],
    })
    const d = admit(st, req({ sessionId: 'n', path: 'seed', promptTokens: 20_000, appendTokens: 20_000 }), {
      now: 0,
    })
    expect(d.response).toMatchObject({ admitted: true, releasedSessions: ['b'] })
    const tooBig = admit(
      st,
      req({ sessionId: 'n', path: 'seed', promptTokens: 40_000, appendTokens: 40_000 }),
      {
        now: 0,
      },
    )
    expect(tooBig.response).toMatchObject({ admitted: false, reason: 'capacity' })
    expect(tooBig.releaseSessions).toEqual([])
  })

  it('rejects for capacity when even releasing every idle session is not enough, releasing nothing', () => {
    const st = state({ usedTokens: 100_000, evictableTokens: 10_000, sessions: [session('a', 5_000, 1)] })
    const d = admit(st, req({ path: 'seed', promptTokens: 20_000, appendTokens: 20_000 }), { now: 0 })
    expect(d.response).toMatchObject({ admitted: false, reason: 'capacity', recommendedPauseMs: 2000 })
    expect(d.releaseSessions).toEqual([])
    expect(d.response.releasedSessions).toBeUndefined()
    // The idle session 'a' (5,000) counts as available in the reported usage.
    expect(d.response.tokenUsageAfter).toBeCloseTo((100_000 - 15_000 - 5_000 + 20_512) / 100_000)
  })

  it('does not report pressure (no pause hint) when the D is full of idle sessions it can release', () => {
    const st = state({
      usedTokens: 95_000,
      evictableTokens: 0,
      sessions: [session('s', 5_000, 5), session('a', 45_000, 1), session('b', 45_000, 2)],
    })
    const d = admit(st, req({ promptTokens: 6_000, appendTokens: 1_000, expectedOutputTokens: 0 }), {
      now: 0,
    })
    expect(d.response).toMatchObject({ admitted: true, recommendedPauseMs: 0 })
    // Nothing had to be released, yet both idle sessions count as available.
    expect(d.releaseSessions).toEqual([])
    expect(d.response.tokenUsageAfter).toBeCloseTo((95_000 - 90_000 + 1_000) / 100_000)
    expect(d.response.releasableTokens).toBe(90_000)
    // The router keeps them apart: available = free + evictable − need, releasable on the side.
    const view = new ClusterView({ now: () => 0 })
    view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 100_000 })
    view.applyAdmission('d0', d.response)
    expect(view.worker('d0')).toMatchObject({ availableTokens: 4_000, releasableTokens: 90_000 })
  })

  it('lower SLO classes hit their usage ceiling first (slo_budget) while interactive still fits', () => {
    const st = state({ usedTokens: 90_000, evictableTokens: 0 })
    const r = (sloClass: 'interactive' | 'batch' | 'background') =>
      admit(st, req({ promptTokens: 4_000, appendTokens: 4_000, expectedOutputTokens: 0, sloClass }), {
        now: 0,
      }).response
    expect(r('interactive')).toMatchObject({ admitted: true, tokenUsageAfter: 0.94 })
    expect(r('batch')).toMatchObject({ admitted: true })
    expect(r('background')).toMatchObject({ admitted: false, reason: 'slo_budget' })
    const fuller = state({ usedTokens: 92_000 })
    const b = admit(
      fuller,
      req({ promptTokens: 4_000, appendTokens: 4_000, expectedOutputTokens: 0, sloClass: 'batch' }),
      {
        now: 0,
      },
    )
    expect(b.response).toMatchObject({ admitted: false, reason: 'slo_budget' })
  })

  it('counts live leases as reserved and ignores (and reports) expired ones', () => {
    const leases = [
      { leaseId: 'old', sessionId: 'x', tokens: 50_000, expiresAt: 100, sloClass: 'batch' as const },
      { leaseId: 'live', sessionId: 'y', tokens: 50_000, expiresAt: 1_000, sloClass: 'batch' as const },
    ]
    const st = state({ leases })
    const at500 = admit(st, req({ path: 'seed', promptTokens: 10_000, appendTokens: 10_000 }), { now: 500 })
    expect(at500.response).toMatchObject({ admitted: true })
    expect(at500.expiredLeases).toEqual(['old'])
    const tight = admit(st, req({ path: 'seed', promptTokens: 60_000, appendTokens: 60_000 }), { now: 500 })
    expect(tight.response.reason).toBe('capacity')
    const later = admit(st, req({ path: 'seed', promptTokens: 60_000, appendTokens: 60_000 }), { now: 1_000 })
    expect(later.response.admitted).toBe(true) // the live lease expired at 1,000
    expect(later.expiredLeases).toEqual(['old', 'live'])
  })

  it('is idempotent for a repeated request id with a live lease', () => {
    const book = new LeaseBook()
    const st = () => state({ usedTokens: 98_000, leases: book.live(0) })
    const first = admit(st(), req({ promptTokens: 1_000, appendTokens: 1_000 }), { now: 0 })
    book.apply(first)
    const again = admit(st(), req({ promptTokens: 1_000, appendTokens: 1_000 }), { now: 0 })
    expect(again.response).toMatchObject({ admitted: true, reason: 'ok' })
    expect(again.lease).toBe(first.lease)
    expect(book.size).toBe(1)
    const other = admit(st(), req({ requestId: 'r2', promptTokens: 1_000, appendTokens: 1_000 }), { now: 0 })
    expect(other.response.reason).toBe('capacity')
  })

  it('a draining worker rejects', () => {
    expect(admit(state({ draining: true }), req(), { now: 0 }).response.reason).toBe('draining')
  })

  it('caps the lease at maxLeaseMs and answers whole milliseconds with a fractional clock', () => {
    expect(admit(state(), req({ leaseMs: 10 ** 9 }), { now: 0 }).response.leaseMs).toBe(60_000)
    const r = admit(state(), req(), { now: 1234.567 }).response
    expect(r.leaseMs).toBe(5_000)
    expect(parseAdmitResponse(r)).toEqual(r)
  })

  it('refuses malformed requests and inconsistent states', () => {
    const code = (f: () => unknown) => {
      try {
        f()
      } catch (e) {
        return e instanceof RouterError ? e.code : 'other'
      }
      return undefined
    }
    expect(code(() => admit(state(), req({ promptTokens: -1 }), { now: 0 }))).toBe('INVALID_MESSAGE')
    expect(code(() => admit(state(), req({ appendTokens: 2_000 }), { now: 0 }))).toBe('INVALID_MESSAGE')
    expect(code(() => admit(state({ usedTokens: 200_000 }), req(), { now: 0 }))).toBe('INVALID_STATE')
    expect(code(() => admit(state({ usedTokens: 10, evictableTokens: 20 }), req(), { now: 0 }))).toBe(
      'INVALID_STATE',
    )
    expect(code(() => admit(state({ capacityTokens: 0 }), req(), { now: 0 }))).toBe('INVALID_STATE')
    expect(code(() => admit(state(), req(), { now: Number.NaN }))).toBe('INVALID_OPTION')
  })
})

describe('LeaseBook', () => {
  it('takes, releases and expires leases', () => {
    const b = new LeaseBook()
    b.take({ leaseId: 'a', sessionId: 's', tokens: 10, expiresAt: 100, sloClass: 'interactive' })
    b.take({ leaseId: 'b', sessionId: 's', tokens: 5, expiresAt: 200, sloClass: 'interactive' })
    expect(b.reservedTokens(50)).toBe(15)
    expect(b.reservedTokens(150)).toBe(5)
    expect(b.live(150).map((l) => l.leaseId)).toEqual(['b'])
    expect(b.release('b')).toBe(true)
    expect(b.release('b')).toBe(false)
    expect(b.expire(100)).toEqual(['a'])
    expect(b.size).toBe(0)
  })
})
