import { describe, expect, it } from 'vitest'
import {
  DtoPSyncError,
  KvEventIndex,
  OfferBuilder,
  SyncSource,
  type SyncSourceOptions,
  type TransferMessage,
} from '../src/index.js'
import { hasher, prefillSide, tokens } from './fixtures.js'

function setup(opts: Partial<SyncSourceOptions> & { pinTtlMs?: number } = {}) {
  const { pinTtlMs = 1000, ...srcOpts } = opts
  const p = prefillSide({ pinTtlMs, poolPages: 256 })
  const source = new SyncSource({
    pageSize: 4,
    beta: 8,
    now: () => p.clock.t,
    blockHasher: hasher,
    bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 100 },
    trustPrefillEvents: false,
    ...srcOpts,
  })
  p.listeners.push((e) => source.observePrefillEvent(e))
  const deliver = (msgs: readonly TransferMessage[]) => {
    for (const m of msgs) {
      const r = p.sink.ingest(m)
      if (r !== undefined) source.handleReply(r)
    }
  }
  return { p, source, deliver }
}

/** A source with minimal options plus `extra` (for option checks). */
const sourceWith = (extra: Partial<SyncSourceOptions>) =>
  new SyncSource({
    pageSize: 4,
    beta: 0,
    now: () => 0,
    bandwidth: { bytesPerSecond: 1, kvBytesPerToken: 1 },
    ...extra,
  })

/** The 10-page chain of a 41-token history (page size 4). */
const CHAIN_41 = new OfferBuilder({ pageSize: 4, blockHasher: hasher }).commitTurn('x', tokens(41)).blocks

/** P's event that it stored page `i` of {@link CHAIN_41}, with event id `id`. */
const storePage = (source: SyncSource, id: number, i: number) =>
  source.observePrefillEvent({
    type: 'BlockStored',
    eventId: id,
    blockHashes: [CHAIN_41[i]!.hash],
    parentBlockHash: i === 0 ? null : CHAIN_41[i - 1]!.hash,
    tokenIds: [...CHAIN_41[i]!.tokens],
    blockSize: 4,
    extraKey: null,
  })

describe('SyncSource', () => {
  it('reports a session within budget only once P acknowledged pinned pages', () => {
    const { p, source, deliver } = setup()
    source.commitTurn('s', tokens(41))
    expect(source.status('s')).toMatchObject({
      committedTokens: 41,
      syncablePages: 10,
      confirmedPages: 0,
      staleness: 41,
      withinBudget: false,
    })
    const { messages, plan } = source.plan(100)
    expect(plan.sessions[0]!.withinBudget).toBe(true) // projected
    expect(source.status('s').withinBudget).toBe(false) // not yet confirmed
    expect(source.status('s').inFlightBlocks).toBe(9)
    deliver(messages)
    expect(source.status('s')).toMatchObject({
      confirmedPages: 9,
      staleness: 5,
      withinBudget: true,
      inFlightBlocks: 0,
    })
    // The pin lapses: the report drops back.
    p.clock.t = 1000
    expect(source.status('s').withinBudget).toBe(false)
    expect(source.metrics()).toMatchObject({
      rounds: 1,
      messagesSent: 1,
      kvBlocksSent: 9,
      repliesReceived: 1,
    })
  })

  it('renews pins before they lapse with a check-and-pin that ships no KV', () => {
    const { p, source, deliver } = setup({ renewAheadMs: 300 })
    source.commitTurn('s', tokens(41))
    deliver(source.plan(100).messages)
    p.clock.t = 600
    expect(source.plan(100).messages).toEqual([]) // 600 + 300 < 1000
    p.clock.t = 750
    const { messages } = source.plan(100)
    expect(messages.length).toBe(1)
    expect(messages[0]!.blocks.every((b) => !b.withKv)).toBe(true)
    deliver(messages)
    p.clock.t = 1500
    expect(source.status('s').withinBudget).toBe(true)
    expect(source.metrics().dedupBlocks).toBe(9)
  })

  it('counts pins only up to pinnedUntil minus the safety margin', () => {
    const { p, source, deliver } = setup({ pinSafetyMarginMs: 200 })
    source.commitTurn('s', tokens(41))
    deliver(source.plan(100).messages)
    p.clock.t = 799
    expect(source.status('s').withinBudget).toBe(true)
    p.clock.t = 800
    expect(source.status('s').withinBudget).toBe(false)
  })

  it('ignores a pin for a chain the session no longer has', () => {
    const { source } = setup()
    const offer = source.commitTurn('s', tokens(41))
    const { messages } = source.plan(100)
    source.commitTurn('s', [99, 99, 99, 99, 99]) // rewritten before the reply came
    source.handleReply({
      sessionId: 's',
      version: offer.version,
      seq: messages[0]!.seq,
      status: 'applied',
      heldPages: 9,
      throughHash: offer.blocks[8]!.hash,
      pinnedUntil: 1000,
      missingHash: null,
      ingestedBlocks: 9,
      skippedBlocks: 0,
      error: null,
    })
    expect(source.status('s').confirmedPages).toBe(0)
  })

  it('truncates pins when the history is rewritten', () => {
    const { source, deliver } = setup()
    source.commitTurn('s', tokens(41))
    deliver(source.plan(100).messages)
    const h = tokens(41)
    h[13] = 999 // page 3 changes
    source.commitTurn('s', h)
    expect(source.status('s').confirmedPages).toBe(3)
  })

  it('replans failed and timed-out transfers, counts late replies', () => {
    const { p, source } = setup({ inFlightTimeoutMs: 50 })
    source.commitTurn('s', tokens(41))
    const first = source.plan(100).messages
    expect(source.plan(100).messages).toEqual([]) // in flight: not sent twice
    source.markFailed('s', first[0]!.seq)
    expect(source.metrics().transferFailures).toBe(1)
    const second = source.plan(100).messages
    expect(second.length).toBe(1)
    p.clock.t = 50
    expect(source.expire()).toBe(1)
    expect(source.inFlightCount()).toBe(0)
    const r = p.sink.ingest(second[0]!)!
    source.handleReply(r)
    expect(source.metrics().lateReplies).toBe(1)
    expect(source.status('s').withinBudget).toBe(true) // a late reply still carries a valid pin
    source.markFailed('s', 12345) // unknown: ignored
  })

  it('drops a hash P says it lacks from its view of P', () => {
    const { p, source } = setup({ trustPrefillEvents: true, pinTtlMs: 0 })
    const view = new KvEventIndex()
    const chain = new OfferBuilder({ pageSize: 4, blockHasher: hasher }).commitTurn('s', tokens(41)).blocks
    // P's events claim the first two pages (e.g. they were evicted after the event was sent).
    source.observePrefillEvent({
      type: 'BlockStored',
      eventId: 0,
      blockHashes: [chain[0]!.hash, chain[1]!.hash],
      parentBlockHash: null,
      tokenIds: [...chain[0]!.tokens, ...chain[1]!.tokens],
      blockSize: 4,
      extraKey: null,
    })
    void view
    source.commitTurn('s', tokens(41))
    expect(source.status('s').confirmedPages).toBe(2) // trusted events
    const { messages } = source.plan(100)
    expect(messages[0]!.startPage).toBe(2)
    const r = p.sink.ingest(messages[0]!)!
    expect(r.status).toBe('unknown-parent')
    source.handleReply(r)
    expect(source.status('s').confirmedPages).toBe(1)
    expect(source.metrics().replies['unknown-parent']).toBe(1)
  })

  it('stops trusting P events after a gap until a snapshot resyncs it', () => {
    const { source } = setup({ trustPrefillEvents: true, pinTtlMs: 0 })
    source.commitTurn('s', tokens(41))
    storePage(source, 0, 0)
    expect(storePage(source, 0, 0)).toBe(false) // repeated id
    storePage(source, 2, 1) // id 1 was lost
    expect(source.prefillViewConsistent).toBe(false)
    expect(source.status('s').confirmedPages).toBe(0)
    source.applyPrefillSnapshot({
      eventId: 2,
      blocks: CHAIN_41.slice(0, 2).map((b) => ({ hash: b.hash, parentHash: b.parentHash })),
    })
    expect(source.prefillViewConsistent).toBe(true)
    expect(source.status('s').confirmedPages).toBe(2)
  })

  it('dedups against its view of P: past a trusted prefix every page carries KV; with a broken view, held pages go hash-only', () => {
    // Trusted and consistent: P's two pages are confirmed, the plan starts after them, all KV.
    const a = setup({ trustPrefillEvents: true, pinTtlMs: 0 }).source
    storePage(a, 0, 0)
    storePage(a, 1, 1)
    a.commitTurn('s', tokens(41))
    const planned = a.plan(100).messages.flatMap((m) => m.blocks)
    expect(planned.length).toBe(7) // pages 2..8: within β = 8 of the 41 tokens
    expect(planned.every((b) => b.withKv)).toBe(true)
    // A gap breaks the view: nothing is confirmed from it, but what it shows still dedups.
    const b = setup({ trustPrefillEvents: true, pinTtlMs: 0 }).source
    storePage(b, 0, 0)
    storePage(b, 2, 1) // event 1 was lost
    expect(b.prefillViewConsistent).toBe(false)
    b.commitTurn('s', tokens(41))
    const sent = b.plan(100).messages.flatMap((m) => m.blocks)
    expect(sent.map((x) => x.withKv)).toEqual([false, false, true, true, true, true, true, true, true])
  })

  it('uses hints and D pressure for priority, and D availability for what it can send', () => {
    const lost = new Set<bigint>()
    const { source } = setup({ decodeHolds: { has: (h) => !lost.has(h) } })
    source.commitTurn('a', tokens(41, 1))
    const b = source.commitTurn('b', tokens(41, 2))
    source.setHints('b', { reseedLikelihood: 1 })
    source.setDecodePressure(0.5)
    lost.add(b.blocks[5]!.hash)
    const { plan, messages } = source.plan(100)
    expect(plan.sessions.map((s) => s.sessionId)).toEqual(['b', 'a'])
    expect(plan.sessions[0]!.reason).toBe('unavailable')
    // a fits whole (phase 'budget'); b can only progress up to its lost page (phase 'progress').
    expect(messages.map((m) => [m.sessionId, m.blocks.length])).toEqual([
      ['a', 9],
      ['b', 5],
    ])
    expect(plan.transfers.map((t) => t.phase)).toEqual(['budget', 'progress'])
    expect(source.metrics().lastOverBudget).toEqual(['b'])
    expect(source.metrics().budgetViolations).toBe(1)
    expect(source.sessionIds().sort()).toEqual(['a', 'b'])
    expect(source.endSession('b')).toBe(true)
    expect(source.inFlightCount()).toBe(1) // b's transfer is forgotten with it
    expect(() => source.status('b')).toThrowError(DtoPSyncError)
  })

  it('takes offers in version order and refuses one that does not continue the chain', () => {
    const { source } = setup()
    const offers = new OfferBuilder({ pageSize: 4, blockHasher: hasher })
    const o1 = offers.commitTurn('s', tokens(20))
    const o2 = offers.commitTurn('s', tokens(40))
    expect(source.addOffer(o1)).toBe(true)
    expect(source.addOffer(o2)).toBe(true)
    expect(source.addOffer(o1)).toBe(false) // older: ignored
    expect(source.status('s').syncablePages).toBe(9)
    const o3 = offers.commitTurn('s', tokens(60))
    const gap = { ...o3, firstPage: 12, blocks: o3.blocks.slice(3) }
    expect(() => source.addOffer(gap)).toThrowError(/starts at page 12/)
    expect(source.addOffer(o3)).toBe(true)
    expect(source.status('s').syncablePages).toBe(14)
  })
})

describe('SyncSource: a session that leaves this D and comes back', () => {
  it('keeps counting versions and message numbers up, so P does not drop its new turns as stale or duplicate', () => {
    const { p, source, deliver } = setup({ origin: 'd0' })
    source.commitTurn('s', tokens(21))
    const first = source.plan(100).messages
    expect(first.every((m) => m.origin === 'd0')).toBe(true)
    deliver(first)
    const v1 = p.sink.appliedVersion('s', 'd0')
    const lastSeq = Math.max(...first.map((m) => m.seq))
    expect(source.endSession('s')).toBe(true)
    // Back on this D with a longer history: a fresh chain, numbered after the old one.
    source.commitTurn('s', tokens(61))
    const again = source.plan(100).messages
    expect(again.length).toBeGreaterThan(0)
    expect(Math.min(...again.map((m) => m.version))).toBeGreaterThan(v1)
    expect(Math.min(...again.map((m) => m.seq))).toBeGreaterThan(lastSeq)
    deliver(again)
    expect(source.metrics().replies.stale + source.metrics().replies.duplicate).toBe(0)
    expect(source.status('s').confirmedPages).toBeGreaterThan(10)
    p.check()
  })

  it('sources of one P can share their view of it: each event is applied once, and what one learns P lacks, all forget', () => {
    const view = new KvEventIndex()
    const make = (origin: string) =>
      new SyncSource({
        origin,
        pageSize: 4,
        beta: 8,
        now: () => 0,
        blockHasher: hasher,
        bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 100 },
        prefillView: view,
      })
    const a = make('d0')
    const b = make('d1')
    a.commitTurn('s', tokens(41))
    b.commitTurn('s', tokens(41))
    expect(storePage(a, 0, 0)).toBe(true)
    expect(storePage(b, 0, 0)).toBe(false) // the same event, already in the shared view
    storePage(a, 1, 1)
    expect([a.status('s').confirmedPages, b.status('s').confirmedPages]).toEqual([2, 2])
    // P answers one source that it lacks page 1: both stop counting it.
    const msg = a.plan(100).messages[0]!
    a.handleReply({
      sessionId: 's',
      version: msg.version,
      seq: msg.seq,
      status: 'missing-kv',
      heldPages: 1,
      throughHash: CHAIN_41[0]!.hash,
      pinnedUntil: null,
      missingHash: CHAIN_41[1]!.hash,
      ingestedBlocks: 0,
      skippedBlocks: 0,
      error: null,
    })
    expect(view.has(CHAIN_41[1]!.hash)).toBe(false)
    expect(b.status('s').confirmedPages).toBe(1)
    expect(() => sourceWith({ prefillView: {} as KvEventIndex })).toThrow(
      /prefillView must be a KvEventIndex/,
    )
  })

  it('an OfferBuilder goes on from the version a session ended with', () => {
    const offers = new OfferBuilder({ pageSize: 4, blockHasher: hasher })
    offers.commitTurn('s', tokens(9))
    offers.commitTurn('s', tokens(13))
    offers.endSession('s')
    expect(offers.commitTurn('s', tokens(9)).version).toBe(3)
    expect(() => sourceWith({ origin: 5 as unknown as string })).toThrow(/origin must be a string/)
  })
})

describe('SyncSource: backing off a full P', () => {
  it('after no-space it sends nothing for noSpaceBackoffMs, doubling per refusal, and resumes once P applies again', () => {
    // P holds 4 pages, a session needs 9: every transfer is refused with no-space.
    const p = prefillSide({ poolPages: 4 })
    const source = new SyncSource({
      pageSize: 4,
      beta: 8,
      now: () => p.clock.t,
      blockHasher: hasher,
      bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 100 },
      noSpaceBackoffMs: 100,
      maxNoSpaceBackoffMs: 250,
    })
    const deliver = (msgs: readonly TransferMessage[]) => {
      for (const m of msgs) {
        const r = p.sink.ingest(m)
        if (r !== undefined) source.handleReply(r)
      }
    }
    source.commitTurn('s', tokens(41))
    deliver(source.plan(10).messages)
    expect(source.metrics().replies['no-space']).toBeGreaterThan(0)
    // Paused for 100 ms: a round sends nothing (and says so), the report still comes.
    p.clock.t = 50
    const paused = source.plan(10)
    expect(paused.messages).toEqual([])
    expect(paused.plan.overBudget).toEqual(['s'])
    expect(source.metrics().pausedRounds).toBe(1)
    // Then it tries again; refused again → 200 ms; then capped at 250 ms.
    p.clock.t = 100
    deliver(source.plan(10).messages)
    p.clock.t = 299
    expect(source.plan(10).messages).toEqual([])
    p.clock.t = 300
    deliver(source.plan(10).messages)
    p.clock.t = 549
    expect(source.plan(10).messages).toEqual([])
    // A session P can hold is applied, and the next refusal starts from 100 ms again.
    p.clock.t = 550
    source.endSession('s')
    source.commitTurn('small', tokens(9))
    deliver(source.plan(10).messages)
    expect(source.metrics().replies.applied).toBe(1)
    expect(() => sourceWith({ noSpaceBackoffMs: 10, maxNoSpaceBackoffMs: 5 })).toThrow(
      /maxNoSpaceBackoffMs \(5\) must be at least noSpaceBackoffMs \(10\)/,
    )
  })
})
