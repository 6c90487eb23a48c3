import { describe, expect, it } from 'vitest'
import {
  DEFAULT_REAPER,
  formatFaults,
  generateAgenticWorkload,
  parseFaults,
  parseMooncakeTrace,
  parsePolicySpec,
  runSimulation,
  SimError,
} from '../src/index.js'

const small = () => generateAgenticWorkload({ seed: 5, sessions: 10, maxTurnsPerSession: 12 })
/** `policy` on the small workload, 1P2D. */
const runSmall = (policy: string) =>
  runSimulation({ workload: small(), topology: { kind: 'pd', prefill: 1, decode: 2 }, policy, seed: 1 })

describe('every turn is accounted for', () => {
  for (const policy of ['kvc', 'round-robin', 'sglang-cache-aware:defaults=rust']) {
    it(`${policy}: completed + failed = turns, one record each, pools balanced`, () => {
      const w = small()
      const r = runSimulation({
        workload: w,
        topology: { kind: 'pd', prefill: 1, decode: 3 },
        policy,
        seed: 1,
        costModel: { capacityTokens: 120_000 },
      })
      expect(r.records).toHaveLength(w.turns.length)
      r.records.forEach((rec, i) => {
        expect(rec.id).toBe(i)
        expect(['completed', 'failed']).toContain(rec.status)
        if (rec.status === 'failed') expect(typeof rec.cause).toBe('string')
        else {
          expect(rec.firstTokenMs).toBeGreaterThanOrEqual(rec.arrivalMs)
          expect(rec.endMs).toBeGreaterThanOrEqual(rec.firstTokenMs)
        }
      })
      expect(r.accounting.balanced).toBe(true)
      expect(r.accounting.poolsBalanced).toBe(true)
      expect(r.accounting.completed + r.accounting.failed).toBe(w.turns.length)
    })
  }

  it('dp-cache-aware runs on N×DP with N = P + D', () => {
    const r = runSimulation({
      workload: small(),
      topology: { kind: 'pd', prefill: 1, decode: 3 },
      policy: 'dp-cache-aware',
      seed: 1,
    })
    expect(r.topology).toBe('4xDP')
    expect(r.records.every((x) => x.status === 'failed' || x.path === 'direct')).toBe(true)
  })

  it('a P/D policy on a DP topology is refused', () => {
    expect(() =>
      runSimulation({ workload: small(), topology: { kind: 'dp', workers: 4 }, policy: 'kvc', seed: 1 }),
    ).toThrow(SimError)
  })
})

describe("the replayer's session concurrency (maxConcurrentSessions)", () => {
  /** Most sessions live at once: each session spans its first arrival to its last end. */
  function peakLive(records: readonly { session: number; arrivalMs: number; endMs: number }[]): number {
    const span = new Map<number, [number, number]>()
    for (const x of records) {
      const s = span.get(x.session)
      span.set(
        x.session,
        s === undefined ? [x.arrivalMs, x.endMs] : [Math.min(s[0], x.arrivalMs), Math.max(s[1], x.endMs)],
      )
    }
    const edges = [...span.values()].flatMap(([a, b]) => [[a, 1] as const, [b, -1] as const])
    edges.sort((x, y) => x[0] - y[0] || x[1] - y[1]) // an end before a start at the same instant
    let live = 0
    let peak = 0
    for (const [, d] of edges) peak = Math.max(peak, (live += d))
    return peak
  }

  it('runs at most N sessions at once, starts a waiting one when one ends, and loses no turn', () => {
    const w = generateAgenticWorkload({
      seed: 5,
      sessions: 10,
      maxTurnsPerSession: 12,
      sessionStartMeanS: 0.5,
    })
    const run = (maxConcurrentSessions?: number) =>
      runSimulation({
        workload: w,
        topology: { kind: 'pd', prefill: 1, decode: 3 },
        policy: 'kvc',
        seed: 1,
        ...(maxConcurrentSessions === undefined ? {} : { maxConcurrentSessions }),
      })
    const free = run()
    const limited = run(3)
    expect(peakLive(free.records)).toBeGreaterThan(3)
    expect(peakLive(limited.records)).toBe(3)
    expect(limited.accounting.balanced).toBe(true)
    expect(limited.records.every((x) => x.status === 'completed')).toBe(true)
    // A waiting session starts when another ends: every first turn after the third arrives at the
    // end of some session's last turn.
    const lastEnds = new Set(
      limited.records.filter((x, i, a) => a[i + 1]?.session !== x.session).map((x) => x.endMs),
    )
    const starts = limited.records.filter((x) => x.turnIndex === 0).sort((a, b) => a.arrivalMs - b.arrivalMs)
    for (const s of starts.slice(3)) expect(lastEnds.has(s.arrivalMs)).toBe(true)
    expect(limited.makespanS).toBeGreaterThan(free.makespanS)
  })

  it('refuses a bad limit, naming it', () => {
    for (const bad of [0, 2.5, -1]) {
      expect(() =>
        runSimulation({
          workload: small(),
          topology: { kind: 'pd', prefill: 1, decode: 1 },
          policy: 'kvc',
          seed: 1,
          maxConcurrentSessions: bad,
        }),
      ).toThrow(/maxConcurrentSessions must be a positive integer/)
    }
  })
})

describe('fault injection', () => {
  it('parses the schedule syntax and JSON-like specs, and refuses bad ones', () => {
    const f = parseFaults(
      'd-death:d1@120s+60s, link-flap:p0-d2@2m+10s; admit-timeout~0.05, router-pause@500ms+0.2s, lost-kv-events~0.01',
    )
    expect(f).toEqual([
      { kind: 'd-death', target: 'd1', atS: 120, forS: 60 },
      { kind: 'link-flap', target: 'p0-d2', atS: 120, forS: 10 },
      { kind: 'admit-timeout', probability: 0.05 },
      { kind: 'router-pause', atS: 0.5, forS: 0.2 },
      { kind: 'lost-kv-events', probability: 0.01 },
    ])
    expect(formatFaults(f)).toContain('d-death:d1@120s+60s')
    expect(parseFaults('none')).toEqual([])
    for (const bad of [
      'explode@1s',
      'd-death',
      'd-death@1s~0.5',
      'admit-timeout~2',
      'link-flap@3s',
      'd-death@soon',
    ]) {
      expect(() => parseFaults(bad), bad).toThrow(SimError)
    }
  })

  it('with every fault kind at once, every turn still ends completed or failed with a cause', () => {
    const w = generateAgenticWorkload({ seed: 9, sessions: 12, maxTurnsPerSession: 15 })
    const faults = parseFaults(
      'd-death:d0@20s+15s, link-flap:p0-d1@10s+20s, admit-timeout~0.1, router-pause@30s+2s, lost-kv-events~0.05, d-death~0.01+5s, router-pause~0.02, p-death~0.01+5s',
    )
    const r = runSimulation({
      workload: w,
      topology: { kind: 'pd', prefill: 2, decode: 3 },
      policy: 'kvc',
      seed: 3,
      faults,
      costModel: { capacityTokens: 150_000 },
    })
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
    expect(r.counters.workerDeaths).toBeGreaterThanOrEqual(1)
    expect(r.counters.admissionTimeouts).toBeGreaterThan(0)
    expect(r.counters.kvEventsLost).toBeGreaterThan(0)
    expect(r.counters.routerPauses).toBeGreaterThan(0)
    for (const rec of r.records) {
      expect(rec.status === 'completed' || (rec.status === 'failed' && rec.cause !== undefined)).toBe(true)
    }
    // The run recovers: most turns still complete.
    expect(r.accounting.completed / r.records.length).toBeGreaterThan(0.5)
  })

  it('a timed D death fails what it holds and the D comes back empty', () => {
    const w = generateAgenticWorkload({ seed: 2, sessions: 8, maxTurnsPerSession: 20 })
    const r = runSimulation({
      workload: w,
      topology: { kind: 'pd', prefill: 1, decode: 2 },
      policy: 'kvc',
      seed: 1,
      faults: parseFaults('d-death:d0@15s+10s'),
    })
    expect(r.counters.workerDeaths).toBe(1)
    expect(r.accounting.balanced).toBe(true)
    const d0 = r.usage.find((u) => u.workerId === 'd0')!
    const during = d0.timesS.findIndex((t) => t > 16 && t < 24)
    expect(d0.usage[during]).toBe(0)
  })

  it('a P death fails its seeds on the P side: they go through the other P to the same D', () => {
    // The first session's first turn seeds through p0 from t = 0 (τ_append 1,024 makes first
    // turns seed); p0 dies 100 ms later, in the middle of that prefill.
    const w = generateAgenticWorkload({ seed: 2, sessions: 8, maxTurnsPerSession: 4 })
    const run = (faults: string) =>
      runSimulation({
        workload: w,
        topology: { kind: 'pd', prefill: 2, decode: 2 },
        policy: 'kvc:tauAppend=1024',
        seed: 1,
        faults: parseFaults(faults),
      })
    const calm = run('none')
    const r = run('p-death:p0@100ms+20s')
    expect(r.counters.workerDeaths).toBe(1)
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
    const hit = r.records.filter((x) => x.lastError === 'prefill worker died')
    expect(hit.length).toBeGreaterThan(0)
    for (const x of hit) {
      // Retried through p1 (p0 is down) on the D it was routed to without the fault: a P's
      // failure does not move the session.
      expect(x).toMatchObject({ status: 'completed', prefillId: 'p1', migrated: false })
      expect(x.workerId).toBe(calm.records[x.id]!.workerId)
    }
    expect(r.accounting.failed).toBe(0)
  })

  it('refuses faults that name workers the topology does not have', () => {
    const pd = { kind: 'pd', prefill: 1, decode: 2 } as const
    for (const [topology, policy, faults, error] of [
      [pd, 'kvc', 'd-death:d7@1s', /no such D worker/],
      [pd, 'kvc', 'p-death:d0@1s', /no such P worker/],
      [{ kind: 'dp', workers: 2 } as const, 'dp-cache-aware', 'p-death~0.1', /p-death needs P workers/],
    ] as const) {
      expect(() =>
        runSimulation({ workload: small(), topology, policy, seed: 1, faults: parseFaults(faults) }),
      ).toThrow(error)
    }
  })
})

describe('D→P sync (experimental, sync=on)', () => {
  it('runs the real SyncSource/SyncSink between every D and P, and every turn and pool still balance', () => {
    const w = generateAgenticWorkload({ seed: 4, sessions: 4, maxTurnsPerSession: 6 })
    const r = runSimulation({
      workload: w,
      topology: { kind: 'pd', prefill: 1, decode: 2 },
      policy: 'kvc:sync=on:syncBeta=256',
      seed: 1,
      costModel: { capacityTokens: 400_000 },
    })
    expect(r.accounting.balanced).toBe(true)
    expect(r.accounting.poolsBalanced).toBe(true)
    expect(r.counters.syncIngestedTokens).toBeGreaterThan(0)
  })
  it('sends what P keeps, no more, and cuts what reseeds re-prefill', () => {
    // 16 sessions (≈ 290K tokens of history at the end) on a 200K-token P: each D's source plans
    // only its share of P's room, backs off when P says no-space, and P keeps every D's numbering
    // apart. Before that, P ingested 20× what it could keep and the wire carried 12× more again.
    const w = generateAgenticWorkload({ seed: 1, sessions: 16 })
    const run = (policy: string) =>
      runSimulation({ workload: w, topology: { kind: 'pd', prefill: 1, decode: 3 }, policy, seed: 1 })
    const reseedPrefill = (r: ReturnType<typeof run>) =>
      r.records.filter((x) => x.path === 'seed' && x.turnIndex > 0).reduce((a, x) => a + x.computedTokens, 0)
    const off = run('kvc')
    const on = run('kvc:sync=on')
    const kvb = 98_304 // the default cost model's KV bytes per token
    expect(on.counters.syncIngestedTokens).toBeGreaterThan(0)
    expect(on.counters.syncBytes).toBeLessThanOrEqual(1.1 * on.counters.syncIngestedTokens * kvb)
    expect(on.counters.syncIngestedTokens).toBeLessThan(2 * 290_000)
    expect(reseedPrefill(on)).toBeLessThan(0.85 * reseedPrefill(off)) // 143K against 193K
    expect(on.accounting.failed).toBe(0)
  })
  it('is refused for policies without the kvc fast path', () => {
    expect(() => runSmall('round-robin:sync=on')).toThrow(/sync=on needs the kvc fast path/)
  })
})

describe('lazy session release (release=reaper) and the v5 fallback switches', () => {
  it('parses release, idleTtlS, reaperIntervalS, seedAdmission and seedSlot, and refuses bad values', () => {
    expect(parsePolicySpec('kvc:granularity=session:release=reaper').release).toEqual({
      mode: 'reaper',
      idleTtlS: DEFAULT_REAPER.idleTtlS,
      intervalS: DEFAULT_REAPER.intervalS,
    })
    expect(parsePolicySpec('kvc:release=reaper:idleTtlS=30:reaperIntervalS=2').release).toEqual({
      mode: 'reaper',
      idleTtlS: 30,
      intervalS: 2,
    })
    expect(parsePolicySpec('kvc').release).toBeUndefined()
    expect(parsePolicySpec('kvc:release=pressure').release).toBeUndefined()
    expect(parsePolicySpec('kvc:seedAdmission=off').seedAdmission).toBe(false)
    expect(parsePolicySpec('kvc').seedAdmission).toBeUndefined()
    expect(parsePolicySpec('kvc:seedSlot=off').seedSlot).toBe(false)
    expect(parsePolicySpec('kvc:seedSlot=on').seedSlot).toBeUndefined()
    expect(() => parsePolicySpec('kvc:release=never')).toThrow(/release must be pressure or reaper/)
    expect(() => parsePolicySpec('kvc:release=reaper:idleTtlS=-1')).toThrow(/idleTtlS must be/)
    expect(() => parsePolicySpec('kvc:release=reaper:reaperIntervalS=0')).toThrow(/reaperIntervalS must be/)
    expect(() => parsePolicySpec('kvc:idleTtlS=10')).toThrow(/need release=reaper/)
    expect(() => parsePolicySpec('kvc:seedAdmission=maybe')).toThrow(/seedAdmission must be on or off/)
    expect(() => parsePolicySpec('kvc:seedSlot=2')).toThrow(/seedSlot must be on or off/)
  })
  for (const policy of [
    'kvc:granularity=session:release=reaper:idleTtlS=5',
    'kvc:release=reaper:idleTtlS=5',
    'kvc-capacity-blind:granularity=session:release=reaper:idleTtlS=5:backpressure=off:seedAdmission=off:pendingSeedsPerD=1000',
    'kvc-capacity-blind:granularity=session:release=reaper:idleTtlS=5:seedSlot=off:backpressure=off:seedAdmission=off:pendingSeedsPerD=1000',
  ]) {
    it(`${policy}: every turn ends, pools balance, the reaper releases idle sessions`, () => {
      const w = small()
      const r = runSimulation({
        workload: w,
        topology: { kind: 'pd', prefill: 1, decode: 2 },
        policy,
        seed: 1,
        timeScale: 10,
        costModel: { capacityTokens: 40_000 },
      })
      expect(r.accounting.balanced).toBe(true)
      expect(r.accounting.poolsBalanced).toBe(true)
      expect(r.accounting.completed + r.accounting.failed).toBe(w.turns.length)
      expect(r.counters.sessionsReaped).toBeGreaterThan(0)
    })
  }
  it('a reaper-mode D never releases a session to make room: only the sweep (and admission, past the TTL) do', () => {
    const run = (policy: string) =>
      runSimulation({
        workload: small(),
        topology: { kind: 'pd', prefill: 1, decode: 2 },
        policy,
        seed: 1,
        timeScale: 10,
        costModel: { capacityTokens: 40_000 },
      })
    // Under pressure release, admission hands idle sessions' memory to the request at once; with a
    // TTL longer than the run, the lazy D holds every session: none is released by the sweep and
    // admission finds nothing releasable.
    expect(run('kvc:granularity=session').counters.admissionReleases).toBeGreaterThan(0)
    const lazy = run('kvc:granularity=session:release=reaper:idleTtlS=100000')
    expect(lazy.counters.sessionsReaped).toBe(0)
    expect(lazy.counters.admissionReleases).toBe(0)
  })
  it('is refused for policies without the kvc fast path', () => {
    expect(() => runSmall('round-robin:release=reaper')).toThrow(/release=reaper needs the kvc fast path/)
    expect(() => runSmall('round-robin:seedSlot=off')).toThrow(/seedSlot=off needs the kvc fast path/)
  })
})

describe('pending-seed slots (kvc-router SeedWaitQueue)', () => {
  it('a seed that ends wakes the turn first in line for its slot, which walks at once', () => {
    // Four 20K-token requests at t = 0 on 1P1D, one seed at a time on the D, and backoffs of up to
    // 5 s: three turns wait in line; each ending seed wakes the next one instead of leaving the
    // slot idle until its backoff runs out.
    const lines = [0, 1, 2, 3].map((i) =>
      JSON.stringify({
        timestamp: 0,
        input_length: 20_000,
        output_length: 20,
        hash_ids: Array.from({ length: 40 }, (_, k) => 1_000 * (i + 1) + k),
      }),
    )
    const r = runSimulation({
      workload: parseMooncakeTrace(lines.join('\n'), 'four.jsonl'),
      topology: { kind: 'pd', prefill: 1, decode: 1 },
      policy: 'kvc:pendingSeedsPerD=1:backoffBaseMs=5000:backoffCapMs=5000',
      seed: 1,
    })
    expect(r.accounting.completed).toBe(4)
    expect(r.counters.seedWakes).toBe(3)
    // Each woken turn started its seed when the one before it ended: its first token comes one
    // seed's time after the previous turn's end, not a backoff later.
    const done = [...r.records].sort((a, b) => a.endMs - b.endMs)
    for (let i = 1; i < done.length; i++) {
      const gap = done[i]!.firstTokenMs - done[i - 1]!.endMs
      expect(gap).toBeLessThan(done[0]!.firstTokenMs + 50)
    }
  })
})
