import { parentPort } from 'node:worker_threads'
import { type RunTask, type SummaryPrepJob, executeTask, prepareSummary } from '../protocol/experiment.js'

/**
 * Worker-thread entry of the parallel runner: runs tasks, reports progress and results; or
 * prepares an experiment's summary (`{ prepare: job }`) while the runs go elsewhere.
 */
if (parentPort !== null) {
  const port = parentPort
  port.on('message', (task: RunTask | { prepare: SummaryPrepJob } | null) => {
    if (task === null) {
      port.close()
      return
    }
    if ('prepare' in task) {
      try {
        const prepared = prepareSummary(task.prepare)
        // The draws move to the main thread instead of being copied.
        port.postMessage(
          { type: 'prepared', prepared },
          (prepared.draws ?? []).map((d) => d.buffer as ArrayBuffer),
        )
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
