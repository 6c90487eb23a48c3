/**
 * Sessions as SGLang serves them, over the real session cache: classic sessions (`open_session`,
 * `session_params`: each turn's prompt rebuilt from the session's history, with SGLang's `timeout`)
 * and tagged sessions (a top-level `session_id`), whose KV the session cache holds between turns.
 *
 * @internal
 * @module
 */
import type { SessionCache, SessionRequest } from '@kvc/session-cache'
import { EngineError, type EngineRequest, type SessionParams } from './types.js'

interface History {
  tokens: number[]
  readonly byRid: Map<string, number[]>
  readonly timeoutMs: number | undefined
}

const EMPTY_TOKENS = new Uint32Array(0)

/** @internal */
export class SessionBook {
  readonly #sc: SessionCache
  /** Classic sessions: prompt + output of every turn, by `rid` and the latest. */
  readonly #history = new Map<string, History>()
  /** The tokens each session-cache session has committed (what a turn must extend to reuse it). */
  readonly #committed = new Map<string, Uint32Array>()
  /** Sessions closed while a turn ran: released when it ends. */
  readonly #deferredClose = new Set<string>()

  constructor(sessionCache: SessionCache) {
    this.#sc = sessionCache
  }

  /** Whether a classic session `id` is open. */
  isOpen(id: string): boolean {
    return this.#history.has(id)
  }

  /** Opens classic session `id`; false when a session of that id is still open. */
  open(id: string, timeoutMs: number | undefined): boolean {
    if (this.#history.has(id) || this.#sc.hasSession(id)) return false
    this.#sc.openSession(id)
    this.#history.set(id, { tokens: [], byRid: new Map(), timeoutMs })
    return true
  }

  /** Closes session `id` (classic or tagged); its KV lock goes now, or when its running turn ends. */
  close(id: string): void {
    this.#history.delete(id)
    this.#committed.delete(id)
    if (this.#sc.hasSession(id)) {
      const st = this.#sc.getSessionStatus(id)
      if (st?.active !== true) this.#sc.releaseSession(id)
      else this.#deferredClose.add(id)
    }
  }

  /** Releases the classic sessions idle longer than their `timeout` (SGLang's session timeout). */
  reap(now: number): void {
    for (const [id, h] of this.#history) {
      if (h.timeoutMs === undefined) continue
      const st = this.#sc.getSessionStatus(id)
      if (st !== undefined && !st.active && now - st.lastAccessTime > h.timeoutMs) {
        this.#sc.releaseSession(id)
        this.#history.delete(id)
      }
    }
  }

  /** The admission released `id`'s KV lock: the session stays open, its next turn re-seeds. */
  released(id: string): void {
    this.#committed.delete(id)
  }

  /** The cache was flushed: every session is reopened empty. */
  flushed(): void {
    const sessions = this.#sc.listSessionStatuses().map((s) => s.sessionId)
    for (const id of sessions) this.#sc.releaseSession(id)
    this.#sc.cache.reset()
    this.#committed.clear()
    for (const id of sessions) this.#sc.openSession(id)
  }

  /**
   * A classic session turn's prompt: the session's history (the latest turn's, or the one of
   * `params.rid`, cut at `params.offset`) followed by `tokens` (without a leading BOS once there
   * is history). `tokens` unchanged for a session that is not open.
   */
  prompt(params: SessionParams, tokens: number[]): number[] {
    const h = this.#history.get(params.id)
    if (h === undefined) return tokens
    let base = typeof params.rid === 'string' ? (h.byRid.get(params.rid) ?? h.tokens) : h.tokens
    if (params.drop_previous_output === true && typeof params.rid !== 'string') base = h.tokens
    if (typeof params.offset === 'number' && params.offset >= 0) base = base.slice(0, params.offset)
    return [...base, ...(tokens[0] === 1 && base.length > 0 ? tokens.slice(1) : tokens)]
  }

  /** A session turn when the prompt extends the session's committed tokens, else a plain request. */
  createRequest(item: EngineRequest): SessionRequest {
    const sc = this.#sc
    const sid = item.sessionId
    const plain = (): SessionRequest =>
      sc.createRequest({
        rid: item.rid,
        inputIds: item.tokens,
        priority: item.priority,
        ...(item.extraKey === undefined ? {} : { extraKey: item.extraKey }),
      })
    if (sid === undefined || this.#deferredClose.has(sid)) return plain()
    if (!sc.hasSession(sid)) {
      // First turn of a tagged session, or a session the cache released under pressure: (re)open it.
      sc.openSession(sid, item.extraKey === undefined ? {} : { extraKey: item.extraKey })
      this.#committed.delete(sid)
    }
    const slot = sc.getSessionSlot(sid)!
    if (slot.activeRid !== undefined) {
      throw new EngineError(
        'invalid_request',
        `Invalid request: session ${sid} already has a request in flight`,
      )
    }
    const committed = this.#committed.get(sid) ?? EMPTY_TOKENS
    const sameNs = item.extraKey === undefined || item.extraKey === slot.extraKey
    let extendsCommitted =
      sameNs && committed.length === slot.committedLen && item.tokens.length > committed.length
    for (let i = 0; extendsCommitted && i < committed.length; i++) {
      if (item.tokens[i] !== committed[i]) extendsCommitted = false
    }
    // A prompt that does not extend the session's KV (rewind, replace, dropped output) is served as
    // a plain request: KV reuse then goes through the radix tree only, as in upstream classic sessions.
    if (!extendsCommitted) return plain()
    return sc.createRequest({
      rid: item.rid,
      inputIds: item.tokens,
      sessionId: sid,
      priority: item.priority,
      ...(item.extraKey === undefined ? {} : { extraKey: item.extraKey }),
    })
  }

  /** A turn finished: remember what the session committed and extend the classic history. */
  afterTurn(item: EngineRequest, req: SessionRequest): void {
    if (req.sessionId !== undefined) {
      const slot = this.#sc.getSessionSlot(req.sessionId)
      if (slot !== undefined) this.#committed.set(req.sessionId, req.tokenIds.slice(0, slot.committedLen))
    }
    const hs = item.historySession
    if (hs === undefined) return
    const h = this.#history.get(hs)
    if (h === undefined) return
    const full = [...item.tokens, ...req.outputIds]
    h.tokens = full
    h.byRid.set(item.rid, full)
  }

  /** A turn of session `sid` ended (finished or not): a close that waited for it happens now. */
  turnEnded(sid: string | undefined): void {
    if (sid === undefined || !this.#deferredClose.has(sid)) return
    if (this.#sc.getSessionStatus(sid)?.active === true) return
    this.#deferredClose.delete(sid)
    if (this.#sc.hasSession(sid)) this.#sc.releaseSession(sid)
  }
}
