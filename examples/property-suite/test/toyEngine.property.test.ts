import { RadixCacheError } from '@kvc/radix-cache'
import {
  checkRadixInvariants,
  radixCommands,
  radixModelSetup,
  RadixReferenceModel,
} from '@kvc/radix-cache/testing'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ToyEngine } from '../src/toyEngine.js'

// 1. Reuse the SDK's own model-based suite as a conformance check of the cache configuration
//    the engine uses (page size, policy, granularity).
describe('the cache configuration the engine uses conforms to the reference model', () => {
  it('page 4, lru, page eviction', () => {
    fc.assert(
      fc.property(radixCommands(), (cmds) =>
        fc.modelRun(radixModelSetup({ pageSize: 4, evictGranularity: 'page' }), cmds),
      ),
      { numRuns: 40 },
    )
  })
})

// 2. Property-test the engine's own integration: random interleavings of request starts and
//    finishes, with the SDK's invariant checker and the pool accounting identity after every step,
//    and the reference model predicting every prefix hit.
const prompt = fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 24 })
const step = fc.oneof(
  prompt.map((p) => ({ kind: 'start' as const, prompt: p })),
  fc.nat().map((k) => ({ kind: 'finish' as const, pick: k })),
)

describe('ToyEngine', () => {
  it('never leaks or double-frees a KV slot, and its prefix hits match the model', () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 80 }), (steps) => {
        const engine = new ToyEngine(64, 4)
        const model = new RadixReferenceModel(4)
        for (const s of steps) {
          if (s.kind === 'start') {
            // The model never evicts, so the cache can hold less than it, never more; and a start
            // reuses exactly what the cache holds.
            const held = engine.cache.matchPrefix(s.prompt, { readOnly: true }).length
            expect(held).toBeLessThanOrEqual(model.match(s.prompt, ''))
            const req = engine.start(s.prompt)
            if (req !== undefined) expect(req.prefixLen).toBe(held)
          } else if (engine.running.size > 0) {
            const ids = [...engine.running.keys()]
            const id = ids[s.pick % ids.length]!
            const req = engine.running.get(id)!
            engine.finish(id)
            model.insert(req.tokens, '')
          }
          checkRadixInvariants(engine.cache)
          // Every slot is free, owned by the tree, or owned by exactly one running request.
          expect(engine.pool.availableSize() + engine.cache.totalSize() + engine.requestOwnedTokens()).toBe(
            engine.pool.size,
          )
        }
      }),
      { numRuns: 200 },
    )
  })

  it('a double free is refused by the pool and changes nothing', () => {
    const engine = new ToyEngine(64, 4)
    const req = engine.start([1, 2, 3, 4, 5])!
    const free = engine.pool.availableSize()
    engine.pool.free(req.row.subarray(4))
    expect(() => engine.pool.free(req.row.subarray(4))).toThrow(RadixCacheError)
    expect(engine.pool.availableSize()).toBe(free + 4)
  })
})
