import {
  computeBlockHashes,
  type KvEvent,
  RadixCache,
  sglangBlockHasher,
  xxh3BlockHasher,
} from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { OfferBuilder } from '../src/index.js'
import { fnvBlockHasher } from '../src/testing/index.js'

const tokenArb = fc.integer({ min: 0, max: 5 })

describe('OfferBuilder', () => {
  it('offers full pages of the KV-materialised history, never the newest sampled token', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.tuple(fc.array(tokenArb, { maxLength: 12 }), fc.boolean()), {
          minLength: 1,
          maxLength: 12,
        }),
        (ps, turns) => {
          const hasher = fnvBlockHasher()
          const offers = new OfferBuilder({ pageSize: ps, blockHasher: hasher })
          const history: number[] = []
          const offered: bigint[] = []
          for (const [add, sampled] of turns) {
            history.push(...add)
            const offer = offers.commitTurn('s', history, { newestSampled: sampled })
            const kv = sampled ? Math.max(0, history.length - 1) : history.length
            const pages = Math.floor(kv / ps)
            // The offer continues the chain it had, then covers exactly the materialised full pages.
            expect(offer.firstPage).toBeLessThanOrEqual(offered.length)
            offered.length = offer.firstPage
            offered.push(...offer.blocks.map((b) => b.hash))
            expect(offered.length).toBe(pages)
            expect(offer.committedTokens).toBe(history.length)
            if (sampled && history.length > 0) expect(pages * ps).toBeLessThanOrEqual(history.length - 1)
            // Same ids as the radix cache's hashing of the same tokens.
            expect(offered).toEqual(computeBlockHashes(hasher, history.slice(0, pages * ps), ps))
            for (const b of offer.blocks) expect(b.tokens.length).toBe(ps)
          }
        },
      ),
      { numRuns: 200 },
    )
  })

  it('an unchanged history adds no block but bumps the version', () => {
    const offers = new OfferBuilder({ pageSize: 2, blockHasher: fnvBlockHasher() })
    const a = offers.commitTurn('s', [1, 2, 3, 4, 5])
    const b = offers.commitTurn('s', [1, 2, 3, 4, 5])
    expect(a.blocks.length).toBe(2)
    expect(b.blocks.length).toBe(0)
    expect(b.firstPage).toBe(2)
    expect(b.version).toBe(a.version + 1)
  })

  it('a rewritten history cuts the chain at the first differing page', () => {
    const offers = new OfferBuilder({ pageSize: 2, blockHasher: fnvBlockHasher() })
    offers.commitTurn('s', [1, 2, 3, 4, 5, 6, 7])
    const r = offers.commitTurn('s', [1, 2, 3, 9, 5, 6, 7])
    expect(r.firstPage).toBe(1)
    expect(r.blocks.map((b) => Array.from(b.tokens))).toEqual([
      [3, 9],
      [5, 6],
    ])
    expect(r.blocks[0]!.parentHash).toBe(offers.session('s')!.blocks[0]!.hash)
    const shorter = offers.commitTurn('s', [1, 2, 3])
    expect(shorter.firstPage).toBe(1)
    expect(offers.session('s')!.blocks.length).toBe(1)
  })

  it('a namespace change restarts the chain', () => {
    const offers = new OfferBuilder({
      pageSize: 2,
      blockHasher: sglangBlockHasher({ namespaceInSeed: true }),
    })
    const a = offers.commitTurn('s', [1, 2, 3, 4, 5])
    const b = offers.commitTurn('s', [1, 2, 3, 4, 5], { extraKey: 'lora-a' })
    expect(b.firstPage).toBe(0)
    expect(b.extraKey).toBe('lora-a')
    expect(b.blocks[0]!.hash).not.toBe(a.blocks[0]!.hash)
  })

  for (const [name, make] of [
    ['sglangBlockHasher', () => sglangBlockHasher()],
    ['xxh3BlockHasher', () => xxh3BlockHasher()],
  ] as const) {
    it(`agrees with the ids in P's BlockStored events (${name})`, () => {
      const hasher = make()
      const events: KvEvent[] = []
      const p = new RadixCache({
        pageSize: 4,
        trackValues: false,
        blockHasher: hasher,
        onEvent: (e) => events.push(e),
      })
      const offers = new OfferBuilder({ pageSize: 4, blockHasher: hasher })
      const history = Array.from({ length: 23 }, (_, i) => (i * 7919) % 50_000)
      const offer = offers.commitTurn('s', history)
      p.insert(history.slice(0, 20))
      const stored = events.flatMap((e) => (e.type === 'BlockStored' ? [...e.blockHashes] : []))
      expect(offer.blocks.map((b) => b.hash)).toEqual(stored)
      const parents = events.flatMap((e) => (e.type === 'BlockStored' ? [e.parentBlockHash] : []))
      expect(offer.blocks.map((b) => b.parentHash)).toEqual(parents)
    })
  }

  it('tracks and forgets sessions', () => {
    const offers = new OfferBuilder({ pageSize: 2 })
    offers.commitTurn('a', [1, 2, 3])
    offers.commitTurn('b', [1])
    expect(offers.sessionIds().sort()).toEqual(['a', 'b'])
    expect(offers.session('a')?.committedTokens).toBe(3)
    expect(offers.endSession('a')).toBe(true)
    expect(offers.endSession('a')).toBe(false)
    expect(offers.session('a')).toBeUndefined()
  })
})
