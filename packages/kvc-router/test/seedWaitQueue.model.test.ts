import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { RouterError, SeedWaitQueue } from '../src/index.js'

// Model-based test: random waits (re-registrations, identical ones and tiers included), leaves and worker
// removals run against SeedWaitQueue and a naive map of turn → (start, tier, workers); after every
// command every worker's line length and every `olderThan` answer (each tier and none) are
// compared with the model's count.

const TURNS = ['a', 'b', 'c', 'd', 'e', 'f']
const WORKERS = ['d0', 'd1', 'd2']
const SINCES = [0, 5, 5.5, 10, 20]
const TIERS = [0, 1, 2]

interface Model {
  readonly turns: Map<string, { since: number; tier: number; workers: Set<string> }>
}
type Real = SeedWaitQueue

function check(m: Model, q: Real): void {
  for (const w of WORKERS) {
    let waiting = 0
    for (const t of m.turns.values()) if (t.workers.has(w)) waiting++
    expect(q.waiting(w)).toBe(waiting)
    for (const since of [...SINCES, -1, 100]) {
      for (const tier of [...TIERS, undefined]) {
        let older = 0
        for (const t of m.turns.values())
          if (t.workers.has(w) && t.since < since && (tier === undefined || t.tier <= tier)) older++
        expect(tier === undefined ? q.olderThan(w, since) : q.olderThan(w, since, tier)).toBe(older)
      }
    }
    // First in line: the most urgent tier, then the oldest, then the smallest id.
    let first: [string, { since: number; tier: number }] | undefined
    for (const [id, t] of m.turns) {
      if (!t.workers.has(w)) continue
      if (
        first === undefined ||
        t.tier < first[1].tier ||
        (t.tier === first[1].tier &&
          (t.since < first[1].since || (t.since === first[1].since && id < first[0])))
      )
        first = [id, t]
    }
    expect(q.first(w)).toBe(first?.[0])
  }
}

class Wait implements fc.Command<Model, Real> {
  constructor(
    readonly turn: string,
    readonly since: number,
    readonly workers: readonly string[],
    readonly tier: number,
  ) {}
  check = () => true
  run(m: Model, q: Real): void {
    q.wait(this.turn, this.since, this.workers, this.tier)
    if (this.workers.length === 0) m.turns.delete(this.turn)
    else m.turns.set(this.turn, { since: this.since, tier: this.tier, workers: new Set(this.workers) })
    check(m, q)
  }
  toString = () => `wait(${this.turn}, ${this.since}, [${this.workers}], ${this.tier})`
}

/**
 * The turn waits again as it waits now, for the same D workers in the same or the reverse order
 * (a walk that met the same full budgets, its candidates ranked differently).
 */
class Rewait implements fc.Command<Model, Real> {
  constructor(
    readonly turn: string,
    readonly reverse: boolean,
  ) {}
  check = (m: Readonly<Model>) => m.turns.has(this.turn)
  run(m: Model, q: Real): void {
    const t = m.turns.get(this.turn)!
    const workers = [...t.workers]
    q.wait(this.turn, t.since, this.reverse ? workers.reverse() : workers, t.tier)
    check(m, q)
  }
  toString = () => `rewait(${this.turn}${this.reverse ? ', reversed' : ''})`
}

class Leave implements fc.Command<Model, Real> {
  constructor(readonly turn: string) {}
  check = () => true
  run(m: Model, q: Real): void {
    q.leave(this.turn)
    m.turns.delete(this.turn)
    check(m, q)
  }
  toString = () => `leave(${this.turn})`
}

class DropWorker implements fc.Command<Model, Real> {
  constructor(readonly worker: string) {}
  check = () => true
  run(m: Model, q: Real): void {
    q.dropWorker(this.worker)
    for (const [id, t] of m.turns) {
      t.workers.delete(this.worker)
      if (t.workers.size === 0) m.turns.delete(id)
    }
    check(m, q)
  }
  toString = () => `dropWorker(${this.worker})`
}

const commands = fc.commands(
  [
    fc
      .tuple(
        fc.constantFrom(...TURNS),
        fc.constantFrom(...SINCES),
        fc.array(fc.constantFrom(...WORKERS), { maxLength: 4 }),
        fc.constantFrom(...TIERS),
      )
      .map(([t, s, w, k]) => new Wait(t, s, w, k)),
    fc.tuple(fc.constantFrom(...TURNS), fc.boolean()).map(([t, r]) => new Rewait(t, r)),
    fc.constantFrom(...TURNS).map((t) => new Leave(t)),
    fc.constantFrom(...WORKERS).map((w) => new DropWorker(w)),
  ],
  { maxCommands: 60 },
)

describe('SeedWaitQueue agrees with the naive model', () => {
  it('waits, re-registrations, leaves and worker removals', () => {
    fc.assert(
      fc.property(commands, (cmds) =>
        fc.modelRun(() => ({ model: { turns: new Map() }, real: new SeedWaitQueue() }), cmds),
      ),
      { numRuns: 300 },
    )
  })

  it('slotFreed tells its listener the turn first in line, and nothing when none waits', () => {
    const q = new SeedWaitQueue()
    const calls: string[] = []
    q.slotFreed('d0') // no listener: nothing happens
    const off = q.onSlotFreed((turnId, workerId) => calls.push(`${turnId}@${workerId}`))
    q.slotFreed('d0')
    expect(calls).toEqual([])
    q.wait('late', 9, ['d0', 'd1'], 0)
    q.wait('early-bg', 1, ['d0'], 2)
    q.wait('early', 3, ['d1'], 0)
    q.slotFreed('d0')
    q.slotFreed('d1')
    expect(calls).toEqual(['late@d0', 'early@d1']) // tier first, then age
    off()
    q.slotFreed('d0')
    expect(calls.length).toBe(2)
    expect(() => q.onSlotFreed('x' as unknown as () => void)).toThrow(RouterError)
  })

  it('refuses bad input with a typed error and leaves its state untouched', () => {
    const q = new SeedWaitQueue()
    q.wait('a', 1, ['d0'])
    for (const bad of [
      () => q.wait('', 1, ['d0']),
      () => q.wait('a', Number.NaN, ['d0']),
      () => q.wait('a', 2, ['']),
      () => q.wait('a', 2, 'd0' as unknown as string[]),
      () => q.wait('a', 2, ['d0'], -1),
      () => q.wait('a', 2, ['d0'], 1.5),
    ]) {
      expect(bad).toThrow(RouterError)
    }
    expect(() => q.wait('a', Number.POSITIVE_INFINITY, ['d1'])).toThrow(/since must be a finite number/)
    expect(() => q.olderThan('d0', Number.NaN)).toThrow(/since must be a number/)
    expect(() => q.olderThan('d0', 2, 1.5)).toThrow(/tier must be an integer/)
    expect(q.waiting('d0')).toBe(1)
    expect(q.olderThan('d0', 2)).toBe(1)
  })
})
