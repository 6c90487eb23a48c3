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
  })
  .map(({ prompt, heldD, heldPShare, dq, running, pq, gbps }) => {
    const d = Math.floor(prompt * heldD)
    return {
      promptTokens: prompt,
      decodeHeldTokens: d,
      decodeQueueS: dq,
      runningDecodes: running,
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
    expect(() => shouldWaitForOwnDecode(-1, estimateLocal(base, P), choosePath(base, P))).toThrow(
      /waitS must be/,
    )
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

  it('a shorter prompt never turns a local seed into a remote one while the D decodes', () => {
    // The prompt shrinks with the cached parts unchanged (both still inside it): fewer new tokens
    // on both sides. Holds while stallWeight × running decodes is at least the link's wire time
    // per token over the prefill's (≤ 0.95 for every link here, 25 Gb/s included): a local
    // prefill's cost per token is then at least the remote one's (prefill plus wire).
    fc.assert(
      fc.property(
        signals,
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0.95, max: 4, noNaN: true }),
        (s0, cut, w) => {
          const s = { ...s0, runningDecodes: Math.max(1, s0.runningDecodes) }
          const p = pathParams(DEFAULT_COST_MODEL, { stallWeight: w })
          if (choosePath(s, p).site !== 'local') return
          const floor = s.decodeHeldTokens
          const shorter = { ...s, promptTokens: floor + Math.floor((s.promptTokens - floor) * cut) }
          expect(choosePath(shorter, p).site).toBe('local')
        },
      ),
    )
  })

  it('the exception, on an idle D: a near tie can tip toward remote for a shorter prompt below one chunk', () => {
    // With nothing decoding on the D, local costs nothing to others; a sub-chunk prompt's
    // transfer then grows with it, so a shorter prompt sheds wire time only on the remote side.
    const s = (prompt: number): PathSignals => ({
      promptTokens: prompt,
      decodeHeldTokens: 0,
      decodeQueueS: 0.0135,
      runningDecodes: 0,
      prefill: { queueS: 0, heldTokens: 0 },
    })
    expect(choosePath(s(8_000), P).site).toBe('local')
    expect(choosePath(s(1_000), P).site).toBe('remote')
  })

  it('a slower link, a shorter D queue and fewer running decodes never turn local into remote', () => {
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
