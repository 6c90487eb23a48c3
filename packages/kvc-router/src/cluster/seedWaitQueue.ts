import { RouterError } from '../errors/routerError.js'

/** One D worker's waiting turns, ordered by (since, turnId). */
interface Line {
  since: number[]
  ids: string[]
}

/** Index of the first entry of `line` not before (since, id). */
function lowerBound(line: Line, since: number, id: string): number {
  let lo = 0
  let hi = line.since.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    const s = line.since[mid]!
    if (s < since || (s === since && line.ids[mid]! < id)) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** Index of the first entry of `line` whose `since` is not below `since`. */
function firstAtOrAfter(line: Line, since: number): number {
  let lo = 0
  let hi = line.since.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (line.since[mid]! < since) lo = mid + 1
    else hi = mid
  }
  return lo
}

/**
 * The turns waiting for D workers' pending-seed slots, oldest first: the fairness of the
 * pending-seed budget. Without it a slot that frees goes to whichever turn asks first — under
 * overload a fresh arrival as often as a turn that has waited 20 s — so waits have a long tail
 * and some turns exhaust their wait budget while younger ones pass. Dispatch lets a turn take a
 * free slot on a D only when the free slots outnumber the turns that started before it and wait
 * for that D ({@link SeedWaitQueue.olderThan}). Turns register for the D workers whose budget
 * turned them away in their last walk ({@link SeedWaitQueue.wait}) and leave when they take a
 * slot or end ({@link SeedWaitQueue.leave}). Each waiting turn has a `tier` (Dispatch: 0 for
 * `interactive`, 1 `batch`, 2 `background`): a turn only yields to older turns of its own tier or
 * a more urgent one, so lower SLO classes, whose smaller budget share may keep them waiting, never
 * hold slots back from higher ones. Each router replica keeps its own queue (the budget itself is
 * shared through the state store). O(tiers × log n) queries, O(n) updates per D.
 *
 * @example
 * ```ts
 * import { SeedWaitQueue } from '@kvc/kvc-router'
 * const q = new SeedWaitQueue()
 * q.wait('t1', 1_000, ['d0'])
 * q.wait('t2', 2_000, ['d0', 'd1'])
 * q.olderThan('d0', 2_000) // 1: t1 started first
 * q.olderThan('d1', 3_000) // 1: t2
 * q.leave('t1')
 * q.olderThan('d0', 2_000) // 0
 * q.wait('bg', 500, ['d0'], 2) // a background turn, older than everyone
 * q.olderThan('d0', 2_000, 0) // 0: an interactive turn does not yield to it
 * q.olderThan('d0', 2_000, 2) // 1: a background turn does
 * ```
 */
export class SeedWaitQueue {
  /** Per D worker, one line per tier. */
  readonly #lines = new Map<string, (Line | undefined)[]>()
  readonly #slotListeners = new Set<(turnId: string, workerId: string) => void>()
  readonly #turns = new Map<
    string,
    { readonly since: number; readonly tier: number; readonly workers: readonly string[] }
  >()

  /**
   * Registers `turnId` (started at `since`, of `tier`, 0 the most urgent) as waiting for a slot on
   * each of `workerIds`, replacing its earlier registration. An empty list is the same as
   * {@link SeedWaitQueue.leave}.
   *
   * @throws RouterError `INVALID_OPTION` (empty turn id, non-finite `since`, bad worker list, a
   * tier that is not an integer in 0..15).
   *
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * const q = new SeedWaitQueue()
   * q.wait('t1', 0, ['d0', 'd1'])
   * q.waiting('d1') // 1
   * ```
   */
  wait(turnId: string, since: number, workerIds: readonly string[], tier = 0): void {
    if (typeof turnId !== 'string' || turnId.length === 0)
      throw new RouterError(
        'INVALID_OPTION',
        `turnId must be a non-empty string, got ${String(turnId)}`,
        turnId,
      )
    if (typeof since !== 'number' || !Number.isFinite(since))
      throw new RouterError('INVALID_OPTION', `since must be a finite number, got ${String(since)}`, since)
    if (!Array.isArray(workerIds) || !workerIds.every(isWorkerId))
      throw new RouterError('INVALID_OPTION', 'workerIds must be a list of worker ids', workerIds)
    checkTier(tier)
    // A turn that walks again and waits for the same D workers (in any order) keeps its places:
    // leaving and registering again would put it back where it is.
    const t = this.#turns.get(turnId)
    if (t !== undefined && t.since === since && t.tier === tier && sameWorkers(t.workers, workerIds)) return
    this.leave(turnId)
    if (workerIds.length === 0) return
    const workers = [...new Set(workerIds)]
    for (const w of workers) {
      let tiers = this.#lines.get(w)
      if (tiers === undefined) this.#lines.set(w, (tiers = []))
      let line = tiers[tier]
      if (line === undefined) tiers[tier] = line = { since: [], ids: [] }
      const i = lowerBound(line, since, turnId)
      line.since.splice(i, 0, since)
      line.ids.splice(i, 0, turnId)
    }
    this.#turns.set(turnId, { since, tier, workers })
  }

  /**
   * Removes `turnId` from every D it waits for (no-op when it waits for none).
   *
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * const q = new SeedWaitQueue()
   * q.wait('t1', 0, ['d0'])
   * q.leave('t1')
   * q.waiting('d0') // 0
   * ```
   */
  leave(turnId: string): void {
    const t = this.#turns.get(turnId)
    if (t === undefined) return
    this.#turns.delete(turnId)
    for (const w of t.workers) {
      const tiers = this.#lines.get(w)
      const line = tiers?.[t.tier]
      if (tiers === undefined || line === undefined) continue
      const i = lowerBound(line, t.since, turnId)
      if (line.ids[i] === turnId) {
        line.since.splice(i, 1)
        line.ids.splice(i, 1)
      }
      if (line.ids.length === 0) tiers[t.tier] = undefined
      if (tiers.every((x) => x === undefined)) this.#lines.delete(w)
    }
  }

  /**
   * How many turns of `tier` or a more urgent one (default: every tier) that started strictly
   * before `since` wait for a slot on `workerId`: the slots a turn of that tier started at `since`
   * must leave to them (itself and turns started at the same time do not count).
   *
   * @throws RouterError `INVALID_OPTION` (`since` not a number, a tier that is not an integer in
   * 0..15).
   *
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * const q = new SeedWaitQueue()
   * q.wait('a', 5, ['d0'])
   * q.olderThan('d0', 5) // 0: a started at the same time, not before
   * q.olderThan('d0', 6) // 1
   * ```
   */
  olderThan(workerId: string, since: number, tier = Number.POSITIVE_INFINITY): number {
    if (typeof since !== 'number' || Number.isNaN(since))
      throw new RouterError('INVALID_OPTION', `since must be a number, got ${String(since)}`, since)
    if (tier !== Number.POSITIVE_INFINITY) checkTier(tier)
    const tiers = this.#lines.get(workerId)
    if (tiers === undefined) return 0
    let n = 0
    const last = Math.min(tier, tiers.length - 1)
    for (let k = 0; k <= last; k++) {
      const line = tiers[k]
      if (line !== undefined) n += firstAtOrAfter(line, since)
    }
    return n
  }

  /**
   * The turn first in line for a slot on `workerId`: the oldest of the most urgent tier that waits
   * for it (`undefined` when none waits). A host that sees a slot free on that D wakes this turn
   * early instead of letting the slot idle until the turn's backoff ends.
   *
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * const q = new SeedWaitQueue()
   * q.wait('old-batch', 1, ['d0'], 1)
   * q.wait('new-interactive', 5, ['d0'], 0)
   * q.first('d0') // 'new-interactive': a more urgent tier goes first
   * q.first('d1') // undefined
   * ```
   */
  first(workerId: string): string | undefined {
    for (const line of this.#lines.get(workerId) ?? []) if (line !== undefined) return line.ids[0]
    return undefined
  }

  /**
   * Registers a function told which turn to wake when a seed on a D ends and gives its
   * pending-seed slot back ({@link SeedWaitQueue.slotFreed}): the host (proxy, simulator) cuts
   * that turn's backoff short, so the slot does not idle until the turn polls again. It runs
   * inside the ending turn's step: schedule the woken turn, never step it from the listener
   * itself, and do not throw (an error surfaces in the ending turn's step). Returns a function that
   * removes the listener.
   * @throws RouterError `INVALID_OPTION` (not a function).
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * const q = new SeedWaitQueue()
   * const woken: string[] = []
   * const off = q.onSlotFreed((turnId) => woken.push(turnId))
   * q.wait('t1', 0, ['d0'])
   * q.slotFreed('d0') // woken: ['t1']
   * off()
   * ```
   */
  onSlotFreed(listener: (turnId: string, workerId: string) => void): () => void {
    if (typeof listener !== 'function')
      throw new RouterError('INVALID_OPTION', 'onSlotFreed takes a function', listener)
    this.#slotListeners.add(listener)
    return () => {
      this.#slotListeners.delete(listener)
    }
  }

  /**
   * A seed on `workerId` ended (completed or failed) and gave its slot back: tells the
   * {@link SeedWaitQueue.onSlotFreed} listeners to wake the turn first in line for that D, if any.
   * Dispatch calls it; a turn that released a slot without seeding (a refused admission, a lost
   * claim) does not, since the slot was not free to the line before either.
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * new SeedWaitQueue().slotFreed('d0') // nobody waits: no call
   * ```
   */
  slotFreed(workerId: string): void {
    if (this.#slotListeners.size === 0) return
    const first = this.first(workerId)
    if (first === undefined) return
    for (const listener of this.#slotListeners) listener(first, workerId)
  }

  /**
   * Turns waiting for a slot on `workerId`.
   *
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * new SeedWaitQueue().waiting('d0') // 0
   * ```
   */
  waiting(workerId: string): number {
    let n = 0
    for (const line of this.#lines.get(workerId) ?? []) n += line?.ids.length ?? 0
    return n
  }

  /**
   * Forgets a removed worker's lines (its waiting turns keep waiting for their other D workers).
   *
   * @example
   * ```ts
   * import { SeedWaitQueue } from '@kvc/kvc-router'
   * const q = new SeedWaitQueue()
   * q.wait('t1', 0, ['d0'])
   * q.dropWorker('d0')
   * q.waiting('d0') // 0
   * ```
   */
  dropWorker(workerId: string): void {
    if (!this.#lines.delete(workerId)) return
    for (const [id, t] of this.#turns) {
      if (!t.workers.includes(workerId)) continue
      const rest = t.workers.filter((w) => w !== workerId)
      if (rest.length === 0) this.#turns.delete(id)
      else this.#turns.set(id, { since: t.since, tier: t.tier, workers: rest })
    }
  }
}

function isWorkerId(w: unknown): boolean {
  return typeof w === 'string' && w.length > 0
}

/**
 * Whether `list` holds exactly the ids of `distinct` (ids without repeats), in any order: as many
 * entries, each of `distinct` among them. Quadratic: for the few D workers one walk waits for;
 * beyond 32 it answers `false` (the caller then registers again, which is correct too).
 */
function sameWorkers(distinct: readonly string[], list: readonly string[]): boolean {
  const n = distinct.length
  if (n !== list.length || n > 32) return false
  for (let i = 0; i < n; i++) if (!list.includes(distinct[i]!)) return false
  return true
}

function checkTier(tier: unknown): void {
  if (typeof tier !== 'number' || !Number.isInteger(tier) || tier < 0 || tier > 15)
    throw new RouterError('INVALID_OPTION', `tier must be an integer in 0..15, got ${String(tier)}`, tier)
}
