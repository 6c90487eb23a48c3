import {
  type EvictGranularity,
  type EvictionPolicy,
  type HostWritePolicy,
  PagedAllocator,
} from '@kvc/radix-cache'
import { type TierChangeRules, tieredPages } from '@kvc/radix-cache/testing'
import fc from 'fast-check'
import { SessionCacheError, type SessionCacheErrorCode } from '../errors/sessionCacheError.js'
import { SessionCache } from '../session/sessionCache.js'
import type { EvictionEvent, SessionGranularity, SessionRequest } from '../session/types.js'
import { checkSessionInvariants } from './invariants.js'
import { type ModelRequest, SessionReferenceModel } from './referenceModel.js'
import { type MisuseKind, type SessionScriptOptions, type SessionStep, sessionStep } from './script.js'

/**
 * Configuration of {@link sessionModelSetup} and {@link runSessionScript}.
 *
 * @example
 * ```ts
 * const setup = sessionModelSetup({ granularity: 'session', pageSize: 16, poolPages: 12, evictGranularity: 'page' })
 * ```
 */
export interface SessionModelConfig {
  readonly granularity: SessionGranularity
  readonly pageSize: number
  /** KV pool size in pages (default 24): small, so that turns run into memory pressure. */
  readonly poolPages?: number
  readonly evictGranularity?: EvictGranularity
  readonly evictionPolicy?: EvictionPolicy
  /** A host tier of this many pages under the tree (default: none). */
  readonly hostPages?: number
  /** Its write policy (default `'write_back'`). */
  readonly writePolicy?: HostWritePolicy
  /** Host hits longer than this are loaded back at admission (default 0 here: every host hit). */
  readonly loadBackThreshold?: number
  /** The cache's `lentTokensFrozen` (the lent prompts are never written: the tree keeps views). */
  readonly lentTokensFrozen?: boolean
}

/**
 * The model side of a session-cache model run.
 *
 * @example
 * ```ts
 * const { model, real } = sessionModelSetup({ granularity: 'block', pageSize: 4 })()
 * model.model.freeSlots() === real.sc.pool.availableSize() // true
 * ```
 */
export interface SessionModelState {
  readonly model: SessionReferenceModel
  /** Each session id's conversation so far (the client's view; survives release). */
  readonly histories: Map<string, number[]>
  /** Shared boilerplate prefix of first turns and of requests without a session. */
  readonly system: readonly number[]
  counters: { rid: number; extra: number }
}

/**
 * The real side: the cache under test, its clock, the live request objects, what hooks saw.
 *
 * @example
 * ```ts
 * const { real } = sessionModelSetup({ granularity: 'block', pageSize: 4 })()
 * real.sc.openSession('s0')
 * real.clock.t += 10
 * ```
 */
export interface SessionRealState {
  readonly sc: SessionCache
  readonly clock: { t: number }
  readonly reqs: Map<string, SessionRequest>
  readonly finished: SessionRequest[]
  /**
   * The tokens of recently ended requests, copied at their end: they must never change (a
   * session's later turns write to the same token stream, after them).
   */
  readonly endedTokens: Map<SessionRequest, Uint32Array>
  /**
   * Buffers of prompts lent with `copyInputIds: false` (the 64 most recent; with
   * `outputFollowsInput`, the prompt and the tokens after it) and their contents: never written.
   */
  readonly lent: [Uint32Array, Uint32Array][]
  /** While a `turn` step admits its request: the output it will decode. */
  turnOutput: readonly number[] | undefined
  readonly hookCalls: unknown[]
  readonly events: EvictionEvent[]
  /** Another cache, whose requests this one must refuse. */
  readonly foreign: SessionCache
  /** I2: the largest `tokensUnder(lastNode)` seen per held session (block mode). */
  readonly lastResident: Map<string, number>
}

/**
 * A fast-check command of a session-cache model run (one {@link SessionStep}).
 *
 * @example
 * ```ts
 * const cmds: fc.Arbitrary<Iterable<SessionCommand>> = sessionCommands({ sessions: 3 })
 * ```
 */
export type SessionCommand = fc.Command<SessionModelState, SessionRealState>
type Cmd = SessionCommand

function fail(message: string): never {
  throw new Error(message)
}

function sameArray(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** Everything observable, for "a refused call changes nothing". */
function snapshot(r: SessionRealState): string {
  const sc = r.sc
  const st = sc.stats()
  return JSON.stringify({
    acc: sc.poolAccounting(),
    pages: [...tieredPages(sc.cache)].map(([k, p]) => `${k}:${JSON.stringify(p)}`).sort(),
    sessions: sc.listSessionStatuses(),
    slots: sc.listSessionStatuses().map((s) => {
      const slot = sc.getSessionSlot(s.sessionId)!
      return [slot.lastNode, slot.committedLen, slot.activeRid, slot.turns]
    }),
    requests: sc
      .inFlightRequests()
      .map((q) => [
        q.rid,
        q.phase,
        q.cacheProtectedLen,
        q.kvCommittedLen,
        q.kvAllocatedLen,
        q.lastNode,
        q.tokenIds.length,
        Array.from(q.prefixIndices),
      ]),
    stats: { ...st, residentTokensPerSession: [...st.residentTokensPerSession] },
    tree: sc.cache.stats(),
    hooks: r.hookCalls.length,
  })
}

/** Run `fn`, expecting a `SessionCacheError` with `code` and no observable change. */
function expectRefused(
  r: SessionRealState,
  code: SessionCacheErrorCode,
  what: string,
  fn: () => unknown,
): void {
  const before = snapshot(r)
  try {
    fn()
  } catch (e) {
    if (!(e instanceof SessionCacheError)) throw e
    if (e.code !== code) fail(`${what}: expected ${code}, got ${e.code} (${e.message})`)
    const after = snapshot(r)
    if (after !== before) fail(`${what}: refused with ${code} but the state changed`)
    return
  }
  fail(`${what}: expected ${code}, nothing was thrown`)
}

/** Remember an ended request's tokens (the 64 most recent), which must never change. */
function noteEnded(r: SessionRealState, q: SessionRequest): void {
  r.endedTokens.set(q, q.tokenIds.slice())
  if (r.endedTokens.size > 64) r.endedTokens.delete(r.endedTokens.keys().next().value!)
}

/** Check everything that must hold after any step. */
function checkAll(m: SessionModelState, r: SessionRealState): void {
  const sc = r.sc
  const model = m.model
  checkSessionInvariants(sc)
  // Tree: same page paths, tiers, lock and host-reference counts (I5: every lock and host
  // reference is held by a live holder).
  const got = tieredPages(sc.cache)
  const exp = model.tree.pages()
  if (got.size !== exp.size) fail(`tree has ${got.size} pages, model ${exp.size}`)
  for (const [k, p] of exp) {
    const q = got.get(k)
    if (q === undefined || q.lock !== p.lock || q.pin !== p.pin || q.dev !== p.dev || q.host !== p.host)
      fail(`page ${k}: real ${JSON.stringify(q)}, model ${JSON.stringify(p)}`)
  }
  if (model.pendingVictims.length > 0) fail('model: pressure victims left unsettled')
  // Pool: the free count the model derives from the accounting identity.
  const acc = sc.poolAccounting()
  if (acc.free !== model.freeSlots()) fail(`pool free ${acc.free}, model ${model.freeSlots()}`)
  if (acc.requestOwned !== model.requestOwned())
    fail(`requestOwned ${acc.requestOwned}, model ${model.requestOwned()}`)
  if (acc.sessionHeld !== model.sessionHeld())
    fail(`sessionHeld ${acc.sessionHeld}, model ${model.sessionHeld()}`)
  // Sessions.
  const statuses = sc.listSessionStatuses()
  if (statuses.length !== model.sessions.size)
    fail(`${statuses.length} sessions open, model ${model.sessions.size}`)
  for (const st of statuses) {
    const ms = model.sessions.get(st.sessionId)
    if (ms === undefined) fail(`session ${st.sessionId} open, not in the model`)
    const slot = sc.getSessionSlot(st.sessionId)!
    if (slot.committedLen !== ms.committed.length) fail(`session ${ms.id}: committed ${slot.committedLen}`)
    if (slot.turns !== ms.turns) fail(`session ${ms.id}: turns ${slot.turns}, model ${ms.turns}`)
    if (slot.activeRid !== ms.active) fail(`session ${ms.id}: active ${slot.activeRid}, model ${ms.active}`)
    if (slot.lastAccessTime !== ms.lastAccess) fail(`session ${ms.id}: lastAccessTime ${slot.lastAccessTime}`)
    if (slot.extra !== ms.extra) fail(`session ${ms.id}: extra differs`)
    if (slot.demoted !== ms.pinned) fail(`session ${ms.id}: demoted ${slot.demoted}, model ${ms.pinned}`)
    if (sc.granularity === 'block') {
      // I2: the retained committed prefix never shrinks while the session is held (demotion moves
      // it to the host, it does not shrink it).
      const res = slot.lastNode === undefined ? 0 : sc.cache.tokensUnder(slot.lastNode)
      if (st.retainedTokens !== res) fail(`session ${ms.id}: retainedTokens ${st.retainedTokens} != ${res}`)
      const prev = r.lastResident.get(ms.id) ?? 0
      if (res < prev) fail(`I2: session ${ms.id} resident tokens went from ${prev} to ${res}`)
      r.lastResident.set(ms.id, res)
      if (res !== ms.lockLen) fail(`session ${ms.id}: resident ${res}, model lock ${ms.lockLen}`)
    }
  }
  for (const id of r.lastResident.keys()) if (!model.sessions.has(id)) r.lastResident.delete(id)
  // Requests.
  const inFlight = sc.inFlightRequests()
  if (inFlight.length !== model.requests.length)
    fail(`${inFlight.length} requests in flight, model ${model.requests.length}`)
  for (let i = 0; i < inFlight.length; i++) {
    const q = inFlight[i]!
    const mq = model.requests[i]!
    if (q.rid !== mq.rid) fail(`request #${i}: ${q.rid}, model ${mq.rid}`)
    if (
      q.cacheProtectedLen !== mq.protectedLen ||
      q.kvCommittedLen !== mq.committed ||
      q.kvAllocatedLen !== mq.allocated
    ) {
      fail(
        `request ${q.rid}: (${q.cacheProtectedLen}, ${q.kvCommittedLen}, ${q.kvAllocatedLen}) != model (${mq.protectedLen}, ${mq.committed}, ${mq.allocated})`,
      )
    }
    if (!sameArray(q.tokenIds, mq.tokens)) fail(`request ${q.rid}: tokens differ`)
  }
  for (const [a, copy] of r.lent) if (!sameArray(a, copy)) fail('the cache wrote to a lent prompt')
  // Ended requests: their tokens never change, and (block mode) their KV rows are back in the pool.
  for (const [q, tokens] of r.endedTokens) {
    if (!sameArray(q.tokenIds, tokens)) fail(`ended request ${q.rid}: its tokens changed`)
    if (sc.granularity === 'block' && q.reqToToken.length !== 0) fail(`ended request ${q.rid} kept its row`)
  }
  // The extra release hook: each extra exactly once, in the model's order.
  if (
    r.hookCalls.length !== model.expectedHooks.length ||
    r.hookCalls.some((x, i) => x !== model.expectedHooks[i])
  ) {
    fail(`releaseExtra saw ${r.hookCalls.length} calls, model expects ${model.expectedHooks.length}`)
  }
  // Evictions: never more than asked, rounded up to a page when trimming pages.
  const ps = sc.pageSize
  for (const ev of r.events) {
    if (ev.freedTokens <= 0) fail(`eviction event freed ${ev.freedTokens}`)
    if (ev.kind === 'session' && sc.granularity !== 'session') fail('a session-kind eviction in block mode')
    if (ev.kind === 'tree' && sc.cache.evictGranularity === 'page') {
      if (ev.freedTokens > Math.ceil(ev.requestedTokens / ps) * ps) {
        fail(`page eviction freed ${ev.freedTokens} for ${ev.requestedTokens} asked`)
      }
    }
  }
  r.events.length = 0
  const st = sc.stats()
  if (st.sessionsHeld !== model.sessions.size || st.requestsInFlight !== model.requests.length)
    fail('stats counts')
}

/**
 * Settle the sessions the model's pressure picked: the real cache demoted (still open, `demoted`)
 * or released each. Returns the demoted ids, in order.
 */
function settleVictims(m: SessionModelState, r: SessionRealState): string[] {
  const demoted: string[] = []
  for (const v of m.model.pendingVictims.slice()) {
    const slot = r.sc.getSessionSlot(v.id)
    if (slot?.demoted === true) {
      m.model.settle(v, 'demoted')
      demoted.push(v.id)
    } else m.model.settle(v, 'released')
  }
  return demoted
}

/** Adopt the real cache's tiers after a step, checking the change against `rules`. */
function syncTiers(m: SessionModelState, r: SessionRealState, rules: TierChangeRules): void {
  const observed = new Map<string, { dev: boolean; host: boolean }>()
  for (const [k, p] of tieredPages(r.sc.cache)) observed.set(k, { dev: p.dev, host: p.host })
  m.model.tree.applyObserved(observed, rules)
}

/** Allocation pressure may evict, demote pages and sessions, and host-evict. */
const PRESSURE_RULES: TierChangeRules = { deviceEviction: true, hostWrites: 'any' }

/**
 * Pressure outcome: the sessions the cache shed (released, or with a host tier demoted) must be
 * the ones the model predicted; then the tiers are adopted.
 */
function syncPressure(
  m: SessionModelState,
  r: SessionRealState,
  predicted: readonly string[],
  rules: TierChangeRules = PRESSURE_RULES,
): void {
  const demoted = settleVictims(m, r)
  const open = new Set(r.sc.listSessionStatuses().map((s) => s.sessionId))
  const gone = [...m.model.sessions.keys()].filter((id) => !open.has(id))
  const shed = predicted.filter((id) => !open.has(id) || demoted.includes(id))
  if (gone.length > 0 || shed.length !== predicted.length) {
    fail(`pressure shed [${shed}], model predicted [${predicted}]`)
  }
  syncTiers(m, r, rules)
}

function pickRequest(
  m: SessionModelState,
  r: SessionRealState,
  pick: number,
): [ModelRequest, SessionRequest] | undefined {
  const reqs = m.model.requests
  if (reqs.length === 0) return undefined
  const mq = reqs[pick % reqs.length]!
  return [mq, r.reqs.get(mq.rid)!]
}

function sysLen(m: SessionModelState, base: number): number {
  return Math.floor((m.system.length * (base % 4)) / 3)
}

function abortBoth(m: SessionModelState, r: SessionRealState, mq: ModelRequest, q: SessionRequest): void {
  r.sc.abortReq(q)
  m.model.abort(mq)
  r.reqs.delete(mq.rid)
}

/** Grow a request by prefill or decode on both sides; aborts both on a legitimate out-of-memory. */
function grow(
  m: SessionModelState,
  r: SessionRealState,
  mq: ModelRequest,
  q: SessionRequest,
  target: number,
  realCall: () => void,
): boolean {
  const predicted = m.model.grow(mq, target)
  let oom = false
  try {
    realCall()
  } catch (e) {
    if (!(e instanceof SessionCacheError) || e.code !== 'OUT_OF_MEMORY') throw e
    oom = true
  }
  syncPressure(m, r, predicted.released)
  if (oom !== !predicted.ok) fail(`out of memory: real ${oom}, model ${!predicted.ok}`)
  if (oom) {
    if (r.sc.cache.evictableSize() !== 0) fail('out of memory while the tree still had evictable tokens')
    abortBoth(m, r, mq, q)
    return false
  }
  return true
}

function runStep(step: SessionStep, m: SessionModelState, r: SessionRealState): void {
  const sc = r.sc
  const model = m.model
  switch (step.kind) {
    case 'open': {
      const sid = `s${step.session}`
      const ns = step.namespaced ? 'x' : ''
      const extra = step.withExtra ? { extra: m.counters.extra + 1 } : undefined
      const out = model.open(sid, ns, extra)
      if (out.error !== undefined) {
        expectRefused(r, out.error, `open ${sid}`, () => sc.openSession(sid, { extraKey: ns, extra }))
        break
      }
      if (extra !== undefined) m.counters.extra++
      sc.openSession(sid, { extraKey: ns, extra })
      r.lastResident.set(sid, 0)
      break
    }
    case 'turn': {
      const sid = `s${step.session}`
      const sub: SessionStep[] = []
      if (!model.sessions.has(sid)) {
        sub.push({
          kind: 'open',
          session: step.session,
          namespaced: step.session % 2 === 1,
          withExtra: step.chunk % 2 === 0,
        })
      }
      const before = model.requests.length
      for (const s of sub) runSubStep(s, m, r)
      r.turnOutput = step.output
      try {
        runSubStep(
          { kind: 'begin', session: step.session, base: step.chunk, append: step.append, namespaced: false },
          m,
          r,
        )
      } finally {
        r.turnOutput = undefined
      }
      if (model.requests.length === before) break // refused (busy session)
      const rid = model.requests[model.requests.length - 1]!.rid
      const pickOf = (): number | undefined => {
        const i = model.requests.findIndex((x) => x.rid === rid)
        return i < 0 ? undefined : i
      }
      for (let guard = 0; guard < 10_000; guard++) {
        const i = pickOf()
        if (i === undefined) return // aborted (out of memory)
        const mq = model.requests[i]!
        if (mq.committed >= mq.originLen) break
        runSubStep({ kind: 'prefill', pick: i, tokens: step.chunk }, m, r)
      }
      for (const tok of step.output) {
        const i = pickOf()
        if (i === undefined) return
        runSubStep({ kind: 'decode', pick: i, token: tok }, m, r)
      }
      const i = pickOf()
      if (i !== undefined && step.finish)
        runSubStep({ kind: 'finish', pick: i, newExtra: step.output.length % 2 === 1 }, m, r)
      break
    }
    case 'begin': {
      const sid = step.session === null ? undefined : `s${step.session}`
      let prompt: number[]
      if (sid !== undefined) {
        prompt = (m.histories.get(sid) ?? m.system.slice(0, sysLen(m, step.base))).concat(step.append)
      } else if (step.base >= 2 && m.histories.has(`s${step.base - 2}`)) {
        prompt = m.histories.get(`s${step.base - 2}`)!.concat(step.append)
      } else {
        prompt = m.system.slice(0, step.base === 0 ? 0 : sysLen(m, 3)).concat(step.append)
      }
      const extraKey = sid === undefined && step.namespaced ? 'x' : undefined
      const rid = `r${++m.counters.rid}`
      // Odd appends lend the prompt (`copyInputIds: false`): the cache reads it in place. Every
      // other lent prompt is the start of a longer buffer (`outputFollowsInput`) that goes on with
      // the output its turn decodes, or outside a turn with its append again (decode steps read
      // those tokens in place while they agree, and copy at the first that differs).
      const lend = step.append.length % 2 === 1
      const follow = lend && step.append.length % 4 === 1
      let inputIds: number[] | Uint32Array = prompt
      if (lend) {
        const after = follow ? (r.turnOutput ?? step.append) : []
        const buf = new Uint32Array(prompt.length + after.length)
        buf.set(prompt)
        buf.set(after, prompt.length)
        inputIds = buf.subarray(0, prompt.length)
        r.lent.push([buf, buf.slice()])
        if (r.lent.length > 64) r.lent.shift()
      }
      const q = sc.createRequest({
        rid,
        inputIds,
        ...(lend ? { copyInputIds: false } : {}),
        ...(follow ? { outputFollowsInput: true } : {}),
        ...(sid !== undefined ? { sessionId: sid } : {}),
        ...(extraKey !== undefined ? { extraKey } : {}),
      })
      // I1: what the tree alone would give, before anything changes.
      const ns = sid !== undefined ? (model.sessions.get(sid)?.ns ?? '') : (extraKey ?? '')
      const treeOnly = sc.cache.matchPrefix(prompt.slice(0, prompt.length - 1), {
        extraKey: ns,
        readOnly: true,
      })
      // A load-back may bring the host part of the match onto the device (and make room for it).
      const hit = model.tree.match(prompt.slice(0, prompt.length - 1), ns)
      const hostKeys = model.tree.pathKeys(prompt, hit.device + hit.host, ns)
      for (const k of model.tree.pathKeys(prompt, hit.device, ns)) hostKeys.delete(k)
      const out = model.admit(rid, sid, extraKey, prompt)
      if (out.error !== undefined) {
        expectRefused(r, out.error, `begin ${rid} (${sid})`, () => sc.matchPrefix(q))
        break
      }
      const res = sc.matchPrefix(q)
      r.reqs.set(rid, q)
      syncPressure(
        m,
        r,
        out.value.shed,
        model.hostCapacity === 0 ? {} : { ...PRESSURE_RULES, deviceGains: hostKeys },
      )
      if (res.length !== out.value.length) fail(`match ${rid}: ${res.length}, model ${out.value.length}`)
      if (res.loadedTokens !== out.value.loaded)
        fail(`match ${rid}: loaded ${res.loadedTokens}, model ${out.value.loaded}`)
      if (res.fromSlot !== out.value.restored) fail(`match ${rid}: fromSlot ${res.fromSlot}`)
      if (res.reprefillTokens !== out.value.reprefill) fail(`match ${rid}: reprefill ${res.reprefillTokens}`)
      // I1: the tree alone decides the match: its device hit, plus its host hit when loaded back.
      if (
        !res.fromSlot &&
        (res.length !== treeOnly.length + res.loadedTokens ||
          (res.loadedTokens !== 0 && res.loadedTokens !== treeOnly.hostLength) ||
          !sameArray(res.indices.subarray(0, treeOnly.length), treeOnly.indices))
      ) {
        fail(`I1: match of ${rid} (${sid}) differs from the tree's own answer`)
      }
      if (!sameArray(res.indices, q.prefixIndices)) fail(`match ${rid}: indices differ from the row`)
      if (sc.cache.tokensUnder(res.lastNode) !== q.cacheProtectedLen) fail(`match ${rid}: lock position`)
      break
    }
    case 'prefill': {
      const p = pickRequest(m, r, step.pick)
      if (p === undefined) break
      const [mq, q] = p
      const n = Math.min(step.tokens, mq.originLen - mq.committed)
      if (n <= 0) break
      const target = mq.committed + n
      if (!grow(m, r, mq, q, target, () => sc.prefill(q, n))) break
      mq.committed = target
      const exp = model.unfinished(mq, target < mq.originLen)
      const res = sc.cacheUnfinishedReq(q, { chunked: target < mq.originLen })
      syncTiers(m, r, { hostWrites: 'any' }) // write-through copies
      if (
        res.insertedTokens !== exp.inserted ||
        res.prefixLen !== exp.prefixLen ||
        res.freedTokens !== exp.freed ||
        res.protectedLen !== exp.protectedLen
      ) {
        fail(`cacheUnfinishedReq ${mq.rid}: ${JSON.stringify(res)} != model ${JSON.stringify(exp)}`)
      }
      break
    }
    case 'decode': {
      const p = pickRequest(m, r, step.pick)
      if (p === undefined) break
      const [mq, q] = p
      if (mq.committed < mq.originLen) break
      if (mq.tokens.length > mq.originLen) {
        if (!grow(m, r, mq, q, mq.tokens.length, () => sc.decode(q, step.token))) break
        mq.committed = mq.tokens.length
      } else {
        sc.decode(q, step.token)
      }
      mq.tokens.push(step.token)
      break
    }
    case 'retry': {
      const p = pickRequest(m, r, step.pick)
      if (p === undefined) break
      const [mq, q] = p
      const before = Array.from(q.prefixIndices)
      const committedBefore = mq.committed
      const a = sc.matchPrefix(q)
      const b = sc.matchPrefix(q)
      const want = model.rematch(mq)
      // I3: restoring twice gives identical results; without new tree content, the same indices.
      if (a.length !== b.length || !sameArray(a.indices, b.indices) || a.lastNode !== b.lastNode) {
        fail(`I3: retry of ${mq.rid} is not idempotent`)
      }
      if (a.length !== want) fail(`retry ${mq.rid}: ${a.length}, model ${want}`)
      if (want === committedBefore && !sameArray(a.indices, before))
        fail(`I3: retry of ${mq.rid} moved its indices`)
      break
    }
    case 'finish': {
      const p = pickRequest(m, r, step.pick)
      if (p === undefined) break
      const [mq, q] = p
      const extra = step.newExtra && mq.sid !== undefined ? { extra: ++m.counters.extra } : undefined
      const exp = model.finished(mq, extra === undefined ? undefined : { value: extra })
      const res = sc.cacheFinishedReq(q, extra === undefined ? {} : { extra })
      syncTiers(m, r, { hostWrites: 'any' }) // write-through copies
      if (
        res.insertedTokens !== exp.inserted ||
        res.prefixLen !== exp.prefixLen ||
        res.freedTokens !== exp.freed ||
        res.protectedLen !== exp.protectedLen
      ) {
        fail(`cacheFinishedReq ${mq.rid}: ${JSON.stringify(res)} != model ${JSON.stringify(exp)}`)
      }
      if (mq.sid !== undefined) m.histories.set(mq.sid, mq.tokens.slice())
      r.reqs.delete(mq.rid)
      r.finished.push(q)
      noteEnded(r, q)
      if (q.phase !== 'finished' || q.lastNode !== undefined) fail(`request ${mq.rid} not finished`)
      break
    }
    case 'abort': {
      const p = pickRequest(m, r, step.pick)
      if (p === undefined) break
      abortBoth(m, r, p[0], p[1])
      r.finished.push(p[1])
      noteEnded(r, p[1])
      break
    }
    case 'release': {
      const sid = `s${step.session}`
      const slot = sc.getSessionSlot(sid)
      const out = model.release(sid)
      if (out.error !== undefined) {
        expectRefused(r, out.error, `release ${sid}`, () => sc.releaseSession(sid))
        break
      }
      // I5: the session still holds its lock (its host reference, when demoted) until this, its
      // last release.
      if (slot?.lastNode !== undefined && sc.cache.tokensUnder(slot.lastNode) > 0) {
        const info = sc.cache.nodeInfo(slot.lastNode)
        if ((slot.demoted ? info.hostRef : info.lockRef) < 1)
          fail(`I5: session ${sid} lost its ${slot.demoted ? 'host reference' : 'lock'} before release`)
      }
      // What releasing this session alone makes obtainable is exactly its own releasable count.
      const alone = sc.releasableTokens({ sessionId: sid })
      const obtainableBefore = sc.pool.availableSize() + sc.cache.evictableSize()
      const spyBefore = sc.pool.availableSize()
      const freed = sc.releaseSession(sid)
      const gained = sc.pool.availableSize() + sc.cache.evictableSize() - obtainableBefore
      if (gained !== alone)
        fail(`releasableTokens({ sessionId: ${sid} }) said ${alone}, releasing it made ${gained} obtainable`)
      if (freed !== out.value) fail(`release ${sid} freed ${freed}, model ${out.value}`)
      if (sc.pool.availableSize() - spyBefore !== freed)
        fail(`release ${sid}: pool changed by another amount`)
      if (sc.granularity === 'block' && freed !== 0) fail('block-mode release freed KV directly')
      break
    }
    case 'evictIdle': {
      const idleMs = step.idleMs ?? undefined
      const needTokens = step.needTokens ?? undefined
      const devicePages = () => [...tieredPages(sc.cache).values()].filter((p) => p.dev).length
      const pagesBefore = devicePages()
      const exp = model.evictIdle(idleMs, needTokens)
      // A TTL sweep releases exactly the sessions `releasableTokens({ idleMs })` counts: what
      // becomes obtainable (free + evictable) must be that count, to the token.
      const releasable = sc.releasableTokens(idleMs === undefined ? {} : { idleMs })
      const releasableAll = sc.releasableTokens()
      const obtainableBefore = sc.pool.availableSize() + sc.cache.evictableSize()
      const res = sc.evictIdleSessions({
        ...(idleMs !== undefined ? { idleMs } : {}),
        ...(needTokens !== undefined ? { needTokens } : {}),
      })
      const gained = sc.pool.availableSize() + sc.cache.evictableSize() - obtainableBefore
      if (idleMs !== undefined && needTokens === undefined && gained !== releasable) {
        fail(
          `releasableTokens({ idleMs: ${idleMs} }) said ${releasable}, the sweep made ${gained} obtainable`,
        )
      }
      if (gained > releasableAll) {
        fail(`releasing idle sessions made ${gained} obtainable, releasableTokens() said ${releasableAll}`)
      }
      const demoted = settleVictims(m, r)
      const released = exp.released.filter((id) => !demoted.includes(id))
      if (
        res.released.join() !== released.join() ||
        res.demoted.join() !== demoted.join() ||
        res.freedTokens !== exp.freed
      ) {
        fail(
          `evictIdleSessions released [${res.released}] demoted [${res.demoted}] freed ${res.freedTokens}, model [${exp.released}] ${exp.freed}`,
        )
      }
      if (devicePages() !== pagesBefore) fail('evictIdleSessions evicted device pages directly')
      syncTiers(m, r, { hostWrites: 'any' }) // demotion copies paths to the host
      break
    }
    case 'evict': {
      const ps = sc.pageSize
      const evictable = sc.cache.evictableSize()
      const freed = sc.evict(step.tokens)
      const observed = new Map<string, { dev: boolean; host: boolean }>()
      for (const [k, p] of tieredPages(sc.cache)) observed.set(k, { dev: p.dev, host: p.host })
      const removed = model.tree.applyObserved(observed, {
        deviceEviction: true,
        hostWrites: 'demotion',
      }).leftDevice
      if (removed !== freed) fail(`evict reported ${freed}, ${removed} left the device`)
      if (freed < Math.min(step.tokens, evictable))
        fail(`evict(${step.tokens}) freed ${freed} of ${evictable}`)
      if (
        sc.cache.evictGranularity === 'page' &&
        freed !== Math.min(Math.ceil(step.tokens / ps) * ps, evictable)
      ) {
        fail(`page eviction of ${step.tokens} freed ${freed}`)
      }
      break
    }
    case 'tick': {
      model.now += step.ms
      r.clock.t += step.ms
      break
    }
    case 'misuse':
      runMisuse(step.what, step.pick, m, r)
      break
  }
}

function runSubStep(step: SessionStep, m: SessionModelState, r: SessionRealState): void {
  runStep(step, m, r)
  checkAll(m, r)
}

function runMisuse(what: MisuseKind, pick: number, m: SessionModelState, r: SessionRealState): void {
  const sc = r.sc
  const model = m.model
  const sessions = [...model.sessions.values()]
  const idle = sessions.filter((s) => s.active === undefined)
  const busy = sessions.filter((s) => s.active !== undefined)
  const nth = <T>(xs: readonly T[]): T | undefined => (xs.length === 0 ? undefined : xs[pick % xs.length])
  switch (what) {
    case 'finishTwice': {
      const q = nth(r.finished)
      if (q === undefined) return
      expectRefused(r, 'REQUEST_FINISHED', 'finish twice', () => sc.cacheFinishedReq(q))
      expectRefused(r, 'REQUEST_FINISHED', 'abort after the end', () => sc.abortReq(q))
      expectRefused(r, 'REQUEST_FINISHED', 'prefill after the end', () => sc.prefill(q, 1))
      expectRefused(r, 'REQUEST_FINISHED', 'match after the end', () => sc.matchPrefix(q))
      return
    }
    case 'releaseTwice': {
      const sid = nth([...model.released.keys()])
      if (sid === undefined || model.sessions.has(sid)) return
      expectRefused(r, 'SESSION_RELEASED', `release ${sid} twice`, () => sc.releaseSession(sid))
      return
    }
    case 'releaseUnknown':
      expectRefused(r, 'UNKNOWN_SESSION', 'release a never-opened session', () => sc.releaseSession('ghost'))
      return
    case 'releaseBusy': {
      const s = nth(busy)
      if (s === undefined) return
      expectRefused(r, 'SESSION_BUSY', `release busy ${s.id}`, () => sc.releaseSession(s.id))
      return
    }
    case 'openTwice': {
      const s = nth(sessions)
      if (s === undefined) return
      expectRefused(r, 'SESSION_EXISTS', `open ${s.id} twice`, () => sc.openSession(s.id))
      return
    }
    case 'unknownSession': {
      const q = sc.createRequest({ rid: 'ghost-req', sessionId: 'ghost', inputIds: [1, 2, 3] })
      expectRefused(r, 'UNKNOWN_SESSION', 'request for a never-opened session', () => sc.matchPrefix(q))
      return
    }
    case 'busySession': {
      const s = nth(busy)
      if (s === undefined) return
      const q = sc.createRequest({ rid: 'busy-req', sessionId: s.id, inputIds: s.committed.concat([0]) })
      expectRefused(r, 'SESSION_BUSY', `second request for ${s.id}`, () => sc.matchPrefix(q))
      return
    }
    case 'badPrefix': {
      const s = nth(idle.filter((x) => x.committed.length > 0))
      if (s === undefined) return
      let prompt: number[]
      if (pick % 2 === 0) {
        prompt = s.committed.slice() // does not strictly extend
      } else {
        prompt = s.committed.concat([0])
        const i = pick % s.committed.length
        prompt[i] = prompt[i]! + 1
      }
      const q = sc.createRequest({ rid: 'bad-prefix', sessionId: s.id, inputIds: prompt })
      expectRefused(r, 'PREFIX_MISMATCH', `non-append request for ${s.id}`, () => sc.matchPrefix(q))
      return
    }
    case 'namespace': {
      const s = nth(idle)
      if (s === undefined) return
      const q = sc.createRequest({
        rid: 'bad-ns',
        sessionId: s.id,
        extraKey: s.ns === 'x' ? 'y' : 'x',
        inputIds: (m.histories.get(s.id) ?? s.committed).concat([0]),
      })
      expectRefused(r, 'NAMESPACE_MISMATCH', `request for ${s.id} in another namespace`, () =>
        sc.matchPrefix(q),
      )
      return
    }
    case 'duplicateRid': {
      const mq = nth(model.requests)
      if (mq === undefined) return
      const q = sc.createRequest({ rid: mq.rid, inputIds: [1, 2, 3] })
      expectRefused(r, 'DUPLICATE_REQUEST', `second request ${mq.rid}`, () => sc.matchPrefix(q))
      return
    }
    case 'foreignRequest': {
      const q = r.foreign.createRequest({ rid: 'foreign', inputIds: [1, 2, 3] })
      expectRefused(r, 'UNKNOWN_REQUEST', 'a request of another cache', () => sc.matchPrefix(q))
      return
    }
    case 'notAdmitted': {
      const q = sc.createRequest({ rid: 'not-admitted', inputIds: [1, 2, 3] })
      expectRefused(r, 'UNKNOWN_REQUEST', 'prefill before admission', () => sc.prefill(q, 1))
      expectRefused(r, 'UNKNOWN_REQUEST', 'finish before admission', () => sc.cacheFinishedReq(q))
      return
    }
    case 'prefillPast': {
      const p = pickRequest(m, r, pick)
      if (p === undefined) return
      const [mq, q] = p
      expectRefused(r, 'INVALID_REQUEST', `prefill past the prompt of ${mq.rid}`, () =>
        sc.prefill(q, mq.originLen - mq.committed + 1),
      )
      return
    }
    case 'decodeEarly': {
      const mq = nth(model.requests.filter((x) => x.committed < x.originLen))
      if (mq === undefined) return
      const q = r.reqs.get(mq.rid)!
      expectRefused(r, 'INVALID_REQUEST', `decode before the prefill of ${mq.rid}`, () => sc.decode(q, 0))
      return
    }
  }
}

/** A {@link SessionStep} as a fast-check command over the model and the real cache. */
class StepCommand implements Cmd {
  constructor(readonly step: SessionStep) {}
  check(): boolean {
    return true
  }
  run(m: SessionModelState, r: SessionRealState): void {
    runStep(this.step, m, r)
    checkAll(m, r)
  }
  toString(): string {
    return JSON.stringify(this.step)
  }
}

/**
 * Setup function for `fc.modelRun`: a fresh {@link SessionCache} (over a small
 * `PagedAllocator`, logical clock, release hook and eviction log wired in) and a fresh
 * {@link SessionReferenceModel}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { sessionCommands, sessionModelSetup } from '@kvc/session-cache/testing'
 * fc.assert(fc.property(sessionCommands(), (cmds) => {
 *   fc.modelRun(sessionModelSetup({ granularity: 'block', pageSize: 16 }), cmds)
 * }), { numRuns: 50 })
 * ```
 */
export function sessionModelSetup(
  config: SessionModelConfig,
): () => { model: SessionModelState; real: SessionRealState } {
  return () => {
    const clock = { t: 0 }
    const ps = config.pageSize
    const poolSize = (config.poolPages ?? 24) * ps
    const hookCalls: unknown[] = []
    const events: EvictionEvent[] = []
    const hostCapacity = (config.hostPages ?? 0) * ps
    const loadBackThreshold = config.loadBackThreshold ?? 0
    const sc = new SessionCache({
      granularity: config.granularity,
      pool: new PagedAllocator({ size: poolSize, pageSize: ps }),
      pageSize: ps,
      ...(config.hostPages !== undefined
        ? {
            hostTier: {
              capacity: hostCapacity,
              writePolicy: config.writePolicy ?? 'write_back',
              loadBackThreshold,
            },
          }
        : {}),
      ...(config.evictGranularity !== undefined ? { evictGranularity: config.evictGranularity } : {}),
      ...(config.evictionPolicy !== undefined ? { evictionPolicy: config.evictionPolicy } : {}),
      ...(config.lentTokensFrozen !== undefined ? { lentTokensFrozen: config.lentTokensFrozen } : {}),
      now: () => clock.t,
      releaseExtra: (extra) => {
        hookCalls.push(extra)
      },
      onEviction: (e) => {
        events.push(e)
      },
    })
    const system = Array.from({ length: Math.max(16, 4 * ps + 3) }, (_, i) => 100 + i)
    return {
      model: {
        model: new SessionReferenceModel(config.granularity, ps, poolSize, {
          capacity: hostCapacity,
          loadBackThreshold,
        }),
        histories: new Map(),
        system,
        counters: { rid: 0, extra: 0 },
      },
      real: {
        sc,
        clock,
        reqs: new Map(),
        finished: [],
        endedTokens: new Map(),
        lent: [],
        turnOutput: undefined,
        hookCalls,
        events,
        foreign: new SessionCache({ poolSize: ps, pageSize: ps }),
        lastResident: new Map(),
      },
    }
  }
}

/**
 * fast-check arbitrary of command lists built from {@link sessionStep}: each command runs one
 * step on the real cache and on the reference model and then checks everything (see
 * {@link checkSessionInvariants}; plus model agreement on pages, locks, free slots, sessions,
 * requests, release hooks, and refused calls changing nothing). Run them with
 * {@link sessionModelSetup}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { sessionCommands, sessionModelSetup } from '@kvc/session-cache/testing'
 * fc.assert(fc.property(sessionCommands({ sessions: 3 }), (cmds) => {
 *   fc.modelRun(sessionModelSetup({ granularity: 'session', pageSize: 1 }), cmds)
 * }))
 * ```
 */
export function sessionCommands(options: SessionScriptOptions = {}): fc.Arbitrary<Iterable<SessionCommand>> {
  return fc.commands([sessionStep(options).map((s) => new StepCommand(s))], {
    maxCommands: options.maxSteps ?? 80,
    size: 'max',
  })
}

/**
 * Replay a script (from {@link sessionScript}, or written by hand) on a fresh cache and model,
 * checking everything after every step; then drain it (abort what runs, release every session)
 * and check that no lock, slot or `extra` is left behind. Returns the final states.
 *
 * @example
 * ```ts
 * import { runSessionScript } from '@kvc/session-cache/testing'
 * runSessionScript({ granularity: 'block', pageSize: 4 }, [
 *   { kind: 'open', session: 0, namespaced: false, withExtra: true },
 *   { kind: 'begin', session: 0, base: 1, append: [1, 2, 3], namespaced: false },
 *   { kind: 'prefill', pick: 0, tokens: 16 },
 *   { kind: 'finish', pick: 0, newExtra: false },
 * ])
 * ```
 */
export function runSessionScript(
  config: SessionModelConfig,
  steps: readonly SessionStep[],
): { model: SessionModelState; real: SessionRealState } {
  const { model, real } = sessionModelSetup(config)()
  for (const step of steps) new StepCommand(step).run(model, real)
  drainAndCheck(model, real)
  return { model, real }
}

/**
 * End of a run: abort every request in flight and release every session (on both sides), then
 * check I5's conclusion: nothing is locked, the pool holds only free slots and evictable tree
 * pages, and every `extra` went through the release hook exactly once.
 *
 * @example
 * ```ts
 * const { model, real } = sessionModelSetup({ granularity: 'block', pageSize: 1 })()
 * drainAndCheck(model, real)
 * ```
 */
export function drainAndCheck(m: SessionModelState, r: SessionRealState): void {
  for (const mq of m.model.requests.slice()) abortBoth(m, r, mq, r.reqs.get(mq.rid)!)
  for (const id of [...m.model.sessions.keys()]) {
    const out = m.model.release(id)
    const freed = r.sc.releaseSession(id)
    if (out.error !== undefined || freed !== out.value) fail(`drain: release ${id}`)
  }
  checkAll(m, r)
  const sc = r.sc
  if (sc.cache.protectedSize() !== 0)
    fail(`I5: ${sc.cache.protectedSize()} tokens still locked after the drain`)
  if (sc.cache.hostEvictableSize() !== sc.cache.hostOnlySize())
    fail('I5: host-only tokens still locked or host-referenced after the drain')
  for (const p of tieredPages(sc.cache).values())
    if (p.pin !== 0) fail('I5: a host reference left after the drain')
  const acc = sc.poolAccounting()
  if (acc.free + acc.evictable !== acc.poolSize) fail('drain: pool not back to free + evictable')
  const extras = new Set(r.hookCalls)
  if (extras.size !== r.hookCalls.length) fail('an extra was released twice')
  for (let i = 1; i <= m.counters.extra; i++) {
    // Every extra handed in (open or finish) is released exactly once by the end.
    if (![...extras].some((x) => (x as { extra: number }).extra === i)) fail(`extra #${i} never released`)
  }
}
