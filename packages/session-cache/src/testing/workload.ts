import type { EvictGranularity, HostTierOptions } from '@kvc/radix-cache'
import { seededRandom } from '@kvc/radix-cache/testing'
import { SessionCacheError } from '../errors/sessionCacheError.js'
import { SessionCache } from '../session/sessionCache.js'
import type { SessionGranularity } from '../session/types.js'
import { BareRadixEngine } from './bareEngine.js'

/**
 * Options of {@link agenticWorkload}; token counts are drawn uniformly from `[min, max]`.
 *
 * @example
 * ```ts
 * const turns = agenticWorkload({ sessions: 32, turns: 20, appendTokens: [50, 400], seed: 42 })
 * ```
 */
export interface AgenticWorkloadOptions {
  /** Concurrent conversations (default 16). */
  readonly sessions?: number
  /** Turns per conversation (default 6). */
  readonly turns?: number
  /** Boilerplate every conversation starts with (system prompt, tool schemas; default 512). */
  readonly systemTokens?: number
  /** First user message, after the boilerplate (default `[1000, 3000]`). */
  readonly firstTokens?: readonly [number, number]
  /** Each later turn's append: tool results, user message (default `[100, 600]`). */
  readonly appendTokens?: readonly [number, number]
  /** Generated tokens per turn (default `[50, 300]`). */
  readonly outputTokens?: readonly [number, number]
  /** PRNG seed (default 1). */
  readonly seed?: number
}

/**
 * One turn of an {@link agenticWorkload}: what the client appends, what the model answers.
 *
 * @example
 * ```ts
 * for (const { session, turn, append, output } of agenticWorkload({ sessions: 2, turns: 2 })) {
 *   console.log(session, turn, append.length, output.length)
 * }
 * ```
 */
export interface WorkloadTurn {
  readonly session: number
  /** 0-based turn index within the session. */
  readonly turn: number
  /** Tokens appended to the conversation (the first turn: boilerplate + first message). */
  readonly append: Uint32Array
  /** Tokens the model generates. */
  readonly output: Uint32Array
}

/**
 * A deterministic multi-session agentic workload: `sessions` conversations of `turns` turns,
 * interleaved at random (one turn in flight at a time). Every conversation opens with the same
 * boilerplate, then grows by its appends and outputs, so turn `t+1`'s prompt extends turn `t`'s
 * prompt and output — the shape of the research prototype's agent traces
 * (`docs/design/prototype.md#setup`).
 *
 * @example
 * ```ts
 * import { agenticWorkload } from '@kvc/session-cache/testing'
 * const turns = agenticWorkload({ sessions: 8, turns: 4, seed: 7 })
 * turns.length // 32
 * ```
 */
export function agenticWorkload(options: AgenticWorkloadOptions = {}): WorkloadTurn[] {
  const sessions = options.sessions ?? 16
  const turns = options.turns ?? 6
  const system = options.systemTokens ?? 512
  const [f0, f1] = options.firstTokens ?? [1000, 3000]
  const [a0, a1] = options.appendTokens ?? [100, 600]
  const [o0, o1] = options.outputTokens ?? [50, 300]
  const rand = seededRandom(options.seed ?? 1)
  const between = (lo: number, hi: number): number => lo + Math.floor(rand() * (hi - lo + 1))
  // Token ids: boilerplate 1..system, then per-session ids far apart so conversations diverge.
  let next = 1_000_000
  const fresh = (n: number): Uint32Array => {
    const out = new Uint32Array(n)
    for (let i = 0; i < n; i++) out[i] = next++
    return out
  }
  const boiler = Uint32Array.from({ length: system }, (_, i) => i + 1)
  const done = new Array<number>(sessions).fill(0)
  const out: WorkloadTurn[] = []
  let left = sessions * turns
  while (left > 0) {
    let s = Math.floor(rand() * sessions)
    while (done[s] === turns) s = (s + 1) % sessions
    const t = done[s]!
    let append: Uint32Array
    if (t === 0) {
      const first = fresh(between(f0, f1))
      append = new Uint32Array(boiler.length + first.length)
      append.set(boiler)
      append.set(first, boiler.length)
    } else {
      append = fresh(between(a0, a1))
    }
    out.push({ session: s, turn: t, append, output: fresh(between(o0, o1)) })
    done[s] = t + 1
    left--
  }
  return out
}

/**
 * Which engine {@link runWorkload} drives.
 *
 * @example
 * ```ts
 * for (const engine of ['block', 'session', 'bare'] as WorkloadEngine[]) {
 *   console.log(runWorkload({ engine, pageSize: 16, poolSize: 65_536 }, turns).reprefillPerTurn)
 * }
 * ```
 */
export type WorkloadEngine = SessionGranularity | 'bare'

/**
 * Configuration of {@link runWorkload}.
 *
 * @example
 * ```ts
 * const config: RunWorkloadConfig = { engine: 'block', pageSize: 16, poolSize: 65_536, evictGranularity: 'page', idleTtl: 24 }
 * runWorkload(config, agenticWorkload())
 * ```
 */
export interface RunWorkloadConfig {
  /** `'block'` / `'session'` (a {@link SessionCache}) or `'bare'` (a {@link BareRadixEngine}). */
  readonly engine: WorkloadEngine
  readonly pageSize: number
  /** KV pool size in token slots. */
  readonly poolSize: number
  readonly evictGranularity?: EvictGranularity
  /** Prefill chunk size (default 2048). */
  readonly chunk?: number
  /**
   * Session TTL in turns: the clock advances by one per turn, and before each turn sessions idle
   * for at least this many turns are reaped (`evictIdleSessions({ idleMs })`), as a server reaps
   * timed-out streaming sessions. Default: no TTL.
   */
  readonly idleTtl?: number
  /** A host KV tier under the engine's radix cache (see `@kvc/radix-cache`'s `hostTier`). */
  readonly hostTier?: HostTierOptions
}

/**
 * What {@link runWorkload} measured.
 *
 * @example
 * ```ts
 * const r = runWorkload({ engine: 'session', pageSize: 16, poolSize: 65_536 }, agenticWorkload())
 * console.log(r.freedPerEvictionMax, r.reprefillPerTurn)
 * ```
 */
export interface WorkloadReport {
  readonly engine: WorkloadEngine
  readonly turns: number
  /** Turns aborted for lack of memory. */
  readonly failedTurns: number
  /** Tokens prefilled (prompt minus cached prefix), all turns. */
  readonly prefilledTokens: number
  /**
   * Tokens a later turn computed again although its conversation had committed them before
   * (`min(previous committed, prompt - 1) - cached`, at least 0): KV lost between turns.
   */
  readonly reprefilledTokens: number
  /** `reprefilledTokens` per later turn (turns after a conversation's first). */
  readonly reprefillPerTurn: number
  /** Eviction events (tree evictions that freed tokens; session-mode slot drops). */
  readonly evictions: number
  /** Mean and largest tokens freed by one eviction. */
  readonly freedPerEvictionMean: number
  readonly freedPerEvictionMax: number
  /** Sessions released under pressure (SessionCache only). */
  readonly sessionsEvicted: number
  /** Tokens loaded back from the host tier at admission (not recomputed; 0 without a tier). */
  readonly loadedBackTokens: number
  /** Sessions demoted to the host tier under pressure (SessionCache only). */
  readonly sessionsDemoted: number
}

/**
 * Run a workload turn by turn as a serving engine would — admit (`matchPrefix`), prefill in
 * chunks (`cacheUnfinishedReq`), decode, finish — on a fresh engine, and measure evictions and
 * re-prefill. A SessionCache keeps one session per conversation (reopened after an eviction); the
 * bare engine sends every turn as a request without a session.
 *
 * @example
 * ```ts
 * import { agenticWorkload, runWorkload } from '@kvc/session-cache/testing'
 * const w = agenticWorkload({ sessions: 8, turns: 4 })
 * const block = runWorkload({ engine: 'block', pageSize: 16, poolSize: 16_384 }, w)
 * const legacy = runWorkload({ engine: 'session', pageSize: 16, poolSize: 16_384 }, w)
 * console.log(block.freedPerEvictionMax, legacy.freedPerEvictionMax)
 * ```
 */
export function runWorkload(config: RunWorkloadConfig, workload: readonly WorkloadTurn[]): WorkloadReport {
  const chunk = config.chunk ?? 2048
  const freedLog: number[] = []
  const histories = new Map<number, Uint32Array>()
  const committed = new Map<number, number>()
  let prefilled = 0
  let reprefilled = 0
  let laterTurns = 0
  let failed = 0
  let sessionsEvicted = 0
  let loadedBack = 0
  let sessionsDemoted = 0
  const concat = (a: Uint32Array | undefined, b: Uint32Array): Uint32Array => {
    if (a === undefined) return b
    const out = new Uint32Array(a.length + b.length)
    out.set(a)
    out.set(b, a.length)
    return out
  }
  const account = (w: WorkloadTurn, promptLen: number, cached: number): void => {
    prefilled += promptLen - cached
    const prev = committed.get(w.session)
    if (prev !== undefined) {
      laterTurns++
      reprefilled += Math.max(0, Math.min(prev, promptLen - 1) - cached)
    }
  }
  if (config.engine === 'bare') {
    const e = new BareRadixEngine({
      pageSize: config.pageSize,
      poolSize: config.poolSize,
      ...(config.evictGranularity !== undefined ? { evictGranularity: config.evictGranularity } : {}),
      ...(config.hostTier !== undefined ? { hostTier: config.hostTier } : {}),
    })
    const evict = e.cache.evict.bind(e.cache)
    e.cache.evict = (n: number) => {
      const res = evict(n)
      if (res.evictedTokens > 0) freedLog.push(res.evictedTokens)
      return res
    }
    let rid = 0
    for (const w of workload) {
      const prompt = concat(histories.get(w.session), w.append)
      const id = `r${rid++}`
      const m = e.begin(id, prompt)
      account(w, prompt.length, m.length)
      let ok = true
      for (let done = m.length; ok && done < prompt.length; ) {
        const n = Math.min(chunk, prompt.length - done)
        ok = e.prefill(id, n)
        done += n
        if (ok) e.unfinished(id, done < prompt.length)
      }
      for (let i = 0; ok && i < w.output.length; i++) ok = e.decode(id, w.output[i]!)
      if (!ok) {
        e.abort(id)
        failed++
        continue
      }
      committed.set(w.session, e.committedOf(id))
      histories.set(w.session, e.tokensOf(id))
      e.finished(id)
    }
    loadedBack = e.cache.stats().loadedBackTokens
  } else {
    let clock = 0
    const sc = new SessionCache({
      now: () => clock,
      granularity: config.engine,
      pageSize: config.pageSize,
      poolSize: config.poolSize,
      ...(config.evictGranularity !== undefined ? { evictGranularity: config.evictGranularity } : {}),
      ...(config.hostTier !== undefined ? { hostTier: config.hostTier } : {}),
      onEviction: (ev) => {
        freedLog.push(ev.freedTokens)
      },
    })
    let rid = 0
    for (const w of workload) {
      clock++
      if (config.idleTtl !== undefined) sc.evictIdleSessions({ idleMs: config.idleTtl })
      const sid = `s${w.session}`
      if (!sc.hasSession(sid)) sc.openSession(sid)
      const prompt = concat(histories.get(w.session), w.append)
      const req = sc.createRequest({ rid: `r${rid++}`, sessionId: sid, inputIds: prompt })
      const m = sc.matchPrefix(req)
      account(w, prompt.length, m.length)
      try {
        while (req.kvCommittedLen < prompt.length) {
          sc.prefill(req, Math.min(chunk, prompt.length - req.kvCommittedLen))
          sc.cacheUnfinishedReq(req, { chunked: req.kvCommittedLen < prompt.length })
        }
        for (let i = 0; i < w.output.length; i++) sc.decode(req, w.output[i]!)
      } catch (err) {
        if (!(err instanceof SessionCacheError) || err.code !== 'OUT_OF_MEMORY') throw err
        sc.abortReq(req)
        failed++
        continue
      }
      committed.set(w.session, req.kvCommittedLen)
      histories.set(w.session, req.tokenIds.slice())
      sc.cacheFinishedReq(req)
    }
    sessionsEvicted = sc.stats().sessionsEvicted
    loadedBack = sc.stats().loadedBackTokens
    sessionsDemoted = sc.stats().sessionsDemoted
  }
  let sum = 0
  let max = 0
  for (const f of freedLog) {
    sum += f
    if (f > max) max = f
  }
  return {
    engine: config.engine,
    turns: workload.length,
    failedTurns: failed,
    prefilledTokens: prefilled,
    reprefilledTokens: reprefilled,
    reprefillPerTurn: laterTurns === 0 ? 0 : reprefilled / laterTurns,
    evictions: freedLog.length,
    freedPerEvictionMean: freedLog.length === 0 ? 0 : sum / freedLog.length,
    freedPerEvictionMax: max,
    sessionsEvicted,
    loadedBackTokens: loadedBack,
    sessionsDemoted,
  }
}
