import { type Server, type Socket, createServer, connect } from 'node:net'

/**
 * A loopback TCP proxy in front of a server, one per replica: it can add a random delay to every
 * chunk (order kept per direction), cut every connection and refuse new ones until `restore`, or
 * be closed for good (a replica killed without cleanup).
 */
export class TcpProxy {
  readonly #server: Server
  readonly #target: number
  readonly #sockets = new Set<Socket>()
  #cut = false
  #delay: () => number = () => 0
  port = 0

  private constructor(target: number) {
    this.#target = target
    this.#server = createServer((client) => this.#accept(client))
  }

  static async start(targetPort: number): Promise<TcpProxy> {
    const p = new TcpProxy(targetPort)
    await new Promise<void>((resolve) => p.#server.listen(0, '127.0.0.1', () => resolve()))
    const a = p.#server.address()
    p.port = typeof a === 'object' && a !== null ? a.port : 0
    return p
  }

  /** Every chunk waits `delay()` ms (in order). */
  setDelay(delay: () => number): void {
    this.#delay = delay
  }

  /** Drops every connection now and refuses new ones until `restore`. */
  cut(): void {
    this.#cut = true
    for (const s of this.#sockets) s.destroy()
    this.#sockets.clear()
  }

  restore(): void {
    this.#cut = false
  }

  async close(): Promise<void> {
    this.cut()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
  }

  #accept(client: Socket): void {
    if (this.#cut) {
      client.destroy()
      return
    }
    const upstream = connect(this.#target, '127.0.0.1')
    this.#sockets.add(client)
    this.#sockets.add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      this.#sockets.delete(client)
      this.#sockets.delete(upstream)
    }
    client.on('error', drop)
    upstream.on('error', drop)
    client.on('close', drop)
    upstream.on('close', drop)
    this.#pipe(client, upstream)
    this.#pipe(upstream, client)
  }

  /**
   * Forwards `from`'s chunks to `to`, each after its delay, strictly in arrival order: one queue
   * and one timer per direction. (Timers of different lengths, one per chunk, could fire out of
   * order within a millisecond, and a reordered byte stream is a corrupt one.)
   */
  #pipe(from: Socket, to: Socket): void {
    const queue: { at: number; chunk: Buffer }[] = []
    let timer: NodeJS.Timeout | undefined
    const drain = () => {
      timer = undefined
      while (queue.length > 0 && queue[0]!.at <= Date.now()) {
        const { chunk } = queue.shift()!
        if (!to.destroyed) to.write(chunk)
      }
      if (queue.length > 0) timer = setTimeout(drain, queue[0]!.at - Date.now())
    }
    from.on('data', (chunk: Buffer) => {
      const d = this.#delay()
      if (d <= 0 && queue.length === 0) {
        if (!to.destroyed) to.write(chunk)
        return
      }
      const last = queue.length > 0 ? queue[queue.length - 1]!.at : 0
      queue.push({ at: Math.max(Date.now() + d, last), chunk })
      if (timer === undefined) timer = setTimeout(drain, queue[0]!.at - Date.now())
    })
  }
}
