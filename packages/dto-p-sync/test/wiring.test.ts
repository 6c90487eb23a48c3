import { describe, expect, it } from 'vitest'
import {
  InMemoryNetwork,
  type LinkModel,
  messageBytes,
  type SyncReply,
  SyncSource,
  type TransferMessage,
  wireSync,
} from '../src/index.js'
import { seededRandom } from '../src/testing/index.js'
import { hasher, prefillSide, tokens } from './fixtures.js'

function setup(forward: Partial<LinkModel<TransferMessage>> = {}, pinTtlMs = 5000) {
  const p = prefillSide({ pinTtlMs, poolPages: 128, reservationTimeoutMs: 1000 })
  const net = new InMemoryNetwork({ random: seededRandom(3), startTime: 0 })
  const now = () => net.now()
  p.clock.t = 0
  Object.defineProperty(p.clock, 't', { get: now, set: () => {} })
  const source = new SyncSource({
    pageSize: 4,
    beta: 8,
    now,
    blockHasher: hasher,
    bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 100 },
    trustPrefillEvents: false,
  })
  p.listeners.push((e) => source.observePrefillEvent(e))
  const fwd = net.link<TransferMessage>({
    bytesPerSecond: 1e6,
    latencyMs: 1,
    units: (m) => m.blocks.length,
    ...forward,
  })
  const back = net.link<SyncReply>({ bytesPerSecond: 1e7, latencyMs: 1 })
  const wiring = wireSync({ source, sink: p.sink, forward: fwd, backward: back })
  return { p, net, source, wiring, fwd, back }
}

describe('wireSync', () => {
  it('runs the protocol over the links: reserve on begin, insert on end, reply, pin', () => {
    const { p, net, source, wiring, fwd } = setup()
    source.commitTurn('s', tokens(81))
    const plan = wiring.round(1000)
    expect(plan.transfers.length).toBe(1)
    const bytes = messageBytes({ ...plan.transfers[0]!, seq: 0 }, 100)
    expect(fwd.stats().bytesSent).toBe(bytes)
    net.advanceTo(2) // the transfer began landing: slots reserved
    expect(p.sink.reservedTokens()).toBe(plan.transfers[0]!.kvBlocks * 4)
    net.advanceTo(1000)
    wiring.expire()
    expect(source.status('s').withinBudget).toBe(true)
    expect(p.sink.reservedTokens()).toBe(0)
    expect(wiring.stats().repliesSent).toBe(1)
    p.check()
  })

  it('subtracts the link backlog from the next round budget', () => {
    const { source, wiring, fwd } = setup({ bytesPerSecond: 1e4 }) // a slow link: transfers queue
    source.commitTurn('a', tokens(81, 1))
    wiring.round(1000)
    const backlog = fwd.backlogBytes()
    expect(backlog).toBeGreaterThan(8000)
    source.commitTurn('b', tokens(81, 2))
    const plan = wiring.round(1000) // the source's own budget is 1e6 bytes/s
    expect(plan.budgetBytes).toBeCloseTo(1e6 - backlog, 6)
  })

  it('frees the reservation of a transfer that hangs, and replans it', () => {
    const { p, net, source, wiring } = setup({ hangRate: 1, timeoutMs: 500 })
    source.commitTurn('s', tokens(41))
    wiring.round(100)
    net.advanceTo(10)
    expect(p.sink.reservedTokens()).toBeGreaterThan(0)
    net.advanceTo(600) // the sender's timeout: failure status
    expect(source.metrics().transferFailures).toBe(1)
    expect(p.sink.reservedTokens()).toBeGreaterThan(0) // P does not know yet
    net.advanceTo(1010)
    wiring.expire()
    expect(p.sink.reservedTokens()).toBe(0)
    expect(wiring.stats().expired).toBe(1)
    p.check()
    expect(source.plan(100).messages.length).toBe(1)
  })

  it('keeps the part of a transfer that broke off', () => {
    const { p, net, source, wiring } = setup({ partialRate: 1 })
    source.commitTurn('s', tokens(41))
    wiring.round(100)
    net.runUntilIdle()
    const st = source.status('s')
    expect(p.sink.metrics().partial).toBe(1)
    expect(st.confirmedPages).toBe(p.sink.metrics().ingestedBlocks)
    expect(st.confirmedPages).toBeLessThan(9)
    p.check()
  })

  it('answers a malformed message with a rejected reply instead of throwing into the link', () => {
    const { net, source, wiring, fwd } = setup()
    source.commitTurn('s', tokens(41))
    wiring.round(100)
    fwd.send({ sessionId: 's', version: 1, seq: 99, extraKey: '', startPage: 0, blocks: [] }, 10)
    net.runUntilIdle()
    expect(wiring.stats().rejected).toBe(1)
    expect(source.metrics().replies.rejected).toBe(1)
  })
})
