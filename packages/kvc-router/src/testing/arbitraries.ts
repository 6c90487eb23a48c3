import fc from 'fast-check'
import type { TurnDispatch } from '../dispatch/turnDispatch.js'
import type { DispatchAction } from '../dispatch/types.js'
import type { Router } from '../router/router.js'
import type { AdmitAnswer, SendAnswer } from './driver.js'

/**
 * Any admission answer a D may give: admit (with or without a pause hint), reject for any reason
 * with any pause up to 2 s, time out, or fail.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { admitAnswerArb } from '@kvc/kvc-router/testing'
 * fc.sample(admitAnswerArb(), 3).length // 3
 * ```
 */
export function admitAnswerArb(): fc.Arbitrary<AdmitAnswer> {
  const pause = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2000 }))
  return fc.oneof(
    pause.map((pauseMs): AdmitAnswer => ({ kind: 'admit', pauseMs })),
    fc
      .tuple(fc.constantFrom('capacity', 'slo_budget', 'draining', 'append_too_large' as const), pause)
      .map(([reason, pauseMs]): AdmitAnswer => ({ kind: 'reject', reason, pauseMs })),
    fc.constant<AdmitAnswer>({ kind: 'timeout' }),
    fc.constant<AdmitAnswer>({ kind: 'error' }),
  )
}

/**
 * Any answer to a send or a seed.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { sendAnswerArb } from '@kvc/kvc-router/testing'
 * fc.sample(sendAnswerArb(), 1).length // 1
 * ```
 */
export function sendAnswerArb(): fc.Arbitrary<SendAnswer> {
  return fc.oneof(
    {
      weight: 3,
      arbitrary: fc
        .integer({ min: 0, max: 500 })
        .map((outputTokens): SendAnswer => ({ kind: 'ok', outputTokens })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom('transfer_timeout', 'transfer_error', 'worker_error', 'worker_unreachable' as const)
        .map((cause): SendAnswer => ({ kind: 'fail', cause })),
    },
  )
}

/**
 * An adversary that "eventually admits": per worker, a finite queue of arbitrary answers, after
 * which it always admits (Theorem 1's hypothesis). Build with {@link finiteAdversary}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { finiteAdversaryArb } from '@kvc/kvc-router/testing'
 * fc.sample(finiteAdversaryArb(['d0', 'd1'], 4), 1)[0]?.get('d0')?.length
 * ```
 */
export function finiteAdversaryArb(
  workers: readonly string[],
  maxPerWorker: number,
): fc.Arbitrary<Map<string, AdmitAnswer[]>> {
  return fc
    .tuple(...workers.map(() => fc.array(admitAnswerArb(), { maxLength: maxPerWorker })))
    .map((lists) => new Map(workers.map((w, i) => [w, lists[i]!])))
}

/**
 * Turns a finite answer script into an `admit` callback for `ScriptedDriver` (consumes the
 * worker's queue, then admits).
 *
 * @example
 * ```ts
 * import { finiteAdversary } from '@kvc/kvc-router/testing'
 * const admit = finiteAdversary(new Map([['d0', [{ kind: 'timeout' }]]]))
 * ```
 */
export function finiteAdversary(
  script: Map<string, AdmitAnswer[]>,
): (a: { readonly workerId: string }) => AdmitAnswer {
  const queues = new Map([...script].map(([w, q]) => [w, [...q]]))
  return (a) => queues.get(a.workerId)?.shift() ?? { kind: 'admit' }
}

/**
 * Checks that no in-flight load is left on any worker (call when no turn is running): every
 * turn that ended gave back what it took, and none still waits in line for a pending-seed slot.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { checkNoInflightLoad } from '@kvc/kvc-router/testing'
 * checkNoInflightLoad(new Router({ now: () => 0 })) // ok
 * ```
 */
export function checkNoInflightLoad(router: Router): void {
  const c = router.cluster
  for (const id of [...c.decodeIds(), ...c.prefillIds()]) {
    const l = c.store.load(id)
    if (l.turns !== 0 || l.pendingSeeds !== 0 || l.prefillTokens !== 0 || l.decodeBlocks !== 0) {
      throw new Error(`worker ${id} still has load ${JSON.stringify(l)}`)
    }
  }
  for (const id of c.decodeIds()) {
    const n = c.seedWaiters.waiting(id)
    if (n !== 0) throw new Error(`${n} ended turns still wait for a pending-seed slot on ${id}`)
  }
}

/**
 * The D an action is about: an admission request, a claim, a send or a seed (`undefined` for the
 * others). Exported for this package's tests; not part of the `./testing` entry point.
 *
 * @internal
 */
export function decodeOfAction(a: DispatchAction): string | undefined {
  switch (a.type) {
    case 'admit':
    case 'sendFast':
      return a.workerId
    case 'seedViaP':
      return a.decodeId
    case 'claim':
      return a.claim.workerId
    default:
      return undefined
  }
}

/**
 * Checks the in-flight turn counts exactly, while turns run (call between actions, with every
 * turn started on the store, by any router sharing it, and nothing else adding load): a running
 * turn is committed to the D its pending claim, admission request, send or seed is about, and to
 * no D while it waits between walks (during the backoff between admission tries it stays on that
 * D); every D's `turns` is the number of running turns committed to it, and every P's `turns` the
 * number of running turns seeding through it. So a turn counts toward its D from the moment
 * Dispatch commits to it and moves or gives back that count on every outcome.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { checkLoadAccounting } from '@kvc/kvc-router/testing'
 * const router = new Router({ now: () => 0, workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }] })
 * const turn = router.dispatch({ sessionId: 's', promptTokens: 100 })
 * turn.next() // admit on d0
 * checkLoadAccounting(router, [turn]) // ok: d0 counts 1 turn
 * ```
 */
export function checkLoadAccounting(router: Router, turns: Iterable<TurnDispatch>): void {
  const c = router.cluster
  const live = [...turns].filter((t) => !t.finished)
  for (const t of live) {
    const a = t.pending
    if (a === undefined) continue
    const d = decodeOfAction(a)
    if (d !== undefined && t.committedWorker !== d) {
      throw new Error(
        `turn ${t.turnId} waits on ${a.type} for ${d} but counts toward ${String(t.committedWorker)}`,
      )
    }
    if (a.type === 'wait' && a.reason !== 'admission_retry' && t.committedWorker !== undefined) {
      throw new Error(`turn ${t.turnId} waits between walks but still counts toward ${t.committedWorker}`)
    }
  }
  for (const d of c.decodeIds()) {
    let n = 0
    for (const t of live) if (t.committedWorker === d) n++
    const turnsOnD = c.store.load(d).turns
    if (turnsOnD !== n)
      throw new Error(`D ${d} counts ${turnsOnD} in-flight turns, ${n} running turns are committed to it`)
  }
  for (const p of c.prefillIds()) {
    let n = 0
    for (const t of live) if (t.pending?.type === 'seedViaP' && t.pending.prefillId === p) n++
    const turnsOnP = c.store.load(p).turns
    if (turnsOnP !== n)
      throw new Error(`P ${p} counts ${turnsOnP} in-flight turns, ${n} running turns seed through it`)
  }
}
