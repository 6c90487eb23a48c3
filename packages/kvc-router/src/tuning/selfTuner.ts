/**
 * Online self-tuning of three Dispatch parameters from the traffic the router observes, each
 * within documented bounds (`docs/design/algorithms.md#self-tuning`): `τ_reject` from how often a
 * D that refused a session admits it on the next try, the pending-seed budget `K` by additive
 * increase and multiplicative decrease on the D workers' transfer health, and the backoff base
 * from the admission RPC latencies. Pure: the router feeds it observations and applies what it
 * returns.
 *
 * @module
 */
import { RouterError, describeValue } from '../errors/routerError.js'
import type { LatencyWindow } from '../hedging/latencyWindow.js'

/**
 * The values the tuner moves.
 *
 * @example
 * ```ts
 * import type { TunedParams } from '@kvc/kvc-router'
 * const t: TunedParams = { tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }
 * ```
 */
export interface TunedParams {
  readonly tauReject: number
  readonly pendingSeedsPerD: number
  readonly backoffBaseMs: number
}

/**
 * Inclusive bounds of each tuned value, and how the tuner reads the traffic.
 *
 * @example
 * ```ts
 * import { DEFAULT_TUNING_OPTIONS, type TuningOptions } from '@kvc/kvc-router'
 * const o: TuningOptions = { ...DEFAULT_TUNING_OPTIONS, pendingSeedsPerD: [2, 8] }
 * ```
 */
export interface TuningOptions {
  readonly tauReject: readonly [number, number]
  readonly pendingSeedsPerD: readonly [number, number]
  readonly backoffBaseMs: readonly [number, number]
  /** Turns (ended) per tuning window: the values change at most once a window. */
  readonly windowTurns: number
  /** Observations a rule needs before it moves its value. */
  readonly minSamples: number
  /**
   * `τ_reject` goes up when a D that refused a session `τ_reject − 1` times in a row admits it
   * on the next try at least this often, and down when it does at most `lowerHazard` as often.
   */
  readonly raiseHazard: number
  readonly lowerHazard: number
  /** A D's transfer queue at or above this depth halves `K` (the pause hint's threshold, 8). */
  readonly transferQueueLimit: number
}

/**
 * The default bounds and rules (`docs/design/algorithms.md#self-tuning` gives each reason):
 * `τ_reject` in [2, 8], `K` in [1, 16], the backoff base in [5, 500] ms; windows of 64 turns;
 * 20 observations before a rule moves; hazards 0.5 and 0.1; a transfer queue of 8.
 *
 * @example
 * ```ts
 * import { DEFAULT_TUNING_OPTIONS } from '@kvc/kvc-router'
 * DEFAULT_TUNING_OPTIONS.pendingSeedsPerD // [1, 16]
 * ```
 */
export const DEFAULT_TUNING_OPTIONS: TuningOptions = Object.freeze({
  tauReject: Object.freeze([2, 8] as const),
  pendingSeedsPerD: Object.freeze([1, 16] as const),
  backoffBaseMs: Object.freeze([5, 500] as const),
  windowTurns: 64,
  minSamples: 20,
  raiseHazard: 0.5,
  lowerHazard: 0.1,
  transferQueueLimit: 8,
})

/** The largest streak length the hazard is kept for. */
const MAX_STREAK = 16

function clamp(x: number, b: readonly [number, number]): number {
  return Math.min(b[1], Math.max(b[0], x))
}

/**
 * The self-tuner. Dispatch reports what it sees (rejection streaks and how they end, seeds turned
 * away by the budget, transfers and the D workers' transfer queues, turns ending); at the end of
 * each window of `windowTurns` turns {@link SelfTuner.turnEnded} returns the values that changed:
 *
 * - **`τ_reject`** (rejections before a D is excluded for a session): the hazard `h_k`, the share
 *   of rejection streaks that reached `k` and ended with the same D admitting the session on the
 *   next try, is estimated at `k = τ_reject − 1` (counts halved every window, so old traffic
 *   fades). `h ≥ raiseHazard`: the D was more likely than not to take the session back, and
 *   excluding it meant re-prefilling the session elsewhere; one more try. `h ≤ lowerHazard`:
 *   the D hardly ever recovers at that point; exclude one rejection earlier.
 * - **`K`** (pending seeds per D), additive increase, multiplicative decrease: seeds turned away
 *   by the budget in a window without a transfer timeout and with every D's transfer queue below
 *   `transferQueueLimit` → `K + 1`; a transfer timeout or a queue at the limit → `⌊K / 2⌋`.
 * - **backoff base**: twice the 0.95-quantile of the recent admission RPC latencies, so a retry
 *   comes after a slow round trip has had time to answer, not sooner and not much later.
 *
 * @example
 * ```ts
 * import { LatencyWindow, SelfTuner } from '@kvc/kvc-router'
 * const tuner = new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 })
 * const rpc = new LatencyWindow()
 * for (let i = 0; i < 32; i++) rpc.record(3)
 * tuner.seedBudgetHit()
 * let change
 * for (let i = 0; i < 64; i++) change = tuner.turnEnded(rpc) ?? change
 * change // { pendingSeedsPerD: 5, backoffBaseMs: 6 }
 * ```
 */
export class SelfTuner {
  readonly options: TuningOptions
  #values: TunedParams
  #turns = 0
  #updates = 0
  readonly #reached = new Float64Array(MAX_STREAK + 1)
  readonly #recovered = new Float64Array(MAX_STREAK + 1)
  #budgetHits = 0
  #transferTimeouts = 0
  #maxQueue = 0

  constructor(initial: TunedParams, options: Partial<TuningOptions> = {}) {
    const o: TuningOptions = { ...DEFAULT_TUNING_OPTIONS, ...options }
    const bad = (what: string, v: unknown): never => {
      throw new RouterError('INVALID_OPTION', `self-tuning ${what}, got ${describeValue(v)}`, v)
    }
    for (const k of ['tauReject', 'pendingSeedsPerD', 'backoffBaseMs'] as const) {
      const b = o[k]
      if (!Array.isArray(b) || b.length !== 2 || !(b[0] >= 1 && b[1] >= b[0] && Number.isFinite(b[1]))) {
        bad(`${k} bounds must be [lo, hi] with 1 <= lo <= hi`, b)
      }
      const v = initial?.[k]
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 1) bad(`initial ${k} must be a number >= 1`, v)
    }
    if (!Number.isInteger(o.windowTurns) || o.windowTurns < 1)
      bad('windowTurns must be an integer >= 1', o.windowTurns)
    if (!Number.isInteger(o.minSamples) || o.minSamples < 1)
      bad('minSamples must be an integer >= 1', o.minSamples)
    if (!(o.lowerHazard >= 0 && o.lowerHazard < o.raiseHazard && o.raiseHazard <= 1)) {
      bad('hazards must satisfy 0 <= lowerHazard < raiseHazard <= 1', [o.lowerHazard, o.raiseHazard])
    }
    if (!(o.transferQueueLimit >= 1)) bad('transferQueueLimit must be >= 1', o.transferQueueLimit)
    this.options = o
    // The starting values, brought within the bounds.
    this.#values = {
      tauReject: Math.round(clamp(initial.tauReject, o.tauReject)),
      pendingSeedsPerD: Math.round(clamp(initial.pendingSeedsPerD, o.pendingSeedsPerD)),
      backoffBaseMs: clamp(initial.backoffBaseMs, o.backoffBaseMs),
    }
  }

  /**
   * The current values.
   *
   * @example
   * ```ts
   * import { SelfTuner } from '@kvc/kvc-router'
   * new SelfTuner({ tauReject: 99, pendingSeedsPerD: 4, backoffBaseMs: 50 }).values.tauReject // 8: the bound
   * ```
   */
  get values(): TunedParams {
    return this.#values
  }

  /** Windows in which a value changed. */
  get updates(): number {
    return this.#updates
  }

  /**
   * A session's rejection streak on a D reached `k` rejections.
   *
   * @example
   * ```ts
   * import { SelfTuner } from '@kvc/kvc-router'
   * new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }).rejected(1)
   * ```
   */
  rejected(k: number): void {
    if (k >= 1) this.#reached[Math.min(k, MAX_STREAK)]!++
  }

  /**
   * A D admitted a session after refusing it `k` times in a row (`k ≥ 1`).
   *
   * @example
   * ```ts
   * import { SelfTuner } from '@kvc/kvc-router'
   * new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }).recovered(2)
   * ```
   */
  recovered(k: number): void {
    if (k >= 1) this.#recovered[Math.min(k, MAX_STREAK)]!++
  }

  /**
   * A seed was turned away by a D's pending-seed budget.
   *
   * @example
   * ```ts
   * import { SelfTuner } from '@kvc/kvc-router'
   * new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }).seedBudgetHit()
   * ```
   */
  seedBudgetHit(): void {
    this.#budgetHits++
  }

  /**
   * A KV transfer ended (`timedOut`: it hit the transfer timeout).
   *
   * @example
   * ```ts
   * import { SelfTuner } from '@kvc/kvc-router'
   * new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }).transferEnded(false)
   * ```
   */
  transferEnded(timedOut: boolean): void {
    if (timedOut) this.#transferTimeouts++
  }

  /**
   * A D reported its transfer queue depth (in an admission answer).
   *
   * @example
   * ```ts
   * import { SelfTuner } from '@kvc/kvc-router'
   * new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }).transferQueue(3)
   * ```
   */
  transferQueue(depth: number): void {
    if (depth > this.#maxQueue) this.#maxQueue = depth
  }

  /**
   * A turn ended. At the end of a window, applies the three rules and returns the values that
   * changed (`undefined`: none, or not the end of a window). `rpc`: the router's admission RPC
   * latencies.
   *
   * @example
   * ```ts
   * import { LatencyWindow, SelfTuner } from '@kvc/kvc-router'
   * const t = new SelfTuner({ tauReject: 3, pendingSeedsPerD: 4, backoffBaseMs: 50 }, { windowTurns: 1 })
   * t.turnEnded(new LatencyWindow()) // undefined: nothing observed
   * ```
   */
  turnEnded(rpc: LatencyWindow): Partial<TunedParams> | undefined {
    if (++this.#turns < this.options.windowTurns) return undefined
    this.#turns = 0
    const o = this.options
    const v = this.#values
    const change: { -readonly [K in keyof TunedParams]?: number } = {}
    // τ_reject: the hazard at the current boundary.
    const k = v.tauReject - 1
    const reached = this.#reached[k]!
    if (reached >= o.minSamples) {
      const h = this.#recovered[k]! / reached
      const tau = h >= o.raiseHazard ? v.tauReject + 1 : h <= o.lowerHazard ? v.tauReject - 1 : v.tauReject
      const t = Math.round(clamp(tau, o.tauReject))
      if (t !== v.tauReject) change.tauReject = t
    }
    for (let i = 0; i <= MAX_STREAK; i++) {
      this.#reached[i]! *= 0.5
      this.#recovered[i]! *= 0.5
    }
    // K: AIMD on the transfer health.
    if (this.#transferTimeouts > 0 || this.#maxQueue >= o.transferQueueLimit) {
      const kk = Math.max(o.pendingSeedsPerD[0], Math.floor(v.pendingSeedsPerD / 2))
      if (kk !== v.pendingSeedsPerD) change.pendingSeedsPerD = kk
    } else if (this.#budgetHits > 0) {
      const kk = Math.min(o.pendingSeedsPerD[1], v.pendingSeedsPerD + 1)
      if (kk !== v.pendingSeedsPerD) change.pendingSeedsPerD = kk
    }
    this.#budgetHits = 0
    this.#transferTimeouts = 0
    this.#maxQueue = 0
    // Backoff base: two slow round trips.
    if (rpc.size >= o.minSamples) {
      const b = clamp(Math.round(2 * rpc.quantile(0.95)), o.backoffBaseMs)
      if (b !== v.backoffBaseMs) change.backoffBaseMs = b
    }
    if (Object.keys(change).length === 0) return undefined
    this.#values = { ...v, ...change }
    this.#updates++
    return change
  }
}
