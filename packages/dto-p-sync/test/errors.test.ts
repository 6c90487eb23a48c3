import { describe, expect, it } from 'vitest'
import {
  DtoPSyncError,
  DtoPSyncErrorCode,
  InMemoryNetwork,
  KvEventIndex,
  OfferBuilder,
  planSync,
  SyncSource,
  type TransferMessage,
} from '../src/index.js'
import { chainOf, hasher, msgOf, prefillSide, tokens } from './fixtures.js'

function code(fn: () => unknown): string | undefined {
  try {
    fn()
  } catch (e) {
    if (e instanceof DtoPSyncError) {
      expect(e.name).toBe('DtoPSyncError')
      expect(e.message.length).toBeGreaterThan(0)
      return e.code
    }
    throw e
  }
  return undefined
}

function source(now: () => number = () => 0): SyncSource {
  return new SyncSource({
    pageSize: 4,
    beta: 8,
    now,
    blockHasher: hasher,
    bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 1 },
  })
}

/** P-side state that a refused call must leave unchanged. */
function pState(p: ReturnType<typeof prefillSide>) {
  return {
    pages: p.pages(),
    free: p.pool.availableSize(),
    metrics: p.sink.metrics(),
    reserved: p.sink.reservedTokens(),
  }
}

describe('every error code, raised before any state change', () => {
  it('lists exactly the codes below', () => {
    expect(Object.values(DtoPSyncErrorCode).sort()).toEqual(
      [
        'HASH_MISMATCH',
        'INVALID_MESSAGE',
        'INVALID_OPTION',
        'INVALID_SESSION_ID',
        'INVALID_TOKENS',
        'TIME_WENT_BACKWARDS',
        'UNKNOWN_RESERVATION',
        'UNKNOWN_SESSION',
      ].sort(),
    )
  })

  it('INVALID_OPTION', () => {
    expect(code(() => new OfferBuilder({ pageSize: 0 }))).toBe('INVALID_OPTION')
    expect(code(() => new OfferBuilder({ pageSize: 4, blockHasher: {} as never }))).toBe('INVALID_OPTION')
    const base = {
      sessions: [],
      pageSize: 4,
      beta: 8,
      horizonMs: 10,
      bandwidth: { bytesPerSecond: 1, kvBytesPerToken: 1 },
    }
    expect(code(() => planSync({ ...base, beta: -1 }))).toBe('INVALID_OPTION')
    expect(code(() => planSync({ ...base, bandwidth: { bytesPerSecond: 0, kvBytesPerToken: 1 } }))).toBe(
      'INVALID_OPTION',
    )
    expect(code(() => planSync({ ...base, maxBlocksPerTransfer: 0 }))).toBe('INVALID_OPTION')
    const s = { sessionId: 'a', version: 1, committedTokens: 0, blocks: [], confirmedPages: 0 }
    expect(code(() => planSync({ ...base, sessions: [s, s] }))).toBe('INVALID_OPTION')
    expect(code(() => planSync({ ...base, sessions: [{ ...s, hints: { dPressure: 2 } }] }))).toBe(
      'INVALID_OPTION',
    )
    expect(code(() => planSync({ ...base, sessions: [s], score: () => Number.NaN }))).toBe('INVALID_OPTION')
    expect(code(() => source().setDecodePressure(1.5))).toBe('INVALID_OPTION')
    expect(
      code(
        () =>
          new SyncSource({
            pageSize: 4,
            beta: 8,
            now: 0 as never,
            bandwidth: { bytesPerSecond: 1, kvBytesPerToken: 1 },
          }),
      ),
    ).toBe('INVALID_OPTION')
    expect(code(() => prefillSide({ pinTtlMs: -1 }))).toBe('INVALID_OPTION')
    expect(code(() => new InMemoryNetwork().link({ bytesPerSecond: -5 }))).toBe('INVALID_OPTION')
    const p = prefillSide()
    const r = p.sink.begin(msgOf(chainOf(tokens(41)), 0, 2))
    if (r.kind !== 'reserved') throw new Error('expected a reservation')
    const before = pState(p)
    expect(code(() => p.sink.complete(r.reservation.id, 3))).toBe('INVALID_OPTION')
    expect(code(() => p.sink.ingest(msgOf(chainOf(tokens(41)), 0, 2, { seq: 9 }), -1))).toBe('INVALID_OPTION')
    expect(pState(p)).toEqual(before)
  })

  it('INVALID_SESSION_ID', () => {
    expect(code(() => new OfferBuilder({ pageSize: 4 }).commitTurn('', [1]))).toBe('INVALID_SESSION_ID')
    expect(code(() => source().status(''))).toBe('INVALID_SESSION_ID')
    const p = prefillSide()
    const before = pState(p)
    expect(code(() => p.sink.begin({ ...msgOf(chainOf(tokens(41)), 0, 2), sessionId: 7 as never }))).toBe(
      'INVALID_SESSION_ID',
    )
    expect(pState(p)).toEqual(before)
  })

  it('INVALID_TOKENS', () => {
    const offers = new OfferBuilder({ pageSize: 4 })
    expect(code(() => offers.commitTurn('s', [1, 2.5]))).toBe('INVALID_TOKENS')
    expect(code(() => offers.commitTurn('s', [-1]))).toBe('INVALID_TOKENS')
    expect(code(() => offers.commitTurn('s', null as never))).toBe('INVALID_TOKENS')
    expect(offers.session('s')).toBeUndefined()
  })

  it('INVALID_MESSAGE', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    p.sink.ingest(msgOf(chain, 0, 2))
    const before = pState(p)
    const good = msgOf(chain, 2, 5, { seq: 1 })
    const bad: TransferMessage[] = [
      { ...good, version: 0 },
      { ...good, seq: -1 },
      { ...good, blocks: [] },
      { ...good, blocks: [good.blocks[0]!, good.blocks[2]!] }, // broken chain
      { ...good, blocks: [{ ...good.blocks[0]!, tokens: Uint32Array.of(1, 2) }] }, // short page
      { ...good, startPage: 0 }, // a first page with a parent
      { ...good, startPage: 3 }, // parent is page 2 on P, not page 3
      { ...good, blocks: [{ ...good.blocks[0]!, withKv: 'yes' as never }] },
    ]
    for (const m of bad) expect(code(() => p.sink.begin(m))).toBe('INVALID_MESSAGE')
    expect(pState(p)).toEqual(before)
    const s = source()
    expect(
      code(() => s.handleReply({ sessionId: 's', version: 1, seq: 0, status: 'nope' as never } as never)),
    ).toBe('INVALID_MESSAGE')
    expect(code(() => s.markFailed('s', -1))).toBe('INVALID_MESSAGE')
    const offers = new OfferBuilder({ pageSize: 4, blockHasher: hasher })
    offers.commitTurn('s', tokens(20))
    const o2 = offers.commitTurn('s', tokens(40))
    expect(code(() => s.addOffer(o2))).toBe('INVALID_MESSAGE') // continues a chain s never saw
    expect(s.sessionIds()).toEqual([])
    expect(code(() => s.addOffer({ ...o2, committedTokens: 3 }))).toBe('INVALID_MESSAGE')
    const index = new KvEventIndex()
    expect(
      code(() =>
        index.apply({
          type: 'BlockStored',
          eventId: 0,
          blockHashes: [1n],
          parentBlockHash: null,
          tokenIds: [1],
          blockSize: 2,
          extraKey: null,
        }),
      ),
    ).toBe('INVALID_MESSAGE')
    expect(code(() => index.apply({ type: 'Nope', eventId: 0 } as never))).toBe('INVALID_MESSAGE')
    expect(code(() => index.resync({ eventId: 1.5, blocks: [] }))).toBe('INVALID_MESSAGE')
    expect(index.lastEventId).toBe(-1)
  })

  it('HASH_MISMATCH', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    p.sink.ingest(msgOf(chain, 0, 2))
    const before = pState(p)
    const m = msgOf(chain, 2, 4, { seq: 1 })
    const forged = { ...m, blocks: [{ ...m.blocks[0]!, tokens: Uint32Array.of(9, 9, 9, 9) }, m.blocks[1]!] }
    expect(code(() => p.sink.begin(forged))).toBe('HASH_MISMATCH')
    expect(pState(p)).toEqual(before)
  })

  it('UNKNOWN_SESSION', () => {
    const s = source()
    expect(code(() => s.status('nope'))).toBe('UNKNOWN_SESSION')
    expect(code(() => s.setHints('nope', { dPressure: 1 }))).toBe('UNKNOWN_SESSION')
  })

  it('UNKNOWN_RESERVATION', () => {
    const p = prefillSide()
    const before = pState(p)
    expect(code(() => p.sink.complete(42))).toBe('UNKNOWN_RESERVATION')
    expect(code(() => p.sink.abort(42))).toBe('UNKNOWN_RESERVATION')
    expect(pState(p)).toEqual(before)
  })

  it('TIME_WENT_BACKWARDS', () => {
    let t = 10
    const s = source(() => t)
    s.commitTurn('a', tokens(10))
    t = 5
    expect(code(() => s.plan(10))).toBe('TIME_WENT_BACKWARDS')
    const p = prefillSide()
    p.clock.t = 10
    p.sink.expire()
    p.clock.t = 9
    const before = pState(p)
    expect(code(() => p.sink.ingest(msgOf(chainOf(tokens(41)), 0, 2)))).toBe('TIME_WENT_BACKWARDS')
    expect(pState(p)).toEqual(before)
    const net = new InMemoryNetwork({ startTime: 5 })
    expect(code(() => net.advanceTo(4))).toBe('TIME_WENT_BACKWARDS')
  })
})
