import { describe, expect, it } from 'vitest'
import { Router, renderDispatch, renderRoute } from '../src/index.js'
import { ManualClock, ScriptedDriver } from '../src/testing/index.js'

describe('explain renderers', () => {
  it('renders a route decision as a table with every key and the deciding key', () => {
    const r = new Router({
      now: () => 0,
      random: () => 0.5,
      params: { pageSize: 16 },
      workers: [
        { id: 'd0', role: 'decode', capacityTokens: 100_000 },
        { id: 'd1', role: 'decode', capacityTokens: 2_000 },
        { id: 'd2', role: 'decode', capacityTokens: 100_000 },
      ],
    })
    r.cluster.setHealth('d2', false)
    expect(renderRoute(r.route({ sessionId: 'sess', promptTokens: 9_000 }))).toBe(
      [
        'route sess (kvc, 9000 tokens, 0 blocks, unbound, mean load 0)',
        '  #  worker  fast  capOk  score  overlap  bonus  load  tie  append  need  avail   by',
        '  0  d0      no    yes    0      0        0      0     2    9000    9512  100000  capOk',
        '  1  d1      no    no     0      0        0      0     0    9000    9512  2000    last',
        '  -  d2: unhealthy',
      ].join('\n'),
    )
  })

  it('renders a dispatch record: outcome, steps, first route', () => {
    const clock = new ManualClock()
    const router = new Router({
      now: clock.now,
      random: () => 0.5,
      workers: [{ id: 'd0', role: 'decode', capacityTokens: 1e6 }],
    })
    const answers = [{ kind: 'reject', reason: 'capacity', pauseMs: 300 } as const]
    const run = new ScriptedDriver({
      router,
      clock,
      admit: () => answers.shift() ?? { kind: 'admit' },
    }).runTurn({
      sessionId: 's',
      promptTokens: 100,
    })
    const text = renderDispatch(run.final.record)
    expect(text.split('\n')[0]).toBe(
      'turn s#1 (session s, interactive, kvc): done: fast on d0 after 3 attempts, 2 walks, 337 ms',
    )
    expect(text).toContain('admit d0  rejected: capacity (pause 300 ms)')
    expect(text).toContain('reject d0  capacity: rejects[s][d0] = 1')
    expect(text).toContain('wait  until 326.0 (all_rejecting)')
    expect(text).toContain('done d0  fast on d0')
    expect(text).toContain('route s (kvc, 100 tokens')
  })
})
