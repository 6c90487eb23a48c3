/**
 * How a turn was served: `fast` (direct to the D that holds the session; the D prefills the
 * append), `local` (a local seed: the D Route picked prefilled the part of the prompt it lacked
 * itself, chosen by the adaptive path choice), `seed` (a P prefilled, the KV was transferred to a
 * D), `direct` (a colocated worker prefilled and decoded it).
 *
 * @example
 * ```ts
 * import type { ServePath } from '@kvc/sim'
 * const p: ServePath = 'fast'
 * ```
 */
export type ServePath = 'fast' | 'local' | 'seed' | 'direct'

/**
 * The fate of one turn. Every turn of a run has exactly one record, completed or failed with a
 * cause; the run's accounting checks it.
 *
 * @example
 * ```ts
 * import type { TurnRecord } from '@kvc/sim'
 * const isFast = (r: TurnRecord) => r.status === 'completed' && r.path === 'fast'
 * ```
 */
export interface TurnRecord {
  readonly id: number
  readonly session: number
  readonly turnIndex: number
  readonly inputLength: number
  readonly outputLength: number
  readonly appendTokens: number
  readonly reuseFraction: number
  /** Arrival (simulated ms). */
  readonly arrivalMs: number
  /** First token (ms), `NaN` when the turn failed before producing one. */
  readonly firstTokenMs: number
  /** Completion or failure (ms). */
  readonly endMs: number
  readonly status: 'completed' | 'failed'
  /** Failure cause (the router's cause, or the simulator's: `horizon`, `worker_failed`...). */
  readonly cause: string | undefined
  /** Last physical failure seen by the turn (`transfer_timeout`, `kv_capacity`...), even if it completed later. */
  readonly lastError: string | undefined
  readonly path: ServePath | undefined
  readonly workerId: string | undefined
  readonly prefillId: string | undefined
  /** The session moved to another D for this turn. */
  readonly migrated: boolean
  /** Prompt tokens the serving worker (P for a seed, else the worker) found cached (at most `inputLength`). */
  readonly cachedTokens: number
  /** The same prefix match in the cache's own units (page-padded prompts of hash-id traces may exceed `inputLength`). */
  readonly matchedTokens: number
  /** Prompt tokens computed (prefilled) for the turn. */
  readonly computedTokens: number
  /** Tokens moved over a P→D link. */
  readonly transferredTokens: number
  /** Admission RPCs and sends. */
  readonly attempts: number
}

/**
 * One sample of a worker's KV usage.
 *
 * @example
 * ```ts
 * import type { UsageSeries } from '@kvc/sim'
 * const s: UsageSeries = { workerId: 'd0', role: 'decode', timesS: [0, 5], usage: [0, 0.4] }
 * ```
 */
export interface UsageSeries {
  readonly workerId: string
  readonly role: 'prefill' | 'decode' | 'colocated'
  /** Sample times, seconds. */
  readonly timesS: readonly number[]
  /** Occupied fraction of the KV pool (cached + running), 0..1. */
  readonly usage: readonly number[]
}

/**
 * Eviction counters of a worker: how many evictions and how many tokens each freed (the
 * session cache's histogram; the research prototype measured ~67K tokens per eviction at session
 * level and expected about a page at block level: `docs/design/prototype.md#session-level-eviction`).
 *
 * @example
 * ```ts
 * import type { EvictionStats } from '@kvc/sim'
 * const e: EvictionStats = { workerId: 'd0', evictions: 3, evictedTokens: 48, meanTokensPerEviction: 16, maxTokensPerEviction: 16 }
 * ```
 */
export interface EvictionStats {
  readonly workerId: string
  readonly evictions: number
  readonly evictedTokens: number
  readonly meanTokensPerEviction: number
  readonly maxTokensPerEviction: number
}
