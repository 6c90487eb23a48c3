/**
 * Fault injection: HTTP answers replaced or delayed per path, KV-event batches kept off the live
 * socket, and the health endpoints' verdict.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { sendJson } from '@kvc/worker-bindings'
import { errorResponse } from '../sglang/errors.js'

/**
 * One injected HTTP fault (see {@link EmulatorFaults.inject}).
 *
 * @example
 * ```ts
 * import { createSglangEmulator, type EmulatorFault } from '@kvc/sglang-emulator'
 * const emu = await createSglangEmulator({ timing: { scale: 0 } })
 * const fault: EmulatorFault = { path: '/generate', status: 429, retryAfter: '1', times: 2 }
 * emu.faults.inject(fault)
 * await emu.close()
 * ```
 */
export interface EmulatorFault {
  /** Path it applies to (exact match, e.g. `/get_load`). */
  readonly path: string
  /** Answer with this status instead of serving the request (omit: serve it, after `delayMs`). */
  readonly status?: number
  /** Wait this long (real ms) first. */
  readonly delayMs?: number
  /** How many requests it applies to (default 1). */
  readonly times?: number
  /** `retry-after` header value to send with `status`. */
  readonly retryAfter?: string
  /** Body to send with `status` (default an SGLang-style JSON error). */
  readonly body?: string
}

/**
 * Fault injection for tests and demos.
 *
 * @example
 * ```ts
 * import { createSglangEmulator } from '@kvc/sglang-emulator'
 * const emu = await createSglangEmulator({ timing: { scale: 0 } })
 * emu.faults.setHealthy(false) // /health answers 503
 * emu.faults.clear()
 * await emu.close()
 * ```
 */
export interface EmulatorFaults {
  /** Makes the next `times` requests to `path` fail or stall. */
  inject(fault: EmulatorFault): void
  /** The next `count` KV-event batches are buffered for replay but not sent live (a sequence gap). */
  dropKvEvents(count: number): void
  /** `/health` and `/health_generate` answer 503 while unhealthy. */
  setHealthy(healthy: boolean): void
  /**
   * The next `count` KV transfers this prefill worker serves deliver only `fraction` of the
   * prompt's pages: the decode worker refuses them (a `KVTransferError`), as it would a transfer
   * cut short, and frees what it had allocated.
   */
  partialTransfers(count: number, fraction?: number): void
  /** Removes every pending fault. */
  clear(): void
}

/** The faults pending on one emulator. @internal */
export class FaultInjector implements EmulatorFaults {
  readonly #list: (EmulatorFault & { remaining: number })[] = []
  #dropKv = 0
  #healthy = true
  #partial: number[] = []

  inject(fault: EmulatorFault): void {
    this.#list.push({ ...fault, remaining: fault.times ?? 1 })
  }

  dropKvEvents(count: number): void {
    this.#dropKv += count
  }

  setHealthy(healthy: boolean): void {
    this.#healthy = healthy
  }

  partialTransfers(count: number, fraction = 0.5): void {
    if (!(fraction >= 0 && fraction < 1)) throw new RangeError(`fraction must be in [0, 1), got ${fraction}`)
    for (let i = 0; i < count; i++) this.#partial.push(fraction)
  }

  clear(): void {
    this.#list.length = 0
    this.#dropKv = 0
    this.#healthy = true
    this.#partial.length = 0
  }

  /** The fraction of its pages the KV transfer being served delivers (1: all; uses up one fault). */
  takeTransferFraction(): number {
    return this.#partial.shift() ?? 1
  }

  get healthy(): boolean {
    return this.#healthy
  }

  /** Whether the KV-event batch being published goes to the replay buffer only (uses up one drop). */
  takeKvDrop(): boolean {
    if (this.#dropKv <= 0) return false
    this.#dropKv--
    return true
  }

  /**
   * Applies the next fault for `path`, if any: waits its delay, then answers its status. True when
   * the request was answered (or its client left during the delay): the server must not serve it.
   */
  async apply(path: string, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
    const fault = this.#take(path)
    if (fault === undefined) return false
    if (fault.delayMs) await realDelay(fault.delayMs, res)
    if (fault.status !== undefined) {
      req.resume()
      const headers: Record<string, string> = { 'content-type': 'application/json' }
      if (fault.retryAfter !== undefined) headers['retry-after'] = fault.retryAfter
      sendJson(
        res,
        fault.status,
        fault.body ?? errorResponse(fault.status, `injected fault on ${path}`),
        headers,
      )
      return true
    }
    return res.destroyed
  }

  #take(path: string): (EmulatorFault & { remaining: number }) | undefined {
    const i = this.#list.findIndex((f) => f.path === path && f.remaining > 0)
    if (i < 0) return undefined
    const f = this.#list[i]!
    f.remaining--
    if (f.remaining <= 0) this.#list.splice(i, 1)
    return f
  }
}

/** Waits `ms` of real time, or until the client goes away. */
function realDelay(ms: number, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms)
    function done(): void {
      clearTimeout(timer)
      res.off('close', done)
      resolve()
    }
    res.once('close', done)
  })
}
