import { describe, expect, it } from 'vitest'
import { type FaultSpec, generateAgenticWorkload, runSimulation } from '../src/index.js'

// Twelve sessions, time compressed 10×, on 2 P and 2 D workers of 100K tokens: the P workers are
// mostly idle (sessions live on their D workers) while the D workers' KV fills.
function run(policy: string, seed: number, faults: readonly FaultSpec[] = []) {
  return runSimulation({
    workload: generateAgenticWorkload({
      seed,
      sessions: 12,
      maxTurnsPerSession: 30,
      sharedPrefixTokens: 1024,
    }),
    topology: { kind: 'pd', prefill: 2, decode: 2 },
    policy,
    seed,
    timeScale: 10,
    costModel: { capacityTokens: 100_000 },
    faults,
  })
}

describe('the adaptive mechanisms in the simulator', () => {
  it.each([1, 2, 3])(
    'seed %i: elastic=on drains an idle P and restarts it as a D; no turn is lost',
    (seed) => {
      const r = run('kvc:elastic=on', seed)
      const switches = r.adaptive?.elasticSwitches ?? []
      expect(switches.length).toBeGreaterThan(0)
      for (const s of switches) {
        expect(s).toMatchObject({ from: 'prefill', to: 'decode' })
        expect(s.switchMs).toBeGreaterThanOrEqual(s.adviseMs)
      }
      // minPrefill 1: the last P stays.
      expect(r.adaptive?.finalTopology).toBe('1P3D')
      expect(r.accounting.failed).toBe(0)
      expect(r.accounting.balanced).toBe(true)
      // Without elastic=on the topology stays as configured and nothing is reported.
      expect(run('kvc', seed).adaptive?.elasticSwitches).toBeUndefined()
    },
  )

  it.each([1, 2, 3])('seed %i: hedged admission under lost admission RPCs sends hedges, some win', (seed) => {
    const faults: FaultSpec[] = [{ kind: 'admit-timeout', probability: 0.05 }]
    const r = run('kvc:pathChoice=adaptive:hedgeAdmissions=true', seed, faults)
    const h = r.adaptive?.hedges
    expect(h).toBeDefined()
    expect(h!.sent).toBeGreaterThan(0)
    expect(h!.won).toBeGreaterThan(0)
    expect(h!.won).toBeLessThanOrEqual(h!.sent)
    expect(r.accounting.failed).toBe(0)
    expect(r.accounting.balanced).toBe(true)
    expect(run('kvc:pathChoice=adaptive', seed, faults).adaptive?.hedges).toBeUndefined()
  })

  it.each([1, 2, 3])(
    'seed %i: selfTune keeps τ_reject, K and the backoff base within their bounds',
    (seed) => {
      const r = run('kvc:selfTune=true', seed)
      const t = r.adaptive?.tuning
      expect(t).toBeDefined()
      expect(t!.tauReject).toBeGreaterThanOrEqual(2)
      expect(t!.tauReject).toBeLessThanOrEqual(8)
      expect(t!.pendingSeedsPerD).toBeGreaterThanOrEqual(1)
      expect(t!.pendingSeedsPerD).toBeLessThanOrEqual(16)
      expect(t!.backoffBaseMs).toBeGreaterThanOrEqual(5)
      expect(t!.backoffBaseMs).toBeLessThanOrEqual(500)
      expect(t!.updates).toBeGreaterThan(0)
      expect(r.accounting.failed).toBe(0)
    },
  )
})
