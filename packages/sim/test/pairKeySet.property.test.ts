import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { PairKeySet } from '../src/hashing/pairKeySet.js'

describe('PairKeySet agrees with a Set of the pairs', () => {
  it('add / has / size after every operation, through growth and colliding lanes', () => {
    // Small lane ranges force equal lanes and equal slots; signed and unsigned forms are one key.
    const lane = fc.oneof(fc.integer({ min: -3, max: 3 }), fc.integer(), fc.nat(0xffffffff))
    const op = fc.record({ add: fc.boolean(), hi: lane, lo: lane })
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), fc.integer({ min: 0, max: 64 }), (ops, expected) => {
        const set = new PairKeySet(expected)
        const model = new Set<string>()
        for (const { add, hi, lo } of ops) {
          const k = `${hi | 0},${lo | 0}`
          if (add) expect(set.add(hi, lo)).toBe(!model.has(k))
          else expect(set.has(hi, lo)).toBe(model.has(k))
          if (add) model.add(k)
          expect(set.size).toBe(model.size)
        }
        for (const k of model) {
          const [hi, lo] = k.split(',').map(Number)
          expect(set.has(hi!, lo!)).toBe(true)
        }
      }),
      { numRuns: 200 },
    )
  })
})
