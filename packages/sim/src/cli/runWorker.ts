import { parentPort } from 'node:worker_threads'
import { type RunTask, executeTask } from '../protocol/experiment.js'

/** Worker-thread entry of the parallel runner: runs tasks, reports progress and results. */
if (parentPort !== null) {
  const port = parentPort
  port.on('message', (task: RunTask | null) => {
    if (task === null) {
      port.close()
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
