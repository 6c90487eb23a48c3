import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type DecodeSessionStatus,
  type DecodeSessionsView,
  type Lease,
  Router,
  admit,
  admitWorkerState,
  decodeCapacityReport,
} from '../src/index.js'

/**
 * A session cache as the builders see it. Each session frees `own` tokens when released alone;
 * `releasableTokens` answers as `SessionCache` does (busy sessions and, with `idleMs`, younger
 * ones count 0).
 */
function sessionsView(
  list: readonly (DecodeSessionStatus & { readonly own: number })[],
  evictable: number,
  now: number,
): DecodeSessionsView & { calls: { idleMs?: number; sessionId?: string }[] } {
  const calls: { idleMs?: number; sessionId?: string }[] = []
  return {
    calls,
    cache: { evictableSize: () => evictable },
    listSessionStatuses: () => list,
    releasableTokens: (o) => {
      calls.push({ ...o })
      let t = 0
      for (const s of list) {
        if (o.sessionId !== undefined && s.sessionId !== o.sessionId) continue
        if (s.active || (o.idleMs !== undefined && now - s.lastAccessTime < o.idleMs)) continue
        t += s.own
      }
      return t
    },
  }
}

const sessionArb = fc.record({
  active: fc.boolean(),
  lastAccessTime: fc.nat({ max: 10_000 }),
  residentTokens: fc.nat({ max: 5_000 }),
  own: fc.nat({ max: 5_000 }),
})

const worldArb = fc.record({
  sessions: fc.array(sessionArb, { maxLength: 12 }),
  size: fc.integer({ min: 1, max: 100_000 }),
  freeShare: fc.double({ min: 0, max: 1, noNaN: true }),
  evictable: fc.nat({ max: 200_000 }),
  ttl: fc.option(fc.nat({ max: 12_000 }), { nil: undefined }),
  now: fc.integer({ min: 10_000, max: 20_000 }),
  transfers: fc.nat({ max: 20 }),
  retracted: fc.nat({ max: 2 }),
  reserved: fc.nat({ max: 200_000 }),
})

describe('a D worker’s admission state and capacity report, from one builder', () => {
  it('idle = no request in flight and, with a TTL, idle that long; only idle sessions carry releasableTokens', () => {
    fc.assert(
      fc.property(worldArb, (w) => {
        const list = w.sessions.map((s, i) => ({ ...s, sessionId: `s${i}` }))
        const view = sessionsView(list, w.evictable, w.now)
        const free = Math.floor(w.size * w.freeShare)
        const pool = { size: w.size, availableSize: () => free }
        const src = {
          pool,
          sessions: view,
          idleTtlMs: w.ttl,
          transferQueueDepth: w.transfers,
          retractedQueueDepth: w.retracted,
        }
        const leases: Lease[] = [
          { leaseId: 'l', sessionId: 's0', tokens: 10, expiresAt: w.now + 1, sloClass: 'interactive' },
        ]
        const st = admitWorkerState(src, { now: w.now, leases })
        expect(st.capacityTokens).toBe(w.size)
        expect(st.usedTokens).toBe(w.size - free)
        expect(st.evictableTokens).toBe(Math.min(w.size - free, w.evictable))
        expect(st.leases).toBe(leases)
        expect(st.transferQueueDepth).toBe(w.transfers)
        expect(st.retractedQueueDepth).toBe(w.retracted)
        expect('draining' in st).toBe(false)
        expect([...st.sessions.keys()]).toEqual(list.map((s) => s.sessionId))
        for (const s of list) {
          const got = st.sessions.get(s.sessionId)!
          const idle = !s.active && (w.ttl === undefined || w.now - s.lastAccessTime >= w.ttl)
          expect(got).toMatchObject({
            sessionId: s.sessionId,
            residentTokens: s.residentTokens,
            lastAccessTime: s.lastAccessTime,
            idle,
          })
          expect(got.releasableTokens).toBe(idle ? s.own : undefined)
        }
        // What `admit` reads is consistent: it never refuses the state as malformed.
        admit(
          st,
          { requestId: 'r', sessionId: 'x', path: 'seed', promptTokens: 10, appendTokens: 10 },
          { now: w.now },
        )

        const report = decodeCapacityReport(src, w.reserved)
        expect(report).toEqual({
          freeTokens: free,
          evictableTokens: w.evictable,
          reservedTokens: Math.min(w.reserved, free + w.evictable),
          // The report's releasable tokens follow the same idle rule as the admission state.
          releasableTokens: list
            .filter((s) => st.sessions.get(s.sessionId)!.idle)
            .reduce((t, s) => t + s.own, 0),
          transferQueueDepth: w.transfers,
          retractedQueueDepth: w.retracted,
        })
      }),
    )
  })

  it('a worker without sessions: nothing idle, nothing evictable; draining is passed through', () => {
    const src = {
      pool: { size: 1_000, availableSize: () => 400 },
      transferQueueDepth: 3,
      retractedQueueDepth: 0,
    }
    const st = admitWorkerState(src, { now: 5, leases: [], draining: true })
    expect(st).toMatchObject({ capacityTokens: 1_000, usedTokens: 600, evictableTokens: 0, draining: true })
    expect(st.sessions.size).toBe(0)
    expect(decodeCapacityReport(src, 1_000)).toEqual({
      freeTokens: 400,
      evictableTokens: 0,
      reservedTokens: 400,
      releasableTokens: 0,
      transferQueueDepth: 3,
      retractedQueueDepth: 0,
    })
  })

  it('admission releases an idle session for what it frees alone, not for its resident tokens', () => {
    // Two idle sessions share a 6,000-token prefix: each frees only its own 1,000-token tail.
    const list = [
      { sessionId: 'a', active: false, lastAccessTime: 1, residentTokens: 7_000, own: 1_000 },
      { sessionId: 'b', active: false, lastAccessTime: 2, residentTokens: 7_000, own: 1_000 },
    ]
    const src = {
      pool: { size: 10_000, availableSize: () => 2_000 },
      sessions: sessionsView(list, 0, 10),
      transferQueueDepth: 0,
      retractedQueueDepth: 0,
    }
    const req = {
      requestId: 'r',
      sessionId: 'c',
      path: 'seed' as const,
      promptTokens: 3_000,
      appendTokens: 3_000,
    }
    const d = admit(admitWorkerState(src, { now: 10, leases: [] }), req, { now: 10 }, undefined)
    // need = 3,000 + 512 reserve; 2,000 free + 2 × 1,000 releasable = 4,000 ≥ 3,512.
    expect(d.response.admitted).toBe(true)
    expect(d.releaseSessions).toEqual(['a', 'b'])
    // With a TTL of 9 ms only 'a' (idle since t=1) may go: 3,000 < 3,512.
    const young = admit(admitWorkerState({ ...src, idleTtlMs: 9 }, { now: 10, leases: [] }), req, { now: 10 })
    expect(young.response).toMatchObject({ admitted: false, reason: 'capacity' })
  })

  it('the capacity report feeds the router', () => {
    const router = new Router({ workers: [{ id: 'd0', role: 'decode', capacityTokens: 4096 }] })
    const pool = { size: 4096, availableSize: () => 3_000 }
    router.cluster.reportCapacity(
      'd0',
      decodeCapacityReport({ pool, transferQueueDepth: 0, retractedQueueDepth: 0 }, 500),
    )
    expect(router.cluster.worker('d0').availableTokens).toBe(2_500)
  })
})
