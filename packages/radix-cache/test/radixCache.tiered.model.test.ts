import fc from 'fast-check'
import { describe, it } from 'vitest'
import { EVICTION_POLICIES, HOST_WRITE_POLICIES } from '../src/index.js'
import { tieredCommands, tieredModelSetup } from '../src/testing/index.js'

// Model-based tests of the host tier: random command lists run against a RadixCache with a host
// tier and the naive two-tier reference model. After every command (src/testing/tieredCommands.ts)
// the invariant checker runs, every page's tiers, lock and host-reference counts must agree with
// the model, both pools must balance, each step may only make the tier changes its operation
// allows (locked pages never move, protected pages never leave the host, ...), and the KV events,
// per medium, must add up to the blocks each tier holds.
describe('RadixCache with a host tier agrees with the two-tier reference model', () => {
  for (const writePolicy of HOST_WRITE_POLICIES) {
    for (const pageSize of [1, 2]) {
      it(`${writePolicy}, pageSize ${pageSize}, leaf and page eviction`, () => {
        for (const evictGranularity of ['leaf', 'page'] as const) {
          fc.assert(
            fc.property(tieredCommands(), (cmds) => {
              fc.modelRun(tieredModelSetup({ pageSize, writePolicy, evictGranularity }), cmds)
            }),
            { numRuns: 60 },
          )
        }
      })
    }
  }
  it('a small host tier (smaller than the device), write_back and write_through', () => {
    for (const writePolicy of ['write_back', 'write_through'] as const) {
      fc.assert(
        fc.property(tieredCommands(), (cmds) => {
          fc.modelRun(tieredModelSetup({ pageSize: 2, writePolicy, hostPages: 6, poolPages: 12 }), cmds)
        }),
        { numRuns: 80 },
      )
    }
  })
  it('length-only caches (trackValues: false)', () => {
    fc.assert(
      fc.property(tieredCommands(), (cmds) => {
        fc.modelRun(tieredModelSetup({ pageSize: 2, trackValues: false, hostPages: 10 }), cmds)
      }),
      { numRuns: 80 },
    )
  })
  it('host eviction orders and a load-back threshold', () => {
    for (const hostEvictionPolicy of EVICTION_POLICIES) {
      fc.assert(
        fc.property(tieredCommands({ namespaces: [''] }), (cmds) => {
          fc.modelRun(
            tieredModelSetup({
              pageSize: 2,
              hostEvictionPolicy,
              evictionPolicy: 'lfu',
              hostPages: 8,
              loadBackThreshold: 3,
            }),
            cmds,
          )
        }),
        { numRuns: 25 },
      )
    }
  })
})
