import type { HostTierSpec } from '../hostTier/hostTier.js'
import type { PolicySpec } from '../adapters/router.js'
import type { EvictGranularity, EvictionPolicy } from '../adapters/sessionCache.js'
import type { CostModel } from '../cost/costModel.js'
import type { FaultSpec } from '../faults/faults.js'
import type { Topology } from '../cluster/topology.js'
import type { Workload } from '../workload/types.js'

/**
 * Options of one simulated run: one workload, one policy, one seed.
 *
 * @example
 * ```ts
 * import type { RunOptions } from '@kvc/sim'
 * import { generateAgenticWorkload } from '@kvc/sim'
 * const o: RunOptions = {
 *   workload: generateAgenticWorkload({ seed: 1, sessions: 4 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 2 },
 *   policy: 'kvc',
 *   seed: 1,
 * }
 * ```
 */
export interface RunOptions {
  readonly workload: Workload
  /** As given on the command line; a `direct` policy (DP cache-aware) runs on `N×DP` with N = P + D. */
  readonly topology: Topology
  /** A policy spec (`kvc`, `round-robin`, `kvc:granularity=session`...). */
  readonly policy: PolicySpec | string
  /** The trial seed: router randomness, RPC jitter and faults derive from it. */
  readonly seed: number
  /** Divides think times and arrival offsets (default 1; 10 compresses time 10×). */
  readonly timeScale?: number
  /** Cost-model overrides (capacity included; `capacityTokens: Infinity` is unlimited). */
  readonly costModel?: Partial<CostModel>
  /** Tokens per KV page (default: the workload's suggestion, else 16). */
  readonly pageSize?: number
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  readonly faults?: readonly FaultSpec[]
  /** Interval of the per-worker KV usage samples, simulated seconds (default 5). */
  readonly sampleIntervalS?: number
  /**
   * Tokens allocated per prefill chunk (SGLang's `--chunked-prefill-size`, default 8,192); also
   * the chunk of KV a transfer lands in. Evictions happen per chunk and, while decoding, per page.
   */
  readonly prefillChunkTokens?: number
  /** A prefill that cannot get KV memory for this long fails with `kv_capacity` (default 30 s). */
  readonly memoryWaitTimeoutS?: number
  /** Turns still running at this simulated time fail with cause `horizon` (default 48 h). */
  readonly horizonS?: number
  /**
   * The replayer's session concurrency: at most this many sessions run at once; a session whose
   * start time comes while that many run waits, first come first served, until one ends (its last
   * turn completed or failed), then starts at once. Unset: every session starts at its time. The
   * research prototype's replayer ran 32 (`docs/design/prototype.md#setup`).
   */
  readonly maxConcurrentSessions?: number
  /**
   * A host KV tier on every worker that keeps a cache (`--host-tier`): device eviction demotes
   * pages to it, a later match loads them back over PCIe when that beats recomputing them.
   */
  readonly hostTier?: HostTierSpec
  /** Called as turns end: (ended, total). */
  readonly onProgress?: (ended: number, total: number) => void
}
