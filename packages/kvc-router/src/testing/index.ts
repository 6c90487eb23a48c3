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
  seededRandom,
  type AdmitAnswer,
  type ScriptedDriverOptions,
  type SendAnswer,
  type TurnRun,
} from './driver.js'
export {
  admitAnswerArb,
  checkLoadAccounting,
  checkNoInflightLoad,
  finiteAdversary,
  finiteAdversaryArb,
  sendAnswerArb,
} from './arbitraries.js'
