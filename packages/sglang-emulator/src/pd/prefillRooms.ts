/**
 * In-process rendezvous between emulated prefill and decode workers: a prefill emulator announces
 * each `bootstrap_room` it has prefilled; a decode emulator in the same process waits for it (the
 * stand-in for the Mooncake KV transfer).
 *
 * @internal
 * @module
 */

/** What a decode waiting for a room learns. @internal */
export interface RoomResult {
  readonly ok: boolean
  readonly tokens: number
  readonly message: string | undefined
}

interface Waiter {
  resolve: (r: RoomResult) => void
}

/** @internal */
export class PrefillRooms {
  readonly #done = new Map<string, RoomResult>()
  readonly #waiters = new Map<string, Waiter[]>()
  #closed = false

  /** The prefill finished (or failed) room `room`. */
  settle(room: string, result: RoomResult): void {
    if (this.#closed) return
    const ws = this.#waiters.get(room)
    if (ws !== undefined && ws.length > 0) {
      this.#waiters.delete(room)
      for (const w of ws) w.resolve(result)
      return
    }
    this.#done.set(room, result)
    if (this.#done.size > 100_000) {
      const first = this.#done.keys().next().value
      if (first !== undefined) this.#done.delete(first)
    }
  }

  /** Waits for room `room`; resolves `{ok: false}` on timeout, abort or close. */
  wait(room: string, timeoutMs: number, signal: AbortSignal): Promise<RoomResult> {
    const done = this.#done.get(room)
    if (done !== undefined) {
      this.#done.delete(room)
      return Promise.resolve(done)
    }
    if (this.#closed) return Promise.resolve(dead)
    return new Promise((resolve) => {
      let timer: ReturnType<typeof setTimeout> | undefined
      const finish = (r: RoomResult): void => {
        if (timer !== undefined) clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        const list = this.#waiters.get(room)
        if (list !== undefined) {
          const i = list.indexOf(w)
          if (i >= 0) list.splice(i, 1)
          if (list.length === 0) this.#waiters.delete(room)
        }
        resolve(r)
      }
      const w: Waiter = { resolve: finish }
      const onAbort = (): void => finish({ ok: false, tokens: 0, message: 'aborted' })
      timer = setTimeout(() => finish({ ok: false, tokens: 0, message: 'timeout' }), timeoutMs)
      signal.addEventListener('abort', onAbort, { once: true })
      const list = this.#waiters.get(room) ?? []
      list.push(w)
      this.#waiters.set(room, list)
    })
  }

  /** Fails every waiter (the prefill is gone). */
  close(): void {
    this.#closed = true
    for (const ws of this.#waiters.values()) for (const w of [...ws]) w.resolve(dead)
    this.#waiters.clear()
    this.#done.clear()
  }
}

const dead: RoomResult = { ok: false, tokens: 0, message: 'prefill instance is gone' }

/** Prefill emulators of this process, by `host:bootstrapPort`. @internal */
export const prefillRegistry = new Map<string, PrefillRooms>()
