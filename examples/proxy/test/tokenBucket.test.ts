import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ProxyError } from '../src/errors.js'
import { RequestLimiter } from '../src/limits/limiter.js'
import { TokenBucket } from '../src/limits/tokenBucket.js'
import { NO_LIMITS } from '../src/tenancy/tenants.js'

/**
 * The naive reference: the bucket's content as a function of the time since it was last
 * refilled, in exact milli-token units (integers), so no floating-point shortcut is shared with
 * the implementation.
 */
class BucketModel {
  now = 0
  /** Tokens × 1000 × 1000 (rate is an integer number of tokens/s, times in ms). */
  micro: number
  at = 0
  constructor(
    public rate: number,
    public capacity: number,
  ) {
    this.micro = capacity * 1_000_000
  }
  refill(): void {
    const dt = this.now - this.at
    // A clock that goes back adds nothing (and the next refill counts from there).
    if (dt > 0) this.micro = Math.min(this.capacity * 1_000_000, this.micro + dt * this.rate * 1_000)
    this.at = this.now
  }
  tokens(): number {
    this.refill()
    return this.micro / 1_000_000
  }
}

type Real = { bucket: TokenBucket; clock: { t: number } }
type Cmd = fc.Command<BucketModel, Real>

const close = (a: number, b: number) => Math.abs(a - b) < 1e-6 * Math.max(1, Math.abs(b))

function check(m: BucketModel, r: Real): void {
  const got = r.bucket.available()
  const want = m.tokens()
  if (!close(got, want)) throw new Error(`bucket holds ${got}, model ${want}`)
  if (got > r.bucket.capacity + 1e-9) throw new Error(`bucket holds ${got} > capacity ${r.bucket.capacity}`)
}

const commands: fc.Arbitrary<Cmd>[] = [
  fc.integer({ min: -50, max: 3_000 }).map(
    (dt): Cmd => ({
      check: () => true,
      run: (m, r) => {
        m.now += dt
        r.clock.t += dt
        check(m, r)
      },
      toString: () => `advance(${dt})`,
    }),
  ),
  fc.integer({ min: 0, max: 40 }).map(
    (cost): Cmd => ({
      check: () => true,
      run: (m, r) => {
        const have = m.tokens()
        const granted = have >= cost || (cost > m.capacity && have >= m.capacity)
        const wait = r.bucket.take(cost)
        if (granted !== (wait === 0)) throw new Error(`take(${cost}) with ${have} held: wait ${wait}`)
        if (granted) m.micro -= cost * 1_000_000
        else {
          // The wait returned is enough, and not more than a millisecond too much.
          const need = Math.min(cost, m.capacity) - have
          if (wait * m.rate < need * 1_000 - 1e-6) throw new Error(`wait ${wait} ms is too short for ${need}`)
          if ((wait - 1) * m.rate >= need * 1_000 + 1e-6)
            throw new Error(`wait ${wait} ms is too long for ${need}`)
        }
        check(m, r)
      },
      toString: () => `take(${cost})`,
    }),
  ),
  fc.integer({ min: 0, max: 30 }).map(
    (n): Cmd => ({
      check: () => true,
      run: (m, r) => {
        m.refill()
        m.micro = Math.min(m.capacity * 1_000_000, m.micro + n * 1_000_000)
        r.bucket.refund(n)
        check(m, r)
      },
      toString: () => `refund(${n})`,
    }),
  ),
  fc.tuple(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 30 })).map(
    ([rate, capacity]): Cmd => ({
      check: () => true,
      run: (m, r) => {
        m.refill()
        m.rate = rate
        m.capacity = capacity
        m.micro = Math.min(m.micro, capacity * 1_000_000)
        r.bucket.reconfigure(rate, capacity)
        check(m, r)
      },
      toString: () => `reconfigure(${rate}, ${capacity})`,
    }),
  ),
]

describe('TokenBucket', () => {
  it('matches a naive reference model under any sequence of takes, refunds, clock moves and reconfigurations', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 30 }),
        fc.commands(commands, { maxCommands: 60 }),
        (rate, capacity, cmds) => {
          const clock = { t: 0 }
          const real = {
            bucket: new TokenBucket({ ratePerSecond: rate, capacity, now: () => clock.t }),
            clock,
          }
          fc.modelRun(() => ({ model: new BucketModel(rate, capacity), real }), cmds)
        },
      ),
      { numRuns: 300 },
    )
  })

  it('grants a take larger than its capacity when full, leaving it in debt', () => {
    let t = 0
    const b = new TokenBucket({ ratePerSecond: 10, capacity: 5, now: () => t })
    expect(b.take(12)).toBe(0)
    expect(b.available()).toBe(-7)
    expect(b.take(1)).toBe(800) // 8 tokens to make up at 10/s
    t = 1_200
    expect(b.available()).toBe(5)
  })

  it('refuses bad parameters with a typed error and changes nothing', () => {
    expect(() => new TokenBucket({ ratePerSecond: 0, capacity: 1, now: () => 0 })).toThrow(ProxyError)
    const b = new TokenBucket({ ratePerSecond: 1, capacity: 2, now: () => 0 })
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      try {
        b.take(bad)
        expect.unreachable()
      } catch (e) {
        expect(e).toMatchObject({ code: 'INVALID_ARGUMENT', value: bad })
      }
    }
    expect(() => b.reconfigure(1, 0)).toThrow(/capacity/)
    expect(b.available()).toBe(2)
    expect(b.capacity).toBe(2)
  })
})

describe('RequestLimiter', () => {
  it('counts turns per tenant and overall, and releases each slot once', () => {
    const l = new RequestLimiter({ maxConcurrentTurns: 2 })
    const a = { id: 'a', limits: { ...NO_LIMITS, maxConcurrentTurns: 1 } }
    const b = { id: 'b', limits: NO_LIMITS }
    const ra = l.acquireTurn(a)
    expect(() => l.acquireTurn(a)).toThrow(expect.objectContaining({ code: 'RATE_LIMITED', status: 429 }))
    const rb = l.acquireTurn(b)
    expect(() => l.acquireTurn(b)).toThrow(/its limit \(limits\.maxConcurrentTurns\)/)
    ra()
    ra()
    expect(l.running).toBe(1)
    expect(l.runningOf('a')).toBe(0)
    rb()
    expect(l.running).toBe(0)
  })

  it('keeps a tenant’s bucket across a reload, applying its new limits', () => {
    let t = 0
    const l = new RequestLimiter({ maxConcurrentTurns: null, now: () => t })
    const v1 = { id: 'a', limits: { ...NO_LIMITS, requestsPerSecond: 1, requestBurst: 3 } }
    l.admitRequest(v1)
    l.admitRequest(v1)
    const v2 = { id: 'a', limits: { ...NO_LIMITS, requestsPerSecond: 2, requestBurst: 3 } }
    l.update([v2])
    l.admitRequest(v2) // the third of the burst: the bucket was kept
    expect(() => l.admitRequest(v2)).toThrow(
      expect.objectContaining({ value: expect.objectContaining({ retryAfterS: 1 }) }),
    )
    t = 500 // 2/s now: one token back after 500 ms
    l.admitRequest(v2)
  })
})
