/**
 * Test helpers for `@kvc/session-cache` and for code that embeds it: an invariant checker, a
 * naive reference model, a random multi-session script arbitrary with fast-check commands for
 * model-based tests, and the bare-radix reference engine. Needs `fast-check` (a peer dependency
 * of this subpath only).
 *
 * @packageDocumentation
 */
export { checkSessionInvariants } from './invariants.js'
export { BareRadixEngine, type BareRadixEngineOptions } from './bareEngine.js'
export {
  type ModelOutcome,
  type ModelRequest,
  type ModelSession,
  SessionReferenceModel,
} from './referenceModel.js'
export {
  MISUSE_KINDS,
  type MisuseKind,
  type SessionScriptOptions,
  type SessionStep,
  sessionScript,
  sessionStep,
} from './script.js'
export {
  drainAndCheck,
  runSessionScript,
  type SessionCommand,
  type SessionModelConfig,
  type SessionModelState,
  type SessionRealState,
  sessionCommands,
  sessionModelSetup,
} from './commands.js'
export {
  type AgenticWorkloadOptions,
  agenticWorkload,
  type RunWorkloadConfig,
  runWorkload,
  type WorkloadEngine,
  type WorkloadReport,
  type WorkloadTurn,
} from './workload.js'
export { ReprefillBoundTracker, type SessionSinceTurn } from './reprefillBound.js'
