import { beforeAll, describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  type RunResult,
  SimError,
  generateAgenticWorkload,
  hostTierFigures,
  parseHostTier,
  parsePolicySpec,
  peerFetchSeconds,
  resolveHostTier,
  runSimulation,
} from '../src/index.js'

describe('peer fetch: parsing', () => {
  it('is a part of --host-tier and of the policy key, off by default', () => {
    expect(parseHostTier('4x:peer')).toEqual({ ratio: 4, peerFetch: true })
    expect(parseHostTier('400k:disk:peer')).toEqual({
      capacityTokens: 400_000,
      medium: 'disk',
      peerFetch: true,
    })
    expect(parsePolicySpec('kvc:hostTier=4x+peer').hostTier).toEqual({ ratio: 4, peerFetch: true })
    expect(resolveHostTier({ ratio: 2 }, 1_000, 16, DEFAULT_COST_MODEL, 1).peerFetch).toBe(false)
    expect(resolveHostTier({ ratio: 2, peerFetch: true }, 1_000, 16, DEFAULT_COST_MODEL, 1).peerFetch).toBe(
      true,
    )
    expect(() => parseHostTier('none:peer')).toThrow(SimError)
    expect(() =>
      resolveHostTier({ ratio: 2, peerFetch: 'yes' as never }, 1_000, 16, DEFAULT_COST_MODEL, 1),
    ).toThrow(/peerFetch must be a boolean, got yes/)
  })
  it('a fetch is a KV transfer over the inter-worker link', () => {
    expect(peerFetchSeconds(DEFAULT_COST_MODEL, 50_000)).toBeCloseTo(0.005 + (50_000 * 98_304 * 8) / 400e9, 9)
  })
})

/**
 * A KV-constrained cluster whose sessions move between D workers: 16 sessions on 1P3D with 60K
 * tokens per worker and a 4x host tier.
 */
describe('sessions that move, with a 4x host tier (three seeds)', () => {
  const SEEDS = [1, 2, 3]
  const run = (seed: number, policy: string): RunResult =>
    runSimulation({
      workload: generateAgenticWorkload({ seed, sessions: 16, maxTurnsPerSession: 30 }),
      topology: { kind: 'pd', prefill: 1, decode: 3 },
      policy,
      seed,
      costModel: { capacityTokens: 60_000 },
    })
  const runs = new Map<string, RunResult[]>()
  beforeAll(() => {
    for (const p of ['kvc:hostTier=4x', 'kvc:hostTier=4x+peer', 'kvc:hostTier=4x:waitForOwnDecode=on']) {
      runs.set(
        p,
        SEEDS.map((s) => run(s, p)),
      )
    }
  })

  it('with peer fetch, migrations re-prefill far less on every seed: the P reads the old D’s KV', () => {
    const off = runs.get('kvc:hostTier=4x')!
    const on = runs.get('kvc:hostTier=4x+peer')!
    for (let i = 0; i < SEEDS.length; i++) {
      const a = hostTierFigures(off[i]!)
      const b = hostTierFigures(on[i]!)
      expect(a.migrations, `seed ${SEEDS[i]}`).toBeGreaterThan(0)
      expect(a.peerFetches).toBe(0)
      expect(b.peerFetches).toBeGreaterThan(0)
      // Only seeds of sessions that moved fetch.
      expect(b.peerFetches).toBeLessThanOrEqual(b.migrations)
      expect(b.reprefilledBy.migration).toBeLessThan(a.reprefilledBy.migration / 10)
      expect(b.reprefilledTokens).toBeLessThan(a.reprefilledTokens)
      // What the P fetched it did not compute; everything else is computed as before.
      expect(b.peerFetchedTokens).toBeGreaterThan(0)
    }
  })

  it('no turn is lost and every pool balances, with peer fetch and with waitForOwnDecode', () => {
    for (const [p, rs] of runs) {
      for (const r of rs) {
        expect(r.accounting.balanced, p).toBe(true)
        expect(r.accounting.poolsBalanced, p).toBe(true)
        expect(r.accounting.failed, p).toBe(0)
        expect(r.records.filter((x) => x.status === 'completed').length).toBe(r.records.length)
        // A fetch never replaces the prompt's last token: every prefill computed something.
        for (const x of r.records) expect(x.computedTokens).toBeGreaterThanOrEqual(1)
      }
    }
  })

  it('peer fetch changes nothing for a session that stays: runs without migrations are identical', () => {
    const w = generateAgenticWorkload({ seed: 2, sessions: 6, maxTurnsPerSession: 10 })
    const go = (p: string) =>
      runSimulation({ workload: w, topology: { kind: 'pd', prefill: 1, decode: 2 }, policy: p, seed: 2 })
    const a = go('kvc:hostTier=4x')
    const b = go('kvc:hostTier=4x+peer')
    expect(hostTierFigures(a).migrations).toBe(0)
    expect(b.counters.peerFetches).toBe(0)
    expect(b.records.map((r) => [r.firstTokenMs, r.computedTokens])).toEqual(
      a.records.map((r) => [r.firstTokenMs, r.computedTokens]),
    )
  })
})
