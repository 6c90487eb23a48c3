import { describe, expect, it } from 'vitest'
import {
  SessionCache,
  SessionCacheError,
  type SessionGranularity,
  type SessionRequest,
} from '../src/index.js'
import { checkSessionInvariants } from '../src/testing/index.js'

/**
 * The prototype's failure case E3 (docs/design/prototype.md#streaming-session-correction-crash):
 * a session with 43,459 committed tokens receives a turn carrying only its 6,648 new tokens,
 * while the cached prefix covers 43,459. The prototype corrected the extend length to 0 and a
 * later check, recomputed from the raw lengths, crashed the worker. Here every such turn either
 * gets a consistent extend length (prompt − matched prefix, computed chunk by chunk or at once)
 * or a typed refusal that changes nothing, and the pool's accounting identity holds afterwards.
 */
const COMMITTED = 43_459
const NEW = 6_648
const OUTPUT = 10
const FIRST = COMMITTED - OUTPUT + 1 // prompt + output − 1 tokens are committed after a turn

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => 3 + ((from + i) % 50_000))

function computePrompt(sc: SessionCache, req: SessionRequest, chunk: number | undefined): void {
  const total = req.originInputIds.length
  for (let left = total - req.kvCommittedLen; left > 0; left = total - req.kvCommittedLen) {
    sc.prefill(req, chunk === undefined ? left : Math.min(chunk, left))
    if (chunk !== undefined && req.kvCommittedLen < total) {
      sc.cacheUnfinishedReq(req, { chunked: true })
      sc.matchPrefix(req) // the chunked-prefill restore (a re-match)
      checkSessionInvariants(sc)
    }
  }
  expect(req.kvCommittedLen).toBe(total)
}

function finishTurn(sc: SessionCache, req: SessionRequest, outputs: number): void {
  for (let i = 0; i < outputs; i++) sc.decode(req, 60_000 + i)
  sc.cacheFinishedReq(req)
}

const cases: [number, SessionGranularity, number | undefined][] = []
for (const pageSize of [16, 1])
  for (const granularity of ['block', 'session'] as const)
    for (const chunk of [undefined, 2_048]) cases.push([pageSize, granularity, chunk])

describe('E3: a session turn carrying only its new tokens, the cached prefix longer than them', () => {
  it.each(cases)('page size %i, %s granularity, chunked prefill %s', (pageSize, granularity, chunk) => {
    const sc = new SessionCache({ poolSize: 131_072, pageSize, granularity })
    const sid = '1000195'
    sc.openSession(sid)
    const first = ids(0, FIRST)
    const t1 = sc.createRequest({ rid: 't1', sessionId: sid, inputIds: first })
    sc.matchPrefix(t1)
    computePrompt(sc, t1, chunk)
    finishTurn(sc, t1, OUTPUT)
    expect(sc.getSessionStatus(sid)?.committedTokens).toBe(COMMITTED)
    const committed = Array.from(sc.committedTokens(sid)!)
    checkSessionInvariants(sc)
    const before = sc.poolAccounting()
    const statusBefore = sc.getSessionStatus(sid)

    // The E3 turn: only the 6,648 new tokens. They do not extend what the session committed: a
    // typed refusal, and nothing changes.
    const fresh = ids(COMMITTED + 1_000, NEW)
    const bad = sc.createRequest({ rid: 't2', sessionId: sid, inputIds: fresh })
    let err: unknown
    try {
      sc.matchPrefix(bad)
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(SessionCacheError)
    expect((err as SessionCacheError).code).toBe('PREFIX_MISMATCH')
    expect((err as Error).message).toContain(`does not strictly extend the ${COMMITTED} tokens`)
    sc.abortReq(bad)
    expect(sc.poolAccounting()).toEqual(before)
    expect(sc.getSessionStatus(sid)).toEqual(statusBefore)
    checkSessionInvariants(sc)

    // The same turn as a whole prompt (history + new tokens): a consistent extend length.
    const whole = [...committed, ...fresh]
    const t3 = sc.createRequest({ rid: 't3', sessionId: sid, inputIds: whole })
    const m = sc.matchPrefix(t3)
    // The matched prefix: all the session committed (session mode, or page size 1), or its whole
    // pages (block mode), and never the last prompt token (it computes the logits).
    expect(m.length).toBeLessThanOrEqual(COMMITTED)
    expect(m.length).toBeGreaterThanOrEqual(COMMITTED - (pageSize - 1))
    expect(m.length % pageSize === 0 || m.fromSlot).toBe(true)
    const extend = whole.length - m.length
    expect(extend).toBeGreaterThanOrEqual(NEW)
    expect(extend).toBe(whole.length - t3.kvCommittedLen)
    expect(t3.prefixIndices.length).toBe(m.length)
    computePrompt(sc, t3, chunk)
    finishTurn(sc, t3, OUTPUT)
    expect(sc.getSessionStatus(sid)?.committedTokens).toBe(whole.length + OUTPUT - 1)

    // The accounting identity: free + evictable + protected + request-owned + session-held = pool.
    const acc = sc.poolAccounting()
    expect(acc.balanced).toBe(true)
    expect(acc.requestOwned).toBe(0)
    checkSessionInvariants(sc)
    sc.releaseSession(sid)
    expect(sc.poolAccounting()).toMatchObject({ balanced: true, sessionHeld: 0, requestOwned: 0 })
  })
})
