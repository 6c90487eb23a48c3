import { createHash, randomUUID } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import type { ProxyConfig, SessionSource } from './config.js'
import { ProxyError, badRequest } from './errors.js'
import { BlockHashCache, type ChatMessageLike } from './tokens.js'

/** The session of a request and where its id came from. */
export interface SessionIdentity {
  readonly id: string
  /** `anonymous`: no source matched; the request is a one-turn session that is forgotten after it. */
  readonly source: SessionSource | 'anonymous'
}

const MAX_ID = 256

function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) < 0x20 || s.charCodeAt(i) === 0x7f) return true
  return false
}

function checkId(id: string, what: string): string {
  if (id.length === 0 || id.length > MAX_ID || hasControl(id))
    throw badRequest(`${what} must be 1-${MAX_ID} printable characters`, 400, what)
  return id
}

/**
 * Identifies the session of a request, trying the configured sources in order:
 *
 * 1. `header`: the first of `session.headers` present — `x-session-id`, then SGLang model gateway's
 *    `x-smg-routing-key`, then llm-d's `x-session-token` by default: the explicit, preferred way;
 * 2. `session_id`: the body's top-level `session_id` (SGLang's field, accepted in OpenAI bodies;
 *    off by default: any client can write it, so a deployment opts in);
 * 3. `user`: the OpenAI `user` field (one session per end user: only right when a user runs one
 *    conversation at a time; off by default);
 * 4. `prefix-hash`: chat requests only, a SHA-256 of the conversation's opening — every message up
 *    to and including the first `user` message — so every turn of one agent conversation, which
 *    re-sends its whole history, maps to the same family id (`h:` + 16 hex digits). Look-alike
 *    conversations (the very same opening) are told apart by the proxy's `PrefixSessions`, which
 *    gives each conversation a session of the family.
 *
 * With no match the request is anonymous (a one-turn session).
 */
export function identifySession(
  headers: IncomingHttpHeaders,
  body: Record<string, unknown>,
  messages: readonly ChatMessageLike[] | undefined,
  config: ProxyConfig,
): SessionIdentity {
  for (const source of config.session.sources) {
    if (source === 'header') {
      for (const name of config.session.headers) {
        const v = headers[name]
        const h = Array.isArray(v) ? v[0] : v
        if (typeof h === 'string' && h.length > 0) return { id: checkId(h, name), source }
      }
    } else if (source === 'session_id') {
      const v = body.session_id
      if (v !== undefined && v !== null) {
        if (typeof v !== 'string') throw badRequest('session_id must be a string', 400, 'session_id')
        return { id: checkId(v, 'session_id'), source }
      }
    } else if (source === 'user') {
      const v = body.user
      if (typeof v === 'string' && v.length > 0) return { id: `user:${checkId(v, 'user')}`, source }
    } else if (source === 'prefix-hash' && messages !== undefined) {
      const firstUser = messages.findIndex((m) => m.role === 'user')
      const opening = messages.slice(0, firstUser < 0 ? messages.length : firstUser + 1)
      const h = createHash('sha256')
      for (const m of opening) h.update(JSON.stringify([m.role, m.content ?? null]))
      return { id: `h:${h.digest('hex').slice(0, 16)}`, source }
    }
  }
  return { id: `anon:${randomUUID()}`, source: 'anonymous' }
}

interface SessionEntry {
  readonly id: string
  readonly blocks: BlockHashCache
  /** Tail of the session's turn chain (turns of one session run one after the other). */
  tail: Promise<void>
  /** Turns entered and not finished (the running one and the queued ones). */
  pending: number
  lastSeen: number
  turns: number
  /** What the entry counts toward `session.maxTableBytes`. */
  bytes: number
}

/** Bytes an entry takes besides its block hashes: the entry, its map slot, its promise, its id. */
const ENTRY_OVERHEAD_BYTES = 320

/**
 * The sessions the proxy tracks: one turn at a time per session (later turns queue, up to
 * `maxQueuedTurns`, then 429), the incremental block hashes of each session's prompts, and an
 * idle sweep that forgets sessions not seen for `idleTimeoutMs` (their KV slot is released on
 * their D worker).
 *
 * The table is bounded: at most `session.maxSessions` sessions and `session.maxTableBytes` bytes
 * of per-session state (block hashes, never the prompts' tokens). Past either cap the least
 * recently used idle session is forgotten at once, as the idle sweep would forget it
 * ({@link SessionTable.evictions} counts them); sessions with a turn running or queued are never
 * evicted, so the table can exceed a cap by the sessions in flight.
 */
export class SessionTable {
  readonly #config: ProxyConfig
  readonly #pageSize: number
  readonly #onForget: (id: string) => void
  /** In least-recently-used order (a use moves the session to the end). */
  readonly #sessions = new Map<string, SessionEntry>()
  readonly #timer: ReturnType<typeof setInterval>
  #bytes = 0
  #evictions = 0

  constructor(config: ProxyConfig, pageSize: number, onForget: (id: string) => void) {
    this.#config = config
    this.#pageSize = pageSize
    this.#onForget = onForget
    const every = Math.max(10, Math.min(60_000, Math.floor(config.session.idleTimeoutMs / 2)))
    this.#timer = setInterval(() => this.sweep(), every)
    this.#timer.unref?.()
  }

  get size(): number {
    return this.#sessions.size
  }

  /** Bytes of per-session state held (what `session.maxTableBytes` bounds). */
  get bytes(): number {
    return this.#bytes
  }

  /** Sessions forgotten because a cap was reached (not because they were idle). */
  get evictions(): number {
    return this.#evictions
  }

  /** The ids of the sessions tracked, least recently used first. */
  sessionIds(): string[] {
    return [...this.#sessions.keys()]
  }

  /** Turns waiting behind a running turn of their session. */
  get queued(): number {
    let n = 0
    for (const s of this.#sessions.values()) n += Math.max(0, s.pending - 1)
    return n
  }

  /** Block hasher of a session (the entry is created on first use). */
  blocks(id: string): BlockHashCache {
    return this.#entry(id).blocks
  }

  /**
   * Block ids of `tokens` for session `id` in the namespace `salt` (a tenant's cache salt; none by
   * default), hashed incrementally against its previous prompt and in slices (other requests run in between); the table's byte count follows, and a cap reached
   * evicts the least recently used idle sessions.
   */
  async hashBlocks(id: string, tokens: Uint32Array, salt?: string): Promise<bigint[]> {
    const s = this.#entry(id)
    const ids = await s.blocks.blocksAsync(tokens, salt)
    this.#resize(s)
    return ids
  }

  /**
   * Runs `fn` once the session's previous turns ended. Throws `SESSION_BUSY` (429) when too many
   * turns of the session are queued already.
   */
  async run<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const s = this.#entry(id)
    if (s.pending > this.#config.session.maxQueuedTurns) {
      throw new ProxyError(
        'SESSION_BUSY',
        `session ${id} already has ${s.pending - 1} turn(s) queued behind a running one`,
        { cause: 'session_queue', session_id: id, retryAfterS: 1 },
        429,
      )
    }
    const prev = s.tail
    let release!: () => void
    s.tail = new Promise<void>((r) => {
      release = r
    })
    s.pending++
    try {
      await prev
      s.lastSeen = performance.now()
      s.turns++
      return await fn()
    } finally {
      s.pending--
      s.lastSeen = performance.now()
      release()
      this.#evict()
    }
  }

  /** Forgets an anonymous session right after its turn. */
  drop(id: string): void {
    const s = this.#sessions.get(id)
    if (s !== undefined && s.pending === 0) this.#forget(s)
  }

  /** Forgets sessions idle for longer than `idleTimeoutMs`. */
  sweep(): void {
    const now = performance.now()
    for (const s of this.#sessions.values()) {
      if (s.pending === 0 && now - s.lastSeen > this.#config.session.idleTimeoutMs) this.#forget(s)
    }
  }

  close(): void {
    clearInterval(this.#timer)
  }

  #entry(id: string): SessionEntry {
    let s = this.#sessions.get(id)
    if (s !== undefined) {
      // Most recently used: to the end of the map.
      this.#sessions.delete(id)
      this.#sessions.set(id, s)
      return s
    }
    s = {
      id,
      blocks: new BlockHashCache(this.#pageSize),
      tail: Promise.resolve(),
      pending: 0,
      lastSeen: performance.now(),
      turns: 0,
      bytes: ENTRY_OVERHEAD_BYTES + 2 * id.length,
    }
    this.#sessions.set(id, s)
    this.#bytes += s.bytes
    // No eviction here: the new session is about to run a turn; caps are enforced when turns end.
    return s
  }

  #resize(s: SessionEntry): void {
    const bytes = ENTRY_OVERHEAD_BYTES + 2 * s.id.length + s.blocks.bytes
    if (this.#sessions.get(s.id) === s) this.#bytes += bytes - s.bytes
    s.bytes = bytes
    this.#evict()
  }

  #forget(s: SessionEntry): void {
    this.#sessions.delete(s.id)
    this.#bytes -= s.bytes
    this.#onForget(s.id)
  }

  /** Forgets least recently used idle sessions while a cap is exceeded. */
  #evict(): void {
    const { maxSessions, maxTableBytes } = this.#config.session
    if (this.#sessions.size <= maxSessions && this.#bytes <= maxTableBytes) return
    for (const s of this.#sessions.values()) {
      if (this.#sessions.size <= maxSessions && this.#bytes <= maxTableBytes) return
      if (s.pending > 0) continue
      this.#evictions++
      this.#forget(s)
    }
  }
}
