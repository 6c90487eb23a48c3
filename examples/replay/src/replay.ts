import {
  BlockHashCache,
  type DecisionLine,
  Gateway,
  type KvcProxy,
  type ProxyConfig,
  createProxy,
  resolveConfig,
} from '@kvc/example-proxy'
import type { RouterParamsInput } from '@kvc/kvc-router'
import {
  type EvictionStats,
  type ExperimentConfig,
  type ExperimentResult,
  Prng,
  type RunCounters,
  type RunResult,
  type RunTask,
  type Runner,
  type ServePath,
  type TurnRecord,
  type TurnSpec,
  type UsageSeries,
  type Workload,
  buildWorkload,
  createPolicy,
  parsePolicySpec,
  parseTopology,
  peakRssMB,
  runExperiment,
} from '@kvc/sim'
import { SglangClient, toSglangMetrics, parsePrometheusText } from '@kvc/worker-bindings'
import type { ReplayTarget, RunCluster } from './targets.js'
import { GenerateTransport, proxyTurn } from './transport.js'

/**
 * How turns reach the workers: `direct` (the kvc router embedded here, the policy under test
 * driving the workers itself), `proxy` (a kvc proxy started in process in front of the workers,
 * with the policy under test), or `url` (a kvc proxy already running: the policy is whatever it
 * runs).
 */
export type Via =
  | { readonly kind: 'direct' }
  | { readonly kind: 'proxy' }
  | { readonly kind: 'url'; readonly url: string }

/** Options of a replay. */
export interface ReplayOptions {
  readonly target: ReplayTarget
  readonly via: Via
  /** Token ids are sent modulo this (a real model refuses ids past its vocabulary; default 151,936, Qwen3's). */
  readonly vocabSize?: number
  /** Interval of the KV-usage samples, seconds (default 1). */
  readonly sampleIntervalS?: number
  /** Turns still running this long after the run started fail with cause `horizon` (default: none). */
  readonly horizonS?: number
  /** Router parameters on top of the policy spec's (e.g. shorter backoffs for tests). */
  readonly router?: RouterParamsInput
  /** Proxy configuration on top of the replay's (health probing, KV events...). */
  readonly proxy?: Partial<Pick<ProxyConfig, 'health' | 'loads' | 'kvEvents' | 'upstreamTimeoutMs'>>
  /**
   * Before each run's clock starts, send this many one-token warm-up turns (one-turn sessions of
   * a few random tokens) through the same path: connections, the workers and this process's JIT
   * warm up, so the first run is not charged for them (default 2; 0 disables).
   */
  readonly warmupTurns?: number
  /** Called as turns end. */
  readonly onProgress?: (task: number, ended: number, total: number) => void
}

interface SessionState {
  readonly id: string
  readonly blocks: BlockHashCache
  /** The last successful turn: its prompt + output in workload tokens, and what was really sent + generated. */
  prev: { readonly workload: Uint32Array; readonly real: Uint32Array } | undefined
}

function concat(a: ArrayLike<number>, b: ArrayLike<number>): Uint32Array {
  const out = new Uint32Array(a.length + b.length)
  out.set(a as Uint32Array)
  out.set(b as Uint32Array, a.length)
  return out
}

function startsWith(a: Uint32Array, prefix: Uint32Array): boolean {
  if (a.length < prefix.length) return false
  for (let i = 0; i < prefix.length; i++) if (a[i] !== prefix[i]) return false
  return true
}

/**
 * The prompt to send: the workload's prompt, with the part that repeats the session's previous
 * prompt + output replaced by what was really sent and generated (a real model's output differs
 * from the trace's, and the agent's next prompt carries the real one), token ids modulo the
 * vocabulary.
 */
function promptFor(w: Workload, spec: TurnSpec, st: SessionState | undefined, vocab: number): Uint32Array {
  const wp = w.promptTokens(spec.id)
  const prev = st?.prev
  if (prev !== undefined && startsWith(wp, prev.workload)) {
    const out = new Uint32Array(prev.real.length + wp.length - prev.workload.length)
    out.set(prev.real)
    for (let i = prev.workload.length, k = prev.real.length; i < wp.length; i++, k++) out[k] = wp[i]! % vocab
    return out
  }
  const out = new Uint32Array(wp.length)
  for (let i = 0; i < wp.length; i++) out[i] = wp[i]! % vocab
  return out
}

function sleep(ms: number): Promise<void> {
  return ms <= 0 ? Promise.resolve() : new Promise((r) => setTimeout(r, ms))
}

/** Counters of the run's machinery, read from the decision lines (as the simulator counts them). */
function countersOf(lines: readonly DecisionLine[], kvEvents: number, kvEventsLost: number): RunCounters {
  let admissions = 0
  let admissionRejects = 0
  let admissionTimeouts = 0
  let transfers = 0
  let transferTimeouts = 0
  let transferErrors = 0
  for (const l of lines) {
    for (const s of l.steps as { kind: string; detail: string }[]) {
      if (s.kind === 'admit') {
        admissions++
        if (s.detail.startsWith('rejected')) admissionRejects++
        else if (s.detail === 'timed out' || s.detail === 'error') admissionTimeouts++
      } else if (s.kind === 'seedViaP') {
        if (s.detail === 'failed: transfer_timeout') transferTimeouts++
        else if (s.detail === 'failed: transfer_error') transferErrors++
        else if (!s.detail.startsWith('failed')) transfers++
      }
    }
  }
  const counters = {
    events: 0,
    admissions,
    admissionRejects,
    admissionTimeouts,
    transfers,
    transferTimeouts,
    transferErrors,
    kvEvents,
    kvEventsLost,
    workerDeaths: 0,
    routerPauses: 0,
    memoryWaitFailures: 0,
    // D→P sync is a simulator option (`sync=on`) the replay does not run.
    syncBytes: 0,
    syncIngestedTokens: 0,
  }
  return counters as RunCounters
}

/**
 * Replays one run (one policy, one seed) against real workers and returns it in the simulator's
 * `RunResult` shape, so the simulator's own metric code (`computeRunMetrics`, the bootstrap, the
 * report) reads it unchanged. Arrivals follow the simulator: closed-loop sessions (a turn arrives
 * its think time after the previous one ended) or open-loop arrivals, divided by `timeScale`.
 */
export async function replayTask(task: RunTask, options: ReplayOptions): Promise<RunResult> {
  const wall0 = performance.now()
  const workload = buildWorkload(task.workload, task.seed)
  const spec = parsePolicySpec(task.policy)
  const policy = createPolicy(spec)
  const pageSize = task.pageSize ?? workload.suggestedPageSize ?? 16
  const vocab = options.vocabSize ?? 151_936
  const ts = task.timeScale
  const cluster: RunCluster = await options.target.open({
    topology: parseTopology(task.topology),
    spec,
    pathMode: policy.pathMode,
    pageSize,
  })
  const lines: DecisionLine[] = []
  let ok = false
  let gateway: Gateway | undefined
  let proxy: KvcProxy | undefined
  let t0 = performance.now()
  const now = (): number => performance.now() - t0
  const sampler = new UsageSampler(cluster, (options.sampleIntervalS ?? 1) * 1000, now)
  const records: (TurnRecord | undefined)[] = new Array(workload.turns.length)
  const sessions = new Map<number, SessionState>()
  let firstArrival = Number.POSITIVE_INFINITY
  let lastEnd = 0
  let ended = 0
  const horizonMs = options.horizonS === undefined ? Number.POSITIVE_INFINITY : options.horizonS * 1000
  try {
    const config = resolveConfig({
      listen: { port: 0 },
      workers: cluster.workers,
      tokenizer: 'emulator',
      router: { pageSize, ...spec.routerParams, ...options.router },
      decisionLog: 'off',
      limits: { maxBodyBytes: 512 * 1024 * 1024, maxPromptTokens: 16_000_000, maxMaxTokens: 1_000_000 },
      session: { idleTimeoutMs: 24 * 3_600_000 },
      ...options.proxy,
    })
    const gwOptions = {
      policy,
      random: new Prng(task.seed, 'router').asRandom(),
      onDecision: (l: DecisionLine) => lines.push(l),
      onWarning: () => {},
    }
    let url: string | undefined
    if (options.via.kind === 'direct') {
      gateway = new Gateway(config, gwOptions)
      await gateway.start()
    } else if (options.via.kind === 'proxy') {
      proxy = await createProxy(config, gwOptions)
      url = proxy.url
    } else url = options.via.url
    for (let i = 0; i < (options.warmupTurns ?? 2); i++) {
      const ids = Uint32Array.from(
        { length: 2 * pageSize + 3 },
        (_, k) => (task.seed * 7919 + i * 104_729 + k * 31) % vocab,
      )
      if (gateway !== undefined) {
        const id = `r${task.index}-warmup-${i}`
        await gateway.runTurn(
          { sessionId: id, promptTokens: ids.length, expectedOutputTokens: 1, sloClass: 'interactive' },
          new GenerateTransport(ids, 1, now),
        )
        gateway.forgetSession(id)
      } else await proxyTurn(url!, undefined, ids, 1, now)
    }
    lines.length = 0
    t0 = performance.now()
    sampler.start()

    const runTurn = async (spec: TurnSpec, arrivalMs: number): Promise<void> => {
      const st = spec.session >= 0 ? sessions.get(spec.session) : undefined
      const prompt = promptFor(workload, spec, st, vocab)
      const sessionId = st?.id ?? `r${task.index}-anon-${spec.id}` // session-less requests: one-turn sessions
      const maxTokens = Math.max(1, spec.outputLength)
      let rec: Omit<
        TurnRecord,
        | 'id'
        | 'session'
        | 'turnIndex'
        | 'inputLength'
        | 'outputLength'
        | 'appendTokens'
        | 'reuseFraction'
        | 'arrivalMs'
      >
      let outputIds: readonly number[] | undefined
      if (arrivalMs > horizonMs) {
        rec = failedRec('horizon', arrivalMs)
      } else if (gateway !== undefined) {
        const transport = new GenerateTransport(prompt, maxTokens, now)
        const blocks = (st?.blocks ?? new BlockHashCache(pageSize)).blocks(prompt)
        const r = await gateway.runTurn(
          {
            sessionId,
            promptTokens: prompt.length,
            blocks,
            expectedOutputTokens: maxTokens,
            sloClass: 'interactive',
          },
          transport,
        )
        if (spec.session < 0) gateway.forgetSession(sessionId)
        const end = now()
        const lastError = [...r.record.steps]
          .reverse()
          .find((s) => s.detail.startsWith('failed: '))
          ?.detail.slice(8)
        if (r.status === 'completed') {
          outputIds = transport.observation.outputIds
          const c = r.completion!
          rec = {
            firstTokenMs: transport.observation.firstTokenAt ?? end,
            endMs: end,
            status: 'completed',
            cause: undefined,
            lastError,
            path: r.path as ServePath,
            workerId: r.workerId,
            prefillId: r.prefillId,
            migrated: r.migratedFrom !== undefined,
            ...cacheCost(c.cachedTokens, spec, workload),
            transferredTokens: c.transferredTokens,
            attempts: r.record.attempts,
          }
        } else rec = { ...failedRec(r.cause ?? 'unknown', end), lastError, attempts: r.record.attempts }
      } else {
        const p = await proxyTurn(url!, spec.session >= 0 ? sessionId : undefined, prompt, maxTokens, now)
        const end = now()
        if (p.ok && p.kvc !== undefined) {
          outputIds = p.kvc.output_ids
          rec = {
            firstTokenMs: p.firstTokenAt ?? end,
            endMs: end,
            status: 'completed',
            cause: undefined,
            lastError: undefined,
            path: p.kvc.path,
            workerId: p.kvc.worker,
            prefillId: p.kvc.prefill ?? undefined,
            migrated: p.kvc.migrated_from !== null,
            ...cacheCost(p.kvc.cached_tokens, spec, workload),
            transferredTokens: p.kvc.transferred_tokens,
            attempts: p.kvc.attempt,
          }
        } else rec = { ...failedRec(p.cause ?? 'unknown', end), lastError: p.message }
      }
      records[spec.id] = {
        id: spec.id,
        session: spec.session,
        turnIndex: spec.turnIndex,
        inputLength: spec.inputLength,
        outputLength: spec.outputLength,
        appendTokens: spec.appendTokens,
        reuseFraction: spec.reuseFraction,
        arrivalMs,
        ...rec,
      }
      if (rec.status === 'completed' && st !== undefined) {
        const wOut = workload.outputTokens(spec.id)
        if (wOut !== undefined && outputIds !== undefined)
          st.prev = {
            workload: concat(workload.promptTokens(spec.id), wOut),
            real: concat(prompt, outputIds),
          }
      }
      if (arrivalMs < firstArrival) firstArrival = arrivalMs
      if (rec.endMs > lastEnd) lastEnd = rec.endMs
      options.onProgress?.(task.index, ++ended, workload.turns.length)
    }

    // Sessions run their turns in order; session-less requests run at their arrival times.
    const bySession = new Map<number, TurnSpec[]>()
    const loose: TurnSpec[] = []
    for (const t of workload.turns) {
      if (t.session < 0) loose.push(t)
      else {
        let list = bySession.get(t.session)
        if (list === undefined) bySession.set(t.session, (list = []))
        list.push(t)
      }
    }
    for (const s of bySession.keys()) {
      sessions.set(s, {
        id: `r${task.index}-${workload.sessionLabels[s] ?? `s${s}`}`,
        blocks: new BlockHashCache(pageSize),
        prev: undefined,
      })
    }
    const closed = workload.arrivalMode === 'closed'
    await Promise.all([
      ...[...bySession.values()].map(async (turns) => {
        let prevEnd = 0
        for (const t of turns) {
          const at =
            t.turnIndex === 0 || !closed ? Math.max(prevEnd, t.arrivalMs / ts) : prevEnd + t.thinkMs / ts
          await sleep(at - now())
          await runTurn(t, Math.max(at, now()))
          prevEnd = records[t.id]!.endMs
        }
      }),
      ...loose.map(async (t) => {
        await sleep(t.arrivalMs / ts - now())
        await runTurn(t, Math.max(t.arrivalMs / ts, now()))
      }),
    ])
    ok = true
  } finally {
    sampler.stop()
    await proxy?.close()
    await gateway?.close()
    if (!ok) {
      // A run that could not finish (a worker unreachable at startup...) still releases its workers.
      await sampler.settled()
      await cluster.close()
    }
  }
  const kvEvents = (gateway ?? proxy?.gateway)?.workers.all().reduce((a, w) => a + w.kvEventsReceived, 0) ?? 0
  const kvLost = (gateway ?? proxy?.gateway)?.workers.all().reduce((a, w) => a + w.kvEventGaps, 0) ?? 0
  const evictions = await evictionsOf(cluster)
  let poolsBalanced = true
  for (const e of cluster.emulators.values()) if (!e.stats().balanced) poolsBalanced = false
  await sampler.settled()
  await cluster.close()
  const recs = records as TurnRecord[]
  const byCause: Record<string, number> = {}
  let completed = 0
  let named = true
  for (let i = 0; i < recs.length; i++) {
    const r = recs[i]
    if (r === undefined) {
      named = false
      continue
    }
    if (r.status === 'completed') completed++
    else byCause[r.cause ?? 'unknown'] = (byCause[r.cause ?? 'unknown'] ?? 0) + 1
  }
  return {
    policy: spec.label,
    policyName: policy.name,
    pathMode: policy.pathMode,
    seed: task.seed,
    topology: cluster.topology,
    timeScale: ts,
    pageSize,
    capacityTokens: cluster.capacityTokens,
    records: recs,
    makespanS: Number.isFinite(firstArrival) ? Math.max(0, lastEnd - firstArrival) / 1000 : 0,
    usage: sampler.series(),
    evictions,
    accounting: {
      turns: recs.length,
      completed,
      failed: recs.length - completed,
      failedByCause: Object.fromEntries(Object.entries(byCause).sort(([a], [b]) => (a < b ? -1 : 1))),
      balanced: named && recs.length === workload.turns.length,
      poolsBalanced,
    },
    counters: countersOf(lines, kvEvents, kvLost),
    wallMs: performance.now() - wall0,
    peakRssMB: peakRssMB(),
  }
}

/**
 * A prefix hit in the simulator's units: `matched` tokens as the worker counts them, `cached` in
 * trace tokens (a hash-id trace expanded into small pages: each sent token stands for
 * `tokenScale` of them), at most the prompt, and the rest `computed`.
 */
function cacheCost(matched: number, spec: TurnSpec, w: Workload) {
  const cached = Math.min(Math.round(matched * w.tokenScale), spec.inputLength)
  return {
    cachedTokens: cached,
    matchedTokens: matched,
    computedTokens: Math.max(1, spec.inputLength - cached),
  }
}

function failedRec(cause: string, at: number) {
  return {
    firstTokenMs: Number.NaN,
    endMs: at,
    status: 'failed' as const,
    cause,
    lastError: undefined as string | undefined,
    path: undefined,
    workerId: undefined,
    prefillId: undefined,
    migrated: false,
    cachedTokens: 0,
    matchedTokens: 0,
    computedTokens: 0,
    transferredTokens: 0,
    attempts: 0,
  }
}

/** Evictions per worker: the emulators' session-cache counters, else SGLang's `evicted_tokens_total` (count unknown). */
async function evictionsOf(cluster: RunCluster): Promise<EvictionStats[]> {
  return Promise.all(
    cluster.workers.map(async (w): Promise<EvictionStats> => {
      const emu = cluster.emulators.get(w.id)
      if (emu !== undefined) {
        const st = emu.sessionCache.stats()
        return {
          workerId: w.id,
          evictions: st.evictions,
          evictedTokens: st.evictedTokens,
          meanTokensPerEviction: st.evictions === 0 ? 0 : st.evictedTokens / st.evictions,
          maxTokensPerEviction: st.evictionHistogram.max,
        }
      }
      let tokens = 0
      try {
        const m = toSglangMetrics(
          parsePrometheusText(await new SglangClient({ baseURL: w.url, timeout: 5_000 }).metricsText()),
        )
        tokens = m.evictedTokensTotal ?? 0
      } catch {
        // no /metrics (SGLang without --enable-metrics)
      }
      return {
        workerId: w.id,
        evictions: 0,
        evictedTokens: tokens,
        meanTokensPerEviction: 0,
        maxTokensPerEviction: 0,
      }
    }),
  )
}

/** KV usage of every worker over time, from `/v1/loads` (`token_usage`). */
class UsageSampler {
  readonly #cluster: RunCluster
  readonly #every: number
  readonly #now: () => number
  readonly #clients: {
    id: string
    role: UsageSeries['role']
    client: SglangClient
    t: number[]
    u: number[]
  }[]
  #timer: ReturnType<typeof setInterval> | undefined
  #pending: Promise<unknown> = Promise.resolve()

  constructor(cluster: RunCluster, everyMs: number, now: () => number) {
    this.#cluster = cluster
    this.#every = everyMs
    this.#now = now
    const colocated = !cluster.workers.some((w) => w.role === 'prefill')
    this.#clients = cluster.workers.map((w) => ({
      id: w.id,
      role: w.role === 'prefill' ? 'prefill' : colocated ? 'colocated' : 'decode',
      client: new SglangClient({ baseURL: w.url, timeout: 2_000, maxRetries: 0 }),
      t: [],
      u: [],
    }))
  }

  start(): void {
    this.#sample()
    this.#timer = setInterval(() => this.#sample(), this.#every)
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer)
    this.#timer = undefined
    this.#sample()
  }

  settled(): Promise<unknown> {
    return this.#pending
  }

  series(): UsageSeries[] {
    return this.#clients.map((c) => ({ workerId: c.id, role: c.role, timesS: c.t, usage: c.u }))
  }

  #sample(): void {
    const at = this.#now() / 1000
    this.#pending = Promise.all([
      this.#pending,
      ...this.#clients.map(async (c) => {
        const emu = this.#cluster.emulators.get(c.id)
        let usage: number | undefined
        if (emu !== undefined) {
          const s = emu.stats()
          usage = (s.capacityTokens - s.freeTokens) / s.capacityTokens
        } else {
          try {
            usage = (await c.client.loads({ include: ['core'] })).loads[0]?.token_usage
          } catch {
            usage = undefined
          }
        }
        if (typeof usage === 'number') {
          c.t.push(at)
          c.u.push(usage)
        }
      }),
    ])
  }
}

/**
 * A `Runner` for the simulator's `runExperiment`: every task (policy × seed) is replayed on real
 * workers instead of simulated, one after the other, so the experiment's statistics — estimates
 * with bootstrap intervals, paired differences, strata, the HTML report — are the simulator's own.
 */
export function replayRunner(options: ReplayOptions): Runner {
  return async (tasks, onProgress) => {
    const out: RunResult[] = []
    for (const t of tasks) {
      out.push(
        await replayTask(t, {
          ...options,
          onProgress: (i, e, n) => {
            onProgress(i, e, n)
            options.onProgress?.(i, e, n)
          },
        }),
      )
    }
    return out
  }
}

/** A replayed experiment and, optionally, the same experiment simulated. */
export interface ReplayOutcome {
  readonly real: ExperimentResult
  readonly simulated: ExperimentResult | undefined
}

/**
 * Replays an experiment (the simulator's `ExperimentConfig`: workload, topology, policies, seeds,
 * time scale, capacity) on real workers, and with `compare` also simulates it, so the two verdicts
 * can be put side by side.
 */
export async function runReplay(
  config: ExperimentConfig,
  options: ReplayOptions & { readonly compare?: boolean },
): Promise<ReplayOutcome> {
  const real = await runExperiment(config, { runner: replayRunner(options) })
  const simulated = options.compare === true ? await runExperiment(config) : undefined
  return { real, simulated }
}
