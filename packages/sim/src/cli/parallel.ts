import { availableParallelism } from 'node:os'
import { Worker } from 'node:worker_threads'
import type { RunResult } from '../metrics/runResult.js'
import { SimError, type SimErrorCode } from '../errors/simError.js'
import {
  type ResampleShare,
  type ResampleShareJob,
  type RunTask,
  type Runner,
  type SummaryPrep,
  type SummaryPrepJob,
  type WorkloadSource,
  cheapToRebuild,
  inProcessRunner,
  prepareSummary,
} from '../protocol/experiment.js'

type Msg =
  | { type: 'progress'; index: number; ended: number; total: number }
  | { type: 'result'; index: number; result: RunResult }
  | { type: 'prepared'; prepared: SummaryPrep }
  | { type: 'shared'; share: ResampleShare }
  | {
      type: 'error'
      index: number
      error: { name?: string; message?: string; code?: string; value?: unknown }
    }

/**
 * A runner that spreads tasks over `jobs` worker threads (each run is single-threaded and
 * deterministic, so the results are the same as in process, in task order).
 */
export function threadRunner(jobs: number): Runner {
  return async (tasks, onProgress, onResult) => {
    const n = Math.min(jobs, tasks.length)
    if (n <= 1) return inProcessRunner(tasks, onProgress, onResult)
    const results: RunResult[] = new Array(tasks.length)
    const pending = tasks.slice()
    return new Promise<RunResult[]>((resolve, reject) => {
      const workers: Worker[] = []
      let live = n
      let failed = false
      const feed = (w: Worker, built: Set<string>) => {
        const t = takeNextTask(pending, built)
        w.postMessage(t ?? null)
      }
      for (let i = 0; i < n; i++) {
        const w = spawn()
        const built = new Set<string>()
        workers.push(w)
        w.on('message', (m: Msg) => {
          if (m.type === 'prepared' || m.type === 'shared') return
          if (m.type === 'progress') onProgress(m.index, m.ended, m.total)
          else if (m.type === 'result') {
            // The thread gets its next task first: what `onResult` does then overlaps with it.
            feed(w, built)
            if (onResult === undefined) results[m.index] = m.result
            else onResult(m.index, m.result)
          } else if (!failed) {
            failed = true
            for (const x of workers) void x.terminate()
            const e = m.error
            reject(
              e.name === 'SimError' && e.code !== undefined
                ? new SimError(e.code as SimErrorCode, e.message ?? 'error', e.value)
                : new Error(e.message ?? 'a simulation worker failed'),
            )
          }
        })
        w.on('error', (err) => {
          if (failed) return
          failed = true
          for (const x of workers) void x.terminate()
          reject(err)
        })
        w.on('exit', () => {
          live--
          if (live === 0 && !failed) resolve(results)
        })
        feed(w, built)
      }
    })
  }
}

/** What a thread builds once per run's workload and keeps for the next runs on it. */
function workloadKey(t: RunTask): string {
  const source = JSON.stringify(t.workload)
  return t.workload.kind === 'agentic' ? `${t.seed} ${source}` : source
}

/**
 * Removes and returns the task a thread should run next: the first pending one whose workload
 * the thread has built recently (its `built` keys, most recent last), else the first pending one
 * (recorded in `built`). A thread keeps the workloads of its recent runs, so this spares it generating a
 * seed's workload that the other thread generates too; the results do not depend on the order.
 */
export function takeNextTask(pending: RunTask[], built: Set<string>): RunTask | undefined {
  if (pending.length === 0) return undefined
  let at = 0
  for (let i = 0; i < pending.length; i++) {
    if (built.has(workloadKey(pending[i]!))) {
      at = i
      break
    }
  }
  const t = pending.splice(at, 1)[0]!
  const key = workloadKey(t)
  built.delete(key)
  built.add(key)
  // A thread keeps its three most recent workloads (`buildWorkload`).
  if (built.size > 3) built.delete(built.values().next().value!)
  return t
}

/** A thread running the worker entry (`runWorker`). */
function spawn(): Worker {
  const here = import.meta.url
  if (!here.endsWith('.ts')) return new Worker(new URL('./runWorker.js', here))
  // From source (tsx), a worker boots the TypeScript loader before importing the entry, and
  // resolves workspace packages to their sources.
  const api = import.meta.resolve('tsx/esm/api')
  const entry = new URL('./runWorker.ts', here).href
  const boot = `import(${JSON.stringify(api)}).then((m) => { m.register(); return import(${JSON.stringify(entry)}) })`
  return new Worker(boot, { eval: true, execArgv: [...process.execArgv, '--conditions=@kvc/source'] })
}

/**
 * Where an experiment's summary is helped while its runs go, for `runExperiment`'s `prepare` and
 * `share`; `close` lets the helping thread go once the experiment is summarized.
 */
export interface SummaryHelper {
  /** Computes {@link prepareSummary} (`runExperiment`'s `prepare`). */
  readonly prepare: (job: SummaryPrepJob) => Promise<SummaryPrep>
  /**
   * Computes a share of a policy's bootstrap on the preparing thread (`runExperiment`'s `share`);
   * only where that thread is one of its own.
   */
  readonly share?: (job: ResampleShareJob) => Promise<ResampleShare>
  readonly close: () => void
}

/**
 * Where an experiment's summary preparation ({@link prepareSummary}) runs while its runs go: on
 * this thread once the runner has handed out its first tasks (its threads run them meanwhile),
 * else, when the one run takes this thread, on a thread of its own if that thread can build the
 * workload again cheaply ({@link cheapToRebuild}); that thread then also computes half of the
 * bootstrap's resamples once the run has ended (`share`). Undefined (the summary prepares after
 * the runs) with one job (`--jobs 1`) or a workload too dear to build twice.
 */
export function summaryHelper(
  jobs: number,
  tasks: number,
  source: WorkloadSource,
): SummaryHelper | undefined {
  if (jobs <= 1) return undefined
  if (Math.min(jobs, tasks) > 1) {
    return {
      prepare: (job) =>
        new Promise((resolve, reject) => {
          setImmediate(() => {
            try {
              resolve(prepareSummary(job))
            } catch (err) {
              reject(err)
            }
          })
        }),
      close: () => {},
    }
  }
  if (!cheapToRebuild(source)) return undefined
  let w: Worker | undefined
  let closed = false
  // Replies come in the order of the requests (the thread answers one message after the other).
  const waiting: { resolve: (m: Msg) => void; reject: (err: unknown) => void }[] = []
  const failAll = (err: unknown) => {
    for (const x of waiting.splice(0)) x.reject(err)
  }
  const thread = (): Worker => {
    if (w !== undefined) return w
    const t = spawn()
    t.on('message', (m: Msg) => waiting.shift()?.resolve(m))
    t.on('error', failAll)
    t.on('exit', () => failAll(new Error('the preparing thread exited')))
    w = t
    return t
  }
  const ask = (message: unknown): Promise<Msg> =>
    closed
      ? Promise.reject(new Error('the preparing thread is closed'))
      : new Promise((resolve, reject) => {
          waiting.push({ resolve, reject })
          thread().postMessage(message)
        })
  const unexpected = (m: Msg) => new Error(m.type === 'error' ? m.error.message : 'unexpected message')
  return {
    prepare: async (job) => {
      const m = await ask({ prepare: job })
      if (m.type !== 'prepared') throw unexpected(m)
      return m.prepared
    },
    share: async (job) => {
      const m = await ask({ share: job })
      if (m.type !== 'shared') throw unexpected(m)
      return m.share
    },
    close: () => {
      if (closed) return
      closed = true
      // A share still being computed is not needed any more (the main thread took it back): the
      // thread stops, and the process does not wait for it.
      if (waiting.length > 0) {
        w?.unref()
        void w?.terminate()
      } else w?.postMessage(null)
    },
  }
}

/** Default number of parallel runs: the machine's cores. */
export function defaultJobs(): number {
  return Math.max(1, availableParallelism())
}
