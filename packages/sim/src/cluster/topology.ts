import { SimError, SimErrorCode } from '../errors/simError.js'

/**
 * A cluster shape: `nP mD` disaggregated prefill/decode, or `N×DP` colocated data-parallel
 * workers (each prefills and decodes; the research prototype's strongest baseline, "8-way DP
 * cache-aware": `docs/design/prototype.md#headline-comparison`).
 *
 * @example
 * ```ts
 * import type { Topology } from '@kvc/sim'
 * const t: Topology = { kind: 'pd', prefill: 2, decode: 6 }
 * ```
 */
export type Topology =
  | { readonly kind: 'pd'; readonly prefill: number; readonly decode: number }
  | { readonly kind: 'dp'; readonly workers: number }

const PD = /^(\d+)\s*P\s*(\d+)\s*D$/i
const DP = /^(\d+)\s*(?:x|×|\*)?\s*DP$/i

/**
 * Parse `2P6D` (also `2p6d`) or `8xDP` / `8×DP` / `8DP`. Throws `INVALID_OPTION` with the
 * accepted forms otherwise.
 *
 * @example
 * ```ts
 * import { parseTopology } from '@kvc/sim'
 * parseTopology('2P6D') // { kind: 'pd', prefill: 2, decode: 6 }
 * parseTopology('8xDP') // { kind: 'dp', workers: 8 }
 * ```
 */
export function parseTopology(s: string): Topology {
  const t = s.trim()
  const pd = PD.exec(t)
  if (pd !== null) {
    const prefill = Number(pd[1])
    const decode = Number(pd[2])
    if (decode < 1 || decode > 1024 || prefill > 1024) {
      throw new SimError(
        SimErrorCode.InvalidOption,
        `topology ${s}: need 1..1024 D workers and at most 1024 P workers`,
        s,
      )
    }
    return { kind: 'pd', prefill, decode }
  }
  const dp = DP.exec(t)
  if (dp !== null) {
    const workers = Number(dp[1])
    if (workers < 1 || workers > 1024) {
      throw new SimError(SimErrorCode.InvalidOption, `topology ${s}: need 1..1024 DP workers`, s)
    }
    return { kind: 'dp', workers }
  }
  throw new SimError(
    SimErrorCode.InvalidOption,
    `topology ${JSON.stringify(s)} not understood: use nPmD (e.g. 2P6D) or NxDP (e.g. 8xDP)`,
    s,
  )
}

/**
 * Canonical spelling (`2P6D`, `8xDP`).
 *
 * @example
 * ```ts
 * import { formatTopology } from '@kvc/sim'
 * formatTopology({ kind: 'dp', workers: 8 }) // '8xDP'
 * ```
 */
export function formatTopology(t: Topology): string {
  return t.kind === 'pd' ? `${t.prefill}P${t.decode}D` : `${t.workers}xDP`
}

/**
 * GPUs (workers) in a topology.
 *
 * @example
 * ```ts
 * import { topologyWorkers } from '@kvc/sim'
 * topologyWorkers({ kind: 'pd', prefill: 2, decode: 6 }) // 8
 * ```
 */
export function topologyWorkers(t: Topology): number {
  return t.kind === 'pd' ? t.prefill + t.decode : t.workers
}
