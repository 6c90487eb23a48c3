export {
  replayRunner,
  replayTask,
  runReplay,
  type ReplayOptions,
  type ReplayOutcome,
  type Via,
} from './replay.js'
export {
  emulatedTarget,
  externalTarget,
  readWorkersFile,
  type EmulatedTargetOptions,
  type ReplayTarget,
  type RunCluster,
} from './targets.js'
export { GenerateTransport, proxyTurn, type ProxyTurn, type TurnObservation } from './transport.js'
