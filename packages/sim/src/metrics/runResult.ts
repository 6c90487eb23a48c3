import type { DecodeGapHistograms } from './decodeGaps.js'
import type { ElasticSwitch } from '../adaptive/elastic.js'
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
  /** Hot sessions the D workers retracted under memory pressure (`retract=on`). */
  readonly retractions: number
  /** Waiting turns woken early because a seed ended and its pending-seed slot was theirs. */
  readonly seedWakes: number
  /** Classic P/D baselines: requests whose D never preallocated their KV within the bootstrap timeout. */
  readonly preallocTimeouts: number
  /** Baselines: requests their router sent again after a failure. */
  readonly retries: number
  /** D→P sync (`sync=on`): bytes sent and tokens P ingested. */
  readonly syncBytes: number
  readonly syncIngestedTokens: number
  /** Host tier (`--host-tier`): prefills that loaded part of their prompt back, and the tokens they loaded. */
  readonly loadBacks: number
  readonly loadedBackTokens: number
  /**
   * Peer fetch (`--host-tier …:peer`): seeds whose P read part of the prompt from the session's
   * old D instead of recomputing it, and the tokens read.
   */
  readonly peerFetches: number
  readonly peerFetchedTokens: number
}

/**
 * What the adaptive mechanisms of a run did: the elastic controller's role switches
 * (`elastic=on`), the hedged admission RPCs (`hedgeAdmissions`) and the self-tuned parameters
 * (`selfTune`).
 *
 * @example
 * ```ts
 * import type { AdaptiveRunInfo } from '@kvc/sim'
 * const moved = (a: AdaptiveRunInfo) => a.elasticSwitches?.length ?? 0
 * ```
 */
export interface AdaptiveRunInfo {
  readonly elasticSwitches?: readonly ElasticSwitch[]
  readonly finalTopology?: string
  /** Hedged admissions: second RPCs sent, those whose D admitted first, late leases released. */
  readonly hedges?: { readonly sent: number; readonly won: number; readonly releasedLate: number }
  /** Self-tuning: the values at the end of the run and how many windows changed one. */
  readonly tuning?: {
    readonly tauReject: number
    readonly pendingSeedsPerD: number
    readonly backoffBaseMs: number
    readonly updates: number
  }
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
  /**
   * Every completed turn's inter-token gaps, rows by record index (absent where the runner cannot
   * see tokens, as in a replay without streaming: ITL statistics are then `NaN`).
   */
  readonly decodeGaps?: DecodeGapHistograms
  /** Simulated time from the first arrival to the last turn's end, seconds. */
  readonly makespanS: number
  readonly usage: readonly UsageSeries[]
  readonly evictions: readonly EvictionStats[]
  readonly accounting: RunAccounting
  readonly counters: RunCounters
  /** Wall-clock milliseconds (not part of the deterministic output). */
  readonly wallMs: number
  /**
   * The process's peak resident set size when the run ended, MB (its high-water mark so far,
   * with every worker thread; not part of the deterministic output).
   */
  readonly peakRssMB: number
  /** What the adaptive mechanisms did (`elastic=on`, hedged admission, self-tuning), when on. */
  readonly adaptive?: AdaptiveRunInfo
}

/**
 * The process's peak resident set size so far, MB (one decimal): what `kvc-sim` reports.
 *
 * @example
 * ```ts
 * import { peakRssMB } from '@kvc/sim'
 * console.log(`peak RSS ${peakRssMB()} MB`)
 * ```
 */
export function peakRssMB(): number {
  return Math.round(process.resourceUsage().maxRSS / 102.4) / 10
}
