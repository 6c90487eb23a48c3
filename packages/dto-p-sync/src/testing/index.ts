/**
 * Test helpers for code that embeds `@kvc/dto-p-sync`: a fast test block hasher, a seeded PRNG, a
 * complete D→P harness over an in-memory network, invariant checkers (P's cache, KV pool
 * accounting, Theorem 4) and fast-check arbitraries of sync scenarios. Needs `fast-check` (a peer
 * dependency of this subpath only).
 *
 * @packageDocumentation
 */
export { fnvBlockHasher } from './fnvBlockHasher.js'
/** The seeded PRNG (mulberry32) of deterministic networks and workloads; the one `@kvc/radix-cache/testing` exports. */
export { seededRandom } from '@kvc/radix-cache/testing'
export { checkSyncInvariants, checkTheorem4 } from './invariants.js'
export { SyncHarness, type SyncHarnessOptions } from './harness.js'
export {
  type SyncCommand,
  type SyncCommandsOptions,
  syncCommands,
  syncHarnessOptions,
  type SyncModel,
  syncScenarioSetup,
} from './arbitraries.js'
