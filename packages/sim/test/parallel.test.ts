import { describe, expect, it } from 'vitest'
import { takeNextTask, threadRunner } from '../src/cli/parallel.js'
import {
  type RunResult,
  type RunTask,
  SimError,
  inProcessRunner,
  runSweep,
  toStableJson,
} from '../src/index.js'

const task = (index: number, over: Partial<RunTask> = {}): RunTask => ({
  index,
  policy: index % 2 === 0 ? 'kvc' : 'round-robin',
  seed: 1 + Math.floor(index / 2),
  workload: { kind: 'agentic', options: { sessions: 3, maxTurnsPerSession: 3 } },
  topology: '1P2D',
  timeScale: 1,
  costModel: {},
  faults: [],
  ...over,
})

// Each worker thread boots the TypeScript loader first: seconds each on a busy machine.
describe('worker-thread runner', { timeout: 180_000 }, () => {
  it('gives the results of the in-process runner, in task order, with progress from every task', async () => {
    const tasks = [0, 1, 2, 3].map((i) => task(i))
    const seen = new Map<number, number>()
    const threads = await threadRunner(2)(tasks, (t, ended, total) => {
      expect(ended).toBeLessThanOrEqual(total)
      seen.set(t, ended)
    })
    const here = await inProcessRunner(tasks, () => {})
    expect(threads.map((r) => [r.policy, r.seed])).toEqual(here.map((r) => [r.policy, r.seed]))
    // Everything but the wall-clock time and memory of each run.
    const same = (rs: readonly RunResult[]) =>
      toStableJson(rs.map((r) => ({ ...r, wallMs: 0, peakRssMB: 0 })))
    expect(same(threads)).toBe(same(here))
    expect([...seen.keys()].sort()).toEqual([0, 1, 2, 3])
    for (const [t, ended] of seen) expect(ended, `task ${t}`).toBe(here[t]!.records.length)
  })

  it('a sweep through threads (results handed over as tasks end) equals one in process', async () => {
    const config = {
      workload: { kind: 'agentic' as const, options: { sessions: 3, maxTurnsPerSession: 3 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin'],
      seeds: [1, 2],
      bootstrapResamples: 10,
    }
    const sweepConfig = { ...config, axis: 'time-scale' as const, values: [1, 4] }
    const a = await runSweep(sweepConfig, { runner: threadRunner(2) })
    const b = await runSweep(sweepConfig)
    expect(toStableJson(a)).toBe(toStableJson(b))
  })

  it('a bad task rejects with the typed error, its code and its value', async () => {
    const err = await threadRunner(2)([task(0), task(1, { topology: '2X3Y' })], () => {}).catch((e) => e)
    expect(err).toBeInstanceOf(SimError)
    expect(err.code).toBe('INVALID_OPTION')
    expect(err.message).toMatch(/topology "2X3Y" not understood/)
    expect(err.value).toBe('2X3Y')
  })
})

describe('the worker-thread runner hands out tasks', () => {
  it('prefers a task whose workload the thread built recently, and hands out every task once', () => {
    // Policy-major order, as an experiment plans it: 3 policies × 3 seeds.
    const tasks = [0, 1, 2, 3, 4, 5, 6, 7, 8].map((i) => task(i, { seed: 1 + (i % 3) }))
    const pending = tasks.slice()
    const a = new Set<string>()
    const b = new Set<string>()
    const order: [string, number][] = []
    for (;;) {
      const x = takeNextTask(pending, a)
      if (x !== undefined) order.push(['a', x.index])
      const y = takeNextTask(pending, b)
      if (y !== undefined) order.push(['b', y.index])
      if (x === undefined && y === undefined) break
    }
    expect(order.map(([, i]) => i).sort((p, q) => p - q)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8])
    const seedsOf = (w: string) => new Set(order.filter(([t]) => t === w).map(([, i]) => tasks[i]!.seed))
    // Each seed's workload is built by one thread only, except one seed shared at the end.
    expect(seedsOf('a').size + seedsOf('b').size).toBe(4)
    expect(order.slice(0, 4)).toEqual([
      ['a', 0],
      ['b', 1],
      ['a', 3],
      ['b', 4],
    ])
  })

  it('keys a trace by its source only, and forgets all but the three most recent workloads', () => {
    const trace = { kind: 'trace' as const, path: 'x.jsonl' }
    const built = new Set<string>()
    const pending = [
      task(0, { seed: 1, workload: trace }),
      task(1, { seed: 2 }),
      task(2, { seed: 2, workload: trace }),
    ]
    expect(takeNextTask(pending, built)!.index).toBe(0)
    expect(takeNextTask(pending, built)!.index).toBe(2)
    for (const seed of [5, 6, 7]) takeNextTask([task(9, { seed })], built)
    expect(built.size).toBe(3)
    expect(takeNextTask(pending, built)!.index).toBe(1)
    expect(takeNextTask(pending, built)).toBeUndefined()
  })
})
