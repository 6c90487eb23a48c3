import type { DecodeGapHistograms } from '../metrics/decodeGaps.js'
import type { RunResult } from '../metrics/runResult.js'
import { e2eOf, elapsedOf, ttftOf } from '../metrics/runMetrics.js'
import { type Slo, meetsSlo, tpotOf } from '../metrics/slo.js'
import type { TurnRecord } from '../metrics/types.js'
import type { ClusterLayout, PolicyColumns } from './bootstrap.js'

/**
 * The bootstrap's clusters for trials whose records are `trials` (one array per seed, in seed
 * order): whole sessions when `bySession` (a session's turns are not independent), else one
 * cluster per request. Turn indices are global: seed after seed.
 *
 * @example
 * ```ts
 * import { clusterLayout, type TurnRecord } from '@kvc/sim'
 * const trial = [{ session: 0 }, { session: 0 }, { session: 1 }] as TurnRecord[]
 * clusterLayout([trial], true).seeds[0]!.length // 2 sessions
 * ```
 */
export function clusterLayout(trials: readonly (readonly TurnRecord[])[], bySession: boolean): ClusterLayout {
  const seeds: Int32Array[][] = []
  let offset = 0
  for (const recs of trials) {
    if (!bySession) {
      // One cluster per request, in order: views of one array of their indices.
      const ids = Int32Array.from({ length: recs.length }, (_, i) => offset + i)
      const clusters: Int32Array[] = new Array(recs.length)
      for (let i = 0; i < recs.length; i++) clusters[i] = ids.subarray(i, i + 1)
      seeds.push(clusters)
      offset += recs.length
      continue
    }
    const groups = new Map<number, number[]>()
    recs.forEach((r, i) => {
      const key = bySession && r.session >= 0 ? r.session : -1 - i
      let g = groups.get(key)
      if (g === undefined) {
        g = []
        groups.set(key, g)
      }
      g.push(offset + i)
    })
    seeds.push([...groups.values()].map((g) => Int32Array.from(g)))
    offset += recs.length
  }
  return { seeds }
}

/** The gap histograms of `runs`, rows concatenated seed after seed; undefined if a run has none. */
function concatGaps(runs: readonly RunResult[]): DecodeGapHistograms | undefined {
  if (runs.some((r) => r.decodeGaps === undefined)) return undefined
  let turns = 0
  let entries = 0
  for (const r of runs) {
    turns += r.records.length
    entries += r.decodeGaps!.buckets.length
  }
  const offsets = new Int32Array(turns + 1)
  const buckets = new Uint16Array(entries)
  const counts = new Float32Array(entries)
  let t = 0
  let e = 0
  for (const r of runs) {
    const g = r.decodeGaps!
    for (let i = 0; i < r.records.length; i++) offsets[t + i + 1] = e + g.offsets[i + 1]!
    buckets.set(g.buckets, e)
    counts.set(g.counts, e)
    t += r.records.length
    e += g.buckets.length
  }
  return { offsets, buckets, counts }
}

/**
 * One policy's per-turn columns for the paired bootstrap (its runs in seed order, the same
 * layout for every policy): latencies, failures, the fast path, TPOT, goodput under `slo`, gap
 * histograms and, when the clusters are sessions, each session's task times.
 *
 * @example
 * ```ts
 * import { DEFAULT_SLO, clusterLayout, policyColumns, runSimulation, generateAgenticWorkload } from '@kvc/sim'
 * const run = runSimulation({ workload: generateAgenticWorkload({ seed: 1, sessions: 2, maxTurnsPerSession: 3 }),
 *   topology: { kind: 'pd', prefill: 1, decode: 1 }, policy: 'kvc', seed: 1 })
 * const layout = clusterLayout([run.records], true)
 * policyColumns([run], layout, DEFAULT_SLO, true).good?.length // every turn
 * ```
 */
export function policyColumns(
  runs: readonly RunResult[],
  layout: ClusterLayout,
  slo: Slo,
  bySession: boolean,
): PolicyColumns {
  const recs: TurnRecord[] = []
  for (const run of runs) for (const r of run.records) recs.push(r)
  const n = recs.length
  const c = {
    ttft: new Float64Array(n),
    e2e: new Float64Array(n),
    elapsedTtft: new Float64Array(n),
    elapsed: new Float64Array(n),
    failed: new Uint8Array(n),
    fast: new Uint8Array(n),
    tpot: new Float64Array(n),
    good: new Uint8Array(n),
  }
  recs.forEach((r, k) => {
    const ok = r.status === 'completed'
    c.ttft[k] = ttftOf(r)
    c.e2e[k] = e2eOf(r)
    c.elapsedTtft[k] = ok ? ttftOf(r) : elapsedOf(r)
    c.elapsed[k] = elapsedOf(r)
    c.failed[k] = ok ? 0 : 1
    c.fast[k] = ok && r.path === 'fast' ? 1 : 0
    c.tpot[k] = tpotOf(r)
    c.good[k] = meetsSlo(r, slo) ? 1 : 0
  })
  const gaps = concatGaps(runs)
  if (!bySession) return { ...c, ...(gaps === undefined ? {} : { gaps }) }
  const clusters = layout.seeds.flatMap((s) => [...s])
  const task = {
    span: new Float64Array(clusters.length),
    spanElapsed: new Float64Array(clusters.length),
    served: new Float64Array(clusters.length),
    servedElapsed: new Float64Array(clusters.length),
  }
  clusters.forEach((members, k) => {
    let first = Number.POSITIVE_INFINITY
    let last = Number.NEGATIVE_INFINITY
    let served = 0
    let failed = false
    for (let j = 0; j < members.length; j++) {
      const r = recs[members[j]!]!
      if (r.arrivalMs < first) first = r.arrivalMs
      if (r.endMs > last) last = r.endMs
      served += r.endMs - r.arrivalMs
      if (r.status !== 'completed') failed = true
    }
    const spanS = (last - first) / 1000
    task.spanElapsed[k] = spanS
    task.servedElapsed[k] = served / 1000
    task.span[k] = failed ? Number.POSITIVE_INFINITY : spanS
    task.served[k] = failed ? Number.POSITIVE_INFINITY : served / 1000
  })
  return { ...c, ...(gaps === undefined ? {} : { gaps }), task }
}
