/**
 * The emulated worker without HTTP: the real KV pool, radix cache and session cache, admission
 * leases, the request lifecycle (wait for memory, prefill or receive the KV, decode token by
 * token, commit), sessions, KV events and counters. The HTTP server drives it.
 *
 * @internal
 * @module
 */
import {
  type AdmitRequest,
  type AdmitResponse,
  LeaseBook,
  admit,
  type DecodeStateSource,
  admitWorkerState,
} from '@kvc/kvc-router'
import { PagedAllocator, RadixCache } from '@kvc/radix-cache'
import { SessionCache, SessionCacheError, type SessionRequest } from '@kvc/session-cache'
import { FAKE_BOOTSTRAP_HOST, fromRadixKvEvent } from '@kvc/worker-bindings'
import type { EmulatorConfig, EmulatorRole } from '../config/options.js'
import type { FaultInjector } from '../faults/faults.js'
import { EmulatorCounters, renderMetrics } from '../metrics/emulatorMetrics.js'
import { fakeDetokenize, fakeNextToken, fakePromptHash } from '../model/fakeModel.js'
import { PrefillRooms, prefillRegistry } from '../pd/prefillRooms.js'
import { decodeStepMs, prefillMs, transferMs } from '../timing/timing.js'
import { KvEventStream } from './kvEventStream.js'
import { SessionBook } from './sessions.js'
import { EngineError, type EngineOutput, type EngineRequest, type ProgressSink } from './types.js'
import { MemoryWaiters, sleepScaled, throwIfAborted } from './waits.js'

/**
 * Counters and state of an emulator.
 *
 * @example
 * ```ts
 * import { createSglangEmulator } from '@kvc/sglang-emulator'
 * const emu = await createSglangEmulator({ timing: { scale: 0 } })
 * const { treeTokens, freeTokens, balanced } = emu.stats()
 * await emu.close()
 * ```
 */
export interface EmulatorStats {
  readonly runningRequests: number
  readonly waitingRequests: number
  readonly requestsTotal: number
  readonly promptTokensTotal: number
  readonly generationTokensTotal: number
  readonly cachedTokensTotal: number
  readonly evictedTokensTotal: number
  /** Tokens in the radix tree. */
  readonly treeTokens: number
  readonly evictableTokens: number
  readonly freeTokens: number
  readonly capacityTokens: number
  readonly openSessions: number
  readonly activeLeases: number
  readonly transferQueueDepth: number
  readonly kvEventBatches: number
  /** The pool accounting identity holds (no leaked KV slot). */
  readonly balanced: boolean
}

/** The load an SGLang worker reports (`/get_load`, `/v1/loads`). @internal */
export interface EngineLoad {
  readonly running: number
  readonly waiting: number
  /** KV slots in use that cannot be evicted. */
  readonly usedTokens: number
  readonly transferQueueDepth: number
}

/** @internal */
export class EmulatorEngine {
  readonly role: EmulatorRole
  readonly pageSize: number
  readonly capacityTokens: number
  readonly sessionCache: SessionCache
  readonly sessions: SessionBook
  readonly counters = new EmulatorCounters()
  /** Prefill role: the rooms decode emulators of this process wait for. */
  readonly rooms: PrefillRooms | undefined
  readonly kvEvents: KvEventStream | undefined
  readonly #config: EmulatorConfig
  readonly #faults: FaultInjector
  readonly #cache: RadixCache
  readonly #pool: PagedAllocator
  readonly #leases = new LeaseBook()
  readonly #inflight = new Map<string, AbortController>()
  readonly #memory = new MemoryWaiters()
  #running = 0
  #waiting = 0
  #batchTokens = 0
  #reservedSlots = 0
  #transferQueue = 0
  #draining = false
  #closed = false

  constructor(config: EmulatorConfig, faults: FaultInjector) {
    this.#config = config
    this.#faults = faults
    this.role = config.role
    this.pageSize = config.pageSize
    this.capacityTokens = config.capacityTokens
    this.#pool = new PagedAllocator({ size: config.capacityTokens, pageSize: config.pageSize })
    const kv = config.kvEvents
    const stream =
      kv === undefined
        ? undefined
        : new KvEventStream(
            kv,
            () => faults.takeKvDrop(),
            () => {
              this.counters.kvEventBatches++
            },
          )
    this.kvEvents = stream
    this.#cache = new RadixCache({
      pageSize: config.pageSize,
      allocator: this.#pool,
      ...(config.evictionPolicy === undefined ? {} : { evictionPolicy: config.evictionPolicy }),
      ...(stream === undefined
        ? {}
        : {
            onEvent: (e) => stream.push(fromRadixKvEvent(e)),
            ...(kv?.blockHasher === undefined ? {} : { blockHasher: kv.blockHasher }),
          }),
    })
    this.sessionCache = new SessionCache({
      cache: this.#cache,
      pool: this.#pool,
      granularity: config.granularity,
      onEviction: (e) => {
        this.counters.evictedTokens += e.freedTokens
      },
    })
    this.sessions = new SessionBook(this.sessionCache)
    this.rooms = config.role === 'prefill' ? new PrefillRooms() : undefined
  }

  get closed(): boolean {
    return this.#closed
  }

  setDraining(draining: boolean): void {
    this.#draining = draining
  }

  // ------------------------------------------------------------------------------------------
  // Requests in flight

  /** Registers request `rid` as in flight; its controller aborts it. */
  track(rid: string): AbortController {
    const c = new AbortController()
    this.#inflight.set(rid, c)
    return c
  }

  untrack(rid: string): void {
    this.#inflight.delete(rid)
  }

  isInflight(rid: string): boolean {
    return this.#inflight.has(rid)
  }

  /** Aborts request `rid` (or every request, `rid` undefined). */
  abort(rid: string | undefined, reason: Error): void {
    if (rid !== undefined) this.#inflight.get(rid)?.abort(reason)
    else for (const c of this.#inflight.values()) c.abort(reason)
  }

  /** No request running, waiting or in flight. */
  idle(): boolean {
    return this.#running === 0 && this.#waiting === 0 && this.#inflight.size === 0
  }

  // ------------------------------------------------------------------------------------------
  // State

  load(): EngineLoad {
    return {
      running: this.#running,
      waiting: this.#waiting,
      usedTokens: this.capacityTokens - this.#pool.availableSize() - this.#cache.evictableSize(),
      transferQueueDepth: this.#transferQueue,
    }
  }

  stats(): EmulatorStats {
    const acc = this.sessionCache.poolAccounting()
    const c = this.counters
    return {
      runningRequests: this.#running,
      waitingRequests: this.#waiting,
      requestsTotal: c.requests,
      promptTokensTotal: c.promptTokens,
      generationTokensTotal: c.generationTokens,
      cachedTokensTotal: c.cachedTokens,
      evictedTokensTotal: c.evictedTokens,
      treeTokens: this.#cache.totalSize(),
      evictableTokens: this.#cache.evictableSize(),
      freeTokens: this.#pool.availableSize(),
      capacityTokens: this.capacityTokens,
      openSessions: this.sessionCache.stats().sessionsHeld,
      activeLeases: this.#leases.live(Math.floor(performance.now())).length,
      transferQueueDepth: this.#transferQueue,
      kvEventBatches: c.kvEventBatches,
      balanced: acc.balanced,
    }
  }

  metricsText(modelName: string): string {
    const l = this.load()
    return renderMetrics(
      this.counters,
      {
        runningRequests: l.running,
        waitingRequests: l.waiting,
        usedTokens: l.usedTokens,
        capacityTokens: this.capacityTokens,
      },
      modelName,
    )
  }

  /** Empties the tree (sessions stay open, empty); false while requests run or wait. */
  flushCache(): boolean {
    if (!this.idle()) return false
    this.sessions.flushed()
    this.#memory.notify()
    return true
  }

  /** Closes session `id`; its KV lock goes now, or when its running turn ends. */
  closeSession(id: string): void {
    this.sessions.close(id)
    this.#memory.notify()
  }

  // ------------------------------------------------------------------------------------------
  // Admission: kvc-router's admit over this worker's real state

  admit(request: AdmitRequest): AdmitResponse {
    // Whole milliseconds: admit() answers leaseMs = expiresAt − now, which the contract wants integral.
    const now = Math.floor(performance.now())
    this.#leases.expire(now)
    const decision = admit(
      admitWorkerState(this.#decodeState(), {
        now,
        leases: this.#leases.live(now),
        draining: this.#draining || this.#closed,
      }),
      request,
      { now },
      this.#config.admission,
    )
    this.#leases.apply(decision)
    for (const id of decision.releaseSessions) {
      // Only the KV lock goes: the session stays open for its client (it re-seeds on its next turn).
      if (this.sessionCache.hasSession(id)) this.sessionCache.releaseSession(id)
      this.sessions.released(id)
    }
    if (decision.releaseSessions.length > 0) this.#memory.notify()
    return decision.response
  }

  /** This D's KV state and queues, for its admission state. */
  #decodeState(): DecodeStateSource {
    return {
      pool: this.#pool,
      sessions: this.sessionCache,
      transferQueueDepth: this.#transferQueue,
      retractedQueueDepth: 0,
    }
  }

  // ------------------------------------------------------------------------------------------
  // Execution

  /** Runs one request through the real caches, with the timing model's delays. */
  async execute(
    item: EngineRequest,
    signal: AbortSignal,
    onProgress: ProgressSink | undefined,
  ): Promise<EngineOutput> {
    const t0 = performance.now()
    const sc = this.sessionCache
    const timing = this.#config.timing
    const counters = this.counters
    counters.requests++
    if (this.#leases.release(item.rid)) this.#memory.notify()
    const fake = item.bootstrap?.host === FAKE_BOOTSTRAP_HOST
    const maxNew = item.sampling.maxNewTokens
    let sreq: SessionRequest | undefined
    let cached = 0
    let reserved = 0
    this.#waiting++
    let waiting = true
    try {
      // Admission into the batch: the uncached prompt plus the decode reserve must fit.
      for (;;) {
        throwIfAborted(signal)
        sreq = this.sessions.createRequest(item)
        cached = sc.matchPrefix(sreq).length
        // Slots are handed out by page: the prompt's pages plus the decode tokens', rounded up.
        const need = this.#ceilPage(item.tokens.length + maxNew) - cached
        if (need > this.capacityTokens) {
          sc.abortReq(sreq)
          sreq = undefined
          throw new EngineError(
            'invalid_request',
            `The request needs ${need} KV slots, more than the pool holds (${this.capacityTokens} tokens).`,
          )
        }
        if (sc.ensureFree(need + this.#reservedSlots).ok) {
          // Reserve every slot the request will take until it has allocated it.
          reserved = need
          this.#reservedSlots += reserved
          break
        }
        sc.abortReq(sreq)
        sreq = undefined
        await this.#memory.wait(signal)
      }
      this.#waiting--
      waiting = false
      this.#running++
      const target = this.#ceilPage(item.tokens.length + maxNew)
      const syncReserve = (r: SessionRequest): void => {
        const remaining = Math.max(0, target - this.#ceilPage(r.kvAllocatedLen))
        this.#reservedSlots += remaining - reserved
        reserved = remaining
      }
      const promptLen = item.tokens.length
      this.#batchTokens += promptLen
      const uncached = promptLen - cached
      // Prefill: computed here, or (decode with a bootstrap room) received from the prefill.
      if (this.role === 'decode' && item.bootstrap !== undefined && !fake) {
        await this.#receiveKv(item, uncached, signal)
      } else {
        await sleepScaled(prefillMs(timing, uncached, cached), timing.scale, signal)
      }
      const chunk = this.#config.chunkedPrefillSize
      if (chunk === undefined || uncached <= chunk) sc.prefill(sreq, uncached)
      else {
        // Chunked prefill: each chunk's pages enter the tree before the next is computed, and the
        // request re-matches (it adopts pages another request inserted meanwhile), as SGLang does.
        for (let left = uncached; left > 0; left = promptLen - sreq.kvCommittedLen) {
          sc.prefill(sreq, Math.min(chunk, left))
          if (sreq.kvCommittedLen < promptLen) {
            sc.cacheUnfinishedReq(sreq, { chunked: true })
            sc.matchPrefix(sreq)
          }
        }
      }
      syncReserve(sreq)
      counters.promptTokens += promptLen
      counters.cachedTokens += cached
      counters.ttft.observe((performance.now() - t0) / 1000)
      const hash = fakePromptHash(item.tokens)
      const out: number[] = []
      let finish: Record<string, unknown> = { type: 'length', length: maxNew }
      let textEnd: number | undefined
      for (let i = 0; i < maxNew; i++) {
        if (i > 0) await sleepScaled(decodeStepMs(timing, this.#batchTokens), timing.scale, signal)
        throwIfAborted(signal)
        const tok = fakeNextToken(hash, i)
        sc.decode(sreq, tok)
        syncReserve(sreq) // what stays reserved: the decode pages not yet allocated
        out.push(tok)
        this.#batchTokens++
        counters.generationTokens++
        if (item.sampling.stopTokenIds.has(tok)) {
          finish = { type: 'stop', matched: tok }
          break
        }
        const text = fakeDetokenize(out)
        const hit = item.sampling.stop.find((s) => text.endsWith(s))
        if (hit !== undefined) {
          finish = { type: 'stop', matched: hit }
          textEnd = item.sampling.noStopTrim ? undefined : text.length - hit.length
          break
        }
        if (i < maxNew - 1) {
          onProgress?.({
            outputIds: out.slice(),
            text,
            promptTokens: promptLen,
            cachedTokens: cached,
            finishReason: null,
          })
        }
      }
      if (maxNew === 0) finish = { type: 'length', length: 0 }
      // Finish: the committed tokens enter the tree (a fake bootstrap skips the insert, as upstream).
      if (fake) sc.abortReq(sreq)
      else sc.cacheFinishedReq(sreq)
      const finishedReq = sreq
      sreq = undefined
      this.sessions.afterTurn(item, finishedReq)
      if (this.role === 'prefill' && item.bootstrap !== undefined) {
        // A partial-transfer fault delivers only part of the prompt's pages.
        const part = this.#faults.takeTransferFraction()
        const tokens = part >= 1 ? promptLen : Math.floor((promptLen * part) / this.pageSize) * this.pageSize
        this.rooms?.settle(item.bootstrap.room, { ok: true, tokens, message: undefined })
      }
      let text = fakeDetokenize(
        out.filter((t) => !item.sampling.stopTokenIds.has(t) || item.sampling.noStopTrim),
      )
      if (textEnd !== undefined) text = text.slice(0, textEnd)
      const e2e = (performance.now() - t0) / 1000
      counters.e2e.observe(e2e)
      return {
        outputIds: out,
        text,
        finishReason: finish,
        promptTokens: promptLen,
        cachedTokens: cached,
        e2e,
      }
    } catch (err) {
      if (sreq !== undefined) sc.abortReq(sreq)
      if (this.role === 'prefill' && item.bootstrap !== undefined) {
        this.rooms?.settle(item.bootstrap.room, { ok: false, tokens: 0, message: (err as Error)?.message })
      }
      if (err instanceof SessionCacheError) {
        if (err.code === 'OUT_OF_MEMORY')
          throw new EngineError('invalid_request', `Out of memory: ${err.message}`)
        throw new EngineError('invalid_request', `Invalid request: ${err.message}`)
      }
      throw err
    } finally {
      if (waiting) this.#waiting--
      else {
        this.#running--
        this.#batchTokens = Math.max(0, this.#batchTokens - item.tokens.length)
      }
      this.#reservedSlots -= reserved
      this.#memory.notify()
      this.sessions.turnEnded(item.sessionId)
    }
  }

  #ceilPage(n: number): number {
    return Math.ceil(n / this.pageSize) * this.pageSize
  }

  /** Decode role: waits for the prefill's KV of the request's room, then for the transfer time. */
  async #receiveKv(item: EngineRequest, uncached: number, signal: AbortSignal): Promise<void> {
    const b = item.bootstrap!
    const timing = this.#config.timing
    this.#transferQueue++
    try {
      const local = b.host === '127.0.0.1' || b.host === 'localhost' || b.host === '::1'
      if (local && b.port !== null) {
        const rooms = prefillRegistry.get(`${b.host === 'localhost' ? '127.0.0.1' : b.host}:${b.port}`)
        const r =
          rooms === undefined
            ? { ok: false, tokens: 0, message: 'prefill instance is gone' }
            : await rooms.wait(b.room, this.#config.transferTimeoutMs, signal)
        throwIfAborted(signal)
        if (!r.ok) {
          throw new EngineError(
            'kv_transfer',
            `KVTransferError(bootstrap_room=${b.room}): Failed to get kvcache from prefill instance, it might be dead (${r.message ?? 'unknown'})`,
          )
        }
        // What arrived must cover the prompt: a transfer cut short is refused, never decoded from.
        if (r.tokens < item.tokens.length) {
          throw new EngineError(
            'kv_transfer',
            `KVTransferError(bootstrap_room=${b.room}): the prefill instance delivered the KV of ${r.tokens} of ${item.tokens.length} prompt tokens`,
          )
        }
      }
      await sleepScaled(transferMs(timing, uncached), timing.scale, signal)
    } finally {
      this.#transferQueue--
    }
  }

  // ------------------------------------------------------------------------------------------
  // Shutdown

  /** Refuses new work: aborts every request, wakes every waiter, fails the prefill's rooms. */
  shutdown(): void {
    this.#closed = true
    this.kvEvents?.stop()
    this.abort(undefined, new Error('emulator closed'))
    this.#memory.notify()
    this.rooms?.close()
  }
}
