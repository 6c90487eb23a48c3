import fc from 'fast-check'
import { describe, it } from 'vitest'
import { drainAndCheck, sessionCommands, sessionModelSetup } from '../src/testing/index.js'
import type { SessionModelConfig, SessionModelState, SessionRealState } from '../src/testing/index.js'

// Model-based tests (I1–I5 plus accounting): random multi-session, multi-turn scripts with chunked
// prefill, decode, retries, aborts, releases, TTL/pressure evictions and misuse, run against
// SessionCache and the naive SessionReferenceModel. After every step src/testing/commands.ts checks
// the invariant checker, the page sets and lock counts, the pool accounting identity (free +
// evictable + protected + requestOwned + sessionHeld == pool size), the sessions, the requests,
// the extra release hook and the eviction sizes; the PagedAllocator refuses any double free and
// the model refuses any locked page disappearing. Each run ends with a drain (I5). The runs with a
// host tier also compare every page's tiers and host references, settle which sessions pressure
// demoted (kept on the host) rather than released, and check load-back at admission (I1: the
// tree's device hit plus its host hit).
function run(config: SessionModelConfig, numRuns: number, opts: Parameters<typeof sessionCommands>[0] = {}) {
  fc.assert(
    fc.property(sessionCommands(opts), (cmds) => {
      let state: { model: SessionModelState; real: SessionRealState } | undefined
      const setup = sessionModelSetup(config)
      fc.modelRun(() => {
        state = setup()
        return state
      }, cmds)
      drainAndCheck(state!.model, state!.real)
    }),
    { numRuns },
  )
}

describe('SessionCache agrees with the reference model', () => {
  // The tree keeps views of lent prompts (and of outputs read after them) instead of copies.
  for (const pageSize of [1, 4]) {
    it(`block granularity, pageSize ${pageSize}, lent tokens frozen`, () => {
      run({ granularity: 'block', pageSize, poolPages: 48 / pageSize, lentTokensFrozen: true }, 100, {
        maxAppend: 12,
        maxChunk: 12,
        maxEvict: 24,
      })
    })
  }
  for (const granularity of ['block', 'session'] as const) {
    it(`${granularity} granularity, pageSize 1`, () => {
      run({ granularity, pageSize: 1, poolPages: 48 }, 150, { maxAppend: 10, maxChunk: 12, maxEvict: 24 })
    })
    for (const evictGranularity of ['leaf', 'page'] as const) {
      it(`${granularity} granularity, pageSize 16, ${evictGranularity} eviction`, () => {
        run({ granularity, pageSize: 16, poolPages: 12, evictGranularity }, 150, {
          maxAppend: 40,
          maxChunk: 48,
          maxEvict: 64,
        })
      })
    }
  }
  // With a host tier (I6: a held session's committed prefix is retained whole, on the device
  // under its lock or, demoted under pressure, on the host under its host reference).
  for (const writePolicy of ['write_back', 'write_through'] as const) {
    it(`block granularity with a host tier (${writePolicy}), pageSize 1 and 4`, () => {
      run({ granularity: 'block', pageSize: 1, poolPages: 48, hostPages: 48, writePolicy }, 30, {
        maxAppend: 10,
        maxChunk: 12,
        maxEvict: 24,
      })
      run({ granularity: 'block', pageSize: 4, poolPages: 16, hostPages: 12, writePolicy }, 50, {
        maxAppend: 12,
      })
    })
  }
  it('block granularity with a small host tier (demotion often refused), page eviction', () => {
    run({ granularity: 'block', pageSize: 4, poolPages: 16, hostPages: 4, evictGranularity: 'page' }, 60, {
      maxAppend: 12,
    })
  })
  it('session granularity with a host tier under the tree', () => {
    run({ granularity: 'session', pageSize: 4, poolPages: 16, hostPages: 16 }, 40, { maxAppend: 12 })
  })
  it('block granularity, pageSize 4, lfu and priority orders', () => {
    for (const evictionPolicy of ['lfu', 'priority'] as const) {
      run({ granularity: 'block', pageSize: 4, poolPages: 16, evictionPolicy }, 40, { maxAppend: 12 })
    }
  })
})
