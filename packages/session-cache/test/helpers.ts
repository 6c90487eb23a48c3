import { PagedAllocator } from '@kvc/radix-cache'
import { expect } from 'vitest'
import {
  SessionCache,
  type SessionCacheErrorCode,
  SessionCacheError,
  type SessionCacheOptions,
  type SessionRequest,
} from '../src/index.js'

/** A cache with a logical clock (`clock.t`) over a PagedAllocator the test can inspect. */
export function makeCache(
  opts: Partial<SessionCacheOptions> & { pageSize?: number; poolSize?: number } = {},
): { sc: SessionCache; pool: PagedAllocator; clock: { t: number } } {
  const clock = { t: 0 }
  const pageSize = opts.pageSize ?? 4
  const pool = new PagedAllocator({ size: opts.poolSize ?? 1024, pageSize })
  const sc = new SessionCache({ now: () => clock.t, ...opts, pool, pageSize })
  return { sc, pool, clock }
}

/** Run a whole turn: admit, prefill in chunks (cacheUnfinishedReq after each), decode, finish. */
export function turn(
  sc: SessionCache,
  rid: string,
  inputIds: ArrayLike<number>,
  output: readonly number[],
  opts: { sessionId?: string; chunk?: number; finish?: boolean } = {},
): SessionRequest {
  const req = sc.createRequest({
    rid,
    inputIds,
    ...(opts.sessionId !== undefined ? { sessionId: opts.sessionId } : {}),
  })
  sc.matchPrefix(req)
  const chunk = opts.chunk ?? 1_000_000
  while (req.kvCommittedLen < inputIds.length) {
    sc.prefill(req, Math.min(chunk, inputIds.length - req.kvCommittedLen))
    sc.cacheUnfinishedReq(req, { chunked: req.kvCommittedLen < inputIds.length })
  }
  for (const t of output) sc.decode(req, t)
  if (opts.finish !== false) sc.cacheFinishedReq(req)
  return req
}

export function range(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => from + i)
}

/** Everything observable about a cache, to check that a refused call changed nothing. */
export function observe(sc: SessionCache): string {
  const st = sc.stats()
  return JSON.stringify({
    acc: sc.poolAccounting(),
    sessions: sc.listSessionStatuses(),
    slots: sc.listSessionStatuses().map((s) => sc.getSessionSlot(s.sessionId)),
    reqs: sc
      .inFlightRequests()
      .map((r) => [r.rid, r.phase, r.cacheProtectedLen, r.kvCommittedLen, r.kvAllocatedLen]),
    stats: { ...st, residentTokensPerSession: [...st.residentTokensPerSession] },
    tree: sc.cache.stats(),
  })
}

/** Expect `fn` to throw a SessionCacheError with `code`, leaving `sc` unchanged. */
export function expectRefused(
  sc: SessionCache,
  code: SessionCacheErrorCode,
  fn: () => unknown,
): SessionCacheError {
  const before = observe(sc)
  let caught: unknown
  try {
    fn()
  } catch (e) {
    caught = e
  }
  expect(caught).toBeInstanceOf(SessionCacheError)
  const err = caught as SessionCacheError
  expect(err.code).toBe(code)
  expect(observe(sc)).toBe(before)
  return err
}
