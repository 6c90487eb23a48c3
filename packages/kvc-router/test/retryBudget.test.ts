import { describe, expect, it } from 'vitest'
import {
  Router,
  RouterError,
  type RouterParamsInput,
  type SeedViaPAction,
  type SendFastAction,
} from '../src/index.js'
import { ManualClock, ScriptedDriver, checkNoInflightLoad } from '../src/testing/index.js'

function setup(
  capacities: number[],
  send: (a: SendFastAction | SeedViaPAction) => 'ok' | 'fail',
  params: RouterParamsInput = {},
) {
  const clock = new ManualClock(1_000)
  const router = new Router({
    now: clock.now,
    random: () => 0.5,
    params: { pageSize: 16, ...params },
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1e6 },
      ...capacities.map((c, i) => ({ id: `d${i}`, role: 'decode' as const, capacityTokens: c })),
    ],
  })
  const sends: (SendFastAction | SeedViaPAction)[] = []
  let admits = 0
  const driver = new ScriptedDriver({
    router,
    clock,
    admit: () => {
      admits++
      return { kind: 'admit' }
    },
    send: (a) => {
      sends.push(a)
      return send(a) === 'ok' ? { kind: 'ok', outputTokens: 10 } : { kind: 'fail', cause: 'worker_error' }
    },
  })
  return { router, clock, driver, sends, admits: () => admits }
}

describe('a turn that no retry can help ends at once or within its retry budget', () => {
  it('a prompt plus decode reserve above every D’s capacity fails before any attempt (too_large, TOO_LARGE)', () => {
    const s = setup([65_536, 32_768], () => 'ok')
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 100_000, expectedOutputTokens: 64 })
    expect(run.final.type).toBe('fail')
    if (run.final.type !== 'fail') return
    expect(run.final.cause).toBe('too_large')
    expect(run.final.error).toBeInstanceOf(RouterError)
    expect(run.final.error.code).toBe('TOO_LARGE')
    expect(run.final.error.message).toContain('100064 tokens of KV')
    expect(run.final.error.message).toContain('largest D worker holds (65536)')
    expect(run.actions).toEqual([])
    expect(s.admits()).toBe(0)
    expect(s.router.cluster.store.getBinding('s')).toBeUndefined()
    checkNoInflightLoad(s.router)
    // The reserve counts: a prompt that fits alone but not with its max_tokens is refused too.
    const r2 = s.driver.runTurn({ sessionId: 's2', promptTokens: 65_000, expectedOutputTokens: 1_000 })
    expect(r2.final).toMatchObject({ type: 'fail', cause: 'too_large' })
    // One that fits the largest D is routed there.
    const r3 = s.driver.runTurn({ sessionId: 's3', promptTokens: 60_000, expectedOutputTokens: 1_000 })
    expect(r3.final).toMatchObject({ type: 'done', workerId: 'd0' })
  })

  it('sends that fail everywhere stop after maxSendFailures, not after maxAttempts', () => {
    const s = setup([1e6, 1e6, 1e6], () => 'fail')
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final.type).toBe('fail')
    if (run.final.type !== 'fail') return
    expect(run.final.cause).toBe('worker_failed')
    expect(run.final.error.code).toBe('ATTEMPTS_EXHAUSTED')
    expect(run.final.error.message).toContain('retry budget maxSendFailures 8')
    expect(s.sends).toHaveLength(8)
    checkNoInflightLoad(s.router)
  })

  it('the budget is a parameter, and a success within it completes the turn', () => {
    let n = 0
    const s = setup([1e6, 1e6], () => (++n <= 2 ? 'fail' : 'ok'))
    const run = s.driver.runTurn({ sessionId: 's', promptTokens: 800 })
    expect(run.final.type).toBe('done')
    expect(s.sends).toHaveLength(3)
    const tight = setup([1e6, 1e6], () => 'fail', { maxSendFailures: 2 })
    expect(tight.driver.runTurn({ sessionId: 's', promptTokens: 800 }).final.type).toBe('fail')
    expect(tight.sends).toHaveLength(2)
    expect(() => new Router({ params: { maxSendFailures: 0 } })).toThrow(
      /maxSendFailures must be an integer >= 1/,
    )
  })
})
