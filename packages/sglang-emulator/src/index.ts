/**
 * `@kvc/sglang-emulator`: an SGLang-compatible worker for tests, demos and simulator validation.
 * It serves SGLang's HTTP paths, fields and errors over the real `@kvc/radix-cache` and
 * `@kvc/session-cache`, publishes their KV events on ZeroMQ, answers the kvc admission RPC with
 * `@kvc/kvc-router`'s `admit`, plays the prefill and decode roles of a P/D pair, injects faults,
 * and takes its latencies from the router's cost model (scaled). Clients come from
 * `@kvc/worker-bindings`; this package depends on it, never the reverse.
 *
 * @module
 */
export {
  SglangEmulatorError,
  SglangEmulatorErrorCode,
} from './errors/emulatorError.js'
export type {
  EmulatorKvEventsOptions,
  EmulatorRole,
  SglangEmulatorOptions,
} from './config/options.js'
export {
  DEFAULT_EMULATOR_TIMING,
  type EmulatorCostParameter,
  type EmulatorTiming,
  type ResolvedTiming,
} from './timing/timing.js'
export type { EmulatorStats } from './engine/engine.js'
export type { EmulatorFault, EmulatorFaults } from './faults/faults.js'
export { createSglangEmulator, type SglangEmulator } from './server/emulator.js'
export {
  BOS_TOKEN,
  EOS_TOKEN,
  PAD_TOKEN,
  TOKEN_OFFSET,
  VOCAB_SIZE,
  fakeChatTemplate,
  fakeDetokenize,
  fakeNextToken,
  fakePromptHash,
  fakeTokenize,
} from './model/fakeModel.js'
