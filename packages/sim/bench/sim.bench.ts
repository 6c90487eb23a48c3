import { existsSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { bench, describe } from 'vitest'
import { threadRunner } from '../src/cli/parallel.js'
import { DEFAULT_COMPARE_POLICIES } from '../src/cli/main.js'
import { type Workload, loadMooncakeTrace, runExperiment, runSimulation, runSweep } from '../src/index.js'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const CONV = join(ROOT, '..', 'shared', 'traces', 'conversation_trace.jsonl')

/** The trace replayed `times` times back to back (later copies shifted by the span, ids kept). */
function repeat(w: Workload, times: number): Workload {
  const n = w.turns.length
  const span = w.turns[n - 1]!.arrivalMs + 3000
  const turns = Array.from({ length: n * times }, (_, i) => {
    const t = w.turns[i % n]!
    return { ...t, id: i, arrivalMs: t.arrivalMs + Math.floor(i / n) * span }
  })
  return {
    ...w,
    turns,
    promptTokens: (i) => w.promptTokens(i % n),
    outputTokens: (i) => w.outputTokens(i % n),
  }
}

const once = { iterations: 1, warmupIterations: 0, time: 0, warmupTime: 0 }
const report: string[] = []

/** Peak RSS of the process so far (monotonic), MB. */
function peakMB(): number {
  return Math.round(process.resourceUsage().maxRSS / 1024)
}

interface Timed {
  readonly wallS: number
  /** CPU seconds of the process (user + system): less sensitive to a busy machine than wall. */
  readonly cpuS: number
  readonly requests: number
  readonly events: number
  readonly failed: number
}

function timed(
  run: () => { records: readonly unknown[]; counters: { events: number }; accounting: { failed: number } },
): Timed {
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const r = run()
  const c = process.cpuUsage(c0)
  return {
    wallS: (performance.now() - t0) / 1000,
    cpuS: (c.user + c.system) / 1e6,
    requests: r.records.length,
    events: r.counters.events,
    failed: r.accounting.failed,
  }
}

function line(label: string, t: Timed, extra = ''): string {
  return `${label}: ${t.requests} requests in ${t.wallS.toFixed(2)} s wall, ${t.cpuS.toFixed(2)} s CPU = ${Math.round(t.requests / t.wallS)} simulated requests/s (${t.events} events, ${t.failed} failed), peak RSS so far ${peakMB()} MB${extra}`
}

/**
 * The conversation trace at block granularity (the default for a hash-id trace), once and replayed
 * twice as long (linear scaling: the ratio of the two should be ≈ 2), then at token granularity,
 * the path before blocks, whose results are the same: the ratio token / block is the speed-up of
 * block granularity in this run. Block runs go first, so the peak RSS after them is theirs alone.
 */
describe.skipIf(!existsSync(CONV))('Mooncake conversation trace (12,031 requests), 2P6D, kvc', () => {
  const w = existsSync(CONV) ? loadMooncakeTrace(CONV, { granularity: 'block' }) : undefined
  const wt = existsSync(CONV) ? loadMooncakeTrace(CONV, { granularity: 'token' }) : undefined
  const runs = new Map<string, Timed>()
  const simulate = (workload: Workload) =>
    runSimulation({ workload, topology: { kind: 'pd', prefill: 2, decode: 6 }, policy: 'kvc', seed: 1 })
  for (const times of [1, 2]) {
    bench(
      `block granularity, replayed ${times}× (${times * 12_031} requests)`,
      () => {
        const t = timed(() => simulate(repeat(w!, times)))
        runs.set(`block×${times}`, t)
        const one = runs.get('block×1')!
        const x = times === 1 ? '' : ` (×${(t.cpuS / one.cpuS).toFixed(2)} the CPU of one replay)`
        report.push(line(`conversation ×${times}, block`, t, x))
        console.log(report.at(-1))
      },
      once,
    )
  }
  bench(
    'token granularity (the previous path), replayed 1× (12,031 requests)',
    () => {
      const t = timed(() => simulate(wt!))
      const b = runs.get('block×1')
      const x =
        b === undefined
          ? ''
          : `; token / block: ${(t.wallS / b.wallS).toFixed(1)}× wall, ${(t.cpuS / b.cpuS).toFixed(1)}× CPU`
      report.push(line('conversation ×1, token', t, x))
      console.log(report.at(-1))
    },
    once,
  )
})

describe('kvc-sim compare on the built-in workload (4 policies × 3 seeds, 2 worker threads)', () => {
  bench(
    'compare',
    async () => {
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      const r = await runExperiment(
        {
          workload: { kind: 'agentic' },
          topology: '2P6D',
          policies: [...DEFAULT_COMPARE_POLICIES],
          seeds: [1, 2, 3],
        },
        { runner: threadRunner(2) },
      )
      const c = process.cpuUsage(c0)
      const done = `compare: ${r.runs.length} runs, ${r.policies.reduce((a, p) => a + p.turns, 0)} turns in ${((performance.now() - t0) / 1000).toFixed(1)} s wall, ${((c.user + c.system) / 1e6).toFixed(1)} s CPU (both threads), peak RSS so far ${peakMB()} MB`
      report.push(done)
      console.log(done)
    },
    once,
  )
})

/**
 * The sweep of issue #21's benchmark: 8 load points × 4 policies × 3 seeds (96 runs) on the built-in
 * workload, 2 worker threads. Minutes on two cores until the simulator gets faster, so it runs only
 * with KVC_SIM_BENCH_SWEEP=1 (the same as `kvc-sim sweep --jobs 2`).
 */
describe.skipIf(process.env.KVC_SIM_BENCH_SWEEP !== '1')(
  'kvc-sim sweep on the built-in workload (8 time scales × 4 policies × 3 seeds, 2 worker threads)',
  () => {
    bench(
      'sweep',
      async () => {
        const t0 = performance.now()
        const r = await runSweep(
          {
            workload: { kind: 'agentic' },
            topology: '2P6D',
            policies: [...DEFAULT_COMPARE_POLICIES],
            seeds: [1, 2, 3],
            axis: 'time-scale',
            values: [1, 1.5, 2, 3, 4, 6, 8, 10],
          },
          { runner: threadRunner(2) },
        )
        const line = `sweep: ${r.points.length} points × ${r.config.policies.length} policies × ${r.config.seeds.length} seeds in ${((performance.now() - t0) / 1000).toFixed(1)} s wall`
        report.push(line)
        console.log(line)
      },
      once,
    )
  },
)
