import { expect, it } from 'vitest'
import { SessionCache } from '../src/index.js'

it('doc example', () => {
  const sc = new SessionCache({ poolSize: 4096, pageSize: 4 })
  sc.openSession('chat-1')
  const t1 = sc.createRequest({ rid: 't1', sessionId: 'chat-1', inputIds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] })
  expect(sc.matchPrefix(t1).length).toBe(0)
  sc.prefill(t1, 6)
  expect(sc.cacheUnfinishedReq(t1, { chunked: true }).protectedLen).toBe(4)
  sc.prefill(t1, 4)
  sc.cacheUnfinishedReq(t1)
  for (const tok of [11, 12, 13]) sc.decode(t1, tok)
  expect(t1.kvCommittedLen).toBe(12)
  sc.cacheFinishedReq(t1)
  const t2 = sc.createRequest({ rid: 't2', sessionId: 'chat-1', inputIds: [...t1.tokenIds, 14, 15] })
  expect(sc.matchPrefix(t2).length).toBe(12)
  expect(sc.getSessionStatus('chat-1')?.residentTokens).toBe(12)
  expect(sc.poolAccounting().balanced).toBe(true)
})
