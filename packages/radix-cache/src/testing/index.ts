/**
 * Test helpers for code that embeds `@kvc/radix-cache`: naive reference models (one tier, and two
 * tiers for caches with a host tier), an invariant checker, fast-check command arbitraries for
 * model-based tests, and a seeded PRNG. Needs `fast-check` (a peer
 * dependency of this subpath only).
 *
 * @packageDocumentation
 */
export { RadixReferenceModel } from './referenceModel.js'
export { seededRandom } from './random.js'
export { cachedPages, checkRadixInvariants, tieredPages } from './invariants.js'
export {
  type HeldLock,
  radixCommands,
  type RadixCommand,
  radixModelSetup,
  type RadixCommandsOptions,
  type RadixModelConfig,
  type RadixModelState,
  type RadixRealState,
} from './commands.js'
export {
  type TierChangeCounts,
  type TierChangeRules,
  type TieredPage,
  TieredReferenceModel,
} from './tieredReferenceModel.js'
export {
  type TieredCommand,
  type TieredCommandsOptions,
  type TieredHold,
  type TieredModelConfig,
  type TieredModelState,
  type TieredRealState,
  tieredCommands,
  tieredModelSetup,
} from './tieredCommands.js'
