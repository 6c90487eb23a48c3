import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { runSessionScript, sessionScript } from '../src/testing/index.js'

// Guards the property tests against a degenerate generator: the random scripts must actually reach
// multi-turn sessions, memory pressure, tree evictions and sessions released under pressure.
describe('sessionScript reaches the interesting states', () => {
  for (const granularity of ['block', 'session'] as const) {
    it(`${granularity} granularity`, () => {
      const scripts = fc.sample(sessionScript({ maxAppend: 40, maxChunk: 48, maxEvict: 64 }), {
        numRuns: 60,
        seed: 42,
      })
      let turns = 0
      let evictions = 0
      let sessionsEvicted = 0
      let deepSessions = 0
      for (const steps of scripts) {
        const { real } = runSessionScript({ granularity, pageSize: 16, poolPages: 12 }, steps)
        const st = real.sc.stats()
        turns += st.sessionTurns
        evictions += st.evictions
        sessionsEvicted += st.sessionsEvicted
        deepSessions += st.sessionTurns >= 3 ? 1 : 0
      }
      expect(turns).toBeGreaterThan(100)
      expect(evictions).toBeGreaterThan(20)
      expect(sessionsEvicted).toBeGreaterThan(10)
      expect(deepSessions).toBeGreaterThan(10)
    })
  }
})
