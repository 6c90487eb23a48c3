import { describe, expect, it } from 'vitest'
import { generateAgenticWorkload, type RunResult, runSimulation } from '../src/index.js'

/**
 * Findings 3 and 4 of docs/design/simulation.md#findings-to-reproduce, on three workload seeds and
 * a small grid around their setting. The cluster is the prototype's at half size: 40 built-in
 * sessions on 2P5D with 100K tokens per worker (the prototype: 52 sessions of 30–60K tokens on
 * 2P6D with 200K), time scale 10, a 1,024-token shared prefix (with the 6,000-token default,
 * capacity-blind routing pins every session to one D: finding 2).
 */
const SEEDS = [1, 2, 3] as const
/** Generous: the suite runs on a busy two-core machine; nothing here measures wall time. */
const LONG = 900_000

const runs = new Map<string, RunResult>()
/** `policy` on the test cluster (cached: several tests read the same runs). */
function run(
  policy: string,
  seed: number,
  o: { capacity?: number; peaks?: [number, number] } = {},
): RunResult {
  const [lo, hi] = o.peaks ?? [15_000, 30_000]
  const capacity = o.capacity ?? 100_000
  const key = `${policy}/${seed}/${capacity}/${lo}-${hi}`
  let r = runs.get(key)
  if (r === undefined) {
    r = runSimulation({
      workload: generateAgenticWorkload({
        seed,
        sessions: 40,
        sharedPrefixTokens: 1024,
        peakInputMin: lo,
        peakInputMax: hi,
      }),
      topology: { kind: 'pd', prefill: 2, decode: 5 },
      policy,
      seed: 1,
      timeScale: 10,
      costModel: { capacityTokens: capacity },
    })
    runs.set(key, r)
  }
  return r
}

/** Per session: fast-path rate and largest prompt. */
function sessions(r: RunResult) {
  const per = new Map<number, { turns: number; fast: number; peak: number }>()
  for (const x of r.records) {
    let s = per.get(x.session)
    if (s === undefined) per.set(x.session, (s = { turns: 0, fast: 0, peak: 0 }))
    s.turns++
    if (x.path === 'fast') s.fast++
    s.peak = Math.max(s.peak, x.inputLength)
  }
  return [...per.values()].map((s) => ({ rate: s.fast / s.turns, peak: s.peak }))
}
const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length)

/**
 * The research prototype's v5 D side as its notes describe it (docs/design/prototype.md#the-v5-paths,
 * #idle-only-lru): legacy session slots (`granularity=session`) that the engine's LRU releases,
 * whole, only when idle and only under memory pressure (the default `release=pressure`; no TTL, no
 * retraction of hot sessions); a fast-path admission that reads the slot's committed length
 * against free + evictable memory (`admission=slot`: no release, lease or pause hint); the
 * fallback a plain request through SGLang's P/D router (`seedPath=pd`: the D preallocates, then a P
 * prefills; `seedSlot=off`: outside the session's slot; `seedAdmission=off`, no pending-seed budget).
 */
const V5_D =
  'granularity=session:admission=slot:seedAdmission=off:seedSlot=off:seedPath=pd:backpressure=off:pendingSeedsPerD=1000'
/** Finding 3's workload: session peaks of 7.5–45K tokens (the prototype's starved and served sessions averaged 62K and 31K). */
const SPREAD: [number, number] = [7_500, 45_000]

describe('finding 3: capacity-blind routing starves the largest sessions (docs/design/prototype.md#capacity-blind-routing)', () => {
  /** Starved (below 50% fast path) sessions, and their mean peak prompt over the others'. */
  const starvation = (r: RunResult) => {
    const per = sessions(r)
    const low = per.filter((s) => s.rate < 0.5)
    const high = per.filter((s) => s.rate >= 0.5)
    return { low: low.length, ratio: mean(low.map((s) => s.peak)) / mean(high.map((s) => s.peak)) }
  }
  const fallbackMs = (r: RunResult) =>
    mean(
      r.records
        .filter((x) => x.path === 'seed' && x.status === 'completed')
        .map((x) => x.endMs - x.arrivalMs),
    )

  it("under v5's D side every D fills, the largest sessions starve, and their turns complete on the fallback (seeds 1–3; 90K and 110K tokens per worker)", {
    timeout: LONG,
  }, () => {
    const grid: [number, number][] = [
      ...SEEDS.map((s) => [s, 100_000] as [number, number]),
      [1, 90_000],
      [1, 110_000],
    ]
    for (const [seed, capacity] of grid) {
      const r = run(`kvc-capacity-blind:${V5_D}`, seed, { capacity, peaks: SPREAD })
      // Hot sessions are never idle, so the LRU finds little to release: every D peaks at 97% or more, most at 100% (the prototype: 97–100%).
      for (const u of r.usage.filter((x) => x.role === 'decode'))
        expect(Math.max(...u.usage)).toBeGreaterThanOrEqual(0.97)
      // A starved group, made of the largest sessions (seeds 1–3: 16 / 14 / 8 sessions below 50%,
      // 1.67× / 1.55× / 1.70× the others' peak prompt; the prototype: 1.98×)...
      const s = starvation(r)
      expect(s.low).toBeGreaterThanOrEqual(6)
      expect(s.ratio).toBeGreaterThan(1.3)
      // ...whose turns complete on the fallback, as the prototype's did (≈ 3.5 s there; 6.7–9.4 s here).
      expect(r.accounting.failed).toBe(0)
      expect(fallbackMs(r)).toBeLessThan(15_000)
    }
  })

  it("under v5's D side capacity-aware Route does not serve them: the D side starves them; the SDK's design starves none (seeds 1–3)", {
    timeout: LONG,
  }, () => {
    for (const seed of SEEDS) {
      const blind = starvation(run(`kvc-capacity-blind:${V5_D}`, seed, { peaks: SPREAD }))
      // The same D side with the SDK's Route (capOk key, migration, reset-on-success): as many
      // starve (21 / 23 / 16 against 16 / 14 / 8): the prototype's diagnosis, routing, is not
      // what starves them in this model.
      const aware = starvation(run(`kvc:${V5_D}`, seed, { peaks: SPREAD }))
      expect(aware.low).toBeGreaterThanOrEqual(blind.low)
      // The SDK's design (block-level retention, release on demand, Algorithm 2 admission on both
      // paths, pause hints): no session below 50% fast path (the lowest at 0.66 on seed 1) and no
      // turn fails.
      const sdk = run('kvc', seed, { peaks: SPREAD })
      expect(starvation(sdk).low).toBe(0)
      expect(sdk.accounting.failed).toBe(0)
    }
  })

  it.todo(
    'bimodal per-session fast-path rates, a group near 0 (the prototype: 15–18 of 52 sessions below 20%) — not reproduced by v5\'s D side as its notes describe it: 0–1 of 40 sessions fall below 20%, the starved group sits at 20–50% (README, "Findings")',
  )
})

/**
 * Finding 4's conditions: a D that takes a seed's transfer first and waits for memory (Mooncake's
 * 32 s transfer timeout), legacy session slots released lazily (a reaper frees sessions idle for
 * 120 s, nothing is released to make room), capacity-blind routing, the fallback seeded unchecked
 * (no admission, pause hint or pending-seed budget). The README explains why v5's D side as its
 * notes describe it (finding 3) makes no transfer wait for memory, hence no timeout.
 */
const LAZY = 'kvc-capacity-blind:granularity=session:release=reaper'
const NO_BP = 'backpressure=off:seedAdmission=off:pendingSeedsPerD=1000'

describe('finding 4: without backpressure, transfer timeouts cascade once D workers fill (docs/design/prototype.md#idle-only-lru)', () => {
  it('timeouts start when the D workers fill and keep coming; backpressure turns them into waits; releasing idle sessions on demand makes failed turns fall (seeds 1–3; 90K and 110K tokens per worker)', {
    timeout: LONG,
  }, () => {
    const grid: [number, number][] = [
      ...SEEDS.map((s) => [s, 100_000] as [number, number]),
      [1, 90_000],
      [1, 110_000],
    ]
    for (const [seed, capacity] of grid) {
      const v5 = run(`${LAZY}:${NO_BP}`, seed, { capacity })
      const timedOut = v5.records.filter((x) => x.lastError === 'kv transfer timed out')
      expect(v5.counters.transferTimeouts).toBeGreaterThanOrEqual(100) // 378 / 257 / 318
      expect(v5.accounting.failed).toBeGreaterThan(0.1 * v5.accounting.turns) // 385 / 281 / 355
      // None before the first D worker is full (KV usage ≥ 95%)...
      const firstFullS = Math.min(
        ...v5.usage
          .filter((u) => u.role === 'decode')
          .map((u) => u.timesS[u.usage.findIndex((x) => x >= 0.95)] ?? Number.POSITIVE_INFINITY),
      )
      expect(Number.isFinite(firstFullS)).toBe(true)
      expect(timedOut.every((x) => x.endMs >= firstFullS * 1000)).toBe(true)
      // ...then a steady stream: turns that saw a timeout end in most 30-second windows after it.
      const windows = new Set(timedOut.map((x) => Math.floor(x.endMs / 30_000)))
      const span = Math.floor(v5.makespanS / 30) - Math.floor(firstFullS / 30)
      expect(windows.size).toBeGreaterThanOrEqual(0.6 * span)
      // The outcome the finding is about, failed turns: releasing idle sessions when memory runs
      // short (the same routing and session slots, with the SDK's admission) leaves none failed.
      const released = run(LAZY.replace(':release=reaper', ''), seed, { capacity })
      expect(released.accounting.failed).toBeLessThanOrEqual(0.01 * released.accounting.turns)
      expect(released.counters.transferTimeouts).toBe(0)
    }
  })

  it('backpressure alone (admission, pause hints, the pending-seed budget) removes the timeouts but not the failed turns, as the prototype predicted (seeds 1–3)', {
    timeout: LONG,
  }, () => {
    for (const seed of SEEDS) {
      const v5 = run(`${LAZY}:${NO_BP}`, seed)
      const bp = run(LAZY, seed)
      expect(bp.counters.transferTimeouts).toBeLessThanOrEqual(0.05 * v5.counters.transferTimeouts)
      expect(bp.accounting.failedByCause.transfer_failed ?? 0).toBe(0)
      // The turns wait for memory lazy release does not give back and fail all_paused instead
      // (385 → 389, 281 → 285, 355 → 287): backpressure moves the failure, it does not make room
      // (docs/design/prototype.md#idle-only-lru).
      expect(bp.accounting.failed).toBeGreaterThan(0.7 * v5.accounting.failed)
    }
  })
})
