import { describe, expect, it } from 'vitest'
import { SimError, generateAgenticWorkload, runSimulation } from '../src/index.js'

// Twelve sessions on one P and three D workers of 60K tokens each, time compressed 10×: each D
// ends up holding more hot sessions than stay below its pause threshold.
function run(policy: string, capacityTokens: number, seed = 1) {
  return runSimulation({
    workload: generateAgenticWorkload({
      seed,
      sessions: 12,
      maxTurnsPerSession: 30,
      sharedPrefixTokens: 1024,
    }),
    topology: { kind: 'pd', prefill: 1, decode: 3 },
    policy,
    seed,
    timeScale: 10,
    costModel: { capacityTokens },
  })
}

const ttftOf = (r: ReturnType<typeof run>) => r.records.map((x) => x.firstTokenMs - x.arrivalMs)

describe('retract=on (hot-session retraction)', () => {
  it.each([1, 2, 3])('seed %i: D workers under pressure retract hot sessions; no turn is lost', (seed) => {
    const off = run('kvc:pathChoice=adaptive', 60_000, seed)
    const on = run('kvc:pathChoice=adaptive:retract=on', 60_000, seed)
    expect(off.counters.retractions).toBe(0)
    expect(on.counters.retractions).toBeGreaterThan(0)
    for (const r of [off, on]) {
      expect(r.accounting.failed).toBe(0)
      expect(r.accounting.balanced).toBe(true)
      expect(r.accounting.poolsBalanced).toBe(true)
    }
    // Retracted sessions' next turns are placed on other D workers (Dispatch's tests check that
    // each one moves; here, that some turn did).
    expect(on.records.some((x) => x.migrated)).toBe(true)
  })

  it('changes nothing where no D reaches the threshold', () => {
    const off = run('kvc:pathChoice=adaptive', 1_000_000)
    const on = run('kvc:pathChoice=adaptive:retract=on', 1_000_000)
    expect(on.counters.retractions).toBe(0)
    expect(ttftOf(on)).toEqual(ttftOf(off))
  })

  it('is a kvc option, on or off', () => {
    expect(() => run('kvc:retract=maybe', 60_000)).toThrow(SimError)
    expect(() => run('round-robin:retract=on', 60_000)).toThrow(/retract=on needs the kvc fast path/)
  })
})
