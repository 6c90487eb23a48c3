import { expect, it } from 'vitest'
// The worked example of the README, verbatim between the markers.
// --- README example start
import {
  type AdmitRequest,
  type AdmitWorkerState,
  type DispatchOutcome,
  LeaseBook,
  Router,
  admit,
  renderDispatch,
  renderRoute,
} from '../src/index.js'

let now = 0
const router = new Router({
  now: () => now, // inject the clock...
  random: () => 0.5, // ...and the randomness (a seeded PRNG in simulations)
  params: { pageSize: 16 },
  workers: [
    { id: 'p0', role: 'prefill', capacityTokens: 800_000 },
    { id: 'd0', role: 'decode', capacityTokens: 400_000 },
    { id: 'd1', role: 'decode', capacityTokens: 400_000 },
  ],
})

// 1. Residency: the D workers' KV events (from @kvc/radix-cache, SGLang, vLLM or Dynamo).
router.ingest('d0', {
  type: 'BlockStored',
  eventId: 0,
  blockHashes: [11n, 12n, 13n],
  parentBlockHash: null,
  tokenIds: [],
  blockSize: 16,
  extraKey: null,
})

// 2. Route (Algorithm 1): every eligible D ranked, with the key that decided each rank.
const turn = {
  sessionId: 'agent-7',
  promptTokens: 3_000,
  blocks: [11n, 12n, 13n, 14n],
  expectedOutputTokens: 256,
}
console.log(renderRoute(router.route(turn)))

// 3. Admit (Algorithm 2) runs on each D worker, over its own state: here d0 is nearly full.
const used: Record<string, number> = { d0: 399_000, d1: 50_000 }
const leases: Record<string, LeaseBook> = { d0: new LeaseBook(), d1: new LeaseBook() }
function admitOn(d: string, request: AdmitRequest) {
  const state: AdmitWorkerState = {
    capacityTokens: 400_000,
    usedTokens: used[d]!,
    evictableTokens: 0,
    sessions: new Map(),
    leases: leases[d]!.live(now),
    transferQueueDepth: 0,
    retractedQueueDepth: 0,
  }
  const decision = admit(state, request, { now })
  leases[d]!.apply(decision)
  return decision.response
}

// 4. Dispatch (Algorithm 3): a state machine per turn; the driver performs each action.
const t = router.dispatch(turn)
let a = t.next()
while (a.type !== 'done' && a.type !== 'fail') {
  let outcome: DispatchOutcome
  if (a.type === 'admit') outcome = { type: 'admitResult', response: admitOn(a.workerId, a.request) }
  else if (a.type === 'wait') {
    now = a.untilMs // sleep until then
    outcome = { type: 'waited' }
  } else outcome = { type: 'completed', outputTokens: 256 } // sendFast: POST /generate; seedViaP: P/D pair
  now += 1
  a = t.next(outcome)
}
console.log(renderDispatch(a.record))
// --- README example end

it('runs the README example', () => {
  expect(a).toMatchObject({ type: 'done', path: 'fast', workerId: 'd1', migratedFrom: undefined })
  expect(router.cluster.isPaused('d0')).toBe(true) // d0's pause hint is honoured by the next turns
  expect(router.cluster.store.getBinding('agent-7')).toMatchObject({ workerId: 'd1', committedTokens: 3_256 })
})
