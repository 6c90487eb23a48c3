/**
 * Test helpers for `@kvc/kvc-router` and code that embeds it: the residency index's naive
 * reference model and model-based commands, a scripted driver with a manual clock and a seeded
 * PRNG for Dispatch, adversary arbitraries, and invariant checkers. Needs `fast-check` (an
 * optional peer dependency, for this subpath only).
 *
 * @packageDocumentation
 */
export {
  ResidencyReferenceModel,
  checkResidencyAgainstModel,
  type ResidencyModelWorker,
} from './residencyModel.js'
export {
  RESIDENCY_TEST_CHAINS,
  residencyCommands,
  residencyModelSetup,
  type ResidencyCommand,
  type ResidencyCommandsOptions,
  type ResidencyRealState,
} from './residencyCommands.js'
export {
  ManualClock,
  ScriptedDriver,
  dispatchActionBound,
  scriptedResponse,
  type AdmitAnswer,
  type ScriptedDriverOptions,
  type SendAnswer,
  type TurnRun,
} from './driver.js'
/** The seeded PRNG (mulberry32) to inject as `random`; the one `@kvc/radix-cache/testing` exports. */
export { seededRandom } from '@kvc/radix-cache/testing'
export {
  admitAnswerArb,
  checkLoadAccounting,
  checkNoInflightLoad,
  finiteAdversary,
  finiteAdversaryArb,
  sendAnswerArb,
} from './arbitraries.js'
