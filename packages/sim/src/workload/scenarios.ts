import { SimError, SimErrorCode } from '../errors/simError.js'
import type { AgenticWorkloadOptions } from './agentic.js'

/**
 * A named benchmark setting of the built-in agentic generator: the workload's shape and the
 * cluster it runs on. `kvc-sim --scenario <name>` applies it; a flag given on the command line
 * replaces the scenario's value for that flag.
 *
 * @example
 * ```ts
 * import { SCENARIOS } from '@kvc/sim'
 * SCENARIOS['dynamo-agentic'].workload.sessions // 2200
 * ```
 */
export interface Scenario {
  /** The name `--scenario` takes. */
  readonly name: string
  /** One line: what it stands for and where its figures come from. */
  readonly description: string
  /** Options of the built-in agentic generator (the seed is the trial's). */
  readonly workload: Omit<AgenticWorkloadOptions, 'seed'>
  /** Cluster shape (`nPmD`; the data-parallel baselines run `N×DP` on as many workers). */
  readonly topology: string
  /** KV capacity per worker, tokens. */
  readonly capacityTokens: number
  /** KV page (block) size, tokens. */
  readonly pageSize: number
  /** The replayer's session concurrency (closed loop). */
  readonly maxConcurrentSessions: number
}

/**
 * The named scenarios.
 *
 * - `dynamo-agentic`: the shape of Dynamo's session-routing replay benchmark (2,200 sessions ×
 *   20 turns = 44,000 requests, 8 workers of 16,384 KV blocks of 64 tokens, closed-loop
 *   concurrency 1,024, every session's first turn at time 0; NVIDIA Dynamo,
 *   `docs/benchmarks/aiperf-session-routing-replay`). Its dataset's per-turn lengths are not
 *   published: the output length (log-normal, median 150, mean ≈ 225 tokens) matches its
 *   reported ≈ 231 output tokens per request (8,542 output tok/s at 36.9 requests/s); the
 *   2,000-token shared system prompt (short, as the benchmark found cross-session overlap
 *   shallow), the task and tool-output appends and the think times are the built-in generator's
 *   defaults and our choice. The session concurrency stands for its request concurrency.
 *
 * @example
 * ```ts
 * import { SCENARIOS, generateAgenticWorkload } from '@kvc/sim'
 * const s = SCENARIOS['dynamo-agentic']
 * const w = generateAgenticWorkload({ ...s.workload, sessions: 3, seed: 1 })
 * w.turns.length // 60: 3 sessions × 20 turns
 * ```
 */
export const SCENARIOS: Readonly<Record<ScenarioName, Scenario>> = Object.freeze({
  'dynamo-agentic': Object.freeze({
    name: 'dynamo-agentic',
    description:
      "Dynamo's session-routing replay shape: 2,200 sessions × 20 turns on 8 workers of 16,384 × 64-token KV blocks, 1,024 sessions at once",
    workload: Object.freeze({
      sessions: 2_200,
      turnsPerSession: 20,
      sharedPrefixTokens: 2_000,
      outputMedian: 150,
      outputSigma: 0.9,
      sessionStartMeanS: 0,
    }),
    topology: '2P6D',
    capacityTokens: 16_384 * 64,
    pageSize: 64,
    maxConcurrentSessions: 1_024,
  }),
})

/**
 * The names {@link SCENARIOS} knows.
 *
 * @example
 * ```ts
 * import type { ScenarioName } from '@kvc/sim'
 * const n: ScenarioName = 'dynamo-agentic'
 * ```
 */
export type ScenarioName = 'dynamo-agentic'

/**
 * The scenario called `name`, or a `SimError` (`INVALID_OPTION`) naming it and the known ones.
 *
 * @example
 * ```ts
 * import { scenarioByName } from '@kvc/sim'
 * scenarioByName('dynamo-agentic').pageSize // 64
 * ```
 */
export function scenarioByName(name: string): Scenario {
  const s = (SCENARIOS as Record<string, Scenario>)[name]
  if (s === undefined || !Object.hasOwn(SCENARIOS, name)) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `unknown scenario ${JSON.stringify(name)} (known: ${Object.keys(SCENARIOS).join(', ')})`,
      name,
    )
  }
  return s
}
