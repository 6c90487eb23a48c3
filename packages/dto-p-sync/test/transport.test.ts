import { describe, expect, it } from 'vitest'
import {
  type Delivery,
  DtoPSyncError,
  InMemoryNetwork,
  type TransferStatus,
  transferTimeMs,
} from '../src/index.js'
import { seededRandom } from '../src/testing/index.js'

function record<M>(net: InMemoryNetwork, model: Parameters<InMemoryNetwork['link']>[0]) {
  const link = net.link<M>(model as never)
  const log: (Delivery<M> | TransferStatus<M>)[] = []
  link.connect({ deliver: (d) => log.push(d), status: (s) => log.push(s) })
  return { link, log }
}

describe('InMemoryNetwork', () => {
  it('models bandwidth and latency: transfers queue FIFO on the link', () => {
    const net = new InMemoryNetwork()
    const { link, log } = record<string>(net, { bytesPerSecond: 1000, latencyMs: 5 })
    link.send('a', 100) // on the wire 0..100 ms
    link.send('b', 50) // queued behind a: 100..150 ms
    expect(link.backlogBytes()).toBe(150) // a's 100 bytes and b's 50 are still to serialise
    expect(link.busyUntil()).toBe(150)
    expect(net.nextEventAt()).toBe(5)
    net.advanceTo(1000)
    expect(
      log.map((e) =>
        'phase' in e ? `${e.phase} ${e.message} ${e.at}` : `status ${e.message} ${e.ok} ${e.at}`,
      ),
    ).toEqual([
      'begin a 5',
      'end a 105',
      'status a true 105',
      'begin b 105',
      'end b 155',
      'status b true 155',
    ])
    expect(net.now()).toBe(1000)
    expect(link.backlogBytes()).toBe(0)
    expect(transferTimeMs(100, { bytesPerSecond: 1000, latencyMs: 5 })).toBe(105)
  })

  it('advances only when told, and never backwards', () => {
    const net = new InMemoryNetwork({ startTime: 10 })
    const { link, log } = record<string>(net, { bytesPerSecond: 1e3 })
    link.send('x', 10)
    expect(net.pendingEvents()).toBe(3)
    expect(net.advanceTo(10)).toBe(1) // begin at 10 (no latency)
    expect(log).toHaveLength(1)
    expect(net.advanceBy(10)).toBe(2)
    expect(() => net.advanceTo(5)).toThrowError(DtoPSyncError)
    expect(net.runUntilIdle()).toBe(0)
  })

  it('reorders with jitter, loses, breaks off, hangs and duplicates, reproducibly', () => {
    const run = () => {
      const net = new InMemoryNetwork({ random: seededRandom(7) })
      const { link, log } = record<number>(net, {
        bytesPerSecond: 1e6,
        latencyMs: 1,
        jitterMs: 20,
        lossRate: 0.1,
        partialRate: 0.1,
        hangRate: 0.1,
        duplicateRate: 0.2,
        timeoutMs: 100,
        units: () => 8,
      })
      for (let i = 0; i < 200; i++) link.send(i, 100)
      net.runUntilIdle()
      return { log, stats: link.stats() }
    }
    const a = run()
    const b = run()
    expect(a.log).toEqual(b.log)
    const s = a.stats
    expect(s.sent).toBe(200)
    expect(s.lost + s.partial + s.hung + s.delivered + s.timedOut).toBe(200)
    for (const k of ['lost', 'partial', 'hung', 'duplicated'] as const) expect(s[k]).toBeGreaterThan(0)
    const ends = a.log.filter(
      (e): e is Extract<Delivery<number>, { phase: 'end' }> => 'phase' in e && e.phase === 'end',
    )
    // Reordering: some transfer ends before one submitted earlier.
    expect(ends.some((e, i) => i > 0 && e.message < ends[i - 1]!.message)).toBe(true)
    // Broken-off transfers deliver fewer units than they have.
    for (const e of ends) expect(e.complete ? e.units === 8 : e.units < 8).toBe(true)
    // Every transfer gets exactly one status; failures are reported, lost ones at the timeout.
    const statuses = a.log.filter((e): e is TransferStatus<number> => 'ok' in e)
    expect(statuses).toHaveLength(200)
    expect(statuses.filter((x) => !x.ok)).toHaveLength(s.lost + s.partial + s.hung + s.timedOut)
    // Duplicates: more ends than complete sends.
    expect(ends.filter((e) => e.complete).length).toBe(s.delivered + s.duplicated)
  })

  it('times out a transfer that would outlast the sender timeout', () => {
    const net = new InMemoryNetwork()
    const { link, log } = record<string>(net, { bytesPerSecond: 1000, timeoutMs: 50 })
    link.send('big', 100) // needs 100 ms
    net.runUntilIdle()
    expect(log.map((e) => ('phase' in e ? e.phase : e.reason))).toEqual(['begin', 'timeout'])
    expect(link.stats().timedOut).toBe(1)
  })

  it('refuses bad models and counts events without a receiver', () => {
    const net = new InMemoryNetwork()
    expect(() => net.link({ bytesPerSecond: 0 })).toThrowError(DtoPSyncError)
    expect(() => net.link({ bytesPerSecond: 1, lossRate: 0.5 })).toThrowError(/random/)
    expect(() =>
      new InMemoryNetwork({ random: seededRandom(1) }).link({
        bytesPerSecond: 1,
        lossRate: 0.6,
        hangRate: 0.6,
      }),
    ).toThrowError(/exceed/)
    const link = net.link<string>({ bytesPerSecond: 1 })
    expect(() => link.send('x', -1)).toThrowError(DtoPSyncError)
    link.send('x', 1)
    net.runUntilIdle()
    expect(link.stats().undeliverable).toBe(3)
  })
})
