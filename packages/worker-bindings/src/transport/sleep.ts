import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * Waits `ms` milliseconds; rejects with `ABORTED` as soon as `signal` fires. The timer and the
 * abort listener are always removed, so nothing leaks.
 *
 * @internal
 */
export function abortableSleep(
  ms: number,
  signal: AbortSignal | undefined,
  endpoint?: string,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortedError(signal, endpoint))
      return
    }
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(abortedError(signal!, endpoint))
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/** @internal */
export function abortedError(signal: AbortSignal, endpoint?: string): WorkerBindingsError {
  return new WorkerBindingsError('ABORTED', 'the call was aborted by its AbortSignal', {
    cause: signal.reason,
    endpoint,
  })
}
