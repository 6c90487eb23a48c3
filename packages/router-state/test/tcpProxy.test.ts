import { type Server, type Socket, connect, createServer } from 'node:net'
import { seededRandom } from '@kvc/kvc-router/testing'
import { afterEach, describe, expect, it } from 'vitest'
import { TcpProxy } from './support/tcpProxy.js'

// The delaying proxy the replica tests put between each replica and its server must never
// reorder bytes: a reordered RESP or NATS stream is a corrupt one, and the store's tests would
// then fail for the proxy's sake (or pass for the wrong reason).

const closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c()
})

/** An echo server on a free port. */
async function echoServer(): Promise<number> {
  const sockets = new Set<Socket>()
  const server: Server = createServer((s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
    s.on('error', () => {})
    s.pipe(s)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  closers.push(async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const a = server.address()
  return typeof a === 'object' && a !== null ? a.port : 0
}

describe('TcpProxy (test support)', () => {
  it('keeps every byte in order in both directions under random per-chunk delays', async () => {
    const proxy = await TcpProxy.start(await echoServer())
    closers.push(() => proxy.close())
    const rnd = seededRandom(7)
    // Delays that shrink and grow from one chunk to the next: a later chunk with a shorter
    // delay must still wait for the earlier ones.
    proxy.setDelay(() => (rnd() < 0.3 ? 0 : rnd() * 4))
    const client = connect(proxy.port, '127.0.0.1')
    closers.push(async () => {
      client.destroy()
    })
    await new Promise<void>((resolve) => client.once('connect', () => resolve()))
    const lines = Array.from({ length: 600 }, (_, i) => `${i}\n`)
    const sent = lines.join('')
    let received = ''
    const done = new Promise<void>((resolve) => {
      client.on('data', (b: Buffer) => {
        received += b.toString()
        if (received.length >= sent.length) resolve()
      })
    })
    for (let i = 0; i < lines.length; i++) {
      client.write(lines[i]!)
      // Separate chunks most of the time, so each gets its own delay.
      if (i % 3 !== 0) await new Promise((r) => setImmediate(r))
    }
    await done
    expect(received).toBe(sent)
  })
})
