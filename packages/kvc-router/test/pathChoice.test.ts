import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  DEFAULT_PATH_PARAMS,
  type PathSignals,
  RouterError,
  choosePath,
  estimateLocal,
  estimateRemote,
  headOfLineSeconds,
  pathParams,
  prefillSeconds,
  shouldWaitForOwnDecode,
} from '../src/index.js'

const P = DEFAULT_PATH_PARAMS

/** Signals with the P holding no more of the prompt than the D (what the router knows). */
const signals = fc
  .record({
    prompt: fc.integer({ min: 1, max: 120_000 }),
    heldD: fc.double({ min: 0, max: 1, noNaN: true }),
    heldPShare: fc.double({ min: 0, max: 1, noNaN: true }),
    dq: fc.double({ min: 0, max: 20, noNaN: true }),
    running: fc.integer({ min: 0, max: 64 }),
    pq: fc.double({ min: 0, max: 20, noNaN: true }),
    gbps: fc.constantFrom(25, 100, 200, 400, 800),
    // Turns arriving at the D per second: none (no head-of-line term) in a third of the cases.
    arrivals: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 8, noNaN: true })),
  })
  .map(({ prompt, heldD, heldPShare, dq, running, pq, gbps, arrivals }) => {
    const d = Math.floor(prompt * heldD)
    return {
      promptTokens: prompt,
      decodeHeldTokens: d,
      decodeQueueS: dq,
      runningDecodes: running,
      decodeArrivalsPerS: arrivals,
      prefill: { queueS: pq, heldTokens: Math.floor(d * heldPShare), linkGbps: gbps },
    } satisfies PathSignals
  })

describe('path choice: the estimates', () => {
  it('local: the D prefills what it lacks after its queue, and its batch stops that long', () => {
    const s: PathSignals = {
      promptTokens: 40_000,
      decodeHeldTokens: 6_000,
      decodeQueueS: 0.3,
      runningDecodes: 5,
    }
    const pf = prefillSeconds(DEFAULT_COST_MODEL, 34_000, 6_000)
    const e = estimateLocal(s, P)
    expect(e).toEqual({
      site: 'local',
      newTokens: 34_000,
      ttftS: 0.3 + pf,
      stallS: pf,
      impactS: 5 * pf,
      headOfLineS: 0,
      costS: 0.3 + pf + 5 * pf,
    })
    expect(estimateRemote(s, P)).toBeUndefined()
  })

  it('remote: P queue + P prefill + the transfer tail the prefill could not hide', () => {
    const cm = DEFAULT_COST_MODEL
    const perToken = (cm.kvBytesPerToken * 8) / (cm.linkGbps * 1e9)
    const s: PathSignals = {
      promptTokens: 40_000,
      decodeHeldTokens: 6_000,
      decodeQueueS: 0,
      runningDecodes: 5,
      prefill: { queueS: 1, heldTokens: 6_000 },
    }
    const pf = prefillSeconds(cm, 34_000, 6_000)
    // 34K tokens cross a 400 Gb/s link in 67 ms, well within a 2 s prefill: one chunk is left.
    const tail = cm.transferSetupS + 8_192 * perToken
    expect(estimateRemote(s, P)).toEqual({
      site: 'remote',
      newTokens: 34_000,
      ttftS: 1 + pf + tail,
      stallS: 0,
      impactS: 0,
      headOfLineS: 0,
      costS: 1 + pf + tail,
    })
    // On a 1 Gb/s link the transfer outlasts the prefill: the rest is exposed.
    const slow = estimateRemote({ ...s, prefill: { ...s.prefill!, linkGbps: 1 } }, P)!
    const slowPer = (cm.kvBytesPerToken * 8) / 1e9
    expect(slow.ttftS).toBeCloseTo(1 + pf + cm.transferSetupS + 34_000 * slowPer - pf, 9)
    // Nothing to transfer (the D holds the prompt): no tail.
    expect(estimateRemote({ ...s, decodeHeldTokens: 40_000 }, P)!.ttftS).toBeCloseTo(1 + pf, 12)
  })

  it('the seeds-setting numbers: a 34K reseed beside five running decodes goes remote; on an idle D it stays local', () => {
    const busy: PathSignals = {
      promptTokens: 40_000,
      decodeHeldTokens: 6_000,
      decodeQueueS: 0,
      runningDecodes: 5,
      prefill: { queueS: 1, heldTokens: 6_000 },
    }
    const c = choosePath(busy, P)
    expect(c.site).toBe('remote')
    expect(c.reason).toMatch(/^remote .* < local .* × 5 decodes\)$/)
    expect(choosePath({ ...busy, runningDecodes: 0 }, P).site).toBe('local')
    // Dynamo's rule of thumb falls out: a full prefill queue means prefill locally.
    expect(choosePath({ ...busy, prefill: { queueS: 30, heldTokens: 6_000 } }, P).site).toBe('local')
    // No P: local, whatever it costs.
    const { prefill: _p, ...noP } = busy
    const alone = choosePath(noP, P)
    expect(alone.site).toBe('local')
    expect(alone.remote).toBeUndefined()
    expect(alone.reason).toMatch(/^no P can seed the D/)
  })

  it('ties go local (no transfer, no P), and so does a prompt the D holds whole', () => {
    const s: PathSignals = {
      promptTokens: 4_000,
      decodeHeldTokens: 0,
      decodeQueueS: 0,
      runningDecodes: 0,
      prefill: { queueS: 0, heldTokens: 4_000, linkGbps: 1e12 },
    }
    const c = choosePath(s, P)
    expect(c.site).toBe('remote') // the P holds the prompt: only the transfer is left
    const gap = c.local.costS - c.remote!.costS
    const tie = choosePath({ ...s, prefill: { ...s.prefill!, queueS: gap } }, P)
    expect(Math.abs(tie.local.costS - tie.remote!.costS)).toBeLessThan(1e-12)
    expect(tie.site).toBe(tie.local.costS <= tie.remote!.costS ? 'local' : 'remote')
    expect(choosePath({ ...s, prefill: { ...s.prefill!, queueS: gap + 1e-9 } }, P).site).toBe('local')
    const held = choosePath({ ...s, decodeHeldTokens: 4_000, decodeQueueS: 9 }, P)
    expect(held.site).toBe('local')
    expect(held.reason).toMatch(/holds the whole prompt/)
  })

  it('refuses bad signals and parameters with a typed error naming the field', () => {
    const base: PathSignals = { promptTokens: 10, decodeHeldTokens: 0, decodeQueueS: 0, runningDecodes: 0 }
    const bad: [PathSignals, RegExp][] = [
      [{ ...base, promptTokens: -1 }, /^promptTokens must be/],
      [{ ...base, decodeQueueS: Number.NaN }, /^decodeQueueS must be/],
      [{ ...base, runningDecodes: Number.POSITIVE_INFINITY }, /^runningDecodes must be/],
      [{ ...base, prefill: { queueS: -2, heldTokens: 0 } }, /^prefill\.queueS must be/],
      [{ ...base, prefill: { queueS: 0, heldTokens: 0, linkGbps: 0 } }, /^prefill\.linkGbps must be/],
    ]
    for (const [s, msg] of bad) {
      try {
        choosePath(s, P)
        expect.unreachable()
      } catch (err) {
        expect(err).toBeInstanceOf(RouterError)
        expect((err as RouterError).code).toBe('INVALID_OPTION')
        expect((err as RouterError).message).toMatch(msg)
      }
    }
    expect(() => pathParams(DEFAULT_COST_MODEL, { stallWeight: -1 })).toThrow(/stallWeight must be/)
    expect(() => pathParams(DEFAULT_COST_MODEL, { maxPromptTokens: 0 })).toThrow(/maxPromptTokens must be/)
    expect(() => shouldWaitForOwnDecode(-1, estimateLocal(base, P), choosePath(base, P))).toThrow(
      /waitS must be/,
    )
  })
})

describe('path choice: head-of-line delay', () => {
  it('the turns arriving meanwhile wait behind a local prefill: the whole prefill while the queue drains, half of it during', () => {
    expect(headOfLineSeconds(1, 0, 2)).toBe(2) // two arrivals during a 2 s prefill, 1 s each
    expect(headOfLineSeconds(0.5, 1, 2)).toBe(0.5 * 2 * (1 + 1)) // + one arrival while 1 s of queue drains
    expect(headOfLineSeconds(0, 3, 2)).toBe(0)
    expect(headOfLineSeconds(4, 3, 0)).toBe(0)
    const s: PathSignals = {
      promptTokens: 40_000,
      decodeHeldTokens: 6_000,
      decodeQueueS: 0.3,
      runningDecodes: 2,
      decodeArrivalsPerS: 1.5,
    }
    const pf = prefillSeconds(DEFAULT_COST_MODEL, 34_000, 6_000)
    const e = estimateLocal(s, P)
    expect(e.headOfLineS).toBeCloseTo(1.5 * pf * (0.3 + pf / 2), 12)
    expect(e.costS).toBeCloseTo(0.3 + pf + 2 * pf + e.headOfLineS, 12)
    // The stall weight prices other turns' delay: it weighs the arrivals as it weighs the decodes.
    const half = estimateLocal(s, pathParams(DEFAULT_COST_MODEL, { stallWeight: 0.5 }))
    expect(half.costS).toBeCloseTo(0.3 + pf + 0.5 * (2 * pf + e.headOfLineS), 12)
    // A remote seed holds nobody back on the D.
    expect(estimateRemote({ ...s, prefill: { queueS: 0, heldTokens: 0 } }, P)!.headOfLineS).toBe(0)
  })

  it('a reseed that an idle P queue would not beat goes remote once turns arrive at the D', () => {
    // 34K tokens to prefill beside 2 running decodes, the P 6 s behind: local without arrivals.
    const s: PathSignals = {
      promptTokens: 40_000,
      decodeHeldTokens: 6_000,
      decodeQueueS: 0,
      runningDecodes: 2,
      prefill: { queueS: 6, heldTokens: 0 },
    }
    expect(choosePath(s, P).site).toBe('local')
    expect(choosePath({ ...s, decodeArrivalsPerS: 1 }, P).site).toBe('local')
    const busy = choosePath({ ...s, decodeArrivalsPerS: 2 }, P)
    expect(busy.site).toBe('remote')
    expect(busy.reason).toMatch(/s of arrivals queued behind\)\)$/)
  })

  it('monotone in the prompt with arrivals too: the dip inside the first chunk past what the D holds', () => {
    // Within one chunk the remote seed's transfer grows faster than the local cost (no running
    // decodes, few arrivals), past a point where the head-of-line term's slope catches up: the
    // margin dips between the breakpoints. Set the P queue so that the dip's bottom is a tie.
    const base = {
      promptTokens: 10_001,
      decodeHeldTokens: 10_000,
      decodeQueueS: 0.5,
      runningDecodes: 0,
      decodeArrivalsPerS: 0.065,
      prefill: { queueS: 0, heldTokens: 0 },
    }
    const margin = (s: PathSignals, L: number): number => {
      const t = { ...s, promptTokens: L }
      return estimateLocal(t, P).costS - estimateRemote(t, P)!.costS
    }
    let bottom = base.promptTokens
    for (let L = base.promptTokens + 1; L <= 30_000; L++)
      if (margin(base, L) < margin(base, bottom)) bottom = L
    const s = { ...base, prefill: { queueS: margin(base, bottom), heldTokens: 0 } }
    expect(bottom).toBeGreaterThan(10_001)
    expect(bottom).toBeLessThan(10_000 + 8_192) // inside the chunk, not at a breakpoint
    expect(margin(s, 10_001)).toBeGreaterThan(0) // the plain comparison sends this prompt to the P
    const c = choosePath(s, P)
    expect(c.site).toBe('local')
    const at = Number(/a prompt of (\d+) tokens/.exec(c.reason)?.[1])
    expect(Math.abs(at - bottom)).toBeLessThanOrEqual(1)
  })

  it('non-decreasing in each argument; refuses bad ones with a typed error', () => {
    const x = fc.double({ min: 0, max: 50, noNaN: true })
    fc.assert(
      fc.property(x, x, x, x, (a, q, pf, more) => {
        const h = headOfLineSeconds(a, q, pf)
        expect(h).toBeGreaterThanOrEqual(0)
        expect(headOfLineSeconds(a + more, q, pf)).toBeGreaterThanOrEqual(h)
        expect(headOfLineSeconds(a, q + more, pf)).toBeGreaterThanOrEqual(h)
        expect(headOfLineSeconds(a, q, pf + more)).toBeGreaterThanOrEqual(h)
      }),
    )
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => headOfLineSeconds(bad, 0, 1)).toThrow(RouterError)
      expect(() => headOfLineSeconds(1, bad, 1)).toThrow(/queueS must be/)
      expect(() => headOfLineSeconds(1, 0, bad)).toThrow(/prefillS must be/)
      expect(() =>
        choosePath(
          {
            promptTokens: 9,
            decodeHeldTokens: 0,
            decodeQueueS: 0,
            runningDecodes: 0,
            decodeArrivalsPerS: bad,
          },
          P,
        ),
      ).toThrow(/^decodeArrivalsPerS must be/)
    }
  })
})

describe('path choice: monotonicity (properties)', () => {
  it('a longer P queue never turns a local seed into a remote one', () => {
    fc.assert(
      fc.property(signals, fc.double({ min: 0, max: 30, noNaN: true }), (s, more) => {
        if (choosePath(s, P).site !== 'local') return
        const longer = { ...s, prefill: { ...s.prefill, queueS: s.prefill.queueS + more } }
        expect(choosePath(longer, P).site).toBe('local')
      }),
    )
  })

  it('a shorter prompt never turns a local seed into a remote one', () => {
    // The prompt shrinks with the cached parts unchanged (both still inside it): fewer new tokens
    // on both sides. Any stall weight, idle D workers included.
    fc.assert(
      fc.property(
        signals,
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 4, noNaN: true }),
        (s, cut, w) => {
          const p = pathParams(DEFAULT_COST_MODEL, { stallWeight: w })
          if (choosePath(s, p).site !== 'local') return
          const floor = s.decodeHeldTokens
          const shorter = { ...s, promptTokens: floor + Math.floor((s.promptTokens - floor) * cut) }
          expect(choosePath(shorter, p).site).toBe('local')
        },
      ),
    )
  })

  it('near ties on an idle D: a shorter sub-chunk prompt stays local although its transfer is cheaper', () => {
    // With nothing decoding on the D, local costs nothing to others; a sub-chunk prompt's
    // transfer grows with it, so the plain comparison would send the shorter prompt to the P.
    const s = (prompt: number): PathSignals => ({
      promptTokens: prompt,
      decodeHeldTokens: 0,
      decodeQueueS: 0.0135,
      runningDecodes: 0,
      prefill: { queueS: 0, heldTokens: 0 },
    })
    const long = choosePath(s(8_000), P)
    expect(long.site).toBe('local')
    expect(long.local.costS).toBeLessThanOrEqual(long.remote!.costS)
    const short = choosePath(s(1_000), P)
    expect(short.remote!.costS).toBeLessThan(short.local.costS)
    expect(short.site).toBe('local')
    expect(short.reason).toMatch(/would prefill locally, so this shorter one does too/)
  })

  it('remote only when no longer prompt would be local (brute force over longer prompts)', () => {
    fc.assert(
      fc.property(signals, fc.double({ min: 0, max: 4, noNaN: true }), (s, w) => {
        const p = pathParams(DEFAULT_COST_MODEL, { stallWeight: w })
        if (choosePath(s, p).site !== 'remote') return
        for (let L = s.promptTokens + 1; L <= s.promptTokens + 200_000; L += 97) {
          const t = { ...s, promptTokens: L }
          expect(estimateLocal(t, p).costS).toBeGreaterThan(estimateRemote(t, p)!.costS)
        }
      }),
      { numRuns: 60 },
    )
  })

  it('the choice departs from the plain comparison only near a tie', () => {
    // The gap is at most the P’s fixed prefill cost plus one chunk’s wire time (links of 25 Gb/s
    // and faster: the transfer past one chunk never outgrows the prefill).
    const cm = DEFAULT_COST_MODEL
    fc.assert(
      fc.property(signals, fc.double({ min: 0, max: 4, noNaN: true }), (s, w) => {
        const p = pathParams(cm, { stallWeight: w })
        const c = choosePath(s, p)
        if (c.site !== 'local' || c.remote === undefined || c.local.newTokens === 0) return
        if (c.local.costS <= c.remote.costS) return
        const wire = (cm.kvBytesPerToken * 8) / (s.prefill.linkGbps * 1e9)
        const bound = cm.prefillFixedS + p.transferChunkTokens * wire + 1e-9
        expect(c.local.costS - c.remote.costS).toBeLessThanOrEqual(bound)
      }),
    )
  })

  it('a slower link, a shorter D queue, fewer running decodes or fewer arrivals never turn local into remote', () => {
    fc.assert(
      fc.property(
        signals,
        fc.double({ min: 0, max: 10, noNaN: true }),
        fc.nat({ max: 16 }),
        (s, dq, fewer) => {
          if (choosePath(s, P).site !== 'local') return
          const slower = { ...s, prefill: { ...s.prefill, linkGbps: s.prefill.linkGbps / 4 } }
          expect(choosePath(slower, P).site).toBe('local')
          const shorterQueue = { ...s, decodeQueueS: Math.max(0, s.decodeQueueS - dq) }
          expect(choosePath(shorterQueue, P).site).toBe('local')
          const idler = { ...s, runningDecodes: Math.max(0, s.runningDecodes - fewer) }
          expect(choosePath(idler, P).site).toBe('local')
          const quieter = { ...s, decodeArrivalsPerS: s.decodeArrivalsPerS * (fewer / 16) }
          expect(choosePath(quieter, P).site).toBe('local')
        },
      ),
    )
  })

  it('a faster link never turns a remote seed into a local one', () => {
    fc.assert(
      fc.property(signals, (s) => {
        if (choosePath(s, P).site !== 'remote') return
        const faster = { ...s, prefill: { ...s.prefill, linkGbps: s.prefill.linkGbps * 4 } }
        expect(choosePath(faster, P).site).toBe('remote')
      }),
    )
  })

  it('the estimates grow with what they count', () => {
    fc.assert(
      fc.property(signals, fc.integer({ min: 1, max: 10_000 }), (s, more) => {
        const bigger = { ...s, promptTokens: s.promptTokens + more }
        expect(estimateLocal(bigger, P).ttftS).toBeGreaterThanOrEqual(estimateLocal(s, P).ttftS)
        expect(estimateRemote(bigger, P)!.ttftS).toBeGreaterThanOrEqual(estimateRemote(s, P)!.ttftS - 1e-12)
      }),
    )
  })

  it('a longer wait for the own D never turns a move into a stay', () => {
    fc.assert(
      fc.property(
        signals,
        signals,
        fc.double({ min: 0, max: 5, noNaN: true }),
        fc.double({ min: 0, max: 5, noNaN: true }),
        (own, other, w, more) => {
          const stay = estimateLocal(own, P)
          const move = choosePath(other, P)
          if (shouldWaitForOwnDecode(w, stay, move)) return
          expect(shouldWaitForOwnDecode(w + more, stay, move)).toBe(false)
        },
      ),
    )
  })
})
