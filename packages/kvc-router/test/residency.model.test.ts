import fc from 'fast-check'
import { describe, it } from 'vitest'
import { residencyCommands, residencyModelSetup } from '../src/testing/index.js'

// Model-based tests: random command lists (workers added and removed, KV events in order, with
// gaps, out of order and malformed, router-side updates, resyncs, queries) run against
// ResidencyIndex and the naive per-worker set-of-blocks model; the full state is compared after
// every command and every query's plain and exclusive overlap is compared per worker.
describe('ResidencyIndex agrees with the per-worker set model', () => {
  it('default policy (apply gaps, refuse duplicates)', () => {
    fc.assert(
      fc.property(residencyCommands(), (cmds) => fc.modelRun(residencyModelSetup(), cmds)),
      { numRuns: 150 },
    )
  })
  it('gapPolicy hold', () => {
    fc.assert(
      fc.property(residencyCommands(), (cmds) =>
        fc.modelRun(residencyModelSetup({ gapPolicy: 'hold' }), cmds),
      ),
      { numRuns: 100 },
    )
  })
  it('dedupe and a different theta', () => {
    fc.assert(
      fc.property(residencyCommands(), (cmds) =>
        fc.modelRun(residencyModelSetup({ dedupe: true, thetaShared: 0.3 }), cmds),
      ),
      { numRuns: 100 },
    )
  })
  it('more than 32 workers (multi-word holder masks)', () => {
    // 34 workers registered up front; the commands act on slots around the word boundary.
    const preAdded = Array.from({ length: 34 }, (_, i) => `w${i}`)
    const workers = ['w0', 'w31', 'w32', 'w33', 'w34', 'w35']
    fc.assert(
      fc.property(residencyCommands({ workers, maxCommands: 80 }), (cmds) =>
        fc.modelRun(residencyModelSetup({ preAdded, thetaShared: 0.05 }), cmds),
      ),
      { numRuns: 60 },
    )
  })
})
