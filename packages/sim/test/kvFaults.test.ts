import { describe, expect, it } from 'vitest'
import { generateAgenticWorkload, parseFaults, runSimulation } from '../src/index.js'

/** Corrupted or partial KV as fault kinds: every turn ends with a cause, every pool balances. */
describe('corrupted KV events and partial transfers in the simulator', () => {
  const w = generateAgenticWorkload({ seed: 4, sessions: 10, maxTurnsPerSession: 12 })
  const run = (faults: string, seed = 1) =>
    runSimulation({
      workload: w,
      topology: { kind: 'pd', prefill: 1, decode: 3 },
      // First turns (and long appends) seed through the P: transfers happen.
      policy: 'kvc:tauAppend=1024',
      seed,
      faults: parseFaults(faults),
      costModel: { capacityTokens: 150_000 },
    })

  it('corrupt-kv-events: refused events count as lost, nothing throws, the run is unchanged in shape', () => {
    const calm = run('none')
    for (const seed of [1, 2]) {
      const r = run('corrupt-kv-events~0.2', seed)
      expect(r.accounting.balanced).toBe(true)
      expect(r.accounting.poolsBalanced).toBe(true)
      // Refused (a hash past 64 bits, a reused id) events are lost to the index; orphans are applied.
      expect(r.counters.kvEventsLost).toBeGreaterThan(0)
      expect(r.counters.kvEventsLost).toBeLessThan(r.counters.kvEvents)
      for (const rec of r.records) {
        expect(rec.status === 'completed' || (rec.status === 'failed' && rec.cause !== undefined)).toBe(true)
      }
      // Admission is the ground truth: a wrong residency view costs cache hits, not turns.
      expect(r.accounting.completed).toBe(calm.accounting.completed)
    }
  })

  it('partial-transfer: the D refuses the partial KV (transfer_error), the turn is reseeded and completes', () => {
    const calm = run('none')
    const r = run('partial-transfer~0.3')
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
    expect(r.counters.transferErrors).toBeGreaterThan(0)
    expect(calm.counters.transferErrors).toBe(0)
    const hit = r.records.filter((x) => x.lastError === 'partial KV transfer: pages missing')
    expect(hit.length).toBeGreaterThan(0)
    // Retried elsewhere (or again): the turns hit complete, as many as without the fault.
    expect(hit.filter((x) => x.status === 'completed').length).toBeGreaterThan(0.8 * hit.length)
    for (const rec of r.records) {
      expect(rec.status === 'completed' || (rec.status === 'failed' && rec.cause !== undefined)).toBe(true)
    }
  })

  it('timed windows target one D; the specs parse and name their kinds', () => {
    const r = run('corrupt-kv-events:d1@0s+600s, partial-transfer:d2@0s+600s')
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
    expect(r.counters.kvEventsLost).toBeGreaterThan(0)
    expect(() => parseFaults('partial-transfer:p9@1s')).not.toThrow() // the target is checked against the topology at run time
    expect(() => run('partial-transfer:p0@1s')).toThrow(/no such D worker/)
  })
})
