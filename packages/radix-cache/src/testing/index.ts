/**
 * Test helpers for code that embeds `@kvc/radix-cache`: a naive reference model, an invariant
 * checker, fast-check command arbitraries for model-based tests, and a seeded PRNG. Needs `fast-check` (a peer
 * dependency of this subpath only).
 *
 * @packageDocumentation
 */
export { RadixReferenceModel } from './referenceModel.js'
export { seededRandom } from './random.js'
export { cachedPages, checkRadixInvariants } from './invariants.js'
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
