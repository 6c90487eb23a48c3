import { formatTopology } from './topology.js'
import { SimError, SimErrorCode } from '../errors/simError.js'
import type { DecodeGapHistograms } from '../metrics/decodeGaps.js'
import { type RunAccounting, type RunResult, peakRssMB } from '../metrics/runResult.js'
import type { TurnRecord } from '../metrics/types.js'
import type { SimContext } from './context.js'

/**
 * The run's accounting: every turn has exactly one record, completed or failed with a cause, and
 * every live worker's KV pool balances. Throws a `SimError` (`ACCOUNTING`) when a turn is missing.
 */
export function accountRun(ctx: SimContext, records: readonly (TurnRecord | undefined)[]): RunAccounting {
  const byCause: Record<string, number> = {}
  let completed = 0
  let failed = 0
  let named = true
  for (let i = 0; i < records.length; i++) {
    const r = records[i]
    if (r === undefined) {
      named = false
      continue
    }
    if (r.status === 'completed') completed++
    else {
      failed++
      const c = r.cause ?? 'unknown'
      byCause[c] = (byCause[c] ?? 0) + 1
    }
  }
  let poolsBalanced = true
  for (const w of ctx.workers) {
    if (!w.alive || w.cache === undefined) continue
    const a = w.cache.poolAccounting()
    // The D→P sync's sink holds the slots of transfers in flight outside the session cache.
    const sink = ctx.sync?.reservedTokens(w.id) ?? 0
    if (a.free + a.evictable + a.protected + a.requestOwned + a.sessionHeld + sink !== a.poolSize)
      poolsBalanced = false
  }
  const accounting: RunAccounting = {
    turns: records.length,
    completed,
    failed,
    failedByCause: Object.fromEntries(Object.entries(byCause).sort(([a], [b]) => (a < b ? -1 : 1))),
    balanced: named && completed + failed === ctx.turns.length,
    poolsBalanced,
  }
  if (!accounting.balanced) {
    throw new SimError(
      SimErrorCode.Accounting,
      `run accounting failed: ${JSON.stringify(accounting)}`,
      accounting,
    )
  }
  return accounting
}

/** What a finished run measured, besides its accounting and wall time. */
export interface RunTally {
  readonly records: TurnRecord[]
  readonly accounting: RunAccounting
  /** Events the loop handled. */
  readonly events: number
  /** Simulated times of the first arrival and the last turn's end, ms. */
  readonly firstArrivalMs: number
  readonly lastEndMs: number
  /** Every completed turn's inter-token gaps. */
  readonly decodeGaps: DecodeGapHistograms
  /** `performance.now()` when the run started. */
  readonly wallStart: number
}

/** The result of a finished run: its records, per-worker series, accounting and counters. */
export function collectResult(ctx: SimContext, tally: RunTally): RunResult {
  const config = ctx.config
  const c = ctx.counters
  const syncStats = ctx.sync?.stats()
  const first = Number.isFinite(tally.firstArrivalMs) ? tally.firstArrivalMs : 0
  return {
    policy: config.spec.label,
    policyName: config.policy.name,
    pathMode: config.policy.pathMode,
    seed: config.options.seed,
    topology: formatTopology(config.topology),
    timeScale: config.timeScale,
    pageSize: config.pageSize,
    capacityTokens: config.capacity,
    records: tally.records,
    decodeGaps: tally.decodeGaps,
    makespanS: Math.max(0, tally.lastEndMs - first) / 1000,
    usage: ctx.workers.map((w) => ({
      workerId: w.id,
      role: w.role,
      timesS: w.usageTimes,
      usage: w.usage,
    })),
    evictions: ctx.workers.map((w) => ({
      workerId: w.id,
      evictions: w.evictions,
      evictedTokens: w.evictedTokens,
      meanTokensPerEviction: w.evictions === 0 ? 0 : w.evictedTokens / w.evictions,
      maxTokensPerEviction: w.maxEviction,
    })),
    accounting: tally.accounting,
    counters: {
      events: tally.events,
      admissions: c.admissions,
      admissionRejects: c.admissionRejects,
      admissionTimeouts: c.admissionTimeouts,
      transfers: c.transfers,
      transferTimeouts: c.transferTimeouts,
      transferErrors: c.transferErrors,
      kvEvents: c.kvEvents,
      kvEventsLost: c.kvEventsLost,
      workerDeaths: c.workerDeaths,
      routerPauses: c.routerPauses,
      memoryWaitFailures: c.memoryWaitFailures,
      sessionsReaped: c.sessionsReaped,
      admissionReleases: c.admissionReleases,
      retractions: c.retractions,
      seedWakes: c.seedWakes,
      preallocTimeouts: c.preallocTimeouts,
      retries: c.retries,
      syncBytes: syncStats?.bytesSent ?? 0,
      syncIngestedTokens: syncStats?.ingestedTokens ?? 0,
      loadBacks: c.loadBacks,
      loadedBackTokens: c.loadedBackTokens,
      peerFetches: c.peerFetches,
      peerFetchedTokens: c.peerFetchedTokens,
    },
    wallMs: performance.now() - tally.wallStart,
    peakRssMB: peakRssMB(),
  }
}
