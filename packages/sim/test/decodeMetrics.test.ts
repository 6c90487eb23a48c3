import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  DEFAULT_COST_MODEL,
  DEFAULT_SLO,
  DecodeGapRecorder,
  GAP_BUCKETS,
  computeRunMetrics,
  decodeStepSeconds,
  gapBucket,
  gapBucketMs,
  gapHistogramQuantiles,
  generateAgenticWorkload,
  meetsSlo,
  runSimulation,
  sessionTasks,
  tpotOf,
} from '../src/index.js'

/**
 * The naive reference: a lockstep batch visited step by step. Every sequence keeps the list of
 * its gaps; a stall stretches the next gap of the sequences that were in the batch while it ran.
 */
class ReferenceBatch {
  readonly gaps = new Map<number, number[]>()
  /** Per sequence in the batch: the stall it has been through since its last gap. */
  readonly stalled = new Map<number, number>()
  readonly done = new Map<number, number[]>()

  join(turn: number): void {
    this.gaps.set(turn, [])
    this.stalled.set(turn, 0)
  }
  steps(k: number, stepMs: number): void {
    for (const [t, g] of this.gaps) {
      const s = this.stalled.get(t)!
      for (let i = 0; i < k; i++) g.push(i === 0 ? stepMs + s : stepMs)
      this.stalled.set(t, 0)
    }
  }
  stall(ms: number): void {
    for (const [t, s] of this.stalled) this.stalled.set(t, s + ms)
  }
  finish(turn: number): void {
    this.done.set(turn, this.gaps.get(turn)!)
    this.gaps.delete(turn)
    this.stalled.delete(turn)
  }
  drop(turn: number): void {
    this.gaps.delete(turn)
    this.stalled.delete(turn)
  }
}

type Model = { ref: ReferenceBatch; next: number }
type Real = { rec: DecodeGapRecorder }

const STEP_MS = [8, 12, 12.5, 20, 40]

class JoinCmd implements fc.Command<Model, Real> {
  check(m: Readonly<Model>) {
    return m.next < 40
  }
  run(m: Model, r: Real) {
    const t = m.next++
    m.ref.join(t)
    r.rec.join(0, t)
  }
  toString() {
    return 'join'
  }
}
class StepsCmd implements fc.Command<Model, Real> {
  constructor(
    readonly k: number,
    readonly stepMs: number,
  ) {}
  check() {
    return true
  }
  run(m: Model, r: Real) {
    const batch = m.ref.gaps.size
    m.ref.steps(batch === 0 ? 0 : this.k, this.stepMs)
    r.rec.advance(0, this.k * this.stepMs, this.stepMs, batch)
  }
  toString() {
    return `steps(${this.k}×${this.stepMs})`
  }
}
class StallCmd implements fc.Command<Model, Real> {
  constructor(readonly ms: number) {}
  check() {
    return true
  }
  run(m: Model, r: Real) {
    const batch = m.ref.gaps.size
    if (batch > 0) m.ref.stall(this.ms)
    r.rec.advance(0, this.ms, Number.POSITIVE_INFINITY, batch)
  }
  toString() {
    return `stall(${this.ms})`
  }
}
class FinishCmd implements fc.Command<Model, Real> {
  constructor(readonly pick: number) {}
  check(m: Readonly<Model>) {
    // A sequence ends at a step boundary, after at least one gap (no stall left to account for).
    return [...m.ref.gaps.entries()].some(([t, g]) => g.length > 0 && m.ref.stalled.get(t) === 0)
  }
  run(m: Model, r: Real) {
    const ready = [...m.ref.gaps.entries()].filter(([t, g]) => g.length > 0 && m.ref.stalled.get(t) === 0)
    const [t] = ready[this.pick % ready.length]!
    m.ref.finish(t)
    r.rec.finish(0, t)
  }
  toString() {
    return `finish(${this.pick})`
  }
}
class DropCmd implements fc.Command<Model, Real> {
  constructor(readonly pick: number) {}
  check(m: Readonly<Model>) {
    return m.ref.gaps.size > 0
  }
  run(m: Model, r: Real) {
    const ts = [...m.ref.gaps.keys()]
    const t = ts[this.pick % ts.length]!
    m.ref.drop(t)
    r.rec.drop(t)
  }
  toString() {
    return `drop(${this.pick})`
  }
}

function histogramOf(gaps: readonly number[]): Map<number, number> {
  const h = new Map<number, number>()
  for (const g of gaps) h.set(gapBucket(g), (h.get(gapBucket(g)) ?? 0) + 1)
  return h
}

describe('decode gap recorder (ITL without per-token work)', () => {
  it('matches a step-by-step reference batch on every finished turn (model-based)', () => {
    const commands = [
      fc.constant(new JoinCmd()),
      fc
        .tuple(fc.integer({ min: 1, max: 30 }), fc.constantFrom(...STEP_MS))
        .map(([k, s]) => new StepsCmd(k, s)),
      fc.integer({ min: 1, max: 3000 }).map((ms) => new StallCmd(ms)),
      fc.nat(10).map((p) => new FinishCmd(p)),
      fc.nat(10).map((p) => new DropCmd(p)),
    ]
    fc.assert(
      fc.property(fc.commands(commands, { maxCommands: 120 }), (cmds) => {
        const model: Model = { ref: new ReferenceBatch(), next: 0 }
        const real: Real = { rec: new DecodeGapRecorder(40) }
        fc.modelRun(() => ({ model, real }), cmds)
        const h = real.rec.histograms((t) => model.ref.done.has(t))
        for (let t = 0; t < 40; t++) {
          const got = new Map<number, number>()
          for (let k = h.offsets[t]!; k < h.offsets[t + 1]!; k++) got.set(h.buckets[k]!, h.counts[k]!)
          const want = histogramOf(model.ref.done.get(t) ?? [])
          for (const [b, c] of want) expect(got.get(b) ?? 0, `turn ${t} bucket ${b}`).toBeCloseTo(c, 4)
          for (const [b, c] of got)
            if (!want.has(b)) expect(c, `turn ${t} extra bucket ${b}`).toBeCloseTo(0, 4)
        }
      }),
      { numRuns: 300 },
    )
  })

  it('buckets are within 1.1% of the gap, and quantiles read back from a histogram', () => {
    for (const ms of [0.2, 1, 12, 12.5, 18, 250, 4000]) {
      expect(Math.abs(gapBucketMs(gapBucket(ms)) / ms - 1)).toBeLessThan(0.011)
    }
    const h = new Float64Array(GAP_BUCKETS)
    h[gapBucket(12)] = 98
    h[gapBucket(500)] = 2
    const [p50, p98, p99] = gapHistogramQuantiles(h, 100, [0.5, 0.98, 0.99])
    expect(p50).toBeCloseTo(0.012, 3)
    expect(p98).toBeCloseTo(0.012, 3)
    expect(p99).toBeCloseTo(0.5, 2)
    expect(gapHistogramQuantiles(new Float64Array(GAP_BUCKETS), 0, [0.5])[0]).toBeNaN()
  })
})

describe('TPOT, ITL, goodput and task completion in a run', () => {
  const workload = generateAgenticWorkload({ seed: 4, sessions: 6, maxTurnsPerSession: 8 })
  const colocated = runSimulation({
    workload,
    topology: { kind: 'dp', workers: 2 },
    policy: 'dp-cache-aware',
    seed: 4,
  })
  const pd = runSimulation({
    workload,
    topology: { kind: 'pd', prefill: 1, decode: 1 },
    policy: 'round-robin',
    seed: 4,
  })

  it('every completed turn has about outputLength − 1 gaps whose time adds up to its decode time', () => {
    const h = colocated.decodeGaps!
    let checked = 0
    colocated.records.forEach((r, i) => {
      const n = h.offsets[i + 1]! - h.offsets[i]!
      if (r.status !== 'completed' || r.outputLength <= 1) {
        expect(n).toBe(0)
        return
      }
      let gaps = 0
      let ms = 0
      for (let k = h.offsets[i]!; k < h.offsets[i + 1]!; k++) {
        gaps += h.counts[k]!
        ms += h.counts[k]! * gapBucketMs(h.buckets[k]!)
      }
      // Joining and leaving inside a step shifts the count by less than one gap each way.
      expect(Math.abs(gaps - (r.outputLength - 1))).toBeLessThan(2)
      const decodeMs = r.endMs - r.firstTokenMs
      expect(Math.abs(ms - decodeMs)).toBeLessThan(
        0.02 * decodeMs + 2 * gapBucketMs(h.buckets[h.offsets[i]!]!),
      )
      checked++
    })
    expect(checked).toBeGreaterThan(20)
  })

  it('decode on a D of its own runs at the step time of its batch; colocated prefills stall decode', () => {
    const m = computeRunMetrics(pd, DEFAULT_COST_MODEL.kvBytesPerToken)
    const c = computeRunMetrics(colocated, DEFAULT_COST_MODEL.kvBytesPerToken)
    const minStep = decodeStepSeconds(DEFAULT_COST_MODEL, 0)
    const maxGapS = (h = pd.decodeGaps!) => gapBucketMs(Math.max(...h.buckets)) / 1000
    // Classic P/D: the D never prefills, so every gap is one step of its (small) batch.
    expect(m.itl.p50).toBeGreaterThanOrEqual(minStep * 0.989)
    expect(maxGapS(pd.decodeGaps)).toBeLessThan(decodeStepSeconds(DEFAULT_COST_MODEL, 200_000) * 1.011)
    expect(m.tpot.p99).toBeLessThan(minStep * 2)
    // Colocated: a prompt prefilled on the worker stalls its running batch: some gaps hold a prefill.
    expect(maxGapS(colocated.decodeGaps)).toBeGreaterThan(DEFAULT_COST_MODEL.prefillFixedS + minStep)
    expect(c.itl.p99).toBeGreaterThan(m.itl.p99)
    expect(c.tpot.mean).toBeGreaterThan(m.tpot.mean)
    // The exact mean gap is at least the median gap read from the histogram (the tail is long).
    expect(c.itl.mean).toBeGreaterThan(c.itl.p50 * 0.98)
  })

  it('TPOT is (end − first token) / (output − 1); goodput counts completed turns within both SLOs', () => {
    const m = computeRunMetrics(colocated, DEFAULT_COST_MODEL.kvBytesPerToken)
    const r = colocated.records.find((x) => x.status === 'completed' && x.outputLength > 1)!
    expect(tpotOf(r)).toBeCloseTo((r.endMs - r.firstTokenMs) / 1000 / (r.outputLength - 1), 12)
    const good = colocated.records.filter((x) => meetsSlo(x, DEFAULT_SLO)).length
    expect(m.goodput).toBeCloseTo(good / colocated.records.length, 12)
    const strict = computeRunMetrics(colocated, DEFAULT_COST_MODEL.kvBytesPerToken, { ttftS: 1e-6, tpotS: 1 })
    expect(strict.goodput).toBe(0)
    const loose = computeRunMetrics(colocated, DEFAULT_COST_MODEL.kvBytesPerToken, { ttftS: 1e6, tpotS: 1e6 })
    expect(loose.goodput).toBeCloseTo(loose.completed / loose.turns, 12)
  })

  it('a failed turn is never good, and its TPOT is infinitely slow', () => {
    const failed = { ...colocated.records[0]!, status: 'failed' as const, firstTokenMs: Number.NaN }
    expect(tpotOf(failed)).toBe(Number.POSITIVE_INFINITY)
    expect(meetsSlo(failed, { ttftS: 1e9, tpotS: 1e9 })).toBe(false)
  })

  it('task completion spans a session with its gaps; served time leaves them out', () => {
    const tasks = sessionTasks(colocated.records)
    expect(tasks).toHaveLength(6)
    for (const t of tasks) {
      const recs = colocated.records.filter((r) => r.session === t.session)
      const served = recs.reduce((a, r) => a + (r.endMs - r.arrivalMs), 0) / 1000
      expect(t.servedS).toBeCloseTo(served, 9)
      expect(t.spanS).toBeCloseTo((recs.at(-1)!.endMs - recs[0]!.arrivalMs) / 1000, 9)
      // Closed loop: the span is the served time plus the think times between turns.
      const think = recs.slice(1).reduce((a, r) => a + workload.turns[r.id]!.thinkMs, 0) / 1000
      expect(t.spanS).toBeCloseTo(t.servedS + think, 6)
    }
    const m = computeRunMetrics(colocated, DEFAULT_COST_MODEL.kvBytesPerToken)
    expect(m.task.n).toBe(6)
    expect(m.task.p50).toBeGreaterThan(m.taskServed.p50)
  })
})
