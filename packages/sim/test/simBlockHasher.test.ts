import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { simBlockHasher } from '../src/index.js'

describe('simBlockHasher', () => {
  it("blockId reads the digest's 8 bytes as a big-endian signed 64-bit integer (property)", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 8, maxLength: 8 }), fc.nat(4), (bytes, at) => {
        const want = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigInt64(0)
        expect(simBlockHasher.blockId(bytes)).toBe(want)
        const inside = new Uint8Array(at + 12)
        inside.set(bytes, at)
        expect(simBlockHasher.blockIdAt!(inside, at)).toBe(want)
      }),
    )
    expect(simBlockHasher.blockId(Uint8Array.of(0x80, 0, 0, 0, 0, 0, 0, 0))).toBe(-(2n ** 63n))
    expect(simBlockHasher.blockId(Uint8Array.of(255, 255, 255, 255, 255, 255, 255, 255))).toBe(-1n)
    expect(simBlockHasher.blockId(Uint8Array.of(0, 0, 0, 1, 0, 0, 0, 2))).toBe(2n ** 32n + 2n)
  })

  it('hashPagesInto and blockIdAt give what hashBlock and blockId give page by page (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.nat(), { maxLength: 40 }),
        fc.constantFrom(1, 2, 3, 8),
        fc.nat(5),
        fc.constantFrom(undefined, 'ns', 'другой'),
        fc.boolean(),
        fc.nat(3),
        (words, ps, from0, extraKey, chained, outAt) => {
          const tokens = Uint32Array.from(words)
          const from = Math.min(from0, tokens.length)
          const pages = Math.floor((tokens.length - from) / ps)
          const parent = chained
            ? simBlockHasher.hashBlock(undefined, Uint32Array.of(7, 8), extraKey)
            : undefined
          // The parent digest sits inside a larger array, as a node's packed digests do.
          const packedParent = new Uint8Array(24)
          if (parent !== undefined) packedParent.set(parent, 16)
          const out = new Uint8Array(outAt + 8 * pages).fill(0xee)
          simBlockHasher.hashPagesInto!(
            parent === undefined ? undefined : packedParent,
            16,
            tokens,
            from,
            ps,
            pages,
            extraKey,
            out,
            outAt,
          )
          let prev = parent
          for (let p = 0; p < pages; p++) {
            const at = from + p * ps
            prev = simBlockHasher.hashBlock(prev, tokens.subarray(at, at + ps), extraKey)
            const o = outAt + 8 * p
            expect(Array.from(out.subarray(o, o + 8))).toEqual(Array.from(prev))
            expect(simBlockHasher.blockIdAt!(out, o)).toBe(simBlockHasher.blockId(prev))
          }
          expect(Array.from(out.subarray(0, outAt))).toEqual(new Array(outAt).fill(0xee))
          expect(simBlockHasher.digestLength).toBe(8)
        },
      ),
    )
  })
})
