import { ADMIT_HTTP_PATH } from '@kvc/kvc-router'
import { describe, expect, it } from 'vitest'
import { Conversation, chatStream, useProxy } from './helpers.js'

const SESSIONS = 40
const TURNS = 4

describe('bounded load test on loopback', () => {
  // 2 P + 3 D, the D workers small enough (24K tokens) that 40 sessions press on them.
  const env = useProxy(
    { prefill: 2, decode: 3, decodeCapacityTokens: 24_576, scale: 0.005 },
    { router: { tauAppend: 1_024 } },
  )

  it(`${SESSIONS} concurrent sessions × ${TURNS} turns, with worker faults: no turn is lost`, async () => {
    // Faults while the load runs: D answers 500 to a few sends, admission RPCs stall past even
    // their stretched timeout (a live D's admission waits up to 8 × 500 ms), a P refuses a few
    // prefills.
    env.cluster.decode[0]!.faults.inject({ path: '/v1/chat/completions', status: 500, times: 3 })
    env.cluster.decode[1]!.faults.inject({ path: ADMIT_HTTP_PATH, delayMs: 4_500, times: 2 })
    env.cluster.prefill[0]!.faults.inject({ path: '/v1/chat/completions', status: 503, times: 2 })
    type Outcome = { status: number; cause: string | undefined; complete: boolean }
    const outcomes: Outcome[] = []
    await Promise.all(
      Array.from({ length: SESSIONS }, async (_, i) => {
        // Half the sessions open with a long prompt (seeded through a P), half with a short one.
        const c = new Conversation(
          `load-${i}`,
          `Agent ${i}. ${i % 2 === 0 ? 'Read the whole repository first. '.repeat(60) : ''}`,
        )
        for (let t = 0; t < TURNS; t++) {
          const user = `turn ${t}: tool output ${'line of output '.repeat(1 + ((i * 7 + t) % 9))}`
          if ((i + t) % 3 === 0) {
            c.messages.push({ role: 'user', content: user })
            const s = await chatStream(env.proxy.url, c.id, c.messages)
            const failedEvent = s.events.find((e) => (e as { error?: unknown }).error !== undefined) as
              | { error: { kvc?: { cause?: string } } }
              | undefined
            outcomes.push({
              status: s.status,
              cause: s.status === 200 ? failedEvent?.error.kvc?.cause : 'http',
              complete: s.done && failedEvent === undefined && s.content.length === 8,
            })
            if (s.status === 200 && failedEvent === undefined)
              c.messages.push({ role: 'assistant', content: s.content })
            else c.messages.pop()
          } else {
            const r = await c.turn(env.proxy.url, user)
            const err = r.json.error as { kvc?: { cause?: string } } | undefined
            outcomes.push({
              status: r.status,
              cause: err?.kvc?.cause,
              complete: r.status === 200 && r.content.length === 8,
            })
          }
        }
      }),
    )
    const total = SESSIONS * TURNS
    // Accounting: every turn has exactly one outcome and one decision line; a failure names its cause.
    expect(outcomes).toHaveLength(total)
    expect(env.decisions).toHaveLength(total)
    const completed = outcomes.filter((o) => o.complete).length
    const failed = outcomes.filter((o) => !o.complete)
    for (const f of failed) expect(f.cause, JSON.stringify(f)).toBeTruthy()
    expect(completed + failed.length).toBe(total)
    expect(env.decisions.filter((d) => d.status === 'completed')).toHaveLength(completed)
    for (const d of env.decisions.filter((x) => x.status === 'failed')) expect(d.cause).toBeTruthy()
    // With these faults Dispatch retries elsewhere: nothing fails.
    expect(failed).toEqual([])
    const m = await (await fetch(`${env.proxy.url}/metrics`)).text()
    const turnsTotal = [...m.matchAll(/^kvc_proxy_turns_total\{[^}]*\} (\d+)$/gm)].reduce(
      (a, x) => a + Number(x[1]),
      0,
    )
    expect(turnsTotal).toBe(total)
    expect(m).toMatch(/kvc_proxy_sends_total\{worker="d0",path="[a-z]+",result="worker_error"\} [1-9]/)
    expect(m).toMatch(/kvc_proxy_admissions_total\{worker="d1",result="timeout"\} [1-9]/)
    // Most later turns took the fast path.
    const seen = new Set<string>()
    const later = env.decisions.filter((d) => {
      const first = !seen.has(d.sessionId)
      seen.add(d.sessionId)
      return !first && d.path !== null
    })
    expect(later.filter((d) => d.path === 'fast').length / later.length).toBeGreaterThan(0.8)
    // Nothing is left in flight; the D pools are consistent.
    expect(m).toContain('kvc_proxy_inflight_turns 0')
    for (const d of env.cluster.decode) expect(d.stats().balanced).toBe(true)
    // No wall-clock bound: how long this takes is the machine's business (a benchmark's, not a
    // test's); that every turn ended, and how, is the behaviour under test.
  })
})
