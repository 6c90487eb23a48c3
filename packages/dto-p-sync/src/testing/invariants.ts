import type { RadixCache } from '@kvc/radix-cache'
import { checkRadixInvariants } from '@kvc/radix-cache/testing'
import type { SlotAllocator, SyncSink } from '../sink/syncSink.js'
import type { SyncSource } from '../source/syncSource.js'

/**
 * Check P's side after any step: the radix cache's own invariants
 * (`checkRadixInvariants` from `@kvc/radix-cache/testing`), the KV pool accounting identity
 * `free + cached + reserved == pool size` (no slot leaked or double-owned), and that pins never
 * exceed what is locked. Throws an `Error` listing every violation.
 *
 * @example
 * ```ts
 * import { checkSyncInvariants } from '@kvc/dto-p-sync/testing'
 * // after every step of a test: checkSyncInvariants({ cache, pool, sink, poolSize: pool.size })
 * ```
 */
export function checkSyncInvariants(p: {
  readonly cache: RadixCache
  readonly pool: SlotAllocator
  readonly sink: SyncSink
  /** Total slots of the pool. */
  readonly poolSize: number
  /** Slots held outside the cache and the sink (requests in progress...; default 0). */
  readonly heldElsewhere?: number
}): void {
  checkRadixInvariants(p.cache)
  const problems: string[] = []
  const free = p.pool.availableSize()
  const cached = p.cache.totalSize()
  const reserved = p.sink.reservedTokens()
  const other = p.heldElsewhere ?? 0
  if (free + cached + reserved + other !== p.poolSize) {
    problems.push(
      `pool accounting: free ${free} + cached ${cached} + reserved ${reserved} + elsewhere ${other} != pool ${p.poolSize}`,
    )
  }
  let resSlots = 0
  for (const r of p.sink.reservations()) resSlots += r.slots
  if (resSlots !== reserved)
    problems.push(`reservations hold ${resSlots} slots, reservedTokens() says ${reserved}`)
  if (p.sink.pinCount() > 0 && p.cache.protectedSize() === 0) problems.push('pins held but nothing is locked')
  if (problems.length > 0) throw new Error(`D→P sync invariants violated:\n- ${problems.join('\n- ')}`)
}

/**
 * Theorem 4 (`docs/design/algorithms.md#theorem-4-staleness-budget`) on the current state: for every
 * session the source reports within budget, a reseed on P of the session's history followed by
 * `append` re-prefills at most `β + append.length` tokens (P's cache is asked read-only). Returns how
 * many sessions were checked and how many were within budget; throws an `Error` on a violation.
 *
 * @example
 * ```ts
 * import { checkTheorem4 } from '@kvc/dto-p-sync/testing'
 * // checkTheorem4({ source, cache, history: (id) => histories.get(id)!, append: [1, 2, 3] })
 * ```
 */
export function checkTheorem4(p: {
  readonly source: SyncSource
  readonly cache: RadixCache
  /** D's truth: the session's whole history (what its next prompt starts with). */
  readonly history: (sessionId: string) => ArrayLike<number>
  readonly append: ArrayLike<number>
  readonly extraKey?: (sessionId: string) => string
}): { readonly sessions: number; readonly withinBudget: number } {
  let within = 0
  const statuses = p.source.statuses()
  for (const st of statuses) {
    const h = p.history(st.sessionId)
    if (h.length !== st.committedTokens) {
      throw new Error(
        `session ${st.sessionId}: source says ${st.committedTokens} committed tokens, D has ${h.length}`,
      )
    }
    if (!st.withinBudget) continue
    within++
    const prompt = new Uint32Array(h.length + p.append.length)
    prompt.set(Array.from(h))
    prompt.set(Array.from(p.append), h.length)
    const extraKey = p.extraKey?.(st.sessionId) ?? ''
    const hit = p.cache.matchPrefix(prompt, { readOnly: true, extraKey }).length
    const reprefill = prompt.length - hit
    const bound = p.source.beta + p.append.length
    if (reprefill > bound) {
      throw new Error(
        `Theorem 4 violated for ${st.sessionId}: reported within β=${p.source.beta} (staleness ${st.staleness}, confirmed ${st.confirmedTokens} of ${st.committedTokens}) but a reseed re-prefills ${reprefill} > β + append = ${bound}`,
      )
    }
  }
  return { sessions: statuses.length, withinBudget: within }
}
