/**
 * Pause or evict: a turn whose session's own D is paused (its pause hint) can wait the pause out,
 * or go now and let the D's admission make room, as a data-parallel worker does (it evicts least
 * recently used KV and proceeds). Which costs less is a comparison of two times
 * (`docs/design/algorithms.md#pause-or-evict`). Pure: no I/O, no clock.
 *
 * @module
 */
import { type CostModel, prefillSeconds } from '../cost/costModel.js'
import { RouterError, describeValue } from '../errors/routerError.js'

/**
 * What the choice knows: how long the turn would wait for its D, how many KV slots its admission
 * needs there (the append plus the decode reserve), and the context those slots would sit at.
 *
 * @example
 * ```ts
 * import type { PauseSignals } from '@kvc/kvc-router'
 * const s: PauseSignals = { waitS: 0.8, needTokens: 2_500, contextTokens: 30_000 }
 * ```
 */
export interface PauseSignals {
  /** Seconds until the D's pause ends (what waiting costs this turn). */
  readonly waitS: number
  /** KV slots the turn's admission on the D needs (append + decode reserve). */
  readonly needTokens: number
  /** Prompt tokens the D already holds for the session (the depth at which evicted KV is recomputed). */
  readonly contextTokens: number
}

/**
 * The choice: `evict` (go now; the D makes room) or `wait`, the two costs, and the reason in words.
 *
 * @example
 * ```ts
 * import type { PauseChoice } from '@kvc/kvc-router'
 * const c: PauseChoice = { action: 'evict', waitS: 0.8, recomputeS: 0.17, reason: '…' }
 * ```
 */
export interface PauseChoice {
  readonly action: 'evict' | 'wait'
  readonly waitS: number
  /** Seconds of prefill that recompute what going now would make the D throw away (at most `needTokens`). */
  readonly recomputeS: number
  readonly reason: string
}

function check(what: string, x: unknown): void {
  if (typeof x !== 'number' || !Number.isFinite(x) || x < 0) {
    throw new RouterError(
      'INVALID_OPTION',
      `${what} must be a finite number >= 0, got ${describeValue(x)}`,
      x,
    )
  }
}

/**
 * Whether a turn should wait for its paused D or go now and have the D evict. Going now, the D's
 * admission finds the turn's `needTokens` slots in free memory, in evictable cache and in idle
 * sessions' locks (least recently used first); at worst every one of them held KV that a later
 * turn recomputes, at the depth this session has reached: `recomputeS = prefillSeconds(needTokens,
 * contextTokens)`. Waiting costs the turn `waitS`. It goes now when `recomputeS < waitS`.
 *
 * Both sides err toward waiting: `recomputeS` assumes everything thrown away is needed again (a
 * data-parallel worker's LRU recomputes only what is reused), and `waitS` is the pause as the D
 * set it, while a D whose KV is held by hot sessions renews its pause with every answer. A turn
 * that goes now is still admitted by the D (a D that cannot make room refuses it, and the turn
 * continues as if it had not tried): the choice only decides whether a pause hint holds it back.
 *
 * Properties (fast-check tests): a longer wait never turns `evict` into `wait`; a larger need or a
 * deeper context never turns `wait` into `evict`; no wait, no eviction.
 *
 * @throws RouterError `INVALID_OPTION` on a negative or non-finite signal.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, chooseEvictOrWait } from '@kvc/kvc-router'
 * // A 2K-token append on a 30K-token session, its D paused for 0.8 s more.
 * chooseEvictOrWait({ waitS: 0.8, needTokens: 2_500, contextTokens: 30_000 }, DEFAULT_COST_MODEL).action // 'evict'
 * // A 30K-token seed: recomputing what it would evict costs more than the pause.
 * chooseEvictOrWait({ waitS: 0.8, needTokens: 30_000, contextTokens: 0 }, DEFAULT_COST_MODEL).action // 'wait'
 * ```
 */
export function chooseEvictOrWait(s: PauseSignals, cost: CostModel): PauseChoice {
  if (typeof s !== 'object' || s === null)
    throw new RouterError('INVALID_OPTION', 'pause signals must be an object', s)
  check('waitS', s.waitS)
  check('needTokens', s.needTokens)
  check('contextTokens', s.contextTokens)
  const recomputeS = prefillSeconds(cost, s.needTokens, s.contextTokens)
  const w = s.waitS.toFixed(2)
  const r = recomputeS.toFixed(2)
  if (recomputeS < s.waitS) {
    return {
      action: 'evict',
      waitS: s.waitS,
      recomputeS,
      reason: `recomputing ≤ ${s.needTokens} evicted tokens ${r} s < pause ${w} s`,
    }
  }
  return {
    action: 'wait',
    waitS: s.waitS,
    recomputeS,
    reason: `pause ${w} s ≤ recomputing ≤ ${s.needTokens} evicted tokens ${r} s`,
  }
}
