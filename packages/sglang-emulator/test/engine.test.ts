import { describe, expect, it } from 'vitest'
import { resolveOptions } from '../src/config/options.js'
import { EmulatorEngine } from '../src/engine/engine.js'
import { EngineError, type EngineRequest } from '../src/engine/types.js'
import { FaultInjector } from '../src/faults/faults.js'

// The engine runs without HTTP: these tests drive it directly.
const engineOf = (capacityTokens = 256) =>
  new EmulatorEngine(
    resolveOptions({ capacityTokens, pageSize: 4, timing: { scale: 0 }, kvEvents: false }),
    new FaultInjector(),
  )

const request = (rid: string, tokens: number[], maxNewTokens = 4, sessionId?: string): EngineRequest => ({
  rid,
  tokens,
  sampling: { maxNewTokens, stop: [], stopTokenIds: new Set(), noStopTrim: false },
  extraKey: undefined,
  priority: 0,
  sessionId,
  historySession: undefined,
  bootstrap: undefined,
})

const ids = (n: number, seed: number) => Array.from({ length: n }, (_, i) => ((i * 31 + seed * 7) % 200) + 3)

describe('the engine, without HTTP', () => {
  it('runs a request through the real caches: a repeat hits the prefix, counters and accounting follow', async () => {
    const e = engineOf()
    const signal = new AbortController().signal
    const progress: number[] = []
    const a = await e.execute(request('r1', ids(40, 1)), signal, (p) => progress.push(p.outputIds.length))
    expect(a).toMatchObject({
      promptTokens: 40,
      cachedTokens: 0,
      finishReason: { type: 'length', length: 4 },
    })
    expect(a.outputIds).toHaveLength(4)
    expect(progress).toEqual([1, 2, 3])
    const b = await e.execute(request('r2', ids(40, 1)), signal, undefined)
    expect(b.cachedTokens).toBe(36) // page-aligned, below the prompt length
    expect(b.outputIds).toEqual(a.outputIds) // the fake model is deterministic
    expect(e.stats()).toMatchObject({
      requestsTotal: 2,
      promptTokensTotal: 80,
      cachedTokensTotal: 36,
      generationTokensTotal: 8,
      runningRequests: 0,
      waitingRequests: 0,
      balanced: true,
    })
    expect(e.idle()).toBe(true)
  })

  it('a request larger than the pool is refused as an invalid request; nothing changes', async () => {
    const e = engineOf(64)
    const before = e.stats()
    const err = await e
      .execute(request('big', ids(60, 2), 10), new AbortController().signal, undefined)
      .catch((x) => x)
    expect(err).toBeInstanceOf(EngineError)
    expect(err).toMatchObject({ kind: 'invalid_request' })
    expect(e.stats()).toMatchObject({ ...before, requestsTotal: 1 })
  })

  it('an aborted request releases what it held; a tagged session keeps its KV between turns', async () => {
    const e = engineOf()
    const c = new AbortController()
    c.abort(new Error('stop'))
    await expect(e.execute(request('x', ids(20, 3)), c.signal, undefined)).rejects.toThrow('stop')
    expect(e.stats()).toMatchObject({ runningRequests: 0, waitingRequests: 0, treeTokens: 0, balanced: true })
    const signal = new AbortController().signal
    await e.execute(request('t1', ids(40, 4), 4, 's'), signal, undefined)
    expect(e.sessionCache.getSessionStatus('s')?.residentTokens).toBeGreaterThan(0)
    e.closeSession('s')
    expect(e.sessionCache.hasSession('s')).toBe(false)
    expect(e.stats().balanced).toBe(true)
  })

  it('admission answers from the engine’s state; draining and shutdown refuse', () => {
    const e = engineOf()
    const req = {
      requestId: 'r',
      sessionId: 's',
      path: 'seed' as const,
      promptTokens: 40,
      appendTokens: 40,
      expectedOutputTokens: 8, // the default decode reserve (512) is above this small pool
    }
    expect(e.admit(req)).toMatchObject({ admitted: true, reason: 'ok' })
    e.setDraining(true)
    expect(e.admit({ ...req, requestId: 'r2' })).toMatchObject({ admitted: false, reason: 'draining' })
    e.setDraining(false)
    e.shutdown()
    expect(e.admit({ ...req, requestId: 'r3' })).toMatchObject({ admitted: false, reason: 'draining' })
  })
})
