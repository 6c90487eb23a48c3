/**
 * What a turn adds to the shared load while it runs: its commitment to a D (`turns`), its pending-seed
 * slots, and the in-flight loads of a send; each undone when the turn moves on, ends or is aborted.
 */
import type { LoadDelta } from '../cluster/stateStore.js'
import type { TurnState } from './turnState.js'

/** The load deltas of a turn's commitment and pending-seed slot (shared: no allocation per call). */
const ONE_TURN: LoadDelta = Object.freeze({ turns: 1 })
const ONE_TURN_LESS: LoadDelta = Object.freeze({ turns: -1 })
const ONE_SEED: LoadDelta = Object.freeze({ pendingSeeds: 1 })
const ONE_SEED_LESS: LoadDelta = Object.freeze({ pendingSeeds: -1 })

export function decodeBlocks(st: TurnState): number {
  return Math.ceil((st.turn.promptTokens + st.reserve) / st.ctx.params.pageSize)
}

export function addInflight(
  st: TurnState,
  d: string,
  p: string | undefined,
  prefill: number,
  blocks: number,
): void {
  const store = st.ctx.cluster.store
  commit(st, d) // the D's turn (already counted since the admission request, with admission)
  store.addLoad(
    d,
    p === undefined ? { prefillTokens: prefill, decodeBlocks: blocks } : { decodeBlocks: blocks },
  )
  if (p !== undefined) store.addLoad(p, { turns: 1, prefillTokens: prefill })
  st.inflight = { d, p, prefill, blocks }
}

/** Counts this turn toward `d`'s load (moving the count from another D if it was there). */
export function commit(st: TurnState, d: string): void {
  if (st.committed === d) return
  releaseCommitment(st)
  st.ctx.cluster.store.addLoad(d, ONE_TURN)
  st.committed = d
}

export function releaseCommitment(st: TurnState): void {
  const d = st.committed
  if (d === undefined) return
  st.committed = undefined
  // A removed worker's load was dropped with it.
  if (st.ctx.cluster.has(d)) st.ctx.cluster.store.addLoad(d, ONE_TURN_LESS)
}

export function takeSeedSlot(st: TurnState, d: string): void {
  st.ctx.cluster.seedWaiters.leave(st.turnId)
  st.ctx.cluster.store.addLoad(d, ONE_SEED)
  st.seedSlot = d
}

export function releaseSeedSlot(st: TurnState): void {
  const d = st.seedSlot
  if (d === undefined) return
  if (st.ctx.cluster.has(d)) st.ctx.cluster.store.addLoad(d, ONE_SEED_LESS)
  st.seedSlot = undefined
}

export function takeHedgeSlot(st: TurnState, d: string): void {
  st.ctx.cluster.store.addLoad(d, ONE_SEED)
  st.hedgeSlot = d
}

export function releaseHedgeSlot(st: TurnState): void {
  const d = st.hedgeSlot
  if (d === undefined) return
  st.hedgeSlot = undefined
  if (st.ctx.cluster.has(d)) {
    st.ctx.cluster.store.addLoad(d, ONE_SEED_LESS)
    st.ctx.cluster.seedWaiters.slotFreed(d)
  }
}

export function undoInflight(st: TurnState): void {
  const f = st.inflight
  if (f === undefined) return
  const { cluster } = st.ctx
  const store = cluster.store
  // A removed worker's load was dropped with it.
  if (cluster.has(f.d)) {
    store.addLoad(
      f.d,
      f.p === undefined
        ? { prefillTokens: -f.prefill, decodeBlocks: -f.blocks }
        : { decodeBlocks: -f.blocks },
    )
  }
  if (f.p !== undefined && cluster.has(f.p)) store.addLoad(f.p, { turns: -1, prefillTokens: -f.prefill })
  st.inflight = undefined
}
