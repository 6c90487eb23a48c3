/**
 * The engine's two ways of waiting: for memory (woken whenever KV may have been freed) and for
 * the latency model's time (scaled; at least a turn of the event loop).
 *
 * @internal
 * @module
 */

/** Requests waiting for KV memory. @internal */
export class MemoryWaiters {
  readonly #waiters = new Set<() => void>()

  /** Memory may have been freed: every waiter retries. */
  notify(): void {
    const ws = [...this.#waiters]
    this.#waiters.clear()
    for (const w of ws) w()
  }

  /** Resolves at the next {@link notify}; rejects with the signal's reason when it aborts. */
  wait(signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason)
        return
      }
      const done = (): void => {
        signal.removeEventListener('abort', onAbort)
        this.#waiters.delete(done)
        resolve()
      }
      const onAbort = (): void => {
        this.#waiters.delete(done)
        reject(signal.reason)
      }
      this.#waiters.add(done)
      signal.addEventListener('abort', onAbort, { once: true })
    })
  }
}

/**
 * Waits `ms × scale` of real time (a timer from 1 ms on, else one `setImmediate`); rejects with
 * the signal's reason when it aborts. @internal
 */
export function sleepScaled(ms: number, scale: number, signal: AbortSignal): Promise<void> {
  const scaled = ms * scale
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason)
      return
    }
    const onAbort = (): void => {
      if (timer !== undefined) clearTimeout(timer)
      if (imm !== undefined) clearImmediate(imm)
      reject(signal.reason)
    }
    const done = (): void => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }
    let timer: ReturnType<typeof setTimeout> | undefined
    let imm: ReturnType<typeof setImmediate> | undefined
    if (scaled >= 1) timer = setTimeout(done, scaled)
    else imm = setImmediate(done)
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

/** Throws the signal's reason once it aborted. @internal */
export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw signal.reason ?? new Error('aborted')
}
