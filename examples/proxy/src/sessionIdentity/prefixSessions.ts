import { type Hash, createHash } from 'node:crypto'
import type { ChatMessageLike } from '../tokens.js'

/** A prefix-hash session held by one turn (see {@link PrefixSessions.acquire}). */
export interface PrefixSessionLease {
  /** The session id: the family's id for its first session, `<family>.<n>` for the others. */
  readonly id: string
  /** Whether the turn joined an existing session (it extends that session's last completed turn). */
  readonly joined: boolean
  /**
   * The turn ended. `reply`: the assistant's answer when the turn completed (what the next turn
   * of this conversation re-sends after its prompt), `undefined` when it failed.
   */
  end(reply: string | undefined): void
}

interface Member {
  readonly id: string
  busy: boolean
  /** Digest of the last completed turn's prompt, then of that prompt plus its answer. */
  prompt: string | undefined
  withReply: string | undefined
}

/** How a conversation's message is hashed (role and content: the parts that make the prompt). */
function feed(h: Hash, m: ChatMessageLike): void {
  h.update(JSON.stringify([m.role, m.content ?? null]))
}

/** Digests of every prefix of `messages` that ends at a message boundary (`out[k]`: the first `k + 1`). */
function prefixDigests(messages: readonly ChatMessageLike[]): { digests: string[]; full: Hash } {
  const h = createHash('sha256')
  const digests: string[] = []
  for (const m of messages) {
    feed(h, m)
    digests.push(h.copy().digest('hex'))
  }
  return { digests, full: h }
}

/**
 * Sessions identified by a hash of the conversation's opening (`prefix-hash`), without merging
 * look-alike conversations. Every conversation that opens the same way (same system prompt and
 * first user message) is one **family**; within it, a turn joins a session only when that session
 * is idle and the turn **extends its last completed turn**: the turn's messages start with that
 * turn's prompt, preferably followed by its answer, and go on. Otherwise the turn opens a new
 * session of the family. So `n` rollouts that open identically and run at once are `n` sessions
 * (never serialized behind one another), and each rollout's next turn finds its own session by
 * the answer it re-sends.
 *
 * Families and sessions live until {@link PrefixSessions.forget} (the session table's idle sweep).
 *
 * @example
 * ```ts
 * import { PrefixSessions } from '@kvc/example-proxy'
 * const s = new PrefixSessions()
 * const opening = [{ role: 'user', content: 'hi' }]
 * const a = s.acquire('h:1', opening)
 * const b = s.acquire('h:1', opening) // a runs: b opens another session
 * a.id !== b.id // true
 * a.end('hello')
 * s.acquire('h:1', [...opening, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'go' }]).id === a.id // true
 * ```
 */
export class PrefixSessions {
  readonly #families = new Map<string, Member[]>()
  readonly #familyOf = new Map<string, string>()
  readonly #next = new Map<string, number>()

  /** Sessions tracked. */
  get size(): number {
    return this.#familyOf.size
  }

  /** The ids of a family's sessions, and whether each is busy (for tests and introspection). */
  members(family: string): { id: string; busy: boolean }[] {
    return (this.#families.get(family) ?? []).map((m) => ({ id: m.id, busy: m.busy }))
  }

  /** The session of a turn of `family` whose prompt is `messages`, held until `end`. */
  acquire(family: string, messages: readonly ChatMessageLike[]): PrefixSessionLease {
    const { digests, full } = prefixDigests(messages)
    let members = this.#families.get(family)
    if (members === undefined) {
      members = []
      this.#families.set(family, members)
    }
    // Strict prefixes only: the turn must add at least one message to the one it extends.
    const at = new Map<string, number>()
    for (let k = 0; k < digests.length - 1; k++) at.set(digests[k]!, k)
    let best: Member | undefined
    let bestRank = -1
    for (const m of members) {
      if (m.busy) continue
      // Extending the prompt and its answer beats extending the prompt alone; a session that never
      // completed a turn holds nothing and may be reused by any turn of the family.
      const withReply = m.withReply === undefined ? undefined : at.get(m.withReply)
      const prompt = m.prompt === undefined ? undefined : at.get(m.prompt)
      const rank =
        withReply !== undefined
          ? 2 * digests.length + withReply
          : prompt !== undefined
            ? digests.length + prompt
            : m.prompt === undefined
              ? 0
              : -1
      if (rank > bestRank) {
        best = m
        bestRank = rank
      }
    }
    const joined = best !== undefined && best.prompt !== undefined
    if (best === undefined) {
      const n = this.#next.get(family) ?? 0
      this.#next.set(family, n + 1)
      const id = n === 0 && !this.#familyOf.has(family) ? family : `${family}.${n}`
      best = { id, busy: false, prompt: undefined, withReply: undefined }
      members.push(best)
      this.#familyOf.set(id, family)
    }
    const member = best
    member.busy = true
    let ended = false
    return {
      id: member.id,
      joined,
      end: (reply) => {
        if (ended) return
        ended = true
        member.busy = false
        if (reply === undefined || digests.length === 0) return
        member.prompt = digests[digests.length - 1]
        feed(full, { role: 'assistant', content: reply })
        member.withReply = full.digest('hex')
      },
    }
  }

  /** Forgets session `id` (idle long enough, or dropped); a busy session is kept. */
  forget(id: string): void {
    const family = this.#familyOf.get(id)
    if (family === undefined) return
    const members = this.#families.get(family)!
    const i = members.findIndex((m) => m.id === id)
    if (i < 0 || members[i]!.busy) return
    members.splice(i, 1)
    this.#familyOf.delete(id)
    if (members.length === 0) {
      this.#families.delete(family)
      this.#next.delete(family)
    }
  }
}
