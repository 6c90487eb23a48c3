import { describe, expect, it } from 'vitest'
import {
  ClusterView,
  ResidencyIndex,
  Router,
  RouterError,
  RouterErrorCode,
  type TurnDispatch,
  admit,
  parseAdmitRequest,
  resolveRouterParams,
} from '../src/index.js'
import { ManualClock, ScriptedDriver } from '../src/testing/index.js'

function fresh(): Router {
  const r = new Router({
    now: () => 0,
    random: () => 0.5,
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1000 },
      { id: 'd0', role: 'decode', capacityTokens: 1000 },
    ],
  })
  r.ingest('d0', {
    type: 'BlockStored',
    eventId: 0,
    blockHashes: [1n],
    parentBlockHash: null,
    tokenIds: [],
    blockSize: 16,
    extraKey: null,
  })
  r.cluster.store.setBinding('s', { workerId: 'd0', committedTokens: 10, verifiedBlocks: 1, updatedAt: 0 })
  return r
}

/** Everything observable about a router's state. */
function snapshot(r: Router): string {
  const c = r.cluster
  const ids = [...c.prefillIds(), ...c.decodeIds()]
  return JSON.stringify(
    {
      workers: ids.map((id) => c.worker(id)),
      residency: c.decodeIds().map((id) => [c.residency.workerStatus(id), c.residency.workerBlocks(id)]),
      bindings: c.store.bindingCount(),
      binding: c.store.getBinding('s'),
      rejects: c.store.rejects('s', 'd0'),
      link: c.linkHealth('p0', 'd0'),
    },
    (_, v) => (typeof v === 'bigint' ? v.toString() : v),
  )
}

/**
 * `[code, call, setup?]`: `setup` runs before the snapshot (what it changes legitimately, such as a
 * turn's first action counting it toward its D's load, is not the refused call's doing).
 */
const cases: [RouterErrorCode, (r: Router, prepared: unknown) => unknown, ((r: Router) => unknown)?][] = [
  ['INVALID_OPTION', () => resolveRouterParams({ tauReject: 0 })],
  ['INVALID_OPTION', () => new ResidencyIndex({ thetaShared: 2 })],
  ['INVALID_OPTION', (r) => r.cluster.setHealth('d0', 'yes' as never)],
  ['INVALID_OPTION', (r) => r.route({ sessionId: '', promptTokens: 1 })],
  // A load delta with one bad field changes none of the others.
  ['INVALID_OPTION', (r) => r.cluster.store.addLoad('d0', { turns: 1, prefillTokens: 0.5 })],
  ['INVALID_OPTION', (r) => r.cluster.store.addLoad('d0', { decodeBlocks: Number.NaN })],
  ['INVALID_OPTION', (r) => r.cluster.store.addLoad('d0', null as never)],
  ['INVALID_LENGTH', (r) => r.cluster.addWorker({ id: 'd9', role: 'decode', capacityTokens: -1 })],
  ['INVALID_LENGTH', (r) => r.cluster.reportCapacity('d0', { freeTokens: -5, evictableTokens: 0 })],
  ['INVALID_LENGTH', (r) => r.dispatch({ sessionId: 's', promptTokens: 1.5 })],
  ['INVALID_LENGTH', (r) => r.route({ sessionId: 's', promptTokens: 1, expectedOutputTokens: -1 })],
  ['INVALID_MESSAGE', () => parseAdmitRequest({ requestId: 'r' })],
  [
    'INVALID_MESSAGE',
    (r) => r.ingest('d0', { type: 'BlockRemoved', eventId: 1, blockHashes: ['1'] } as never),
  ],
  [
    'INVALID_STATE',
    () =>
      admit(
        {
          capacityTokens: 10,
          usedTokens: 11,
          evictableTokens: 0,
          sessions: new Map(),
          leases: [],
          transferQueueDepth: 0,
          retractedQueueDepth: 0,
        },
        { requestId: 'r', sessionId: 's', path: 'fast', promptTokens: 1, appendTokens: 1 },
        { now: 0 },
      ),
  ],
  ['UNKNOWN_WORKER', (r) => r.ingest('nope', { type: 'AllBlocksCleared', eventId: 1 })],
  ['UNKNOWN_WORKER', (r) => r.cluster.setHealth('nope', false)],
  ['UNKNOWN_WORKER', (r) => r.cluster.pause('nope', 10)],
  ['DUPLICATE_WORKER', (r) => r.cluster.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1 })],
  ['DUPLICATE_WORKER', (r) => r.cluster.addWorker({ id: 'p0', role: 'decode', capacityTokens: 1 })],
  ['WRONG_ROLE', (r) => r.cluster.reportCapacity('p0', { freeTokens: 1, evictableTokens: 0 })],
  ['WRONG_ROLE', (r) => r.cluster.recordTransfer('d0', 'p0', true)],
  [
    'WRONG_ROLE',
    (r) =>
      r.cluster.applyAdmission('p0', {
        requestId: 'r',
        admitted: true,
        reason: 'ok',
        residentTokens: 0,
        needTokens: 1,
        tokenUsageAfter: 0,
        transferQueueDepth: 0,
        retractedQueueDepth: 0,
        recommendedPauseMs: 0,
      }),
  ],
  [
    'EVENT_OUT_OF_ORDER',
    (r) => {
      r.ingest('p0', { type: 'AllBlocksCleared', eventId: 0 })
      r.ingest('p0', { type: 'AllBlocksCleared', eventId: 0 })
    },
  ],
  ['EVENT_OUT_OF_ORDER', (r) => r.ingest('d0', { type: 'AllBlocksCleared', eventId: 0 })],
  [
    'UNEXPECTED_OUTCOME',
    (_, t) => (t as TurnDispatch).next({ type: 'waited' }),
    (r) => {
      const t = r.dispatch({ sessionId: 's', promptTokens: 10 })
      t.next() // admit on d0: the turn now counts toward d0's load
      return t
    },
  ],
  [
    'TURN_FINISHED',
    (r) => {
      const t = r.dispatch({ sessionId: 'other', promptTokens: 10 })
      t.abort()
      t.next()
    },
  ],
]

describe('every RouterError code', () => {
  it.each(cases.map(([code, f, setup], i) => [`${code} #${i}`, code, f, setup] as const))(
    '%s: refused, nothing changes',
    (_, code, f, setup) => {
      const r = fresh()
      const prepared = setup?.(r)
      const before = snapshot(r)
      let err: unknown
      try {
        f(r, prepared)
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(RouterError)
      expect((err as RouterError).code).toBe(code)
      expect((err as RouterError).name).toBe('RouterError')
      expect(snapshot(r)).toBe(before)
    },
  )

  it('WAIT_EXHAUSTED and ATTEMPTS_EXHAUSTED end turns as fail actions (returned, not thrown)', () => {
    const clock = new ManualClock()
    const mk = (params = {}) =>
      new Router({
        now: clock.now,
        random: () => 0.5,
        params,
        workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }],
      })
    const waitRouter = mk()
    waitRouter.cluster.pause('d0', 1e9)
    const w = new ScriptedDriver({ router: waitRouter, clock }).runTurn({ sessionId: 's', promptTokens: 1 })
    expect(w.final.type === 'fail' && w.final.error.code).toBe('WAIT_EXHAUSTED')
    const a = new ScriptedDriver({
      router: mk({ maxAttempts: 2 }),
      clock,
      admit: () => ({ kind: 'error' }),
    }).runTurn({
      sessionId: 's',
      promptTokens: 1,
    })
    expect(a.final.type === 'fail' && a.final.error.code).toBe('ATTEMPTS_EXHAUSTED')
  })

  it('covers every code of RouterErrorCode', () => {
    const covered = new Set<string>([...cases.map(([c]) => c), 'WAIT_EXHAUSTED', 'ATTEMPTS_EXHAUSTED'])
    expect([...covered].sort()).toEqual(Object.values(RouterErrorCode).sort())
  })

  it('ClusterView needs an injected clock', () => {
    expect(() => new ClusterView({} as never)).toThrow(RouterError)
  })
})
