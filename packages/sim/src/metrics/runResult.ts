import type { EvictionStats, TurnRecord, UsageSeries } from './types.js'

/**
 * Run-level accounting: every turn ended exactly once, completed or failed with a cause.
 *
 * @example
 * ```ts
 * import type { RunAccounting } from '@kvc/sim'
 * const ok = (a: RunAccounting) => a.completed + a.failed === a.turns && a.balanced
 * ```
 */
export interface RunAccounting {
  readonly turns: number
  readonly completed: number
  readonly failed: number
  readonly failedByCause: Readonly<Record<string, number>>
  /** `completed + failed == turns` and every record names its outcome. */
  readonly balanced: boolean
  /** Every live worker's KV pool satisfies `free + evictable + protected + requestOwned + sessionHeld == size` at the end. */
  readonly poolsBalanced: boolean
}

/**
 * Counters of the run's machinery.
 *
 * @example
 * ```ts
 * import type { RunCounters } from '@kvc/sim'
 * const timeoutRate = (c: RunCounters) => c.admissionTimeouts / Math.max(1, c.admissions)
 * ```
 */
export interface RunCounters {
  readonly events: number
  readonly admissions: number
  readonly admissionRejects: number
  readonly admissionTimeouts: number
  readonly transfers: number
  readonly transferTimeouts: number
  readonly transferErrors: number
  readonly kvEvents: number
  readonly kvEventsLost: number
  readonly workerDeaths: number
  readonly routerPauses: number
  readonly memoryWaitFailures: number
  /** Sessions the D workers' idle-TTL reaper released (`release=reaper`). */
  readonly sessionsReaped: number
  /** Sessions released by the D workers' admission to make room (Algorithm 2). */
  readonly admissionReleases: number
  /** Waiting turns woken early because a seed ended and its pending-seed slot was theirs. */
  readonly seedWakes: number
  /** D→P sync (`sync=on`): bytes sent and tokens P ingested. */
  readonly syncBytes: number
  readonly syncIngestedTokens: number
  /** Host tier (`--host-tier`): prefills that loaded part of their prompt back, and the tokens they loaded. */
  readonly loadBacks: number
  readonly loadedBackTokens: number
}

/**
 * The result of one run.
 *
 * @example
 * ```ts
 * import type { RunResult } from '@kvc/sim'
 * const errors = (r: RunResult) => r.accounting.failed
 * ```
 */
export interface RunResult {
  readonly policy: string
  readonly policyName: string
  readonly pathMode: string
  readonly seed: number
  readonly topology: string
  readonly timeScale: number
  readonly pageSize: number
  readonly capacityTokens: number
  readonly records: readonly TurnRecord[]
  /** Simulated time from the first arrival to the last turn's end, seconds. */
  readonly makespanS: number
  readonly usage: readonly UsageSeries[]
  readonly evictions: readonly EvictionStats[]
  readonly accounting: RunAccounting
  readonly counters: RunCounters
  /** Wall-clock milliseconds (not part of the deterministic output). */
  readonly wallMs: number
}
