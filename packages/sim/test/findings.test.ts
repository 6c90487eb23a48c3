import { describe, expect, it } from 'vitest'
import { computeRunMetrics, generateAgenticWorkload, type RunResult, runSimulation } from '../src/index.js'

/**
 * The five findings of docs/design/simulation.md#findings-to-reproduce, reproduced qualitatively
 * with the research prototype's parameters (Qwen3-30B-A3B cost model, SWE-bench-like agentic
 * sessions, the router's defaults). The prototype's numbers: docs/design/prototype.md.
 */
const metrics = (r: RunResult) => computeRunMetrics(r, 98_304)

describe('finding 1: session-level eviction frees tens of thousands of tokens per eviction, block-level about a page (docs/design/prototype.md#session-level-eviction)', () => {
  it('tokens per eviction fall ≥ 10× with block-level retention; both keep the fast path', () => {
    const w = generateAgenticWorkload({ seed: 1, sessions: 16 })
    // Pre-refactor: session slots own their tails (SGLang's leaf eviction for the tree part).
    // Block level as docs/design/algorithms.md#block-level-retention specifies it: sessions live in
    // the tree, shed page by page.
    const run = (policy: string, evictGranularity: 'leaf' | 'page') =>
      metrics(
        runSimulation({
          workload: w,
          topology: { kind: 'pd', prefill: 1, decode: 3 },
          policy,
          seed: 1,
          evictGranularity,
          costModel: { capacityTokens: 150_000 },
        }),
      )
    const session = run('kvc:granularity=session', 'leaf')
    const block = run('kvc', 'page')
    expect(session.decodeEvictions).toBeGreaterThan(0)
    expect(block.decodeEvictions).toBeGreaterThan(0)
    expect(session.decodeTokensPerEviction).toBeGreaterThan(10_000)
    expect(session.decodeTokensPerEviction).toBeGreaterThanOrEqual(10 * block.decodeTokensPerEviction)
    // The router sees where a legacy session lives (it learns it from the session's successful
    // turns, as v5 did), so both granularities serve almost every turn on the fast path (the prototype
    // measured 91.6% with session-level retention).
    expect(session.fastPathRate).toBeGreaterThan(0.9)
    expect(block.fastPathRate).toBeGreaterThan(0.9)
  })
  it('reseeds fall with block-level retention: a session that lost part of its tail re-prefills only that part on its D', () => {
    // The default D (200K tokens), mild pressure: sessions outgrow their D now and then. Session
    // level frees a whole idle session to make room for a page, whose next turn must reseed
    // through a P; block level sheds the pages it needs, and the session's next turn refills
    // them on its own D (refillLostTail). Migrations reseed in both and are counted apart.
    const total = {
      session: { reseeds: 0, stayed: 0, tokens: 0 },
      block: { reseeds: 0, stayed: 0, tokens: 0 },
    }
    for (const seed of [1, 2, 3]) {
      const w = generateAgenticWorkload({ seed, sessions: 16 })
      for (const [mode, policy, evictGranularity] of [
        ['session', 'kvc:granularity=session', 'leaf'],
        ['block', 'kvc', 'page'],
      ] as const) {
        const r = runSimulation({
          workload: w,
          topology: { kind: 'pd', prefill: 1, decode: 3 },
          policy,
          seed: 1,
          evictGranularity,
        })
        const m = metrics(r)
        expect(m.failed).toBe(0)
        expect(m.fastPathRate).toBeGreaterThan(0.97)
        const stayed = r.records.filter((x) => x.path === 'seed' && x.turnIndex > 0 && !x.migrated)
        total[mode].reseeds += m.reseeds
        total[mode].stayed += stayed.length
        total[mode].tokens += stayed.reduce((a, x) => a + x.computedTokens, 0)
      }
    }
    // Seeds 1–3: 52 reseeds → 29; of the sessions' own D, 28 → 6; re-prefilled 534K → 143K tokens.
    expect(total.block.reseeds).toBeLessThan(0.7 * total.session.reseeds)
    expect(total.block.stayed * 3).toBeLessThanOrEqual(total.session.stayed)
    expect(total.block.tokens * 3).toBeLessThanOrEqual(total.session.tokens)
  })
})

describe('finding 2: overlap-pinning on a shared boilerplate prefix leaves D workers without sessions (docs/design/prototype.md#load-floor-bonus)', () => {
  it('plain overlap without the load-floor bonus pins every session to one D; the defaults spread them', () => {
    // A short shared boilerplate (64 pages), as in the prototype's E3 workload, and no capacity
    // pressure.
    const w = generateAgenticWorkload({
      seed: 1,
      sessions: 18,
      sharedPrefixTokens: 1024,
      maxTurnsPerSession: 15,
    })
    const sessionsPerD = (policy: string) => {
      const r = runSimulation({
        workload: w,
        topology: { kind: 'pd', prefill: 1, decode: 3 },
        policy,
        seed: 1,
        costModel: { capacityTokens: 2_000_000 },
      })
      const per = new Map<string, Set<number>>([
        ['d0', new Set()],
        ['d1', new Set()],
        ['d2', new Set()],
      ])
      for (const x of r.records) if (x.workerId !== undefined) per.get(x.workerId)!.add(x.session)
      return [...per.values()].map((s) => s.size)
    }
    const pinned = sessionsPerD('kvc:overlapMode=plain:loadFloorK=0')
    expect(pinned.filter((n) => n === 0).length).toBeGreaterThanOrEqual(1)
    expect(Math.max(...pinned)).toBe(18)
    const spread = sessionsPerD('kvc') // exclusive overlap + load-floor bonus K = 200
    expect(spread.every((n) => n >= 3)).toBe(true)
  })
})

/**
 * Findings 3 and 4 under the research prototype's v5 conditions
 * (docs/design/simulation.md#v5-conditions):
 * legacy session-level retention on the D workers, released lazily (a reaper releases sessions
 * idle for 120 s, nothing is released to make room), the fast path admitted by the D but the
 * fallback seeded through a P unchecked (no admission, no pause hint, no pending-seed budget),
 * Mooncake's 32 s transfer timeout, time scale 10. The workload is the built-in one at half size —
 * sessions peaking at 15–30K tokens on 100K-token D workers, the ratio of the prototype's 30–60K on
 * 200K — with a 1,024-token shared prefix so that sessions spread over the D workers (with the
 * 6,000-token default, capacity-blind routing pins every session to one D: finding 2).
 */
const v5Workload = (peakInputMin = 15_000, peakInputMax = 30_000) =>
  generateAgenticWorkload({ seed: 1, sessions: 40, sharedPrefixTokens: 1024, peakInputMin, peakInputMax })
/** `policy` on the v5 test cluster: 2P5D, 100K tokens per worker, time scale 10. */
const v5Cluster = (policy: string, workload = v5Workload()): RunResult =>
  runSimulation({
    workload,
    topology: { kind: 'pd', prefill: 2, decode: 5 },
    policy,
    seed: 1,
    timeScale: 10,
    costModel: { capacityTokens: 100_000 },
  })
const V5_D = 'granularity=session:release=reaper'
const V5_FALLBACK = 'backpressure=off:seedAdmission=off:pendingSeedsPerD=1000'
const v5Runs = new Map<string, RunResult>()
const v5Run = (policy: string): RunResult => {
  let r = v5Runs.get(policy)
  if (r === undefined) {
    r = v5Cluster(policy)
    v5Runs.set(policy, r)
  }
  return r
}

/** Per session: fast-path rate, the D that served it last, and its largest prompt. */
function sessions(r: RunResult) {
  const per = new Map<number, { turns: number; fast: number; worker: string; peak: number }>()
  for (const x of r.records) {
    let s = per.get(x.session)
    if (s === undefined) per.set(x.session, (s = { turns: 0, fast: 0, worker: '', peak: 0 }))
    s.turns++
    if (x.path === 'fast') s.fast++
    if (x.workerId !== undefined) s.worker = x.workerId
    s.peak = Math.max(s.peak, x.inputLength)
  }
  return [...per.values()].map((s) => ({ rate: s.fast / s.turns, worker: s.worker, peak: s.peak }))
}
const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length)

describe('finding 3: capacity-blind routing starves the largest sessions (docs/design/prototype.md#capacity-blind-routing)', () => {
  it('under v5 conditions the sessions pinned to the D workers it overloads starve, and capacity-aware Route serves every session', () => {
    const blind = sessions(v5Run(`kvc-capacity-blind:${V5_D}:${V5_FALLBACK}`))
    // The same cluster, the same D conditions and fallback: only Route changes (capOk key,
    // migration after τ_reject rejections, reset-on-success).
    const aware = v5Run(`kvc:${V5_D}:${V5_FALLBACK}`)
    const starved = blind.filter((s) => s.rate < 0.8)
    expect(starved.length).toBeGreaterThanOrEqual(10) // 17 of 40
    // A starved group on the D workers that capacity-blind pinning overloaded, a served group
    // elsewhere: per D, the mean fast-path rate of its sessions.
    const perD = [...new Set(blind.map((s) => s.worker))].map((d) =>
      mean(blind.filter((s) => s.worker === d).map((s) => s.rate)),
    )
    expect(Math.min(...perD)).toBeLessThan(0.65) // 0.52
    expect(Math.max(...perD)).toBeGreaterThan(0.85) // 0.95
    // Capacity-aware Route: no session starves, almost no turn fails.
    expect(Math.min(...sessions(aware).map((s) => s.rate))).toBeGreaterThanOrEqual(0.8)
    expect(aware.accounting.failed).toBeLessThan(0.01 * aware.accounting.turns)
  })
  it("with v5's two paths (seedSlot=off) the starved sessions are the largest, and their turns complete on the fallback", () => {
    // Peaks of 7.5–45K tokens (the prototype's starved and served sessions averaged 62K and 31K, so
    // their sizes spread at least 2×). v5's fallback went through the P/D router as a plain
    // request and its admission counted the session's slot only: seedSlot=off.
    const w = v5Workload(7_500, 45_000)
    const run = (policy: string) => v5Cluster(policy, w)
    const sizeRatio = (r: RunResult) => {
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
    const twoPaths = run(`kvc-capacity-blind:${V5_D}:seedSlot=off:${V5_FALLBACK}`)
    const slotSeeds = run(`kvc-capacity-blind:${V5_D}:${V5_FALLBACK}`)
    const t = sizeRatio(twoPaths)
    expect(t.low).toBeGreaterThanOrEqual(8) // 14 of 40 sessions below 50% fast path...
    expect(t.ratio).toBeGreaterThan(1.3) // ...and 1.53× larger than the rest
    expect(t.ratio).toBeGreaterThan(sizeRatio(slotSeeds).ratio + 0.2) // 1.18× when seeds fill the slot
    // Their fallbacks complete, as the prototype's did (≈ 3.5 s there): a seed lands as a plain request
    // the D can make room for, where one that fills the slot waits for a full D until it times out.
    expect(fallbackMs(twoPaths)).toBeLessThan(15_000) // 10.5 s
    expect(fallbackMs(slotSeeds)).toBeGreaterThan(2 * fallbackMs(twoPaths)) // 46 s
    expect(twoPaths.accounting.failed).toBeLessThan(0.05 * twoPaths.accounting.turns) // 3%
  })
  it.todo(
    'bimodal per-session fast-path rates, a group near 0 made of the largest sessions (the prototype: 15–18 of 52 sessions below 20%, 2× larger) — not reproduced: every session serves its first turns fast while its D has room, so the starved group lands at 20–40% (with seedSlot=off) or 20–80%, not near 0; what kept the prototype\'s starved sessions off the fast path from their first turns is not in its notes (see the README, "Findings")',
  )
})

describe('finding 4: without backpressure, transfer timeouts cascade once D workers fill (docs/design/prototype.md#idle-only-lru)', () => {
  it('under v5 conditions timeouts start when the D workers fill and keep coming; admission with pause hints and the pending-seed budget removes them', () => {
    const v5 = v5Run(`kvc-capacity-blind:${V5_D}:${V5_FALLBACK}`)
    // The same routing and D conditions with the SDK's admission on both paths, pause hints and
    // the pending-seed budget (4 per D).
    const bp = v5Run(`kvc-capacity-blind:${V5_D}`)
    const timedOut = v5.records.filter((x) => x.lastError === 'kv transfer timed out')
    expect(v5.counters.transferTimeouts).toBeGreaterThanOrEqual(100) // 378
    expect(timedOut.length).toBeGreaterThan(0)
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
    expect(windows.size).toBeGreaterThanOrEqual(0.6 * span) // 52 of 54
    // Backpressure: the D refuses seeds it cannot hold and the router waits (378 → 8). The turns
    // then wait for memory that lazy release does not give back and fail with all_paused
    // instead (375): backpressure moves the failure, as the prototype expected
    // (docs/design/prototype.md#idle-only-lru); block-level retention with on-demand release (the kvc
    // defaults) is what makes room (README, "Findings").
    expect(bp.counters.transferTimeouts).toBeLessThanOrEqual(0.05 * v5.counters.transferTimeouts)
    expect(bp.accounting.failedByCause.transfer_failed ?? 0).toBe(0)
  })
})

describe('finding 5: time scale 10 vs 1 changes the KVC-vs-DP verdict (docs/design/prototype.md#time-scale)', () => {
  it('the median latency winner flips between ts=1 and ts=10 (5 workload seeds, pooled)', () => {
    // A KV-constrained cluster (70K tokens per worker): compressing the think times 10× removes
    // the idle gaps in which the D workers drain, and that is where the verdict turns. One
    // workload seed is too close to call (the protocol's N ≥ 3): the turns of five are pooled.
    const pooled = (policy: string, timeScale: number) => {
      const e2e: number[] = []
      const ttft: number[] = []
      for (const seed of [1, 2, 3, 4, 5]) {
        const r = runSimulation({
          workload: generateAgenticWorkload({ seed, sessions: 12 }),
          topology: { kind: 'pd', prefill: 1, decode: 3 },
          policy,
          seed: 1,
          timeScale,
          costModel: { capacityTokens: 70_000 },
        })
        for (const x of r.records) {
          const ok = x.status === 'completed'
          e2e.push(ok ? x.endMs - x.arrivalMs : Number.POSITIVE_INFINITY)
          ttft.push(ok ? x.firstTokenMs - x.arrivalMs : Number.POSITIVE_INFINITY)
        }
      }
      return { e2e: median(e2e), ttft: median(ttft) }
    }
    const ratio = (timeScale: number) => {
      const k = pooled('kvc', timeScale)
      const dp = pooled('dp-cache-aware:defaults=rust', timeScale)
      return { e2e: k.e2e / dp.e2e, ttft: k.ttft / dp.ttft }
    }
    const at1 = ratio(1)
    const at10 = ratio(10)
    // KVC wins at ts=1 and loses at ts=10 (E2E p50 0.86× → 1.06× DP's).
    expect(at1.e2e).toBeLessThan(1)
    expect(at10.e2e).toBeGreaterThan(1)
    // The first token suffers most: reseeds replace the fast path (TTFT p50 0.88× → 2.9×).
    expect(at10.ttft).toBeGreaterThan(2 * at1.ttft)
    // Twenty simulations in virtual time: a minute of CPU on an idle machine, more on a busy one.
  }, 600_000)
})
