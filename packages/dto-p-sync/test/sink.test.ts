import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { DtoPSyncError, OfferBuilder, type SyncReply, type TransferMessage } from '../src/index.js'
import { seededRandom } from '../src/testing/index.js'
import { chainOf, hasher, msgOf, prefillSide, tokens } from './fixtures.js'

describe('SyncSink ingest', () => {
  it('inserts a chain into P as an external producer', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    const r = p.sink.ingest(msgOf(chain, 0, 10))!
    expect(r).toMatchObject({
      status: 'applied',
      heldPages: 10,
      throughHash: chain[9]!.hash,
      ingestedBlocks: 10,
      skippedBlocks: 0,
    })
    expect(p.cache.matchPrefix(tokens(41), { readOnly: true }).length).toBe(40)
    expect(p.sink.holds(chain[9]!.hash)).toBe(true)
    expect(p.cache.protectedSize()).toBe(0) // no pin: immediately evictable
    expect(r.pinnedUntil).toBeNull()
    p.check()
    // The next segment chains onto the session's path.
    const longer = chainOf(tokens(61))
    const r2 = p.sink.ingest(msgOf(longer, 10, 15, { seq: 1, version: 2 }))!
    expect(r2).toMatchObject({ status: 'applied', heldPages: 15 })
    expect(p.sink.appliedVersion('s')).toBe(2)
    p.check()
  })

  it('is idempotent: a duplicate delivery changes nothing and repeats the original reply', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 0, max: 5 }), fc.boolean()), {
          minLength: 1,
          maxLength: 8,
        }),
        (steps) => {
          const p = prefillSide({ pinTtlMs: 100 })
          const history: number[] = []
          let seq = 0
          let version = 0
          let held = 0
          for (const [grow, salt, evict] of steps) {
            history.push(...tokens(grow, salt))
            version++
            const chain = chainOf(history)
            if (evict) p.cache.evict(8)
            if (chain.length === 0) continue
            const from = Math.min(held, chain.length - 1)
            const msg = msgOf(chain, from, chain.length, { seq: seq++, version })
            const first = p.sink.ingest(msg)!
            if (first.status === 'applied') held = first.heldPages
            else held = 0
            const pages = p.pages()
            const free = p.pool.availableSize()
            const prot = p.cache.protectedSize()
            const pins = p.sink.pinCount()
            const again = p.sink.ingest(msg)!
            if (
              first.status === 'unknown-parent' ||
              first.status === 'stale' ||
              first.status === 'no-space'
            ) {
              // Refused, so not remembered: the redelivery is judged afresh and, nothing having
              // changed, gets the same answer (a full P may have room by the next delivery).
              expect(again).toEqual(first)
            } else {
              expect(again).toEqual({ ...first, status: 'duplicate' })
            }
            expect(p.pages()).toEqual(pages)
            expect(p.pool.availableSize()).toBe(free)
            expect(p.cache.protectedSize()).toBe(prot)
            expect(p.sink.pinCount()).toBe(pins)
            p.check()
          }
        },
      ),
      // A run that fills P (the last delivery gets no-space), kept as a regression case.
      {
        numRuns: 150,
        examples: [
          [
            [
              [27, 0, false],
              [39, 0, false],
              [31, 0, false],
              [39, 0, false],
              [40, 0, false],
              [38, 0, false],
              [25, 0, false],
              [22, 0, false],
            ],
          ],
        ],
      },
    )
  })

  it('converges to the in-order result whatever the delivery order (re-requesting unknown parents)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 120 }),
        fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 10 }),
        fc.nat(),
        (len, cuts, seed) => {
          const rnd = seededRandom(seed)
          const chain = chainOf(tokens(len + 4, 3))
          const segs: [number, number][] = []
          let at = 0
          for (const c of cuts) {
            if (at >= chain.length) break
            segs.push([at, Math.min(chain.length, at + c)])
            at += c
          }
          if (at < chain.length) segs.push([at, chain.length])
          const p = prefillSide()
          let seq = 0
          const queue: TransferMessage[] = segs.map(([a, b]) => msgOf(chain, a, b, { seq: seq++ }))
          let rounds = 0
          while (queue.length > 0) {
            expect(++rounds).toBeLessThan(100_000)
            const i = Math.floor(rnd() * queue.length)
            const m = queue.splice(i, 1)[0]!
            const r = p.sink.ingest(m)!
            if (r.status === 'unknown-parent') {
              expect(r.missingHash).toBe(m.blocks[0]!.parentHash)
              queue.push({ ...m, seq: seq++ }) // D sends it again later
            } else {
              expect(r.status).toBe('applied')
            }
            p.check()
          }
          const inOrder = prefillSide()
          inOrder.sink.ingest(msgOf(chain, 0, chain.length))
          expect(p.pages()).toEqual(inOrder.pages())
        },
      ),
      { numRuns: 150 },
    )
  })

  it('ignores older versions, even one that was still arriving', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    expect(p.sink.ingest(msgOf(chain, 0, 4, { version: 3, seq: 5 }))!.status).toBe('applied')
    const before = p.pages()
    const old = p.sink.ingest(msgOf(chain, 4, 8, { version: 2, seq: 4 }))!
    expect(old.status).toBe('stale')
    expect(p.pages()).toEqual(before)
    // A reservation of version 3 overtaken by an applied version 4 is dropped at completion.
    const slow = p.sink.begin(msgOf(chain, 4, 8, { version: 3, seq: 6 }))
    expect(slow.kind).toBe('reserved')
    expect(p.sink.ingest(msgOf(chain, 4, 6, { version: 4, seq: 7 }))!.status).toBe('applied')
    if (slow.kind !== 'reserved') throw new Error('unreachable')
    expect(p.sink.complete(slow.reservation.id).status).toBe('stale')
    expect(p.cache.matchPrefix(tokens(41), { readOnly: true }).length).toBe(24)
    p.check()
    expect(p.sink.metrics().stale).toBe(2)
  })

  it('refuses a segment whose parent P lacks, and resolves parents P prefilled itself', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    const r = p.sink.ingest(msgOf(chain, 3, 6))!
    expect(r).toMatchObject({ status: 'unknown-parent', missingHash: chain[2]!.hash, heldPages: 0 })
    expect(p.cache.totalSize()).toBe(0)
    // P's own prefill of the first 3 pages: the parent now resolves through P's KV events.
    const slots = p.pool.alloc(12)
    p.cache.insert(tokens(12), slots)
    expect(p.sink.ingest(msgOf(chain, 3, 6, { seq: 1 }))!.status).toBe('applied')
    expect(p.cache.matchPrefix(tokens(41), { readOnly: true }).length).toBe(24)
    p.check()
  })

  it('skips blocks P holds, answers missing-kv for an identity-only block it lacks', () => {
    const p = prefillSide({ pinTtlMs: 1000 })
    const chain = chainOf(tokens(41))
    p.sink.ingest(msgOf(chain, 0, 4))
    const r = p.sink.ingest(msgOf(chain, 0, 8, { seq: 1, withKv: (i) => i !== 5 }))!
    expect(r).toMatchObject({
      status: 'missing-kv',
      heldPages: 5,
      throughHash: chain[4]!.hash,
      missingHash: chain[5]!.hash,
      ingestedBlocks: 1,
      skippedBlocks: 4,
    })
    expect(r.pinnedUntil).toBe(1000)
    expect(p.cache.matchPrefix(tokens(41), { readOnly: true }).length).toBe(20)
    // A check-and-pin of held blocks ships no KV and renews the pin.
    p.clock.t = 500
    const renew = p.sink.ingest(msgOf(chain, 0, 5, { seq: 2, withKv: () => false }))!
    expect(renew).toMatchObject({ status: 'applied', ingestedBlocks: 0, skippedBlocks: 5, pinnedUntil: 1500 })
    expect(p.sink.pinCount()).toBe(1) // the older pin on the same path was released
    p.check()
    expect(p.sink.metrics().skippedBlocks).toBe(9)
  })

  it('keeps the blocks that arrived before a transfer broke off, frees the rest', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    const b = p.sink.begin(msgOf(chain, 0, 10))
    if (b.kind !== 'reserved') throw new Error('expected a reservation')
    expect(b.reservation.slots).toBe(40)
    expect(p.sink.reservedTokens()).toBe(40)
    p.check()
    const r = p.sink.complete(b.reservation.id, 3)
    expect(r).toMatchObject({ status: 'partial', heldPages: 3, ingestedBlocks: 3 })
    expect(p.cache.totalSize()).toBe(12)
    expect(p.sink.reservedTokens()).toBe(0)
    p.check()
    // A partial outcome is not remembered as applied: the full duplicate still applies.
    expect(p.sink.ingest(msgOf(chain, 0, 10))!.status).toBe('applied')
    expect(p.cache.totalSize()).toBe(40)
  })

  it('frees everything of an aborted or expired reservation', () => {
    const p = prefillSide({ reservationTimeoutMs: 100 })
    const chain = chainOf(tokens(41))
    p.sink.ingest(msgOf(chain, 0, 2))
    const a = p.sink.begin(msgOf(chain, 2, 6, { seq: 1 }))
    const b = p.sink.begin(msgOf(chain, 2, 3, { seq: 2 }))
    if (a.kind !== 'reserved' || b.kind !== 'reserved') throw new Error('expected reservations')
    expect(p.cache.protectedSize()).toBe(8) // the parent path is locked while arriving
    p.sink.abort(a.reservation.id)
    p.check()
    expect(() => p.sink.complete(a.reservation.id)).toThrowError(DtoPSyncError)
    p.clock.t = 100
    expect(p.sink.expire()).toEqual({ reservations: 1, pins: 0 })
    expect(p.sink.hasReservation(b.reservation.id)).toBe(false)
    expect(p.sink.reservedTokens()).toBe(0)
    expect(p.cache.protectedSize()).toBe(0)
    expect(p.pool.availableSize() + p.cache.totalSize()).toBe(p.pool.size)
    expect(p.sink.metrics()).toMatchObject({ reservationsAborted: 1, reservationsExpired: 1 })
  })

  it('ignores a network duplicate of a transfer still arriving', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    const m = msgOf(chain, 0, 4)
    const a = p.sink.begin(m)
    expect(p.sink.begin(m)).toEqual({ kind: 'ignored' })
    expect(p.sink.ingest(m)).toBeUndefined()
    if (a.kind !== 'reserved') throw new Error('expected a reservation')
    expect(p.sink.complete(a.reservation.id).status).toBe('applied')
    expect(p.sink.ingest(m)!.status).toBe('duplicate')
    p.check()
  })

  it('answers no-space when slots cannot be found, evicting unpinned pages first', () => {
    const p = prefillSide({ poolPages: 12, pinTtlMs: 1000 })
    const a = chainOf(tokens(41, 1), 4, 'a')
    expect(p.sink.ingest(msgOf(a, 0, 8, { sessionId: 'a' }))!.status).toBe('applied') // pinned
    const b = chainOf(tokens(41, 2), 4, 'b')
    const r = p.sink.ingest(msgOf(b, 0, 6, { sessionId: 'b' }))!
    expect(r.status).toBe('no-space')
    expect(p.sink.metrics().noSpace).toBe(1)
    p.check()
    p.clock.t = 1000
    p.sink.expire() // a's pin lapses: its pages become evictable
    expect(p.sink.ingest(msgOf(b, 0, 6, { sessionId: 'b', seq: 1 }))!.status).toBe('applied')
    expect(p.sink.metrics().evictedForSpace).toBeGreaterThan(0)
    p.check()
    // Without evictForSpace the sink never evicts.
    const q = prefillSide({ poolPages: 4, evictForSpace: false })
    q.sink.ingest(msgOf(a, 0, 4, { sessionId: 'a' }))
    expect(q.sink.ingest(msgOf(b, 0, 1, { sessionId: 'b' }))!.status).toBe('no-space')
    q.check()
  })

  it('pins until the TTL, releases on expire, refuses pins beyond maxPinnedTokens', () => {
    const p = prefillSide({ pinTtlMs: 500, maxPinnedTokens: 40 })
    const a = chainOf(tokens(41, 1), 4, 'a')
    const b = chainOf(tokens(41, 2), 4, 'b')
    expect(p.sink.ingest(msgOf(a, 0, 8, { sessionId: 'a' }))!.pinnedUntil).toBe(500)
    expect(p.cache.evict(1000).evictedTokens).toBe(0)
    expect(p.sink.ingest(msgOf(b, 0, 8, { sessionId: 'b' }))!.pinnedUntil).toBeNull()
    expect(p.sink.metrics().pinsRefused).toBe(1)
    expect(p.sink.pinnedTokens()).toBe(32)
    p.clock.t = 499
    expect(p.sink.expire().pins).toBe(0)
    p.clock.t = 500
    expect(p.sink.expire().pins).toBe(1)
    expect(p.cache.protectedSize()).toBe(0)
    p.check()
    p.sink.ingest(msgOf(a, 0, 8, { sessionId: 'a', seq: 1 }))
    expect(p.sink.releaseAllPins()).toBe(1)
    p.sink.ingest(msgOf(a, 0, 8, { sessionId: 'a', seq: 2 }))
    expect(p.sink.dropSession('a')).toBe(true)
    expect(p.sink.dropSession('a')).toBe(false)
    expect(p.cache.protectedSize()).toBe(0)
    p.check()
  })

  it('never leaks a slot under random transfer failures, evictions and duplicates', () => {
    type Op =
      | { k: 'begin'; seg: number; len: number; dup: boolean }
      | { k: 'end'; pick: number; got: number }
      | { k: 'abort'; pick: number }
      | { k: 'evict'; n: number }
      | { k: 'tick'; ms: number }
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({
        k: fc.constant('begin' as const),
        seg: fc.nat({ max: 12 }),
        len: fc.integer({ min: 1, max: 6 }),
        dup: fc.boolean(),
      }),
      fc.record({ k: fc.constant('end' as const), pick: fc.nat(), got: fc.nat({ max: 6 }) }),
      fc.record({ k: fc.constant('abort' as const), pick: fc.nat() }),
      fc.record({ k: fc.constant('evict' as const), n: fc.integer({ min: 1, max: 24 }) }),
      fc.record({ k: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 200 }) }),
    )
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 60 }),
        fc.integer({ min: 6, max: 40 }),
        fc.boolean(),
        (ops, poolPages, pins) => {
          const p = prefillSide({ poolPages, reservationTimeoutMs: 300, ...(pins ? { pinTtlMs: 250 } : {}) })
          const chains = [chainOf(tokens(80, 1), 4, 'a'), chainOf(tokens(80, 2), 4, 'b')]
          const open = new Map<number, number>() // reservation id -> blocks of its message
          let seq = 0
          for (const o of ops) {
            if (o.k === 'begin') {
              const ci = o.seg % 2
              const chain = chains[ci]!
              const from = Math.min(o.seg, chain.length - 1)
              const m = msgOf(chain, from, Math.min(chain.length, from + o.len), {
                sessionId: ci ? 'b' : 'a',
                seq: seq++,
              })
              for (const msg of o.dup ? [m, m] : [m]) {
                const r = p.sink.begin(msg)
                if (r.kind === 'reserved') open.set(r.reservation.id, msg.blocks.length)
              }
            } else if (o.k === 'end' || o.k === 'abort') {
              for (const id of [...open.keys()]) if (!p.sink.hasReservation(id)) open.delete(id)
              const live = [...open.keys()]
              if (live.length > 0) {
                const id = live[o.pick % live.length]!
                const n = open.get(id)!
                open.delete(id)
                if (o.k === 'abort') p.sink.abort(id)
                else {
                  const r: SyncReply = p.sink.complete(id, Math.min(o.got, n))
                  expect(['applied', 'partial', 'stale', 'missing-kv']).toContain(r.status)
                }
              }
            } else if (o.k === 'evict') p.cache.evict(o.n)
            else {
              p.clock.t += o.ms
              p.sink.expire()
            }
            p.check()
          }
          for (const id of open.keys()) if (p.sink.hasReservation(id)) p.sink.abort(id)
          p.sink.releaseAllPins()
          expect(p.sink.reservedTokens()).toBe(0)
          expect(p.cache.protectedSize()).toBe(0)
          expect(p.pool.availableSize() + p.cache.totalSize()).toBe(p.pool.size)
        },
      ),
      { numRuns: 200 },
    )
  })

  it('detects a P cache that does not report ingested pages under D hashes', () => {
    const p = prefillSide({ wireEvents: false })
    const chain = chainOf(tokens(41))
    expect(p.sink.ingest(msgOf(chain, 0, 2))!.status).toBe('applied')
    expect(() => p.sink.ingest(msgOf(chain, 2, 4, { seq: 1 }))).toThrowError(/onEvent/)
    p.check()
  })

  it('can skip hash verification', () => {
    const p = prefillSide({ verifyHashes: false })
    const chain = chainOf(tokens(41))
    const forged = msgOf(chain, 0, 2)
    const bad = {
      ...forged,
      blocks: [
        { ...forged.blocks[0]!, hash: 1n },
        { ...forged.blocks[1]!, parentHash: 1n },
      ],
    }
    expect(p.sink.ingest(bad)!.status).toBe('applied') // trusted as is
    const q = prefillSide()
    expect(() => q.sink.ingest(bad)).toThrowError(/hash/)
    expect(q.cache.totalSize()).toBe(0)
  })

  it('ingests into the session namespace only', () => {
    const p = prefillSide()
    const offers = new OfferBuilder({ pageSize: 4, blockHasher: hasher })
    const o = offers.commitTurn('s', tokens(21), { extraKey: 'lora-a' })
    const r = p.sink.ingest({
      sessionId: 's',
      version: o.version,
      seq: 0,
      extraKey: 'lora-a',
      startPage: 0,
      blocks: o.blocks.map((b) => ({ ...b, withKv: true })),
    })!
    expect(r.status).toBe('applied')
    expect(p.cache.matchPrefix(tokens(21), { readOnly: true, extraKey: 'lora-a' }).length).toBe(20)
    expect(p.cache.matchPrefix(tokens(21), { readOnly: true }).length).toBe(0)
    // The same chain ids in the default namespace would not verify: the hasher seeds with the namespace.
    expect(() =>
      p.sink.ingest({
        sessionId: 't',
        version: 1,
        seq: 0,
        extraKey: '',
        startPage: 0,
        blocks: o.blocks.map((b) => ({ ...b, withKv: true })),
      }),
    ).toThrowError(/hash/)
    p.check()
  })

  it('exposes its holdings as a snapshot', () => {
    const p = prefillSide()
    const chain = chainOf(tokens(41))
    p.sink.ingest(msgOf(chain, 0, 3))
    const snap = p.sink.snapshot()
    expect(snap.blocks.map((b) => b.hash).sort()).toEqual(
      chain
        .slice(0, 3)
        .map((b) => b.hash)
        .sort(),
    )
    expect(snap.eventId).toBeGreaterThanOrEqual(0)
  })
})

describe('SyncSink origins: a session synced by several D workers', () => {
  it("keeps each D's versions and sequence numbers apart; without origins the second D's messages look stale or duplicate", () => {
    const chain = chainOf(tokens(61))
    // d0 synced the session up to version 5; it moved to d1, whose source numbers from 1.
    const p = prefillSide()
    expect(p.sink.ingest(msgOf(chain, 0, 5, { seq: 0, version: 5, origin: 'd0' }))!.status).toBe('applied')
    expect(p.sink.ingest(msgOf(chain, 5, 10, { seq: 0, version: 1, origin: 'd1' }))!.status).toBe('applied')
    expect(p.sink.ingest(msgOf(chain, 10, 12, { seq: 1, version: 2, origin: 'd1' }))!.status).toBe('applied')
    expect(p.sink.appliedVersion('s', 'd0')).toBe(5)
    expect(p.sink.appliedVersion('s', 'd1')).toBe(2)
    expect(p.cache.matchPrefix(tokens(61), { readOnly: true }).length).toBe(48)
    p.check()
    // Without origins, d1's numbering collides with d0's: nothing it sends gets in.
    const q = prefillSide()
    expect(q.sink.ingest(msgOf(chain, 0, 5, { seq: 0, version: 5 }))!.status).toBe('applied')
    expect(q.sink.ingest(msgOf(chain, 5, 10, { seq: 0, version: 1 }))!.status).toBe('stale')
    expect(q.sink.ingest(msgOf(chain, 5, 10, { seq: 0, version: 7 }))!.status).toBe('duplicate')
    expect(q.cache.matchPrefix(tokens(61), { readOnly: true }).length).toBe(20)
    q.check()
  })

  it('dropSession forgets one origin or all of them; a non-string origin is refused', () => {
    const p = prefillSide({ pinTtlMs: 1_000 })
    const chain = chainOf(tokens(41))
    p.sink.ingest(msgOf(chain, 0, 4, { origin: 'd0' }))
    p.sink.ingest(msgOf(chain, 0, 6, { origin: 'd1' }))
    expect(p.sink.pinCount()).toBe(2)
    expect(p.sink.dropSession('s', 'd0')).toBe(true)
    expect(p.sink.pinCount()).toBe(1)
    expect(p.sink.appliedVersion('s', 'd0')).toBe(0)
    expect(p.sink.appliedVersion('s', 'd1')).toBe(1)
    expect(p.sink.dropSession('s')).toBe(true)
    expect(p.sink.pinCount()).toBe(0)
    expect(p.sink.dropSession('s')).toBe(false)
    p.check()
    const bad = { ...msgOf(chain, 0, 2), origin: 7 } as unknown as TransferMessage
    expect(() => p.sink.ingest(bad)).toThrow(/origin must be a string/)
  })
})
