import { parentPort } from 'node:worker_threads'
import {
  type ResampleShare,
  type ResampleShareJob,
  type RunTask,
  type SummaryPrepJob,
  computeResampleShare,
  executeTask,
  prepareSummary,
} from '../protocol/experiment.js'

/**
 * Worker-thread entry of the parallel runner: runs tasks, reports progress and results; or
 * prepares an experiment's summary (`{ prepare: job }`) while the runs go elsewhere, then computes
 * a share of its bootstrap (`{ share: job }`) once they have ended.
 */
if (parentPort !== null) {
  const port = parentPort
  /**
   * The first half of the bootstrap draws this thread prepared (a copy: the prepared ones move to
   * the main thread); a share asking for more draws them again.
   */
  let kept: { job: SummaryPrepJob; draws: readonly Int32Array[] } | undefined
  const drawsFor = (job: ResampleShareJob): readonly Int32Array[] | undefined =>
    kept !== undefined &&
    kept.job.bootSeed === job.bootSeed &&
    kept.job.resamples === job.resamples &&
    kept.job.clustersPerSeed?.join(',') === job.layout.clustersPerSeed.join(',')
      ? kept.draws
      : undefined
  port.on('message', (task: RunTask | { prepare: SummaryPrepJob } | { share: ResampleShareJob } | null) => {
    if (task === null) {
      port.close()
      return
    }
    if ('prepare' in task) {
      try {
        const prepared = prepareSummary(task.prepare)
        if (prepared.draws !== undefined) {
          // The share is the first half of the resamples (`SummaryBuilder`): only those are kept.
          const half = prepared.draws.slice(0, task.prepare.resamples >> 1)
          kept = { job: task.prepare, draws: half.map((d) => d.slice()) }
        }
        // The draws move to the main thread instead of being copied.
        port.postMessage(
          { type: 'prepared', prepared },
          (prepared.draws ?? []).map((d) => d.buffer as ArrayBuffer),
        )
        // The number formatting's locale data loads once per process, on the first `toLocaleString`
        // (≈ 15-50 ms): here, while the run goes on the main thread, instead of in the main
        // thread's first progress line or verdict after the run.
        ;(0).toLocaleString('en')
      } catch (err) {
        port.postMessage({ type: 'error', index: -1, error: { message: (err as Error).message } })
      }
      return
    }
    if ('share' in task) {
      try {
        const share: ResampleShare = computeResampleShare(task.share, drawsFor(task.share))
        port.postMessage({ type: 'shared', share }, [
          ...share.metrics.map((x) => x.buffer as ArrayBuffer),
          ...share.strata.flatMap((s) => s.map((x) => x.buffer as ArrayBuffer)),
        ])
      } catch (err) {
        port.postMessage({ type: 'error', index: -1, error: { message: (err as Error).message } })
      }
      return
    }
    try {
      const result = executeTask(task, (ended, total) =>
        port.postMessage({ type: 'progress', index: task.index, ended, total }),
      )
      port.postMessage({ type: 'result', index: task.index, result })
    } catch (err) {
      const e = err as { name?: string; message?: string; code?: string; value?: unknown }
      const error = { name: e.name, message: e.message, code: e.code }
      try {
        // The offending value travels with the error when it can be copied to the main thread.
        port.postMessage({ type: 'error', index: task.index, error: { ...error, value: e.value } })
      } catch {
        port.postMessage({ type: 'error', index: task.index, error })
      }
    }
  })
}
