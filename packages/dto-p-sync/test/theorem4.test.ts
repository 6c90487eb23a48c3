import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { syncCommands, syncHarnessOptions, syncScenarioSetup } from '../src/testing/index.js'

// Theorem 4 (docs/design/algorithms.md#theorem-4-staleness-budget): for any interleaving of D commits, transfers, losses, duplicates
// and reorderings, a synced session's reseed on P re-prefills at most β + append tokens whenever
// the sync reported it within budget. Every step also checks P's radix invariants and the KV pool
// accounting; every run ends with a drain that must leave no slot leaked and nothing locked.
describe('Theorem 4: reseed re-prefills at most β + append when reported within budget', () => {
  it('holds under random interleavings, faults and configurations', () => {
    let within = 0
    let runs = 0
    fc.assert(
      fc.property(syncHarnessOptions(), syncCommands(), (opts, cmds) => {
        const setup = syncScenarioSetup(opts)
        fc.modelRun(setup, cmds)
        const h = setup.harness!
        within += h.withinBudgetChecks
        runs++
        h.drain()
      }),
      { numRuns: 200 },
    )
    // Not vacuous: sessions were reported within budget (and checked) many times.
    expect(within).toBeGreaterThan(runs)
  })

  it('holds without pins (D trusts P KV events) on a lossy, reordering link', () => {
    fc.assert(
      fc.property(syncHarnessOptions(), syncCommands({ sessions: ['a', 'b'] }), (opts, cmds) => {
        const setup = syncScenarioSetup({ ...opts, pinTtlMs: 0 })
        fc.modelRun(setup, cmds)
        setup.harness!.drain()
      }),
      { numRuns: 100 },
    )
  })
})
