import { describe, expect, it } from 'vitest'
import { SyncHarness } from '../src/testing/index.js'

describe('smoke', () => {
  it('syncs a session end to end', () => {
    const h = new SyncHarness({ beta: 8 })
    h.commit(
      's1',
      Array.from({ length: 30 }, (_, i) => i % 7),
      [1, 2, 3, 4, 5],
    )
    expect(h.source.status('s1').withinBudget).toBe(false)
    const plan = h.round(1000)
    expect(plan.transfers.length).toBeGreaterThan(0)
    h.advance(1000)
    h.check([9, 9])
    const st = h.source.status('s1')
    expect(st.withinBudget).toBe(true)
    expect(h.sink.metrics().applied).toBeGreaterThan(0)
    h.drain()
  })
})
