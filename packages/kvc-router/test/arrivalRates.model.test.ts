import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ArrivalRates, RouterError } from '../src/index.js'

// Model-based test: random arrivals, clock steps (forward, and backward: late arrivals) and
// worker removals run against ArrivalRates and a naive list of every arrival's time per worker;
// after every command each worker's rate is compared with the model's sum of
// exp(−age / window) / window over its arrivals (an arrival that came late counts as at the
// worker's latest arrival, as the class documents).

const WORKERS = ['d0', 'd1', 'd2']
const WINDOW_S = 30

interface Model {
  now: number
  readonly arrivals: Map<string, number[]>
}
type Real = ArrivalRates

function modelRate(m: Model, w: string): number {
  const ts = m.arrivals.get(w)
  if (ts === undefined || ts.length === 0) return 0
  const latest = Math.max(...ts)
  const at = Math.max(m.now, latest)
  let sum = 0
  for (const t of ts) sum += Math.exp(-(at - t) / (WINDOW_S * 1000))
  return sum / WINDOW_S
}

function check(m: Model, r: Real): void {
  for (const w of WORKERS) {
    const want = modelRate(m, w)
    const got = r.perSecond(w, m.now)
    expect(Math.abs(got - want)).toBeLessThanOrEqual(1e-9 * Math.max(1, want))
  }
}

class Arrive implements fc.Command<Model, Real> {
  constructor(readonly worker: string) {}
  check = () => true
  run(m: Model, r: Real): void {
    r.record(this.worker, m.now)
    const ts = m.arrivals.get(this.worker) ?? []
    // A late arrival counts as at the worker's latest one.
    ts.push(Math.max(m.now, ...ts))
    m.arrivals.set(this.worker, ts)
    check(m, r)
  }
  toString = () => `arrive(${this.worker})`
}

class Step implements fc.Command<Model, Real> {
  constructor(readonly ms: number) {}
  check = (m: Readonly<Model>) => m.now + this.ms >= 0
  run(m: Model, r: Real): void {
    m.now += this.ms
    check(m, r)
  }
  toString = () => `step(${this.ms})`
}

class Forget implements fc.Command<Model, Real> {
  constructor(readonly worker: string) {}
  check = () => true
  run(m: Model, r: Real): void {
    r.forget(this.worker)
    m.arrivals.delete(this.worker)
    check(m, r)
  }
  toString = () => `forget(${this.worker})`
}

describe('ArrivalRates', () => {
  it('matches a naive sum over every arrival (model-based)', () => {
    const worker = fc.constantFrom(...WORKERS)
    const commands = [
      worker.map((w) => new Arrive(w)),
      worker.map((w) => new Arrive(w)),
      fc.integer({ min: -5_000, max: 120_000 }).map((ms) => new Step(ms)),
      worker.map((w) => new Forget(w)),
    ]
    fc.assert(
      fc.property(fc.commands(commands, { maxCommands: 60 }), (cmds) => {
        fc.modelRun(
          () => ({ model: { now: 0, arrivals: new Map() }, real: new ArrivalRates(WINDOW_S) }),
          cmds,
        )
      }),
    )
  })

  it('a steady rate reads as that rate; it fades once arrivals stop', () => {
    const r = new ArrivalRates(60)
    for (let t = 0; t < 900_000; t += 250) r.record('d0', t)
    expect(r.perSecond('d0', 900_000)).toBeCloseTo(4, 1)
    expect(r.perSecond('d0', 900_000 + 60_000)).toBeCloseTo(4 / Math.E, 1)
    expect(r.perSecond('d0', 900_000 + 600_000)).toBeLessThan(0.001)
    expect(r.perSecond('nobody', 0)).toBe(0)
  })

  it('refuses a bad window or time with a typed error and counts nothing', () => {
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new ArrivalRates(bad)).toThrow(RouterError)
    }
    const r = new ArrivalRates()
    expect(r.windowS).toBe(60)
    r.record('d0', 1_000)
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY]) {
      try {
        r.record('d0', bad)
        expect.unreachable()
      } catch (err) {
        expect(err).toBeInstanceOf(RouterError)
        expect((err as RouterError).code).toBe('INVALID_OPTION')
        expect((err as RouterError).message).toMatch(/^nowMs must be a finite number/)
      }
      expect(() => r.perSecond('d0', bad)).toThrow(/^nowMs must be/)
    }
    expect(r.perSecond('d0', 1_000)).toBeCloseTo(1 / 60, 12)
  })
})
