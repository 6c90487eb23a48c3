import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { EventQueue, Prng, SimError } from '../src/index.js'

describe('EventQueue', () => {
  it('pops in (time, insertion) order, stable for equal times, across growth', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 300 }), (times) => {
        const q = new EventQueue(2)
        times.forEach((t, i) => {
          q.push(t, 1, i, 0)
        })
        const got: number[] = []
        while (q.pop()) got.push(q.a)
        const want = times.map((t, i) => [t, i] as const).sort((x, y) => x[0] - y[0] || x[1] - y[1])
        expect(got).toEqual(want.map((x) => x[1]))
      }),
      { numRuns: 100, seed: 7 },
    )
  })

  it('interleaves pushes and pops correctly', () => {
    const q = new EventQueue()
    q.push(5, 1, 1, 0)
    q.push(1, 1, 2, 0)
    expect(q.pop() && q.a).toBe(2)
    q.push(3, 2, 3, 9)
    q.push(3, 2, 4, 9)
    expect(q.peekTime()).toBe(3)
    expect([q.pop() && q.a, q.pop() && q.a, q.pop() && q.a]).toEqual([3, 4, 1])
    expect(q.pop()).toBe(false)
    expect(q.peekTime()).toBe(Number.POSITIVE_INFINITY)
    expect(q.pushed).toBe(4)
  })

  it('refuses non-finite times and bad capacities', () => {
    expect(() => new EventQueue().push(Number.NaN, 0, 0, 0)).toThrow(RangeError)
    expect(() => new EventQueue(0)).toThrow(SimError)
  })

  it('holds a million events', () => {
    const q = new EventQueue(16)
    const rng = new Prng(1)
    for (let i = 0; i < 1_000_000; i++) q.push(rng.int(1e6), 0, i, 0)
    let prev = -1
    let n = 0
    let sorted = true
    while (q.pop()) {
      if (q.time < prev) sorted = false
      prev = q.time
      n++
    }
    expect(sorted).toBe(true)
    expect(n).toBe(1_000_000)
  })
})

describe('Prng', () => {
  it('is deterministic per seed and stream, and streams are independent', () => {
    const a = new Prng(42, 'x')
    const b = new Prng(42, 'x')
    const c = new Prng(42, 'y')
    const xs = Array.from({ length: 5 }, () => a.next())
    expect(Array.from({ length: 5 }, () => b.next())).toEqual(xs)
    expect(Array.from({ length: 5 }, () => c.next())).not.toEqual(xs)
    expect(new Prng(42).fork('a').stream).toBe('/a')
  })

  it('draws in range with plausible moments', () => {
    const r = new Prng(3)
    let s = 0
    let s2 = 0
    const n = 20_000
    for (let i = 0; i < n; i++) {
      const x = r.next()
      expect(x >= 0 && x < 1).toBe(true)
      const z = r.normal()
      s += z
      s2 += z * z
    }
    expect(Math.abs(s / n)).toBeLessThan(0.03)
    expect(Math.abs(s2 / n - 1)).toBeLessThan(0.05)
    const e = Array.from({ length: n }, () => r.exponential(2)).reduce((x, y) => x + y) / n
    expect(Math.abs(e - 2)).toBeLessThan(0.1)
    expect(r.int(6)).toBeLessThan(6)
  })

  it('refuses unsafe seeds', () => {
    expect(() => new Prng(1.5)).toThrow(SimError)
  })
})
