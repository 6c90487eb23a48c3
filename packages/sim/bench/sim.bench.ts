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

describe.skipIf(!existsSync(CONV))('Mooncake conversation trace (12,031 requests), 2P6D, kvc', () => {
  const w = existsSync(CONV) ? loadMooncakeTrace(CONV) : undefined
  for (const times of [1, 2]) {
    bench(
      `replayed ${times}× (${times * 12_031} requests)`,
      () => {
        const r = runSimulation({
          workload: repeat(w!, times),
          topology: { kind: 'pd', prefill: 2, decode: 6 },
          policy: 'kvc',
          seed: 1,
        })
        const line = `conversation ×${times}: ${r.records.length} requests in ${(r.wallMs / 1000).toFixed(1)} s wall = ${Math.round(r.records.length / (r.wallMs / 1000))} simulated requests/s (${r.counters.events} events, ${r.accounting.failed} failed)`
        report.push(line)
        console.log(line)
      },
      once,
    )
  }
})

describe('kvc-sim compare on the built-in workload (4 policies × 3 seeds, 2 worker threads)', () => {
  bench(
    'compare',
    async () => {
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
      const line = `compare: ${r.runs.length} runs, ${r.policies.reduce((a, p) => a + p.turns, 0)} turns in ${((performance.now() - t0) / 1000).toFixed(1)} s wall`
      report.push(line)
      console.log(line)
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
