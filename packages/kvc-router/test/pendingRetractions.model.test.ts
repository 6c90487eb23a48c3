import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { PendingRetractions } from '../src/index.js'

// Model-based test: turn starts and ends, retractions and deletions run against PendingRetractions
// and a naive model (session → running turns, session → retracting D); after every command every
// session's entry, the size and the running count are compared, and the bound is checked: an
// entry only for a session with a turn running.

const SESSIONS = ['a', 'b', 'c', 'd']
const WORKERS = ['d0', 'd1']

interface Model {
  readonly running: Map<string, number>
  readonly by: Map<string, string>
}
type Real = PendingRetractions

function check(m: Model, r: Real): void {
  for (const s of SESSIONS) {
    expect(r.get(s)).toBe(m.by.get(s))
    expect(r.has(s)).toBe(m.by.has(s))
    if (r.has(s)) expect(m.running.get(s) ?? 0).toBeGreaterThan(0)
  }
  expect(r.size).toBe(m.by.size)
  expect(r.runningSessions).toBe(m.running.size)
}

const cmd = (name: string, run: (m: Model, r: Real) => void): fc.Command<Model, Real> => ({
  check: () => true,
  run: (m, r) => {
    run(m, r)
    check(m, r)
  },
  toString: () => name,
})

const session = fc.constantFrom(...SESSIONS)
const commands = fc.commands(
  [
    session.map((s) =>
      cmd(`started(${s})`, (m, r) => {
        r.turnStarted(s)
        m.running.set(s, (m.running.get(s) ?? 0) + 1)
      }),
    ),
    session.map((s) =>
      cmd(`ended(${s})`, (m, r) => {
        r.turnEnded(s)
        const n = m.running.get(s) ?? 0
        if (n > 1) m.running.set(s, n - 1)
        else if (n === 1) {
          m.running.delete(s)
          m.by.delete(s)
        }
      }),
    ),
    fc.tuple(session, fc.constantFrom(...WORKERS)).map(([s, d]) =>
      cmd(`record(${s}, ${d})`, (m, r) => {
        const running = (m.running.get(s) ?? 0) > 0
        expect(r.record(s, d)).toBe(running)
        if (running) m.by.set(s, d)
      }),
    ),
    session.map((s) =>
      cmd(`delete(${s})`, (m, r) => {
        expect(r.delete(s)).toBe(m.by.delete(s))
      }),
    ),
  ],
  { size: '+1' },
)

describe('PendingRetractions against a model', () => {
  it('agrees with the model after every command; an entry exists only while its session has a turn running', () => {
    fc.assert(
      fc.property(commands, (cmds) => {
        fc.modelRun(
          () => ({ model: { running: new Map(), by: new Map() }, real: new PendingRetractions() }),
          cmds,
        )
      }),
    )
  })
})
