import { createSglangEmulator } from '@kvc/sglang-emulator'
import { WorkerApiError, WorkerBindingsError } from '@kvc/worker-bindings'
import { describe, expect, it } from 'vitest'
import { resolveConfig } from '../src/config.js'
import { Gateway, type TurnTransport, classifyUpstreamError } from '../src/gateway.js'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'

const apiError = (status: number, message: string) =>
  new WorkerApiError({
    status,
    headers: {},
    body: JSON.stringify({ error: { message } }),
    request: 'POST /generate',
    endpoint: 'http://w',
  })

describe('classifyUpstreamError', () => {
  const pd = (side: 'prefill' | 'decode', cause: unknown) =>
    new WorkerBindingsError('PD_DISPATCH', 'pd', { value: side, cause })
  it.each([
    [
      'connection refused on D',
      new WorkerBindingsError('CONNECTION', 'refused'),
      'fast',
      'worker_unreachable',
    ],
    ['a 500 from D', apiError(500, 'boom'), 'fast', 'worker_error'],
    ['a timeout on the fast path', new WorkerBindingsError('TIMEOUT', 't'), 'fast', 'worker_error'],
    ['a timeout on a seed', new WorkerBindingsError('TIMEOUT', 't'), 'seed', 'transfer_timeout'],
    [
      'D could not get the KV',
      apiError(500, 'KVTransferError(bootstrap_room=1): Failed to get kvcache'),
      'seed',
      'transfer_error',
    ],
    ['the P failed', pd('prefill', apiError(503, 'busy')), 'seed', 'transfer_error'],
    [
      'the P unreachable',
      pd('prefill', new WorkerBindingsError('CONNECTION', 'x')),
      'seed',
      'transfer_error',
    ],
    [
      'the D unreachable in a pair',
      pd('decode', new WorkerBindingsError('CONNECTION', 'x')),
      'seed',
      'worker_unreachable',
    ],
    [
      'a D the health tracker knows is down',
      new WorkerBindingsError('ENDPOINT_UNHEALTHY', 'down'),
      'fast',
      'worker_unreachable',
    ],
    [
      'a P the health tracker knows is down',
      pd('prefill', new WorkerBindingsError('ENDPOINT_UNHEALTHY', 'down')),
      'seed',
      'transfer_error',
    ],
    ['429 from D', apiError(429, 'slow down'), 'fast', 'worker_error'],
    ['a stream error', new WorkerBindingsError('STREAM_ERROR', 'x'), 'fast', 'worker_error'],
  ] as const)('%s → %s', (_name, err, path, cause) => {
    expect(classifyUpstreamError(err, path)).toEqual({ kind: 'failed', cause })
  })

  it('D refusing a second turn of a session while one runs there is `busy` (another replica sent it), not the client’s', () => {
    expect(
      classifyUpstreamError(
        apiError(400, 'Invalid request: session agent-7 already has a request in flight'),
        'fast',
      ),
    ).toMatchObject({ kind: 'busy' })
  })

  it('a 4xx from D is the client’s; an abort is an abort', () => {
    expect(classifyUpstreamError(apiError(400, 'too long'), 'fast')).toMatchObject({
      kind: 'client',
      status: 400,
    })
    expect(classifyUpstreamError(new WorkerBindingsError('ABORTED', 'a'), 'fast')).toEqual({
      kind: 'aborted',
    })
  })
})

describe('Gateway (the proxy without HTTP, as the replay embeds it)', () => {
  it('ends a turn the router refuses to continue with internal_error and gives its load back', async () => {
    const baseline = handleCounts()
    const d0 = await createSglangEmulator({ role: 'decode', capacityTokens: 8_192, timing: { scale: 0 } })
    const gw = new Gateway(
      resolveConfig({
        workers: [{ id: 'd0', role: 'decode', url: d0.url }],
        decisionLog: 'off',
        loads: { intervalMs: 0 },
      }),
    )
    try {
      await gw.start()
      // A transport that reports an impossible completion (a negative output length).
      const broken: TurnTransport = {
        start: async () => ({
          cancel: () => {},
          finish: async () => ({ outputTokens: -1, cachedTokens: 0, transferredTokens: 0 }),
        }),
      }
      const r = await gw.runTurn(
        { sessionId: 's', promptTokens: 100, expectedOutputTokens: 8, sloClass: 'interactive' },
        broken,
      )
      expect(r).toMatchObject({ status: 'failed', cause: 'internal_error', committed: true })
      expect(r.error?.message).toMatch(/outputTokens/)
      expect(gw.router.cluster.worker('d0').load).toMatchObject({ turns: 0, pendingSeeds: 0 })
      expect(await gw.metrics.text()).toMatch(
        /kvc_proxy_turns_total\{outcome="failed",path="none",cause="internal_error"\} 1/,
      )
    } finally {
      await gw.close()
      await d0.close()
    }
    expect(await leakedSince(baseline)).toEqual({})
  })
})
