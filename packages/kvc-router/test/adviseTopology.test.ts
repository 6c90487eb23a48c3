import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_TOPOLOGY_PARAMS,
  RouterError,
  type TopologyParams,
  type WorkerTopologySignal,
  adviseTopology,
} from '../src/index.js'

const P0: TopologyParams = { ...DEFAULT_TOPOLOGY_PARAMS, cooldownMs: 0 }

/**
 * A cluster under a constant load: the P workers share `work` GPU-seconds of prefill per second
 * (a queue builds once they are saturated) and the D workers share `kv` D-capacities of pinned KV.
 */
function cluster(nP: number, nD: number, work: number, kv: number): WorkerTopologySignal[] {
  const busy = nP > 0 ? Math.min(1, work / nP) : 0
  const queue = nP > 0 && work / nP >= 1 ? 4 * (work / nP) : 0
  const pressure = nD > 0 ? Math.min(1, kv / nD) : 1
  return [
    ...Array.from({ length: nP }, (_, i) => ({
      id: `p${i}`,
      role: 'prefill' as const,
      prefillBusy: busy,
      prefillQueueS: queue,
      kvPressure: 0,
    })),
    ...Array.from({ length: nD }, (_, i) => ({
      id: `d${i}`,
      role: 'decode' as const,
      prefillBusy: 0,
      prefillQueueS: 0,
      kvPressure: pressure,
    })),
  ]
}

const load = fc.record({
  n: fc.integer({ min: 2, max: 16 }),
  p: fc.double({ min: 0, max: 1, noNaN: true }),
  work: fc.double({ min: 0, max: 12, noNaN: true }),
  kv: fc.double({ min: 0, max: 14, noNaN: true }),
})

describe('adviseTopology', () => {
  it('an idle P becomes a D; a saturated P pool takes the least pressured D', () => {
    const idle = adviseTopology({ now: 0, workers: cluster(2, 6, 0.3, 5.5) }, P0)
    expect(idle).toMatchObject({
      prefill: 1,
      decode: 7,
      switches: [{ workerId: 'p0', from: 'prefill', to: 'decode' }],
    })
    expect(idle.reason).toMatch(
      /^p0 prefill → decode: the other P workers can carry the prefills \(P utilisation 0\.15/,
    )
    const ws = cluster(2, 6, 2, 2)
    const d3 = ws.find((w) => w.id === 'd3')!
    ws[ws.indexOf(d3)] = { ...d3, kvPressure: 0.1 }
    const busy = adviseTopology({ now: 0, workers: ws }, P0)
    expect(busy.switches).toEqual([{ workerId: 'd3', from: 'decode', to: 'prefill' }])
    expect(busy).toMatchObject({ prefill: 3, decode: 5 })
  })

  it('keeps the split while a switch runs, during the cooldown, and when no D can be spared', () => {
    const ws = cluster(2, 6, 0.2, 1)
    const mid = ws.map((w) => (w.id === 'p1' ? { ...w, switchingTo: 'decode' as const } : w))
    expect(adviseTopology({ now: 0, workers: mid }, P0).reason).toMatch(/^keep 1P7D: a switch is under way/)
    const cool = adviseTopology({ now: 30_000, lastChangeAt: 0, workers: ws })
    expect(cool.switches).toEqual([])
    expect(cool.reason).toMatch(/cooling down/)
    expect(adviseTopology({ now: 60_000, lastChangeAt: 0, workers: ws }).switches).toHaveLength(1)
    const full = adviseTopology({ now: 0, workers: cluster(2, 6, 4, 6) }, P0)
    expect(full.switches).toEqual([])
    expect(full.reason).toMatch(/saturated but no D can be spared/)
  })

  it('never goes below minPrefill / minDecode', () => {
    expect(adviseTopology({ now: 0, workers: cluster(1, 7, 0, 0) }, P0).switches).toEqual([])
    const none = { ...P0, minPrefill: 0 }
    expect(adviseTopology({ now: 0, workers: cluster(1, 7, 0, 0) }, none).switches).toEqual([
      { workerId: 'p0', from: 'prefill', to: 'decode' },
    ])
    // The last P leaves only when it does nothing at all (its prefills go local).
    expect(adviseTopology({ now: 0, workers: cluster(1, 7, 0.01, 0) }, none).switches).toEqual([])
    expect(adviseTopology({ now: 0, workers: cluster(7, 1, 20, 0) }, P0).switches).toEqual([])
  })

  it('refuses bad signals and parameters with a typed error', () => {
    const bad = [
      () =>
        adviseTopology({
          now: 0,
          workers: [{ id: 'p0', role: 'prefill', prefillBusy: 2, prefillQueueS: 0, kvPressure: 0 }],
        }),
      () =>
        adviseTopology({
          now: 0,
          workers: [{ id: '', role: 'prefill', prefillBusy: 0, prefillQueueS: 0, kvPressure: 0 }],
        }),
      () => adviseTopology({ now: 0, workers: [...cluster(1, 1, 0, 0), ...cluster(1, 0, 0, 0)] }),
      () => adviseTopology({ now: Number.NaN, workers: [] }),
      () => adviseTopology({ now: 0, workers: [] }, { ...P0, prefillLow: 0.9 }),
      () => adviseTopology({ now: 0, workers: [] }, { ...P0, minDecode: 0 }),
    ]
    for (const f of bad) {
      expect(f).toThrow(RouterError)
      try {
        f()
      } catch (e) {
        expect((e as RouterError).code).toBe('INVALID_OPTION')
      }
    }
  })

  it('monotone in load: more prefill work never asks for fewer P, more KV pressure never for fewer D', () => {
    fc.assert(
      fc.property(
        load,
        fc.double({ min: 0, max: 6, noNaN: true }),
        fc.double({ min: 0, max: 6, noNaN: true }),
        ({ n, p, work, kv }, dw, dk) => {
          const nP = Math.max(1, Math.min(n - 1, Math.round(p * n)))
          const nD = n - nP
          const a = adviseTopology({ now: 0, workers: cluster(nP, nD, work, kv) }, P0)
          const moreWork = adviseTopology({ now: 0, workers: cluster(nP, nD, work + dw, kv) }, P0)
          expect(moreWork.prefill).toBeGreaterThanOrEqual(a.prefill)
          const moreKv = adviseTopology({ now: 0, workers: cluster(nP, nD, work, kv + dk) }, P0)
          expect(moreKv.decode).toBeGreaterThanOrEqual(a.decode)
          // One switch at a time, and the counts always add up.
          expect(Math.abs(a.prefill - nP)).toBeLessThanOrEqual(1)
          expect(a.prefill + a.decode).toBe(n)
          expect(a.switches.length).toBe(a.prefill === nP ? 0 : 1)
        },
      ),
    )
  })

  it('stable under a constant load: following the advice moves one way, reaches a fixed point and stays', () => {
    fc.assert(
      fc.property(load, ({ n, p, work, kv }) => {
        let nP = Math.max(1, Math.min(n - 1, Math.round(p * n)))
        const seen: number[] = [nP]
        let direction = 0
        for (let step = 0; step < 2 * n + 4; step++) {
          const a = adviseTopology({ now: step, workers: cluster(nP, n - nP, work, kv) }, P0)
          const d = a.prefill - nP
          if (d !== 0) {
            // Never back the way it came (no flapping).
            expect(direction === 0 || d === direction).toBe(true)
            direction = d
          }
          nP = a.prefill
          seen.push(nP)
        }
        // The last n + 2 advices changed nothing: a fixed point.
        const tail = seen.slice(-(n + 2))
        expect(new Set(tail).size).toBe(1)
      }),
    )
  })

  it('with the default cooldown, a switch a second for a minute is impossible', () => {
    let last: number | undefined
    let nP = 4
    let switches = 0
    for (let t = 0; t < 60_000; t += 1_000) {
      const a = adviseTopology({
        now: t,
        ...(last === undefined ? {} : { lastChangeAt: last }),
        workers: cluster(nP, 8 - nP, 0, 0),
      })
      if (a.switches.length > 0) {
        switches++
        last = t
        nP = a.prefill
      }
    }
    expect(switches).toBe(1)
  })
})
