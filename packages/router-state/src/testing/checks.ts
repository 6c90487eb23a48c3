import type { ReplicatedStateStore } from '../store/replicatedStore.js'

/**
 * Polls `check` (every 20 ms) until it stops throwing, or rethrows its last error after
 * `timeoutMs` (default 20,000: it returns as soon as the check holds, so a wide limit costs
 * nothing on an idle machine and keeps a busy one from failing). For what replicas learn from
 * each other asynchronously.
 *
 * @example
 * ```ts
 * import { expect } from 'vitest'
 * import { eventually } from '@kvc/router-state/testing'
 * let n = 0
 * await eventually(() => expect(++n).toBeGreaterThan(3))
 * ```
 */
export async function eventually(check: () => void | Promise<void>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      await check()
      return
    } catch (err) {
      if (Date.now() > deadline) throw err
      await new Promise((r) => setTimeout(r, 20))
    }
  }
}

/**
 * Waits (up to `timeoutMs`, default 20,000) until no store counts any in-flight load (turns,
 * pending seeds, prefill tokens, decode blocks) on any of `workers`: every turn gave back what
 * it took. Throws naming the store and the worker otherwise.
 *
 * @example
 * ```ts
 * import type { ReplicatedStateStore } from '@kvc/router-state'
 * import { expectNoLoad } from '@kvc/router-state/testing'
 * declare const a: ReplicatedStateStore, b: ReplicatedStateStore
 * await expectNoLoad([a, b], ['p0', 'd0', 'd1'])
 * ```
 */
export async function expectNoLoad(
  stores: readonly ReplicatedStateStore[],
  workers: readonly string[],
  timeoutMs = 20_000,
): Promise<void> {
  await eventually(() => {
    for (const st of stores) {
      for (const w of workers) {
        const l = st.load(w)
        if (l.turns + l.pendingSeeds + l.prefillTokens + l.decodeBlocks !== 0) {
          throw new Error(`${st.replicaId} still counts load on ${w}: ${JSON.stringify(l)}`)
        }
      }
    }
  }, timeoutMs)
}
