import { type BlockHasher, type KvEvent, sglangBlockHasher } from '@kvc/radix-cache'
import { DtoPSyncError, DtoPSyncErrorCode, invalidMessage, invalidOption } from '../errors/dtoPSyncError.js'
import { type HoldingsSnapshot, KvEventIndex } from '../holdings/kvEventIndex.js'
import { type CommitOptions, OfferBuilder, retire } from '../offers/offerBuilder.js'
import { type Bandwidth, type PlanSession, planUnchecked, type SyncPlan } from '../planner/planSync.js'
import { checkHints, checkWeights, type PriorityHints, type PriorityWeights } from '../planner/priority.js'
import { messageBytes } from '../protocol/bytes.js'
import type {
  HoldingsView,
  Offer,
  ReplyStatus,
  SyncBlock,
  SyncReply,
  TransferMessage,
} from '../protocol/types.js'
import {
  checkFraction,
  checkNonNegative,
  checkPageSize,
  checkPositive,
  checkSessionId,
  describe,
  monotonicClock,
  validateOffer,
  validateReply,
} from '../protocol/validate.js'

/**
 * Options of {@link SyncSource}.
 *
 * @example
 * ```ts
 * import { SyncSource, type SyncSourceOptions } from '@kvc/dto-p-sync'
 * const opts: SyncSourceOptions = {
 *   pageSize: 64, beta: 1024, now: () => performance.now(),
 *   bandwidth: { bytesPerSecond: 5e9, kvBytesPerToken: 98_304 },
 *   trustPrefillEvents: false, // P pins instead
 * }
 * const source = new SyncSource(opts)
 * ```
 */
export interface SyncSourceOptions {
  /** Tokens per page (D's and P's caches'). */
  readonly pageSize: number
  /** Staleness budget β in tokens. */
  readonly beta: number
  /** Bandwidth the sync may use and the model's KV bytes per token. */
  readonly bandwidth: Bandwidth
  /** Clock in milliseconds. */
  readonly now: () => number
  /** Hasher for {@link SyncSource.commitTurn} (default `sglangBlockHasher()`); the same as P's cache. */
  readonly blockHasher?: BlockHasher
  /**
   * Count pages P holds according to its KV events ({@link SyncSource.observePrefillEvent}) as
   * synced, while the event feed has no gap (default `true`). Sound when the feed is in order and
   * prompt (in-process, or a simulator); with a lossy or late feed set it to `false` and let P pin
   * (`pinTtlMs` on the sink): then only pinned, acknowledged pages count.
   */
  readonly trustPrefillEvents?: boolean
  /** Pins are counted only until `pinnedUntil − pinSafetyMarginMs` (clock skew; default 0). */
  readonly pinSafetyMarginMs?: number
  /**
   * Plan as if pins expire this much earlier (default: the planning horizon), so that they are
   * renewed (a check-and-pin of a few bytes) before they lapse.
   */
  readonly renewAheadMs?: number
  /** A transfer neither answered nor reported failed is forgotten after this long (default 32 s). */
  readonly inFlightTimeoutMs?: number
  /** Largest transfer in blocks (default 64). */
  readonly maxBlocksPerTransfer?: number
  /** Spend spare bandwidth on the rest of every chain (default `false`). */
  readonly eager?: boolean
  readonly weights?: PriorityWeights
  /** Which blocks D still holds (its own cache's KV events); default: all. */
  readonly decodeHolds?: HoldingsView
  /**
   * This D's id on the wire (`TransferMessage.origin`, default `''`). Give every D that syncs to
   * the same P its own, and a restarted D process a new one (its id and start time, say): P keeps
   * versions, sequence numbers and pins per origin, so a session that moved between Ds is synced
   * by each of them.
   */
  readonly origin?: string
  /**
   * After P answers `no-space` (it could not make room even by evicting), this source sends
   * nothing for this long, doubling on every further refusal up to `maxNoSpaceBackoffMs`, and
   * back to normal once P applies a transfer again (defaults 250 ms and 8 s). Without it a full P
   * gets the same chains again every round, and the segments pipelined behind a refused one
   * arrive without their parent (`unknown-parent`): bandwidth spent on KV that P throws away.
   */
  readonly noSpaceBackoffMs?: number
  readonly maxNoSpaceBackoffMs?: number
  /**
   * Room on P for this D's sessions, in tokens (default: unlimited): see
   * `PlanInput.maxHeldTokens`. Set it to this D's share of what P can keep (its KV pool less its
   * own working set), or a P smaller than the synced sessions keeps evicting what it ingests.
   */
  readonly maxHeldTokens?: number
  /**
   * This source's view of P, built from P's KV events (default: its own). Give every source that
   * syncs to the same P one shared {@link KvEventIndex}: each P event is then applied once, not
   * once per D (the index ignores an event id it has seen, so feeding the event to every source
   * stays harmless), and a hash one source learns P lacks is dropped for all of them.
   */
  readonly prefillView?: KvEventIndex
}

/**
 * The sound per-session report: what a reseed on P would re-prefill now, beyond the append.
 * `withinBudget` is `true` only when `staleness ≤ β` is guaranteed by pinned, acknowledged pages
 * (or by P's KV events, when trusted), never by transfers still in flight.
 *
 * @example
 * ```ts
 * import type { SessionSyncStatus } from '@kvc/dto-p-sync'
 * const reseedCost = (s: SessionSyncStatus, append: number) => s.staleness + append
 * ```
 */
export interface SessionSyncStatus {
  readonly sessionId: string
  readonly version: number
  readonly committedTokens: number
  /** Full committed pages D can offer. */
  readonly syncablePages: number
  /** Leading pages P is known for sure to hold. */
  readonly confirmedPages: number
  readonly confirmedTokens: number
  /** `committedTokens − confirmedTokens`. */
  readonly staleness: number
  readonly withinBudget: boolean
  /** Blocks of the session in transfers not yet answered. */
  readonly inFlightBlocks: number
}

/**
 * Counters of a {@link SyncSource}.
 *
 * @example
 * ```ts
 * import type { SourceMetrics } from '@kvc/dto-p-sync'
 * const kvShare = (m: SourceMetrics) => m.kvBytesSent / Math.max(1, m.bytesSent)
 * ```
 */
export interface SourceMetrics {
  readonly rounds: number
  readonly messagesSent: number
  /** Bytes put on the link (KV, tokens, headers). */
  readonly bytesSent: number
  readonly kvBytesSent: number
  /** Blocks sent with their KV. */
  readonly kvBlocksSent: number
  /** Blocks sent without KV because P already held them (dedup against P's holdings). */
  readonly dedupBlocks: number
  readonly repliesReceived: number
  /** Replies by status. */
  readonly replies: Readonly<Record<ReplyStatus, number>>
  /** Replies that arrived for a message no longer in flight (late or duplicated). */
  readonly lateReplies: number
  /** Transfers the transport reported failed. */
  readonly transferFailures: number
  /** Transfers forgotten after `inFlightTimeoutMs` without an answer. */
  readonly inFlightExpired: number
  /** Sum over rounds of the sessions the planner reported over β. */
  readonly budgetViolations: number
  /** Rounds that sent nothing because P had answered `no-space` (see `noSpaceBackoffMs`). */
  readonly pausedRounds: number
  /** Sessions reported over β by the last round. */
  readonly lastOverBudget: readonly string[]
}

interface SourcePin {
  pages: number
  until: number
}

interface SourceSession {
  readonly id: string
  extraKey: string
  version: number
  committedTokens: number
  blocks: SyncBlock[]
  lastCommitAt: number
  hints: PriorityHints | undefined
  pins: SourcePin[]
  nextSeq: number
  /** Cached length of the chain prefix P's events say it holds, valid for `evGen`. */
  evPrefix: number
  evGen: number
  /** Blocks of the session in transfers in flight. */
  inFlightBlocks: number
}

interface InFlight {
  sessionId: string
  seq: number
  hashes: bigint[]
  sentAt: number
}

type MutableMetrics = { -readonly [K in keyof SourceMetrics]: SourceMetrics[K] } & {
  replies: Record<ReplyStatus, number>
}

/**
 * D side of the sync: keeps every synced session's chain of committed pages (from
 * {@link Offer}s), knows what P holds (acknowledged pins, P's KV events), plans each round with
 * {@link planSync} and turns the plan into {@link TransferMessage}s; answers to them
 * ({@link SyncReply}) and transport failures update what it knows. Its {@link SyncSource.status}
 * is the sound report Theorem 4 rests on: when it says a session is within β, a reseed of that
 * session on P re-prefills at most `β + append` tokens.
 *
 * Transport-agnostic: {@link SyncSource.plan} returns the messages to send; wire replies to
 * {@link SyncSource.handleReply} and failures to {@link SyncSource.markFailed}, or use
 * {@link wireSync}.
 *
 * @example
 * ```ts
 * import { SyncSource } from '@kvc/dto-p-sync'
 * import { fnvBlockHasher } from '@kvc/dto-p-sync/testing'
 * let now = 0
 * const source = new SyncSource({
 *   pageSize: 4, beta: 8, now: () => now, blockHasher: fnvBlockHasher(),
 *   bandwidth: { bytesPerSecond: 1e6, kvBytesPerToken: 1000 },
 * })
 * source.commitTurn('s1', Array.from({ length: 41 }, (_, i) => i))
 * const { messages } = source.plan(100)
 * console.log(messages.length, source.status('s1').withinBudget) // 1 false (nothing confirmed yet)
 * ```
 */
export class SyncSource {
  readonly pageSize: number
  readonly beta: number
  readonly bandwidth: Bandwidth
  /** The injected clock, read through a check that it never goes back. */
  readonly #clock: () => number
  readonly #offers: OfferBuilder
  readonly #trustEvents: boolean
  readonly #margin: number
  readonly #renewAhead: number | undefined
  readonly #inFlightTimeout: number
  readonly #maxBlocks: number
  readonly #eager: boolean
  readonly #weights: PriorityWeights | undefined
  readonly #decodeHolds: HoldingsView | undefined
  readonly #view: KvEventIndex
  readonly #sessions = new Map<string, SourceSession>()
  /** Next message numbers of ended sessions, so that a session coming back keeps counting up. */
  readonly #retiredSeq = new Map<string, number>()
  readonly #origin: string | undefined
  readonly #backoffBase: number
  readonly #maxHeld: number | undefined
  readonly #backoffMax: number
  /** Consecutive `no-space` answers, and the time before which nothing is sent. */
  #refusals = 0
  #pausedUntil = Number.NEGATIVE_INFINITY
  readonly #inFlight = new Map<string, InFlight>()
  readonly #inFlightHashes = new Map<bigint, number>()
  #pressure = 0
  readonly #m: MutableMetrics = {
    rounds: 0,
    messagesSent: 0,
    bytesSent: 0,
    kvBytesSent: 0,
    kvBlocksSent: 0,
    dedupBlocks: 0,
    repliesReceived: 0,
    replies: {
      applied: 0,
      partial: 0,
      duplicate: 0,
      stale: 0,
      'unknown-parent': 0,
      'missing-kv': 0,
      'no-space': 0,
      rejected: 0,
    },
    lateReplies: 0,
    transferFailures: 0,
    inFlightExpired: 0,
    budgetViolations: 0,
    pausedRounds: 0,
    lastOverBudget: [],
  }

  constructor(options: SyncSourceOptions) {
    if (options === null || typeof options !== 'object')
      throw invalidOption('options must be an object', options)
    this.pageSize = checkPageSize(options.pageSize)
    this.beta = checkNonNegative('beta', options.beta)
    const bw = options.bandwidth
    if (bw === null || typeof bw !== 'object')
      throw invalidOption('bandwidth must be { bytesPerSecond, kvBytesPerToken }', bw)
    checkPositive('bandwidth.bytesPerSecond', bw.bytesPerSecond)
    checkNonNegative('bandwidth.kvBytesPerToken', bw.kvBytesPerToken)
    this.bandwidth = { bytesPerSecond: bw.bytesPerSecond, kvBytesPerToken: bw.kvBytesPerToken }
    this.#clock = monotonicClock(options.now)
    this.#offers = new OfferBuilder({
      pageSize: this.pageSize,
      blockHasher: options.blockHasher ?? sglangBlockHasher(),
    })
    const view = options.prefillView ?? new KvEventIndex()
    if (!(view instanceof KvEventIndex)) throw invalidOption('prefillView must be a KvEventIndex', view)
    this.#view = view
    const trust = options.trustPrefillEvents ?? true
    if (typeof trust !== 'boolean') throw invalidOption('trustPrefillEvents must be a boolean', trust)
    this.#trustEvents = trust
    this.#margin = checkNonNegative('pinSafetyMarginMs', options.pinSafetyMarginMs ?? 0)
    this.#renewAhead =
      options.renewAheadMs === undefined ? undefined : checkNonNegative('renewAheadMs', options.renewAheadMs)
    this.#inFlightTimeout = checkNonNegative('inFlightTimeoutMs', options.inFlightTimeoutMs ?? 32_000)
    this.#maxBlocks = checkNonNegative('maxBlocksPerTransfer', options.maxBlocksPerTransfer ?? 64, true)
    if (this.#maxBlocks === 0) throw invalidOption('maxBlocksPerTransfer must be at least 1', 0)
    const eager = options.eager ?? false
    if (typeof eager !== 'boolean') throw invalidOption('eager must be a boolean', eager)
    this.#eager = eager
    this.#weights = options.weights === undefined ? undefined : checkWeights(options.weights)
    const dh = options.decodeHolds
    if (dh !== undefined && (dh === null || typeof dh.has !== 'function'))
      throw invalidOption('decodeHolds must have has(hash)', dh)
    this.#decodeHolds = dh
    const origin = options.origin
    if (origin !== undefined && typeof origin !== 'string')
      throw invalidOption('origin must be a string', origin)
    this.#origin = origin === '' ? undefined : origin
    this.#maxHeld =
      options.maxHeldTokens === undefined
        ? undefined
        : checkNonNegative('maxHeldTokens', options.maxHeldTokens)
    this.#backoffBase = checkNonNegative('noSpaceBackoffMs', options.noSpaceBackoffMs ?? 250)
    this.#backoffMax = checkNonNegative('maxNoSpaceBackoffMs', options.maxNoSpaceBackoffMs ?? 8_000)
    if (this.#backoffMax < this.#backoffBase) {
      throw invalidOption(
        `maxNoSpaceBackoffMs (${this.#backoffMax}) must be at least noSpaceBackoffMs (${this.#backoffBase})`,
        this.#backoffMax,
      )
    }
  }

  /**
   * Commit a turn of `sessionId` (its whole history so far) and record the resulting offer.
   * Shorthand for an {@link OfferBuilder} plus {@link SyncSource.addOffer}.
   *
   * @example
   * ```ts
   * // source.commitTurn('s1', [...prompt, ...output])
   * ```
   */
  commitTurn(sessionId: string, history: ArrayLike<number>, options?: CommitOptions): Offer {
    const offer = this.#offers.commitTurn(sessionId, history, options)
    this.addOffer(offer)
    return offer
  }

  /**
   * Record an offer (from an {@link OfferBuilder} on D). Offers of a session must come in version
   * order: an offer not newer than the session's version is ignored (returns `false`); one that
   * does not continue the session's chain is refused with `INVALID_MESSAGE`.
   *
   * @example
   * ```ts
   * // source.addOffer(offers.commitTurn('s1', history))
   * ```
   */
  addOffer(offer: Offer): boolean {
    validateOffer(offer, this.pageSize)
    const now = this.#clock()
    const s = this.#sessions.get(offer.sessionId)
    if (s !== undefined && offer.version <= s.version) return false
    const nsChanged = s !== undefined && s.extraKey !== offer.extraKey
    const prev = nsChanged ? [] : (s?.blocks ?? [])
    if (offer.firstPage > prev.length) {
      throw invalidMessage(
        `offer for ${offer.sessionId} starts at page ${offer.firstPage}, the chain has ${prev.length}${nsChanged ? ' in its new namespace' : ''}`,
        offer.firstPage,
      )
    }
    if (
      offer.blocks.length > 0 &&
      offer.firstPage > 0 &&
      offer.blocks[0]!.parentHash !== prev[offer.firstPage - 1]!.hash
    ) {
      throw invalidMessage(
        `offer for ${offer.sessionId} does not chain onto page ${offer.firstPage - 1}`,
        offer.firstPage,
      )
    }
    const session: SourceSession = s ?? {
      id: offer.sessionId,
      extraKey: offer.extraKey,
      version: 0,
      committedTokens: 0,
      blocks: [],
      lastCommitAt: now,
      hints: undefined,
      pins: [],
      nextSeq: this.#retiredSeq.get(offer.sessionId) ?? 0,
      evPrefix: 0,
      evGen: -1,
      inFlightBlocks: 0,
    }
    if (nsChanged) {
      session.pins = []
      session.extraKey = offer.extraKey
    }
    const cut = offer.firstPage
    session.blocks = prev.slice(0, cut).concat(offer.blocks)
    // A rewritten history: pins still cover the common prefix only.
    if (cut < prev.length) for (const p of session.pins) p.pages = Math.min(p.pages, cut)
    if (session.evPrefix > cut) session.evPrefix = cut
    session.version = offer.version
    session.committedTokens = offer.committedTokens
    session.lastCommitAt = now
    if (s === undefined) this.#retiredSeq.delete(offer.sessionId)
    this.#sessions.set(offer.sessionId, session)
    return true
  }

  /**
   * Priority hints of a session (D pressure, reseed likelihood...; `idleMs` is derived from the
   * last commit when not given). Throws `UNKNOWN_SESSION` for a session never offered.
   *
   * @example
   * ```ts
   * // source.setHints('s1', { reseedLikelihood: 0.8 })
   * ```
   */
  setHints(sessionId: string, hints: PriorityHints | undefined): void {
    checkSessionId(sessionId)
    checkHints(hints)
    this.#get(sessionId).hints = hints === undefined ? undefined : { ...hints }
  }

  /**
   * KV usage of this D worker in `[0, 1]`, used as every session's `dPressure` unless its hints
   * say otherwise.
   *
   * @example
   * ```ts
   * // source.setDecodePressure(decodeCache.totalSize() / poolSize)
   * ```
   */
  setDecodePressure(pressure: number): void {
    this.#pressure = checkFraction('pressure', pressure)
  }

  /**
   * Forget a session (finished, or released on D with nothing left to sync). Its in-flight
   * transfers are forgotten too. Returns whether it was known.
   *
   * @example
   * ```ts
   * // source.endSession('s1')
   * ```
   */
  endSession(sessionId: string): boolean {
    const s = this.#sessions.get(sessionId)
    if (s !== undefined) retire(this.#retiredSeq, sessionId, s.nextSeq)
    const known = this.#sessions.delete(sessionId)
    this.#offers.endSession(sessionId)
    for (const [k, f] of this.#inFlight) if (f.sessionId === sessionId) this.#dropInFlight(k, f)
    return known
  }

  /**
   * Feed one KV event of P's cache (dedup hints, and confirmation when `trustPrefillEvents`).
   * Returns `false` for an old or repeated event.
   *
   * @example
   * ```ts
   * // prefillCache onEvent: (e) => { sink.observe(e); source.observePrefillEvent(e) }
   * ```
   */
  observePrefillEvent(event: KvEvent): boolean {
    return this.#view.apply(event)
  }

  /**
   * Resynchronise the view of P after an event gap ({@link SyncSink.snapshot}).
   *
   * @example
   * ```ts
   * // if (!source.prefillViewConsistent) source.applyPrefillSnapshot(sink.snapshot())
   * ```
   */
  applyPrefillSnapshot(snapshot: HoldingsSnapshot): void {
    this.#view.resync(snapshot)
  }

  /** `false` after a gap in P's event feed, until {@link SyncSource.applyPrefillSnapshot}. */
  get prefillViewConsistent(): boolean {
    return this.#view.consistent
  }

  /**
   * Plan one round (see {@link planSync}) for the next `horizonMs`, with `backlogBytes` still queued
   * on the link, and return the plan and the messages to send, in order. The messages are
   * recorded as in flight.
   *
   * @example
   * ```ts
   * // const { messages } = source.plan(100, link.backlogBytes())
   * // for (const m of messages) link.send(m, messageBytes(m, kvBytesPerToken))
   * ```
   */
  plan(
    horizonMs: number,
    backlogBytes = 0,
  ): { readonly plan: SyncPlan; readonly messages: TransferMessage[] } {
    checkNonNegative('horizonMs', horizonMs)
    checkNonNegative('backlogBytes', backlogBytes)
    const now = this.#clock()
    const ahead = now + (this.#renewAhead ?? horizonMs)
    const sessions: PlanSession[] = []
    for (const s of this.#sessions.values()) {
      const hints: PriorityHints = {
        dPressure: s.hints?.dPressure ?? this.#pressure,
        idleMs: s.hints?.idleMs ?? Math.max(0, now - s.lastCommitAt),
        reseedLikelihood: s.hints?.reseedLikelihood ?? 0,
      }
      sessions.push({
        sessionId: s.id,
        extraKey: s.extraKey,
        version: s.version,
        committedTokens: s.committedTokens,
        blocks: s.blocks,
        confirmedPages: this.#confirmedPages(s, ahead),
        hints,
      })
    }
    // Nothing in flight (the usual case when replies come back within a round): no lookups.
    const inFlight: HoldingsView | undefined =
      this.#inFlightHashes.size === 0 ? undefined : { has: (h) => this.#inFlightHashes.has(h) }
    // A trusted, consistent view already counts P's held pages in each session's confirmed prefix,
    // and P's radix tree holds a chain's pages as a prefix (chained hashes: a page implies its
    // parent), so no page past that prefix is held: asking the view again for each one would only
    // cost a lookup per page per round.
    const prefillHolds = this.#trustEvents && this.#view.consistent ? undefined : this.#view
    // Backing off after P said it has no space: plan (for the report) but spend nothing.
    const paused = now < this.#pausedUntil
    if (paused) this.#m.pausedRounds++
    const plan = planUnchecked({
      sessions,
      pageSize: this.pageSize,
      beta: this.beta,
      bandwidth: this.bandwidth,
      horizonMs: paused ? 0 : horizonMs,
      backlogBytes,
      ...(prefillHolds === undefined ? {} : { prefillHolds }),
      ...(inFlight === undefined ? {} : { inFlight }),
      ...(this.#decodeHolds === undefined ? {} : { available: this.#decodeHolds }),
      ...(this.#weights === undefined ? {} : { weights: this.#weights }),
      maxBlocksPerTransfer: this.#maxBlocks,
      eager: this.#eager,
      ...(this.#maxHeld === undefined ? {} : { maxHeldTokens: this.#maxHeld }),
    })
    const kvb = this.bandwidth.kvBytesPerToken
    const messages: TransferMessage[] = []
    for (const t of plan.transfers) {
      const s = this.#sessions.get(t.sessionId)!
      const msg: TransferMessage = {
        ...(this.#origin === undefined ? {} : { origin: this.#origin }),
        sessionId: t.sessionId,
        version: t.version,
        seq: s.nextSeq++,
        extraKey: t.extraKey,
        startPage: t.startPage,
        blocks: t.blocks,
      }
      messages.push(msg)
      const hashes = t.blocks.map((b) => b.hash)
      const key = flightKey(msg.sessionId, msg.seq)
      this.#inFlight.set(key, { sessionId: msg.sessionId, seq: msg.seq, hashes, sentAt: now })
      for (const h of hashes) this.#inFlightHashes.set(h, (this.#inFlightHashes.get(h) ?? 0) + 1)
      s.inFlightBlocks += hashes.length
      this.#m.messagesSent++
      this.#m.bytesSent += messageBytes(msg, kvb)
      this.#m.kvBlocksSent += t.kvBlocks
      this.#m.kvBytesSent += t.kvBlocks * this.pageSize * kvb
      this.#m.dedupBlocks += t.blocks.length - t.kvBlocks
    }
    this.#m.rounds++
    this.#m.budgetViolations += plan.overBudget.length
    this.#m.lastOverBudget = plan.overBudget
    return { plan, messages }
  }

  /**
   * Take P's answer to a transfer into account: clears it from the in-flight set, records the pin
   * it reports (when it matches the session's chain), and drops a hash P said it lacks from the
   * view of P. Replies for unknown sessions are ignored. Throws `INVALID_MESSAGE` for a malformed
   * reply.
   *
   * @example
   * ```ts
   * // backward link deliver: (d) => d.phase === 'end' && d.complete && source.handleReply(d.message)
   * ```
   */
  handleReply(reply: SyncReply): void {
    validateReply(reply)
    const now = this.#clock()
    this.#m.repliesReceived++
    this.#m.replies[reply.status]++
    const key = flightKey(reply.sessionId, reply.seq)
    const f = this.#inFlight.get(key)
    if (f !== undefined) this.#dropInFlight(key, f)
    else this.#m.lateReplies++
    if (reply.missingHash !== null) this.#view.forget(reply.missingHash)
    if (reply.status === 'no-space') {
      this.#refusals++
      const wait = Math.min(this.#backoffMax, this.#backoffBase * 2 ** Math.min(30, this.#refusals - 1))
      this.#pausedUntil = Math.max(this.#pausedUntil, now + wait)
    } else if (reply.status === 'applied' || (reply.status === 'partial' && reply.ingestedBlocks > 0)) {
      this.#refusals = 0
    }
    const s = this.#sessions.get(reply.sessionId)
    if (s === undefined) return
    if (reply.pinnedUntil !== null && reply.heldPages > 0 && reply.pinnedUntil - this.#margin > now) {
      const b = s.blocks[reply.heldPages - 1]
      if (b !== undefined && b.hash === reply.throughHash)
        addPin(s.pins, reply.heldPages, reply.pinnedUntil - this.#margin)
    }
  }

  /**
   * The transport reported transfer `(sessionId, seq)` failed: forget it, so its blocks are
   * planned again.
   *
   * @example
   * ```ts
   * // forward link status: (st) => { if (!st.ok) source.markFailed(st.message.sessionId, st.message.seq) }
   * ```
   */
  markFailed(sessionId: string, seq: number): void {
    checkSessionId(sessionId)
    if (!Number.isSafeInteger(seq) || seq < 0)
      throw invalidMessage(`seq must be a non-negative integer, got ${describe(seq)}`, seq)
    const key = flightKey(sessionId, seq)
    const f = this.#inFlight.get(key)
    if (f === undefined) return
    this.#dropInFlight(key, f)
    this.#m.transferFailures++
  }

  /**
   * Forget transfers older than `inFlightTimeoutMs` and drop expired pins. Call it as the clock
   * advances. Returns the number of transfers forgotten.
   *
   * @example
   * ```ts
   * // every tick: source.expire()
   * ```
   */
  expire(): number {
    const now = this.#clock()
    let n = 0
    for (const [k, f] of this.#inFlight) {
      if (f.sentAt + this.#inFlightTimeout <= now) {
        this.#dropInFlight(k, f)
        n++
      }
    }
    this.#m.inFlightExpired += n
    for (const s of this.#sessions.values())
      if (s.pins.length > 0) s.pins = s.pins.filter((p) => p.until > now)
    return n
  }

  /**
   * The sound staleness report of one session (see {@link SessionSyncStatus}). Throws
   * `UNKNOWN_SESSION` for a session never offered.
   *
   * @example
   * ```ts
   * // if (source.status('s1').withinBudget) { reseed on P costs at most beta + append }
   * ```
   */
  status(sessionId: string): SessionSyncStatus {
    checkSessionId(sessionId)
    const s = this.#get(sessionId)
    return this.#status(s, this.#clock())
  }

  /**
   * {@link SyncSource.status} of every session.
   *
   * @example
   * ```ts
   * // const late = source.statuses().filter((s) => !s.withinBudget)
   * ```
   */
  statuses(): SessionSyncStatus[] {
    const now = this.#clock()
    return [...this.#sessions.values()].map((s) => this.#status(s, now))
  }

  /**
   * Ids of the sessions being synced.
   *
   * @example
   * ```ts
   * // source.sessionIds()
   * ```
   */
  sessionIds(): string[] {
    return [...this.#sessions.keys()]
  }

  /**
   * Transfers sent and not yet answered, failed or expired.
   *
   * @example
   * ```ts
   * // source.inFlightCount()
   * ```
   */
  inFlightCount(): number {
    return this.#inFlight.size
  }

  /**
   * Counters since construction.
   *
   * @example
   * ```ts
   * // const { bytesSent, dedupBlocks, budgetViolations } = source.metrics()
   * ```
   */
  metrics(): SourceMetrics {
    return { ...this.#m, replies: { ...this.#m.replies }, lastOverBudget: [...this.#m.lastOverBudget] }
  }

  #status(s: SourceSession, now: number): SessionSyncStatus {
    const c = this.#confirmedPages(s, now)
    const confirmedTokens = c * this.pageSize
    const staleness = s.committedTokens - confirmedTokens
    return {
      sessionId: s.id,
      version: s.version,
      committedTokens: s.committedTokens,
      syncablePages: s.blocks.length,
      confirmedPages: c,
      confirmedTokens,
      staleness,
      withinBudget: staleness <= this.beta,
      inFlightBlocks: s.inFlightBlocks,
    }
  }

  /** Leading pages of `s`'s chain P is known to hold at time `at`. */
  #confirmedPages(s: SourceSession, at: number): number {
    let c = 0
    for (const p of s.pins) if (p.until > at && p.pages > c) c = p.pages
    c = Math.min(c, s.blocks.length)
    if (this.#trustEvents && this.#view.consistent) {
      const e = this.#eventPrefix(s)
      if (e > c) c = e
    }
    return c
  }

  /**
   * Leading pages of `s`'s chain in the view of P's events. Incremental: P's radix tree only loses
   * pages from the tail of a path and only gains them below pages it holds, so the held part of a
   * chain is a prefix; walk back from the cached boundary while it shrank, then forward while it
   * grew. A full rescan only after the view was reset (gap, correction, clear, resync).
   */
  #eventPrefix(s: SourceSession): number {
    const view = this.#view
    const blocks = s.blocks
    let k: number
    if (s.evGen !== view._resetGeneration) {
      k = 0
      s.evGen = view._resetGeneration
    } else {
      k = Math.min(s.evPrefix, blocks.length)
      while (k > 0 && !view.has(blocks[k - 1]!.hash)) k--
    }
    while (k < blocks.length && view.has(blocks[k]!.hash)) k++
    s.evPrefix = k
    return k
  }

  #get(sessionId: string): SourceSession {
    const s = this.#sessions.get(sessionId)
    if (s === undefined) {
      throw new DtoPSyncError(
        DtoPSyncErrorCode.UnknownSession,
        `session ${sessionId} is not synced by this source`,
        sessionId,
      )
    }
    return s
  }

  #dropInFlight(key: string, f: InFlight): void {
    this.#inFlight.delete(key)
    const s = this.#sessions.get(f.sessionId)
    if (s !== undefined) s.inFlightBlocks -= f.hashes.length
    for (const h of f.hashes) {
      const c = this.#inFlightHashes.get(h)! - 1
      if (c <= 0) this.#inFlightHashes.delete(h)
      else this.#inFlightHashes.set(h, c)
    }
  }
}

function flightKey(sessionId: string, seq: number): string {
  return `${seq}\u0000${sessionId}`
}

/** Add a pin, dropping pins it dominates (no more pages, expiring no later). */
function addPin(pins: SourcePin[], pages: number, until: number): void {
  for (const p of pins) if (p.pages >= pages && p.until >= until) return
  let w = 0
  for (let i = 0; i < pins.length; i++) {
    const p = pins[i]!
    if (!(p.pages <= pages && p.until <= until)) pins[w++] = p
  }
  pins.length = w
  pins.push({ pages, until })
}
