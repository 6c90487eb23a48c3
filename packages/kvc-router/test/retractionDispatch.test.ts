import { describe, expect, it } from 'vitest'
import { type AdmitAction, type DispatchAction, Router, renderDispatch } from '../src/index.js'
import { type AdmitAnswer, ManualClock, ScriptedDriver, checkNoInflightLoad } from '../src/testing/index.js'

/** One P, two D; `admit` answers every admission; `before` sees every action before its answer. */
function setup(admit: (a: AdmitAction) => AdmitAnswer, before?: (a: DispatchAction) => void) {
  const clock = new ManualClock(1_000)
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    params: { pageSize: 16, pathChoice: 'adaptive' },
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
      { id: 'd0', role: 'decode', capacityTokens: 1e6 },
      { id: 'd1', role: 'decode', capacityTokens: 1e6 },
    ],
  })
  const driver = new ScriptedDriver({
    router,
    clock,
    admit,
    ...(before === undefined ? {} : { beforeAnswer: before }),
  })
  return { router, clock, driver }
}

const workerOf = (r: { final: { type: string } }) => (r.final as { workerId?: string }).workerId

describe('hot-session retraction in Dispatch', () => {
  it("a retracted session's next turn moves to another D; the record says why", () => {
    let retract: string[] | undefined
    const s = setup((a) =>
      a.request.sessionId === 'b' && retract !== undefined
        ? { kind: 'admit', retracted: retract }
        : { kind: 'admit' },
    )
    const a1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const own = workerOf(a1)!
    // Session b lands on a's D (a prefix of a's prompt would not matter: b is new) and its
    // admission answer retracts a.
    s.router.cluster.store.exclude('b', own === 'd0' ? 'd1' : 'd0')
    retract = ['a']
    const b1 = s.driver.runTurn({ sessionId: 'b', promptTokens: 2_000 })
    expect(workerOf(b1)).toBe(own)
    expect(renderDispatch(b1.final.record)).toContain(`${own} retracts session a (memory pressure)`)
    expect(s.router.cluster.store.isExcluded('a', own)).toBe(true)
    const a2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_300 })
    expect(a2.final.type).toBe('done')
    expect(workerOf(a2)).not.toBe(own)
    expect(a2.final).toMatchObject({ migratedFrom: own })
    // Its success elsewhere ends the retraction: nothing pending, the exclusion reset.
    expect(s.router.cluster.retractions.has('a')).toBe(false)
    expect(s.router.cluster.store.isExcluded('a', own)).toBe(false)
    checkNoInflightLoad(s.router)
  })

  it('a session retracted while its turn runs there stays excluded after that turn succeeds', () => {
    let inner = false
    let ownOfA: string | undefined
    const s = setup(
      (a) => (a.request.sessionId === 'b' ? { kind: 'admit', retracted: ['a'] } : { kind: 'admit' }),
      (act) => {
        // While a's first turn is being sent, b's turn is admitted on the same D, which retracts a.
        if (inner || act.type !== 'sendFast' || act.turnId.length === 0) return
        if (ownOfA !== undefined) return
        ownOfA = act.workerId
        inner = true
        s.router.cluster.store.exclude('b', act.workerId === 'd0' ? 'd1' : 'd0')
        const b = s.driver.runTurn({ sessionId: 'b', promptTokens: 2_000 })
        expect(workerOf(b)).toBe(act.workerId)
        inner = false
      },
    )
    const a1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    expect(workerOf(a1)).toBe(ownOfA)
    // a's success reset its flags, then the pending retraction excluded it again.
    expect(s.router.cluster.store.isExcluded('a', ownOfA!)).toBe(true)
    const a2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_300 })
    expect(workerOf(a2)).not.toBe(ownOfA)
    checkNoInflightLoad(s.router)
  })

  it('without retracted sessions in the answers nothing moves', () => {
    const s = setup(() => ({ kind: 'admit' }))
    const a1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    s.driver.runTurn({ sessionId: 'b', promptTokens: 2_000 })
    const a2 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_300 })
    expect(workerOf(a2)).toBe(workerOf(a1))
    expect(a2.final).toMatchObject({ path: 'fast' })
  })
})

describe('pending retractions are bounded (a plain Router user, no proxy to forget sessions)', () => {
  it('a session retracted with no turn running, or whose running turn fails, leaves no entry behind', () => {
    // b's answers retract a; a never comes back.
    const s = setup((a) =>
      a.request.sessionId === 'b' ? { kind: 'admit', retracted: ['a'] } : { kind: 'admit' },
    )
    const a1 = s.driver.runTurn({ sessionId: 'a', promptTokens: 8_000 })
    const own = workerOf(a1)!
    s.router.cluster.store.exclude('b', own === 'd0' ? 'd1' : 'd0')
    s.driver.runTurn({ sessionId: 'b', promptTokens: 2_000 })
    // The exclusion is what moves a's next turn; no pending entry is needed for it.
    expect(s.router.cluster.store.isExcluded('a', own)).toBe(true)
    expect(s.router.cluster.retractions.size).toBe(0)
    expect(s.router.cluster.retractions.runningSessions).toBe(0)
  })

  it('a retraction recorded while the turn runs goes when that turn fails or is aborted', () => {
    for (const end of ['fail', 'abort'] as const) {
      const s = setup(() => ({ kind: 'admit' }))
      const t = s.router.dispatch({ sessionId: 'a', promptTokens: 8_000 })
      const first = t.next()
      expect(first.type).toBe('admit')
      expect(s.router.cluster.retractions.record('a', 'd0')).toBe(true)
      expect(s.router.cluster.retractions.size).toBe(1)
      if (end === 'abort') t.abort()
      else {
        // Every admission times out until the turn gives up.
        let a = first
        while (a.type !== 'fail')
          a = t.next(a.type === 'wait' ? { type: 'waited' } : { type: 'admitTimeout' })
      }
      expect(s.router.cluster.retractions.size).toBe(0)
      expect(s.router.cluster.retractions.runningSessions).toBe(0)
    }
  })
})
