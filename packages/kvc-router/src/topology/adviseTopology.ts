/**
 * The elastic topology advisor (the research prototype's roadmap S9,
 * `docs/design/prototype.md#s9-fixed-topology`): from the P workers' prefill utilisation and
 * queues and the D workers' KV pressure, how many P and D workers the cluster should run and
 * which worker should switch roles, one switch at a time, with hysteresis and a cooldown so that
 * a constant load never makes it flap (`docs/design/algorithms.md#elastic-topology`). Pure: the
 * caller drains the worker, switches it and reports back.
 *
 * @module
 */
import { RouterError, describeValue } from '../errors/routerError.js'

/**
 * A worker's role in the advice (a switching worker counts in the role it is switching to).
 *
 * @example
 * ```ts
 * import type { TopologyRole } from '@kvc/kvc-router'
 * const r: TopologyRole = 'prefill'
 * ```
 */
export type TopologyRole = 'prefill' | 'decode'

/**
 * What the advisor reads about one worker over the last window.
 *
 * @example
 * ```ts
 * import type { WorkerTopologySignal } from '@kvc/kvc-router'
 * const p0: WorkerTopologySignal = { id: 'p0', role: 'prefill', prefillBusy: 0.2, prefillQueueS: 0, kvPressure: 0 }
 * ```
 */
export interface WorkerTopologySignal {
  readonly id: string
  readonly role: TopologyRole
  /** The role it is being drained toward, when a switch is under way. */
  readonly switchingTo?: TopologyRole
  /** Share of the window its GPU spent prefilling, in [0, 1]. */
  readonly prefillBusy: number
  /** Seconds of prefill work queued on it now. */
  readonly prefillQueueS: number
  /**
   * KV held by requests in flight and by sessions it could not release, over its capacity, in
   * [0, 1] (what its admission counts as used: evictable pages and idle sessions are free).
   */
  readonly kvPressure: number
  /** KV transfers waiting for it or on the wire (a D). */
  readonly transferQueueDepth?: number
}

/**
 * The advisor's input: every worker, and the clock.
 *
 * @example
 * ```ts
 * import type { TopologySignals } from '@kvc/kvc-router'
 * const s: TopologySignals = { now: 60_000, workers: [] }
 * ```
 */
export interface TopologySignals {
  /** The caller's clock, ms (for the cooldown). */
  readonly now: number
  readonly workers: readonly WorkerTopologySignal[]
  /** When the last switch started (ms); absent: never. */
  readonly lastChangeAt?: number
}

/**
 * The advisor's thresholds. Two per resource, a high one that asks for a worker and a low one
 * that lets one go, so that after any switch the resource it left sits below the threshold that
 * would ask for it back (hysteresis).
 *
 * @example
 * ```ts
 * import { DEFAULT_TOPOLOGY_PARAMS, type TopologyParams } from '@kvc/kvc-router'
 * const p: TopologyParams = { ...DEFAULT_TOPOLOGY_PARAMS, minPrefill: 0 }
 * ```
 */
export interface TopologyParams {
  /** Fewest P workers (0 lets every prefill run on the D workers, as local seeds). */
  readonly minPrefill: number
  readonly minDecode: number
  /** Mean P utilisation at or above which a P is wanted (0.8). */
  readonly prefillHigh: number
  /** A P may go when the others would stay at or below this utilisation (0.5). */
  readonly prefillLow: number
  /** Mean P queue, seconds, at or above which a P is wanted whatever the utilisation (2). */
  readonly prefillQueueHighS: number
  /** Mean D KV pressure at or above which a D is wanted (0.9, the pause hint's threshold). */
  readonly pressureHigh: number
  /** A D may go when the others would stay at or below this pressure (0.7). */
  readonly pressureLow: number
  /** Least time between two switches, ms (60 s). */
  readonly cooldownMs: number
}

/**
 * The defaults, from first principles (`docs/design/algorithms.md#elastic-topology`): a P pool
 * is a queue of prefills, and with deterministic service (M/D/1) a request waits
 * `ρ / (2(1 − ρ))` service times: half of one at ρ = 0.5, two at ρ = 0.8. KV pressure is the D
 * admission's own figure, and 0.9 is where its pause hint starts.
 *
 * @example
 * ```ts
 * import { DEFAULT_TOPOLOGY_PARAMS } from '@kvc/kvc-router'
 * DEFAULT_TOPOLOGY_PARAMS.prefillHigh // 0.8
 * ```
 */
export const DEFAULT_TOPOLOGY_PARAMS: TopologyParams = Object.freeze({
  minPrefill: 1,
  minDecode: 1,
  prefillHigh: 0.8,
  prefillLow: 0.5,
  prefillQueueHighS: 2,
  pressureHigh: 0.9,
  pressureLow: 0.7,
  cooldownMs: 60_000,
})

/**
 * One worker to switch: drain it (no new work, let its turns end), then restart it in role `to`.
 *
 * @example
 * ```ts
 * import type { RoleSwitch } from '@kvc/kvc-router'
 * const s: RoleSwitch = { workerId: 'p1', from: 'prefill', to: 'decode' }
 * ```
 */
export interface RoleSwitch {
  readonly workerId: string
  readonly from: TopologyRole
  readonly to: TopologyRole
}

/**
 * The advice: the P and D counts to run, the switch that gets there (at most one), the figures it
 * rests on, and why, in words.
 *
 * @example
 * ```ts
 * import { adviseTopology } from '@kvc/kvc-router'
 * const a = adviseTopology({ now: 0, workers: [
 *   { id: 'p0', role: 'prefill', prefillBusy: 0.05, prefillQueueS: 0, kvPressure: 0 },
 *   { id: 'p1', role: 'prefill', prefillBusy: 0.05, prefillQueueS: 0, kvPressure: 0 },
 *   { id: 'd0', role: 'decode', prefillBusy: 0.3, prefillQueueS: 0, kvPressure: 0.95 },
 * ] })
 * a.switches // [{ workerId: 'p0', from: 'prefill', to: 'decode' }]
 * ```
 */
export interface TopologyAdvice {
  readonly prefill: number
  readonly decode: number
  readonly switches: readonly RoleSwitch[]
  /** Mean utilisation of the P workers (counting switching ones in their target role). */
  readonly prefillUtilization: number
  /** Mean prefill queue of the P workers, seconds. */
  readonly prefillQueueS: number
  /** Mean KV pressure of the D workers. */
  readonly decodePressure: number
  readonly reason: string
}

function isFrac(x: unknown): boolean {
  return typeof x === 'number' && Number.isFinite(x) && x >= 0 && x <= 1
}

function checkParams(p: TopologyParams): void {
  const bad = (what: string, v: unknown): never => {
    throw new RouterError('INVALID_OPTION', `topology ${what}, got ${describeValue(v)}`, v)
  }
  if (!Number.isInteger(p.minPrefill) || p.minPrefill < 0)
    bad('minPrefill must be an integer >= 0', p.minPrefill)
  if (!Number.isInteger(p.minDecode) || p.minDecode < 1) bad('minDecode must be an integer >= 1', p.minDecode)
  for (const k of ['prefillHigh', 'prefillLow', 'pressureHigh', 'pressureLow'] as const) {
    if (!isFrac(p[k])) bad(`${k} must be in [0, 1]`, p[k])
  }
  if (!(p.prefillLow < p.prefillHigh)) bad('prefillLow must be below prefillHigh', p.prefillLow)
  if (!(p.pressureLow < p.pressureHigh)) bad('pressureLow must be below pressureHigh', p.pressureLow)
  if (!(typeof p.prefillQueueHighS === 'number' && p.prefillQueueHighS > 0)) {
    bad('prefillQueueHighS must be a number > 0', p.prefillQueueHighS)
  }
  if (!(typeof p.cooldownMs === 'number' && p.cooldownMs >= 0))
    bad('cooldownMs must be a number >= 0', p.cooldownMs)
}

function checkSignals(s: TopologySignals): void {
  const bad = (what: string, v: unknown): never => {
    throw new RouterError('INVALID_OPTION', `topology signals: ${what}, got ${describeValue(v)}`, v)
  }
  if (typeof s !== 'object' || s === null || !Array.isArray(s.workers)) bad('need a workers array', s)
  if (typeof s.now !== 'number' || !Number.isFinite(s.now)) bad('now must be a finite number', s.now)
  const seen = new Set<string>()
  for (const w of s.workers) {
    if (typeof w?.id !== 'string' || w.id.length === 0) bad('a worker id must be a non-empty string', w?.id)
    if (seen.has(w.id)) bad(`worker ${w.id} appears twice`, w.id)
    seen.add(w.id)
    if (w.role !== 'prefill' && w.role !== 'decode')
      bad(`worker ${w.id}: role must be prefill or decode`, w.role)
    if (w.switchingTo !== undefined && w.switchingTo !== 'prefill' && w.switchingTo !== 'decode') {
      bad(`worker ${w.id}: switchingTo must be prefill or decode`, w.switchingTo)
    }
    if (!isFrac(w.prefillBusy)) bad(`worker ${w.id}: prefillBusy must be in [0, 1]`, w.prefillBusy)
    if (!isFrac(w.kvPressure)) bad(`worker ${w.id}: kvPressure must be in [0, 1]`, w.kvPressure)
    if (!(typeof w.prefillQueueS === 'number' && Number.isFinite(w.prefillQueueS) && w.prefillQueueS >= 0)) {
      bad(`worker ${w.id}: prefillQueueS must be a finite number >= 0`, w.prefillQueueS)
    }
  }
}

/** Lowest first, ties by id: the cheapest worker to drain. */
function cheapest(ws: readonly WorkerTopologySignal[], key: (w: WorkerTopologySignal) => number): string {
  let best = ws[0]!
  for (const w of ws) {
    const a = key(w)
    const b = key(best)
    if (a < b || (a === b && w.id < best.id)) best = w
  }
  return best.id
}

/**
 * Recommends the P:D split and at most one role switch:
 *
 * - a **D becomes a P** when the P workers are saturated (mean utilisation ≥ `prefillHigh`, or
 *   mean queue ≥ `prefillQueueHighS`) and the D workers can spare one (their KV pressure spread
 *   over one D fewer stays ≤ `pressureLow`); the D with the least pressure switches;
 * - a **P becomes a D** when the P workers can spare one (their utilisation spread over one P
 *   fewer stays ≤ `prefillLow`, and no queue builds up): an idle P is a GPU whose memory could
 *   hold sessions and whose compute could decode; the P with the shortest queue switches;
 * - nothing while a switch is under way or within `cooldownMs` of the last one.
 *
 * A switch leaves the resource it took from below the threshold that would ask for it back, so
 * under a constant load the advice moves one way and stops (property tests: monotone in load,
 * stable under constant load, no flapping).
 *
 * @throws RouterError `INVALID_OPTION` naming a bad signal or parameter.
 *
 * @example
 * ```ts
 * import { adviseTopology } from '@kvc/kvc-router'
 * const busyP = adviseTopology({ now: 0, workers: [
 *   { id: 'p0', role: 'prefill', prefillBusy: 1, prefillQueueS: 6, kvPressure: 0 },
 *   { id: 'd0', role: 'decode', prefillBusy: 0, prefillQueueS: 0, kvPressure: 0.2 },
 *   { id: 'd1', role: 'decode', prefillBusy: 0, prefillQueueS: 0, kvPressure: 0.1 },
 * ] })
 * busyP.switches // [{ workerId: 'd1', from: 'decode', to: 'prefill' }]
 * ```
 */
export function adviseTopology(
  signals: TopologySignals,
  params: TopologyParams = DEFAULT_TOPOLOGY_PARAMS,
): TopologyAdvice {
  checkParams(params)
  checkSignals(signals)
  const ps: WorkerTopologySignal[] = []
  const ds: WorkerTopologySignal[] = []
  let switching = false
  for (const w of signals.workers) {
    const role = w.switchingTo ?? w.role
    if (w.switchingTo !== undefined && w.switchingTo !== w.role) switching = true
    if (role === 'prefill') ps.push(w)
    else ds.push(w)
  }
  const nP = ps.length
  const nD = ds.length
  let busy = 0
  let queue = 0
  for (const w of ps) {
    busy += w.prefillBusy
    queue += w.prefillQueueS
  }
  let pressure = 0
  for (const w of ds) pressure += w.kvPressure
  const rho = nP > 0 ? busy / nP : 0
  const meanQueue = nP > 0 ? queue / nP : 0
  const kv = nD > 0 ? pressure / nD : 0
  const base = {
    prefill: nP,
    decode: nD,
    prefillUtilization: rho,
    prefillQueueS: meanQueue,
    decodePressure: kv,
  }
  const figures = `P utilisation ${rho.toFixed(2)}, P queue ${meanQueue.toFixed(2)} s, D pressure ${kv.toFixed(2)}`
  const keep = (why: string): TopologyAdvice => ({
    ...base,
    switches: [],
    reason: `keep ${nP}P${nD}D: ${why} (${figures})`,
  })
  if (switching) return keep('a switch is under way')
  const last = signals.lastChangeAt
  if (last !== undefined && signals.now - last < params.cooldownMs)
    return keep('cooling down after the last switch')

  // Work the P workers do (GPU-seconds per second) and KV the D workers hold, as if one left.
  const wantP = nP === 0 ? false : rho >= params.prefillHigh || meanQueue >= params.prefillQueueHighS
  const spareP =
    nP > params.minPrefill &&
    meanQueue < params.prefillQueueHighS &&
    (nP === 1 ? busy === 0 : busy / (nP - 1) <= params.prefillLow)
  const spareD = nD > params.minDecode && nD > 1 && pressure / (nD - 1) <= params.pressureLow

  if (wantP && spareD) {
    const id = cheapest(ds, (w) => w.kvPressure)
    return {
      ...base,
      prefill: nP + 1,
      decode: nD - 1,
      switches: [{ workerId: id, from: 'decode', to: 'prefill' }],
      reason: `${id} decode → prefill: the P workers are saturated and the D workers can spare one (${figures})`,
    }
  }
  if (spareP && !wantP) {
    const id = cheapest(ps, (w) => w.prefillQueueS + w.prefillBusy)
    return {
      ...base,
      prefill: nP - 1,
      decode: nD + 1,
      switches: [{ workerId: id, from: 'prefill', to: 'decode' }],
      reason: `${id} prefill → decode: the other P workers can carry the prefills (${figures})`,
    }
  }
  if (wantP) return keep('the P workers are saturated but no D can be spared')
  return keep('balanced')
}
