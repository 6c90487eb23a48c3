import { describe, expect, it } from 'vitest'
import {
  type AdmitAction,
  type ClaimAction,
  type ClaimOutcome,
  type DispatchAction,
  InMemoryClusterStateStore,
  Router,
  type RouterParamsInput,
  type TurnRequest,
  renderDispatch,
} from '../src/index.js'
import {
  type AdmitAnswer,
  ManualClock,
  ScriptedDriver,
  type SendAnswer,
  checkLoadAccounting,
  checkNoInflightLoad,
} from '../src/testing/index.js'
import { decodeOfAction } from '../src/testing/arbitraries.js'

const PAGE = 16
/** Block hashes of session `s`'s prompt of `tokens` tokens (its own blocks, shared with nobody). */
const sessionBlocks = (s: number, tokens: number) =>
  Array.from({ length: Math.floor(tokens / PAGE) }, (_, i) => BigInt(s + 1) * 1_000_000n + BigInt(i))

interface World {
  router: Router
  clock: ManualClock
  store: InMemoryClusterStateStore
}

function world(
  nD: number,
  opts: { nP?: number; params?: RouterParamsInput; claims?: boolean; capacity?: number } = {},
): World {
  const clock = new ManualClock(1_000)
  const store = new InMemoryClusterStateStore({ confirmClaims: opts.claims === true })
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    store,
    params: { pageSize: PAGE, ...opts.params },
    workers: [
      ...Array.from({ length: opts.nP ?? 1 }, (_, i) => ({
        id: `p${i}`,
        role: 'prefill' as const,
        capacityTokens: 10_000_000,
      })),
      ...Array.from({ length: nD }, (_, i) => ({
        id: `d${i}`,
        role: 'decode' as const,
        capacityTokens: opts.capacity ?? 10_000_000,
      })),
    ],
  })
  return { router, clock, store }
}

const spread = (counts: readonly number[]) => Math.max(...counts) - Math.min(...counts)

/**
 * `n` session ids whose stable tie-break puts the same D first on an idle cluster: on equal keys
 * they would all go there, so only the load can spread them (sequential ids would spread by the
 * hash alone and hide a load that is not counted).
 */
function sameTieBreakSessions(router: Router, n: number): string[] {
  const ids: string[] = []
  for (let k = 0; ids.length < n; k++) {
    const id = `agent-${k}`
    if (router.route({ sessionId: id, promptTokens: 800 }).candidates[0]?.workerId === 'd0') ids.push(id)
  }
  return ids
}

describe('a burst of first turns spreads over the D workers (load counts a turn from its admission request or claim)', () => {
  const ks: [string, RouterParamsInput][] = [
    ['loadFloorK = 0', { loadFloorK: 0 }],
    ['default loadFloorK', {}],
  ]
  const shapes: [string, number, boolean][] = [
    ['fast path (short first turns)', 800, false],
    ['fast path with a claiming store (several replicas)', 800, true],
    ['seed path (long first turns)', 20_000, false],
  ]
  for (const [kName, params] of ks) {
    it.each(shapes)(
      `${kName}: 12 unbound sessions routed before any outcome, 3 equal D workers: %s`,
      (_, prompt, claims) => {
        const w = world(3, { params, claims })
        const turns = sameTieBreakSessions(w.router, 12).map((sessionId, i) =>
          w.router.dispatch({ sessionId, promptTokens: prompt, blocks: sessionBlocks(i, prompt) }),
        )
        // Every turn's first action before any of them gets an outcome.
        const first = turns.map((t) => t.next())
        const perD = w.router.cluster
          .decodeIds()
          .map((d) => first.filter((a) => decodeOfAction(a) === d).length)
        expect(first.every((a) => decodeOfAction(a) !== undefined)).toBe(true)
        expect(perD.reduce((x, y) => x + y, 0)).toBe(12)
        expect(spread(perD), `first actions per D: ${perD}`).toBeLessThanOrEqual(1)
        // The store counts each turn on its D already.
        expect(w.router.cluster.decodeIds().map((d) => w.store.load(d).turns)).toEqual(perD)
        checkLoadAccounting(w.router, turns)

        // Drive them all to the end, interleaved, checking the accounting after every step.
        const driver = new ScriptedDriver({ router: w.router, clock: w.clock })
        const actions = [...first]
        for (let open = true; open; ) {
          open = false
          for (let i = 0; i < turns.length; i++) {
            const a = actions[i]!
            if (a.type === 'done' || a.type === 'fail') continue
            open = true
            actions[i] = turns[i]!.next(driver.answer(a))
            checkLoadAccounting(w.router, turns)
          }
        }
        const where = actions.map((a) => (a.type === 'done' ? a.workerId : 'failed'))
        const served = w.router.cluster.decodeIds().map((d) => where.filter((x) => x === d).length)
        expect(served.reduce((x, y) => x + y, 0)).toBe(12)
        expect(spread(served), `sessions per D: ${served}`).toBeLessThanOrEqual(1)
        checkNoInflightLoad(w.router)
      },
    )
  }

  it('exclusive overlap alone does not spread sessions whose shared prefix is on one D; the load-floor bonus does', () => {
    const place = (params: RouterParamsInput) => {
      const w = world(3, { params })
      // A 1,024-token system prompt (64 blocks) resident on d0 only: held by one worker, it is not
      // boilerplate, so every session's exclusive overlap on d0 is 64 blocks.
      const system = Array.from({ length: 64 }, (_, i) => 7_000_000n + BigInt(i))
      w.router.cluster.residency.recordStored('d0', system)
      const turns = sameTieBreakSessions(w.router, 12).map((sessionId, i) =>
        w.router.dispatch({
          sessionId,
          promptTokens: 1_024 + 800,
          blocks: [...system, ...sessionBlocks(i, 800)],
        }),
      )
      const first = turns.map((t) => t.next())
      for (const t of turns) t.abort()
      checkNoInflightLoad(w.router)
      return w.router.cluster.decodeIds().map((d) => first.filter((a) => decodeOfAction(a) === d).length)
    }
    expect(place({ loadFloorK: 0 })).toEqual([12, 0, 0])
    const withBonus = place({})
    expect(Math.min(...withBonus), `sessions per D: ${withBonus}`).toBeGreaterThanOrEqual(3)
    expect(withBonus[0]).toBeGreaterThanOrEqual(Math.max(withBonus[1]!, withBonus[2]!)) // the overlap still counts
  })
})

describe('the load a turn holds moves with it and is given back after every outcome', () => {
  interface Script {
    nD?: number
    nP?: number
    prompt?: number
    claims?: boolean
    params?: RouterParamsInput
    /** Prepares the world (bindings, other replicas' claims...). */
    prepare?: (w: World) => void
    admit?: (a: AdmitAction, w: World, n: number) => AdmitAnswer
    send?: (n: number) => SendAnswer
    claim?: (a: ClaimAction, w: World) => ClaimOutcome
    /** Abort the turn instead of answering this action (1-based). */
    abortAt?: (a: DispatchAction, n: number) => boolean
    expectEnd: Record<string, unknown>
    /** What the turn's record must show (the outcome the script is about did happen). */
    expectSteps?: readonly string[]
  }
  const scripts: [string, Script][] = [
    ['admitted, sent, completed (fast path)', { expectEnd: { type: 'done', path: 'fast' } }],
    [
      'admitted, seeded through a P, completed',
      { prompt: 20_000, expectEnd: { type: 'done', path: 'seed' } },
    ],
    [
      'append_too_large, then the seed path on the same D',
      {
        admit: (_, __, n) => (n === 1 ? { kind: 'reject', reason: 'append_too_large' } : { kind: 'admit' }),
        expectEnd: { type: 'done', path: 'seed' },
        expectSteps: ['rejected: append_too_large'],
      },
    ],
    [
      'rejected by its bound D, migrated to the other D in the same walk',
      {
        nD: 2,
        prepare: (w) => {
          w.store.setBinding('s', { workerId: 'd0', committedTokens: 600, verifiedBlocks: 0, updatedAt: 0 })
        },
        admit: (a) => (a.workerId === 'd0' ? { kind: 'reject', reason: 'capacity' } : { kind: 'admit' }),
        expectEnd: { type: 'done', workerId: 'd1', migratedFrom: 'd0' },
      },
    ],
    [
      'admission timeouts on every try, then the next D',
      {
        nD: 2,
        admit: (_, __, n) => (n <= 3 ? { kind: 'timeout' } : { kind: 'admit' }),
        expectEnd: { type: 'done' },
        expectSteps: ['admission timeouts: rejects[s]'],
      },
    ],
    [
      'admission errors, then admitted on a retry',
      {
        admit: (_, __, n) => (n <= 2 ? { kind: 'error' } : { kind: 'admit' }),
        expectEnd: { type: 'done' },
        expectSteps: ['error'],
      },
    ],
    [
      'the D fails the sent turn, the next D completes it',
      {
        nD: 2,
        send: (n) => (n === 1 ? { kind: 'fail', cause: 'worker_error' } : { kind: 'ok' }),
        expectEnd: { type: 'done' },
        expectSteps: ['failed: worker_error'],
      },
    ],
    [
      'the transfer fails on the seed path, the next walk completes it',
      {
        nD: 1,
        prompt: 20_000,
        send: (n) => (n === 1 ? { kind: 'fail', cause: 'transfer_error' } : { kind: 'ok' }),
        expectEnd: { type: 'done', path: 'seed' },
        expectSteps: ['failed: transfer_error'],
      },
    ],
    [
      'every D keeps rejecting: the turn fails at its wait budget',
      {
        nD: 2,
        admit: () => ({ kind: 'reject', reason: 'capacity', pauseMs: 300 }),
        expectEnd: { type: 'fail', cause: 'all_rejecting' },
      },
    ],
    [
      'the D is removed while its admission RPC is in flight',
      {
        nD: 2,
        admit: (a, w, n) => {
          if (n === 1) {
            w.router.cluster.removeWorker(a.workerId)
            return { kind: 'timeout' }
          }
          return { kind: 'admit' }
        },
        expectEnd: { type: 'done' },
        expectSteps: ['was removed after 1 unanswered admission try'],
      },
    ],
    [
      'aborted while its admission RPC is in flight',
      { abortAt: (a) => a.type === 'admit', expectEnd: { type: 'fail', cause: 'aborted' } },
    ],
    [
      'aborted during the backoff between admission tries',
      {
        admit: () => ({ kind: 'timeout' }),
        abortAt: (a) => a.type === 'wait',
        expectEnd: { type: 'fail', cause: 'aborted' },
      },
    ],
    [
      'aborted while sent',
      { abortAt: (a) => a.type === 'sendFast', expectEnd: { type: 'fail', cause: 'aborted' } },
    ],
    [
      'aborted while seeding',
      {
        prompt: 20_000,
        abortAt: (a) => a.type === 'seedViaP',
        expectEnd: { type: 'fail', cause: 'aborted' },
      },
    ],
    [
      'claims: a lost binding claim re-routes the turn to the winner',
      {
        nD: 3,
        claims: true,
        claim: (a, w) => {
          if (a.claim.kind === 'binding' && w.store.getBinding('s') === undefined) {
            const winner = a.claim.workerId === 'd2' ? 'd1' : 'd2'
            w.store.claim({ kind: 'binding', sessionId: 's', workerId: winner, expected: undefined, at: 0 })
          }
          return w.store.claim(a.claim)
        },
        expectEnd: { type: 'done' },
        expectSteps: ['lost:', 'following the binding'],
      },
    ],
    [
      'claims: a denied pending-seed slot skips the D',
      {
        nD: 2,
        prompt: 20_000,
        claims: true,
        claim: (a, w) =>
          a.claim.kind === 'seedSlot' && a.claim.workerId === 'd0'
            ? { type: 'claimResult', granted: false }
            : w.store.claim(a.claim),
        expectEnd: { type: 'done', workerId: 'd1' },
        expectSteps: ['pending-seed budget full across replicas'],
      },
    ],
    [
      'claims: aborted while a claim is in flight',
      { claims: true, abortAt: (a) => a.type === 'claim', expectEnd: { type: 'fail', cause: 'aborted' } },
    ],
  ]

  it.each(scripts)('%s', (_, sc) => {
    const w = world(sc.nD ?? 1, {
      nP: sc.nP ?? 1,
      claims: sc.claims === true,
      params: { loadFloorK: 0, ...sc.params },
    })
    sc.prepare?.(w)
    let admits = 0
    let sends = 0
    const driver = new ScriptedDriver({
      router: w.router,
      clock: w.clock,
      admit: (a) => sc.admit?.(a, w, ++admits) ?? { kind: 'admit' },
      send: () => sc.send?.(++sends) ?? { kind: 'ok' },
      ...(sc.claim === undefined ? {} : { claim: (a: ClaimAction) => sc.claim!(a, w) }),
    })
    const turn: TurnRequest = { sessionId: 's', promptTokens: sc.prompt ?? 800 }
    const t = w.router.dispatch(turn)
    let a = t.next()
    let n = 0
    while (a.type !== 'done' && a.type !== 'fail') {
      checkLoadAccounting(w.router, [t])
      if (sc.abortAt?.(a, ++n) === true) {
        a = t.abort()
        break
      }
      a = t.next(driver.answer(a))
    }
    expect(a).toMatchObject(sc.expectEnd)
    const text = renderDispatch(a.record)
    for (const x of sc.expectSteps ?? []) expect(text).toContain(x)
    expect(t.committedWorker).toBeUndefined()
    checkNoInflightLoad(w.router)
  })
})
