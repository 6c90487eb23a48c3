import {
  DEFAULT_COST_MODEL,
  decodeStepSeconds,
  makeCostModel,
  prefillSeconds,
  transferSeconds,
} from '@kvc/kvc-router'
import { describe, expect, it } from 'vitest'
import { resolveOptions } from '../src/config/options.js'
import {
  DEFAULT_EMULATOR_TIMING,
  SglangEmulatorError,
  type SglangEmulatorOptions,
  createSglangEmulator,
} from '../src/index.js'
import { decodeStepMs, prefillMs, resolveTiming, transferMs } from '../src/timing/timing.js'

describe('options', () => {
  it('every bad option is refused with INVALID_OPTION naming it, before anything starts', async () => {
    const bad: [SglangEmulatorOptions, RegExp, unknown][] = [
      [{ role: 'router' as never }, /role/, 'router'],
      [{ pageSize: 0 }, /pageSize/, 0],
      [{ capacityTokens: 2, pageSize: 4 }, /capacityTokens/, 2],
      [{ contextLength: 1.5 }, /contextLength/, 1.5],
      [{ maxBodyBytes: 0 }, /maxBodyBytes/, 0],
      [{ port: 70_000 }, /port/, 70_000],
      [{ bootstrapPort: -1 }, /bootstrapPort/, -1],
      [{ bootstrapRanks: 0 }, /bootstrapRanks/, 0],
      [{ transferTimeoutMs: Number.NaN }, /transferTimeoutMs/, Number.NaN],
      [{ granularity: 'page' as never }, /granularity/, 'page'],
      [{ timing: { scale: -1 } }, /timing.scale/, -1],
      [{ timing: { linkGbps: 0 } }, /linkGbps/, 0],
      [{ timing: { prefillFixedS: Number.POSITIVE_INFINITY } }, /prefillFixedS/, Number.POSITIVE_INFINITY],
    ]
    for (const [o, msg, value] of bad) {
      const err = await createSglangEmulator(o).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(SglangEmulatorError)
      expect(err).toMatchObject({ code: 'INVALID_OPTION', value })
      expect((err as Error).message).toMatch(msg)
    }
  })

  it('timing refuses the old millisecond names instead of ignoring them', () => {
    const err = (() => {
      try {
        resolveTiming({ decodeStepMs: 2 } as never)
      } catch (e) {
        return e
      }
    })()
    expect(err).toBeInstanceOf(SglangEmulatorError)
    expect((err as Error).message).toMatch(/timing.decodeStepMs is not a timing parameter/)
  })

  it('defaults: the cost model’s values, 32 s transfer timeout, the capacity as context length', () => {
    const c = resolveOptions({})
    expect(c.timing).toEqual({ scale: 1, cost: DEFAULT_COST_MODEL })
    expect(c.transferTimeoutMs).toBe(DEFAULT_COST_MODEL.transferTimeoutS * 1000)
    expect(c).toMatchObject({
      role: 'colocated',
      pageSize: 16,
      capacityTokens: 65_536,
      contextLength: 65_536,
    })
    for (const [k, v] of Object.entries(DEFAULT_EMULATOR_TIMING)) {
      if (k !== 'scale') expect(v).toBe(DEFAULT_COST_MODEL[k as keyof typeof DEFAULT_COST_MODEL])
    }
    expect(resolveOptions({ capacityTokens: 1_000, pageSize: 16 }).capacityTokens).toBe(992)
  })
})

describe('timing: a view of the router’s cost model', () => {
  it('milliseconds of the same formulas, whatever the overrides; a whole CostModel may be spread in', () => {
    const cm = makeCostModel({ linkGbps: 25, prefillTokensPerS: 10_000, decodeStepS: 0.03 })
    const t = resolveTiming({ ...cm, scale: 0.5 })
    expect(t.scale).toBe(0.5)
    for (const [n, c] of [
      [0, 0],
      [0, 5_000],
      [1, 0],
      [5_000, 0],
      [1_200, 40_000],
    ] as const) {
      expect(prefillMs(t, n, c)).toBeCloseTo(prefillSeconds(cm, n, c) * 1000, 9)
      expect(decodeStepMs(t, c)).toBeCloseTo(decodeStepSeconds(cm, c) * 1000, 9)
      expect(transferMs(t, n)).toBeCloseTo(transferSeconds(cm, n) * 1000, 9)
    }
    // Nothing to compute or send takes no time, as in the simulator.
    expect(prefillMs(t, 0, 10_000)).toBe(0)
    expect(transferMs(t, 0)).toBe(0)
  })
})
