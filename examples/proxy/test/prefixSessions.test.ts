import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type PrefixSessionLease, PrefixSessions } from '../src/sessionIdentity/prefixSessions.js'

interface Msg {
  readonly role: string
  readonly content: string
}

interface ModelSession {
  readonly id: string
  busy: boolean
  /** The last completed turn's prompt, and its answer. */
  prompt: readonly Msg[] | undefined
  reply: string | undefined
}

const same = (a: readonly Msg[], b: readonly Msg[]) =>
  a.length === b.length && a.every((m, i) => m.role === b[i]!.role && m.content === b[i]!.content)
/** Whether `p` is a strict prefix of `m` (at least one message more). */
const strictPrefix = (p: readonly Msg[], m: readonly Msg[]) =>
  p.length < m.length && same(p, m.slice(0, p.length))

/**
 * The naive reference: every session of a family as a record of its last completed turn,
 * compared message by message (no hashing). A turn takes the idle session whose prompt and answer
 * it extends (the longest), else whose prompt it extends (the longest), else an idle session that
 * never completed a turn, else a new one.
 */
class Model {
  readonly families = new Map<string, ModelSession[]>()
  readonly counters = new Map<string, number>()
  readonly live: { family: string; lease: PrefixSessionLease; model: ModelSession; messages: Msg[] }[] = []

  acquire(family: string, messages: readonly Msg[]): ModelSession {
    const members = this.families.get(family) ?? []
    this.families.set(family, members)
    let best: ModelSession | undefined
    let bestRank = -1
    for (const s of members) {
      if (s.busy) continue
      let rank = -1
      if (s.prompt === undefined) rank = 0
      else {
        const full =
          s.reply === undefined ? undefined : [...s.prompt, { role: 'assistant', content: s.reply }]
        if (full !== undefined && strictPrefix(full, messages)) rank = 2 * messages.length + full.length
        else if (strictPrefix(s.prompt, messages)) rank = messages.length + s.prompt.length
      }
      if (rank > bestRank) {
        best = s
        bestRank = rank
      }
    }
    if (best === undefined) {
      const n = this.counters.get(family) ?? 0
      this.counters.set(family, n + 1)
      best = { id: n === 0 ? family : `${family}.${n}`, busy: false, prompt: undefined, reply: undefined }
      members.push(best)
    }
    best.busy = true
    return best
  }
}

type Real = { sessions: PrefixSessions }
type Cmd = fc.Command<Model, Real>

const msgArb = fc.record({
  role: fc.constantFrom('user', 'assistant'),
  content: fc.constantFrom('a', 'b', 'c'),
})

function checkSizes(m: Model, r: Real): void {
  let n = 0
  for (const [family, members] of m.families) {
    n += members.length
    const got = r.sessions.members(family)
    if (JSON.stringify(got) !== JSON.stringify(members.map((s) => ({ id: s.id, busy: s.busy }))))
      throw new Error(`family ${family}: ${JSON.stringify(got)} vs model ${JSON.stringify(members)}`)
  }
  if (r.sessions.size !== n) throw new Error(`size ${r.sessions.size}, model ${n}`)
  // No two live turns share a session.
  const ids = m.live.map((l) => l.lease.id)
  if (new Set(ids).size !== ids.length) throw new Error(`two running turns share a session: ${ids}`)
}

const acquire = fc
  .tuple(fc.constantFrom('f1', 'f2'), fc.array(msgArb, { minLength: 1, maxLength: 5 }), fc.nat(3))
  .map(
    ([family, messages, extendLive]): Cmd => ({
      check: () => true,
      run: (m, r) => {
        // Often, the next turn of a finished conversation (its prompt + answer + a message).
        const done = m.families.get(family)?.filter((s) => !s.busy && s.prompt !== undefined) ?? []
        const base = done[extendLive % Math.max(1, done.length)]
        const msgs =
          extendLive > 0 && base !== undefined
            ? [...base.prompt!, { role: 'assistant', content: base.reply ?? 'x' }, ...messages]
            : messages
        const want = m.acquire(family, msgs)
        const lease = r.sessions.acquire(family, msgs)
        if (lease.id !== want.id) throw new Error(`acquired ${lease.id}, model ${want.id}`)
        m.live.push({ family, lease, model: want, messages: msgs })
        checkSizes(m, r)
      },
      toString: () => `acquire(${family}, ${JSON.stringify(messages)}, ${extendLive})`,
    }),
  )

const end = fc.tuple(fc.nat(10), fc.option(fc.constantFrom('a', 'b', 'zz'), { nil: undefined })).map(
  ([k, reply]): Cmd => ({
    check: (m) => m.live.length > 0,
    run: (m, r) => {
      const [l] = m.live.splice(k % m.live.length, 1)
      l!.lease.end(reply)
      l!.model.busy = false
      if (reply !== undefined) {
        l!.model.prompt = l!.messages
        l!.model.reply = reply
      }
      checkSizes(m, r)
    },
    toString: () => `end(${k}, ${reply})`,
  }),
)

const forget = fc.tuple(fc.constantFrom('f1', 'f2'), fc.nat(5)).map(
  ([family, k]): Cmd => ({
    check: () => true,
    run: (m, r) => {
      const members = m.families.get(family) ?? []
      const s = members[k % Math.max(1, members.length)]
      if (s === undefined) return
      r.sessions.forget(s.id)
      if (!s.busy) {
        members.splice(members.indexOf(s), 1)
        if (members.length === 0) {
          m.families.delete(family)
          m.counters.delete(family)
        }
      }
      checkSizes(m, r)
    },
    toString: () => `forget(${family}, ${k})`,
  }),
)

describe('PrefixSessions', () => {
  it('matches a naive message-by-message model: joins only idle sessions it extends, never a running one', () => {
    fc.assert(
      fc.property(fc.commands([acquire, end, forget], { maxCommands: 50 }), (cmds) => {
        fc.modelRun(() => ({ model: new Model(), real: { sessions: new PrefixSessions() } }), cmds)
      }),
      { numRuns: 300 },
    )
  })

  it('n identical openings at once are n sessions; each next turn finds the session holding its answer', () => {
    const s = new PrefixSessions()
    const opening = [
      { role: 'system', content: 'solve' },
      { role: 'user', content: 'task' },
    ]
    const leases = Array.from({ length: 12 }, () => s.acquire('h:x', opening))
    expect(new Set(leases.map((l) => l.id)).size).toBe(12)
    expect(leases.every((l) => !l.joined)).toBe(true)
    for (const [i, l] of leases.entries()) l.end(`answer ${i}`)
    const next = leases.map((_, i) =>
      s.acquire('h:x', [
        ...opening,
        { role: 'assistant', content: `answer ${i}` },
        { role: 'user', content: 'go' },
      ]),
    )
    expect(next.map((l) => l.id)).toEqual(leases.map((l) => l.id))
    expect(next.every((l) => l.joined)).toBe(true)
    // A retry of a failed turn (the same prompt again) goes back to its session: it still extends
    // the session's last completed turn.
    next[3]!.end(undefined)
    const retry = s.acquire('h:x', [
      ...opening,
      { role: 'assistant', content: 'answer 3' },
      { role: 'user', content: 'go' },
    ])
    expect(retry.id).toBe(leases[3]!.id)
  })

  it('keeps a running session when asked to forget it', () => {
    const s = new PrefixSessions()
    const l = s.acquire('h:y', [{ role: 'user', content: 'hi' }])
    s.forget(l.id)
    expect(s.size).toBe(1)
    l.end('hello')
    s.forget(l.id)
    expect(s.size).toBe(0)
  })
})
