import type OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { useProxy } from './helpers.js'
import { client } from './tenantHelpers.js'

const SYSTEM = 'You are an RL policy. Solve the task step by step and show your work. '.repeat(12)

/**
 * An evaluation or RL harness with n > 1 samples: 12 rollouts that open with the very same
 * messages, sent at once through the official client, without a session header (the proxy's
 * default `prefix-hash` detection names them).
 */
describe('12 identical rollouts', () => {
  const env = useProxy({ prefill: 1, decode: 2 }, { router: { tauAppend: 2_048 } })

  it('run in parallel as 12 sessions: none serialized behind another, none refused, spread over the D workers', async () => {
    const c = client(env.proxy.url, 'unused')
    const opening: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: 'Task 17: prove that the sum of two even numbers is even.' },
    ]
    const first = await Promise.all(
      Array.from({ length: 12 }, () =>
        c.chat.completions
          .create({ model: 'm', messages: opening, max_tokens: 8, temperature: 1 })
          .withResponse(),
      ),
    )
    const sessions = first.map((r) => r.response.headers.get('x-kvc-session')!)
    expect(new Set(sessions).size).toBe(12)
    for (const s of sessions) expect(decodeURIComponent(s)).toMatch(/^h:[0-9a-f]{16}(\.\d+)?$/)
    const workers = new Set(first.map((r) => r.response.headers.get('x-kvc-worker')))
    expect(workers.size).toBe(2)
    // Nothing ever queued behind another turn of its session, and the turns overlapped in time.
    const lines = env.decisions.filter((d) => sessions.includes(encodeURIComponent(d.sessionId)))
    expect(lines).toHaveLength(12)
    expect(lines.every((d) => d.status === 'completed')).toBe(true)
    const spans = lines.map((d) => ({ end: Date.parse(d.ts), start: Date.parse(d.ts) - d.durationMs }))
    const overlapping = spans.some((a, i) =>
      spans.some((b, j) => i !== j && a.start < b.end && b.start < a.end),
    )
    expect(overlapping).toBe(true)

    // Each rollout's second turn re-sends its answer: it finds a session of its own (they are
    // look-alikes too, so any idle one holding that history will do), on the fast path.
    const second = await Promise.all(
      first.map(({ data }, i) =>
        c.chat.completions
          .create({
            model: 'm',
            messages: [
              ...opening,
              { role: 'assistant', content: data.choices[0]!.message.content },
              { role: 'user', content: `Rollout ${i}: now generalize to odd numbers.` },
            ],
            max_tokens: 8,
          })
          .withResponse(),
      ),
    )
    const again = second.map((r) => r.response.headers.get('x-kvc-session')!)
    expect(new Set(again).size).toBe(12)
    expect(new Set([...again, ...sessions]).size).toBe(12)
    for (const r of second) expect(r.response.headers.get('x-kvc-path')).toBe('fast')
    expect(env.proxy.prefixSessions.size).toBe(12)
  })

  it('a conversation that re-sends its answer joins its own session, never a running look-alike', async () => {
    const c = client(env.proxy.url, 'unused')
    const opening: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'hi' }]
    const a = await c.chat.completions.create({ model: 'm', messages: opening, max_tokens: 8 }).withResponse()
    const id = a.response.headers.get('x-kvc-session')
    const next = [
      ...opening,
      { role: 'assistant' as const, content: a.data.choices[0]!.message.content },
      { role: 'user' as const, content: 'tell me more' },
    ]
    // Its next turn and a new "hi" at the same time: the next turn joins, the new one opens another.
    const [b, fresh] = await Promise.all([
      c.chat.completions.create({ model: 'm', messages: next, max_tokens: 8 }).withResponse(),
      c.chat.completions.create({ model: 'm', messages: opening, max_tokens: 8 }).withResponse(),
    ])
    expect(b.response.headers.get('x-kvc-session')).toBe(id)
    expect(b.response.headers.get('x-kvc-path')).toBe('fast')
    expect(fresh.response.headers.get('x-kvc-session')).not.toBe(id)
  })
})
