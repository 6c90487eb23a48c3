import { describe, expect, it } from 'vitest'
import { AGENTIC, runWorkload, type WorkloadOptions } from '../bench/workload.js'

// A small version of the benchmark's agentic workload: D evicts periodically, reseeds go through
// P. With sync on, reseeds re-prefill much less, and every reseed of a session reported within β
// re-prefills at most β + append (Theorem 4, end to end on real radix caches).
const small: WorkloadOptions = {
  ...AGENTIC,
  sessions: 8,
  turns: [8, 14],
  systemTokens: 1024,
  firstPromptTokens: [500, 1500],
  appendTokens: [100, 1000],
  outputTokens: [50, 300],
  startWindowMs: 10_000,
  decodeCapacityTokens: 40_000,
  prefillCapacityTokens: 200_000,
  seed: 3,
}
const base = { bytesPerSecond: 5e9, kvBytesPerToken: 98_304, roundMs: 100, latencyMs: 0.05 }

describe('agentic workload with periodic evictions on D', () => {
  it('sync cuts the tokens re-prefilled on reseed and keeps Theorem 4', () => {
    const off = runWorkload(small, { ...base, enabled: false, beta: 0 })
    expect(off.reseeds).toBeGreaterThan(5)
    for (const beta of [256, 2048]) {
      const on = runWorkload(small, { ...base, enabled: true, beta })
      expect(on.reseeds).toBe(off.reseeds) // the same arrivals and D evictions
      expect(on.theoremViolations).toBe(0)
      expect(on.reseedsWithinBudget).toBeGreaterThan(0)
      expect(on.reseedPrefillTokens).toBeLessThan(off.reseedPrefillTokens)
      expect(on.reseedPrefillTokens).toBeLessThanOrEqual(on.reseeds * beta + on.reseedAppendTokens)
      expect(on.bytesSynced).toBeGreaterThan(0)
    }
  })
})
