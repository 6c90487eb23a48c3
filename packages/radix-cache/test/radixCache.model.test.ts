import fc from 'fast-check'
import { describe, it } from 'vitest'
import { EVICTION_POLICIES } from '../src/index.js'
import { radixCommands, radixModelSetup } from '../src/testing/index.js'

// Model-based tests: random command lists run against RadixCache and the naive reference model;
// after every command the invariant checker, the page sets, the lock counts and the KV pool
// accounting are compared (see src/testing/commands.ts).
describe('RadixCache agrees with the reference model', () => {
  for (const pageSize of [1, 2, 4]) {
    for (const evictGranularity of ['leaf', 'page'] as const) {
      it(`pageSize ${pageSize}, ${evictGranularity} eviction`, () => {
        fc.assert(
          fc.property(radixCommands(), (cmds) => {
            fc.modelRun(radixModelSetup({ pageSize, evictGranularity }), cmds)
          }),
          { numRuns: 150 },
        )
      })
    }
  }
  for (const evictionPolicy of EVICTION_POLICIES) {
    it(`policy ${evictionPolicy}`, () => {
      fc.assert(
        fc.property(radixCommands({ namespaces: ['', 'x', 'y'] }), (cmds) => {
          fc.modelRun(radixModelSetup({ pageSize: 2, evictionPolicy, poolPages: 24 }), cmds)
        }),
        { numRuns: 60 },
      )
    })
  }
})
