import {
  type AdmitAction,
  type AdmitOutcome,
  type ClusterStateStore,
  type DispatchRecord,
  type DoneAction,
  type DrivenTurn,
  Router,
  type RouterParamsInput,
  type RoutingPolicy,
  type SendFailureCause,
  type SloClass,
  TurnDriver,
  type TurnEffects,
  type TurnTimers,
  dynamoKvCostPolicy,
  kvcPolicy,
  powerOfTwoPolicy,
  randomPolicy,
  roundRobinPolicy,
  sglangCacheAwarePolicy,
  sleepUntil,
  stickySessionPolicy,
} from '@kvc/kvc-router'
import {
  type ReplicatedStateStore,
  RouterStateError,
  type StoreEvent,
  connectNatsStore,
  connectRedisStore,
} from '@kvc/router-state'
import { WorkerApiError, WorkerBindingsError } from '@kvc/worker-bindings'
import { type ProxyConfig, type ProxyPolicyName, stateStoreKind } from './config.js'
import { DecisionLog, type DecisionLine, decisionLine } from './decisionLog.js'
import { ProxyError } from './errors.js'
import { isDeadline } from './limits/deadlines.js'
import { maskUrl } from './tenancy/authConfig.js'
import { ProxyMetrics } from './metrics.js'
import { TopologySampler } from './topology/topologyAdvice.js'
import { SLOW_TIMEOUT_FACTOR, type WorkerHandle, WorkerPool } from './workers.js'

/** One turn as the gateway dispatches it. */
export interface TurnInput {
  readonly sessionId: string
  /** Default `${sessionId}#<counter>` (`${sessionId}#<replica id>.<counter>` with a shared state store). */
  readonly turnId?: string
  readonly promptTokens: number
  /** Chained block hashes of the prompt's full pages (see `BlockHashCache`). */
  readonly blocks?: readonly bigint[]
  /** The request's `max_tokens` (the decode reserve). */
  readonly expectedOutputTokens: number
  readonly sloClass: SloClass
}

/** Who serves a send, as the transport needs it. */
export interface ServedBy {
  readonly turnId: string
  readonly sessionId: string
  /** `fast` / `local` / `direct`: D serves the whole turn; `seed`: P prefills, the KV goes to D. */
  readonly path: 'fast' | 'local' | 'seed' | 'direct'
  readonly decode: WorkerHandle
  readonly prefill: WorkerHandle | undefined
  readonly migratedFrom: string | undefined
  /** Request id for D (the admission lease id when there is one, so D consumes the lease). */
  readonly rid: string
  readonly attempt: number
  /**
   * Ask D to keep the session's KV after the turn (`session_id` on the request): the kvc policy's
   * fast path rests on it. Baselines that seed every turn through a P do not (their D workers keep
   * no sessions, as in SGLang's PD mode).
   */
  readonly retainSession: boolean
}

/** What a completed response reports. */
export interface Completion {
  readonly outputTokens: number
  /** Prompt tokens found cached where the prompt was computed (P for a seed, else D). */
  readonly cachedTokens: number
  /** Tokens transferred from P to D (seed path; 0 otherwise). */
  readonly transferredTokens: number
}

/** A response that has started (first chunk, or a whole non-streamed answer) and is not yet delivered. */
export interface StartedResponse {
  /** Delivers the rest (to the client, for the proxy); rejects when the worker fails mid-stream. */
  finish(): Promise<Completion>
  /** Drops the response without delivering it. */
  cancel(): void
}

/**
 * How a turn reaches the workers (an OpenAI request for the proxy, token ids for the replay).
 * `start` rejects with the worker's error when the response fails before it started; the
 * gateway then tells Dispatch, which retries elsewhere.
 */
export interface TurnTransport {
  start(served: ServedBy, signal: AbortSignal): Promise<StartedResponse>
}

/** How a turn ended. */
export interface TurnResult {
  readonly turnId: string
  readonly sessionId: string
  readonly status: 'completed' | 'failed'
  /**
   * Failure cause: the router's (`all_paused`, `all_rejecting`, `worker_failed`, ...) or the
   * proxy's: `bad_request` (a worker refused the request itself, 4xx), `session_busy` (D runs
   * another turn of the session, sent through another replica), `stream_interrupted` (the
   * worker failed after the response started), `client_closed`, `deadline_exceeded` (the turn's
   * deadline passed: the signal given to `runTurn` was aborted with a `DEADLINE_EXCEEDED`
   * `ProxyError`), `shutting_down`, `internal_error`.
   */
  readonly cause: string | undefined
  readonly path: 'fast' | 'local' | 'seed' | 'direct' | undefined
  readonly workerId: string | undefined
  readonly prefillId: string | undefined
  readonly migratedFrom: string | undefined
  readonly completion: Completion | undefined
  /** The response had started (so an error can no longer be a plain HTTP error). */
  readonly committed: boolean
  /** The router's `RouterError` for a routing failure, or the worker's error. */
  readonly error: Error | undefined
  /** For `bad_request`: the worker's HTTP status and message. */
  readonly upstreamStatus: number | undefined
  readonly record: DispatchRecord
  /** Router clock (ms). */
  readonly startedAt: number
  readonly endedAt: number
  /** Time of the first byte delivered (router clock), if any. */
  readonly firstByteAt: number | undefined
}

/** Options of {@link Gateway}. */
export interface GatewayOptions {
  /** A policy object (default: the configured `policy`); the replay passes the simulator's. */
  readonly policy?: RoutingPolicy
  /**
   * Router clock in ms (default `performance.now`; `Date.now` with a shared state store, whose
   * pause hints and binding times travel between replicas).
   */
  readonly now?: () => number
  readonly random?: () => number
  /** Receives every decision line (besides the configured log destination). */
  readonly onDecision?: (line: DecisionLine) => void
  /** Non-fatal problems (a failed poll, a KV-event gap). Default: a JSON line on stderr. */
  readonly onWarning?: (message: string, detail: Record<string, unknown>) => void
  /** Number of sessions tracked (for the metric; the HTTP layer knows them). */
  readonly sessions?: () => number
  /** Events of a shared state store (degraded, recovered, conflict...). Default: a JSON line on stderr. */
  readonly onStoreEvent?: (event: StoreEvent) => void
}

/** The shared state store of a gateway, as `/ready` and the `listening` line show it. */
export interface StateStoreInfo {
  readonly backend: 'memory' | 'nats' | 'redis'
  /** This replica's id in the store (`null` in memory). */
  readonly replicaId: string | null
  readonly connected: boolean
  /** Routing on its last view: the server is unreachable or slow, or not reconciled yet. */
  readonly degraded: boolean
  /** Other replicas heard from within the replica TTL. */
  readonly liveReplicas: number
  /** Writes of this replica waiting for the server. */
  readonly pendingWrites: number
}

/**
 * Connects the shared state store a configuration names (`undefined` for `memory`).
 *
 * @throws ProxyError `STATE_STORE_UNREACHABLE` when the server cannot be reached.
 */
export async function connectStateStore(
  config: ProxyConfig,
  onEvent: (event: StoreEvent) => void,
): Promise<ReplicatedStateStore | undefined> {
  const c = config.stateStore
  const kind = stateStoreKind(c.url)
  if (kind === 'memory') return undefined
  const common = {
    ...(c.replicaId === undefined ? {} : { replicaId: c.replicaId }),
    bindingTtlMs: c.bindingTtlMs,
    ...(c.replicaTtlMs === undefined ? {} : { replicaTtlMs: c.replicaTtlMs }),
    ...(c.heartbeatMs === undefined ? {} : { heartbeatMs: c.heartbeatMs }),
    ...(c.opTimeoutMs === undefined ? {} : { opTimeoutMs: c.opTimeoutMs }),
    onEvent,
  }
  try {
    return kind === 'nats'
      ? await connectNatsStore({ servers: c.url.split(',').map((u) => u.trim()), name: c.name, ...common })
      : await connectRedisStore({ url: c.url, prefix: c.name, ...common })
  } catch (err) {
    if (err instanceof RouterStateError) {
      // The message names the URL; keep a password out of it.
      const msg = err.message.replace(/\/\/[^@/\s]*@/g, '//***@')
      throw new ProxyError(
        err.code === 'INVALID_OPTION' ? 'INVALID_CONFIG' : 'STATE_STORE_UNREACHABLE',
        `state store: ${msg}`,
        kind,
      )
    }
    throw err
  }
}

/** The routing policy of a configured name. */
export function policyByName(name: ProxyPolicyName): RoutingPolicy {
  switch (name) {
    case 'kvc':
      return kvcPolicy()
    case 'round-robin':
      return roundRobinPolicy()
    case 'random':
      return randomPolicy()
    case 'power-of-two':
      return powerOfTwoPolicy()
    case 'sticky-session':
      return stickySessionPolicy()
    case 'sglang-cache-aware':
      return sglangCacheAwarePolicy()
    case 'dynamo-kv-cost':
      return dynamoKvCostPolicy()
  }
}

type Classified =
  | { readonly kind: 'failed'; readonly cause: SendFailureCause }
  | { readonly kind: 'client'; readonly status: number; readonly message: string }
  | { readonly kind: 'busy'; readonly message: string }
  | { readonly kind: 'aborted' }

/** SGLang's (and the emulator's) refusal of a second request in a session while one runs. */
const SESSION_IN_FLIGHT = /session \S+ already has a request in flight/i

/**
 * Maps a worker error to a Dispatch failure cause, a client error (the worker refused the request
 * itself: 4xx other than 408/409/429), `busy` (D refused the turn because another turn of the
 * session runs there: with several replicas, two turns of one session sent to two replicas at
 * once), or an abort.
 */
export function classifyUpstreamError(err: unknown, path: 'fast' | 'local' | 'seed' | 'direct'): Classified {
  let e = err
  let side: 'prefill' | 'decode' = 'decode'
  if (e instanceof WorkerBindingsError && e.code === 'PD_DISPATCH') {
    side = e.value === 'prefill' ? 'prefill' : 'decode'
    e = e.cause ?? e
  }
  if (e instanceof WorkerBindingsError) {
    if (e.code === 'ABORTED') return { kind: 'aborted' }
    // Refused before anything was sent (a body that cannot be written as JSON): the same request
    // fails on every worker, and no worker is at fault.
    if (e.code === 'INVALID_ARGUMENT' || e.code === 'INVALID_OPTION')
      return { kind: 'client', status: 400, message: e.message }
    if (e instanceof WorkerApiError) {
      const s = e.status
      const msg = e.serverMessage ?? e.message
      if (s === 400 && side === 'decode' && SESSION_IN_FLIGHT.test(msg)) return { kind: 'busy', message: msg }
      if (s >= 400 && s < 500 && s !== 408 && s !== 409 && s !== 429 && side === 'decode')
        return { kind: 'client', status: s, message: msg }
      if (/KVTransferError|kvcache|bootstrap/i.test(msg) || (path === 'seed' && side === 'prefill'))
        return { kind: 'failed', cause: 'transfer_error' }
      return { kind: 'failed', cause: 'worker_error' }
    }
    // A known-down endpoint (the health tracker refused the call) counts as a connection failure.
    if (e.code === 'CONNECTION' || e.code === 'ENDPOINT_UNHEALTHY')
      return {
        kind: 'failed',
        cause: path === 'seed' && side === 'prefill' ? 'transfer_error' : 'worker_unreachable',
      }
    if (e.code === 'TIMEOUT')
      return { kind: 'failed', cause: path === 'seed' ? 'transfer_timeout' : 'worker_error' }
    if (path === 'seed' && side === 'prefill') return { kind: 'failed', cause: 'transfer_error' }
    return { kind: 'failed', cause: 'worker_error' }
  }
  if (e instanceof Error && e.name === 'AbortError') return { kind: 'aborted' }
  return { kind: 'failed', cause: 'worker_error' }
}

/**
 * The proxy's core, without HTTP: a `kvc-router` `Router` over the configured workers, and the
 * effects `kvc-router`'s `TurnDriver` runs each turn's Dispatch state machine through — admission
 * RPCs (`AdmissionClient`), sends through a {@link TurnTransport}, waits on real timers (pause
 * hints, backoff) — with metrics and one decision line per turn. The replay harness embeds it directly
 * ("direct policy"); the HTTP proxy puts an OpenAI-compatible front on it.
 */
export class Gateway {
  readonly config: ProxyConfig
  readonly workers: WorkerPool
  readonly metrics: ProxyMetrics
  /** The elastic topology advice over the router's view (`GET /topology/advice`, metrics). */
  readonly topology: TopologySampler
  #topologyTimer: NodeJS.Timeout | undefined
  readonly #options: GatewayOptions
  readonly #log: DecisionLog
  readonly #now: () => number
  /** The router's clock and the timers waits sleep on. */
  readonly #clock: { readonly now: () => number; readonly timers: TurnTimers }
  readonly #warn: (message: string, detail: Record<string, unknown>) => void
  #router: Router | undefined
  /** Runs each turn's Dispatch through this gateway's effects (and wakes turns when a seed slot frees). */
  #driver: TurnDriver | undefined
  #store: ReplicatedStateStore | undefined
  #closing = false
  readonly #running = new Set<AbortController>()
  /** Turns being run (their promises), waited for before the shared store is closed. */
  readonly #turns = new Set<Promise<unknown>>()
  /**
   * With a shared store: when each session's last turn here ended (router clock) and the D it
   * last completed a turn on here, to tell whether another replica served it since, and to
   * release its slot when it goes idle after its binding expired on the server.
   */
  readonly #lastTurn = new Map<string, { readonly at: number; readonly workerId: string | undefined }>()
  #turnCounter = 0

  constructor(config: ProxyConfig, options: GatewayOptions = {}) {
    this.config = config
    this.#options = options
    this.#now =
      options.now ??
      (stateStoreKind(config.stateStore.url) === 'memory' ? () => performance.now() : () => Date.now())
    this.#clock = { now: this.#now, timers: { setTimeout, clearTimeout } }
    const warn =
      options.onWarning ??
      ((message: string, detail: Record<string, unknown>) =>
        process.stderr.write(
          `${JSON.stringify({ ts: new Date().toISOString(), level: 'warn', msg: message, ...detail })}\n`,
        ))
    this.#warn = warn
    this.workers = new WorkerPool(config, { onWarning: warn })
    this.topology = new TopologySampler({
      router: () => this.#router,
      now: this.#now,
      windowSamples: config.topology.windowSamples,
    })
    this.metrics = new ProxyMetrics({
      topology: () => this.topology.advice(),
      router: () => this.#router,
      workers: this.workers,
      sessions: options.sessions ?? (() => this.#router?.cluster.store.bindingCount() ?? 0),
      processMetrics: config.metrics.processMetrics,
      extraText: () => this.#store?.metricsText() ?? '',
    })
    this.#log = new DecisionLog(config.decisionLog, options.onDecision)
  }

  /** The router (after {@link Gateway.start}). */
  get router(): Router {
    if (this.#router === undefined)
      throw new ProxyError('INVALID_CONFIG', 'the gateway is not started', undefined)
    return this.#router
  }

  /** The shared state store (after {@link Gateway.start}; `undefined` in memory). */
  get stateStore(): ReplicatedStateStore | undefined {
    return this.#store
  }

  /** The state store's health, for `/ready` and logs. */
  stateStoreInfo(): StateStoreInfo {
    const s = this.#store
    if (s === undefined)
      return {
        backend: 'memory',
        replicaId: null,
        connected: true,
        degraded: false,
        liveReplicas: 0,
        pendingWrites: 0,
      }
    const m = s.metrics()
    return {
      backend: m.backend === 'nats' ? 'nats' : 'redis',
      replicaId: m.replicaId,
      connected: m.connected,
      degraded: m.degraded,
      liveReplicas: m.liveReplicas,
      pendingWrites: m.pendingWrites,
    }
  }

  /** The clock the router uses. */
  now(): number {
    return this.#now()
  }

  /**
   * Discovers the workers, builds the router (workers registered, unreachable ones unhealthy) and
   * starts the health, loads and KV-event loops.
   */
  async start(): Promise<void> {
    // The shared store first: a replica that cannot reach it must not start routing alone.
    const report =
      this.#options.onStoreEvent ??
      ((e: StoreEvent) =>
        // A URL in a store error names no password in the logs.
        this.#warn(`state store ${e.type}`, { detail: maskUrl(e.detail), replica: this.#store?.replicaId }))
    this.#store = await connectStateStore(this.config, (e) => {
      if (e.type === 'conflict' && e.conflict !== undefined) this.#onConflict(e.conflict)
      report(e)
    })
    const { reachable } = await this.workers.discover()
    const params: RouterParamsInput = this.config.router
    const store: ClusterStateStore | undefined = this.#store
    const router = new Router({
      now: this.#now,
      ...(store === undefined ? {} : { store }),
      ...(this.#options.random === undefined ? {} : { random: this.#options.random }),
      params,
      policy: this.#options.policy ?? policyByName(this.config.policy),
      workers: this.workers.all().map((w) => ({
        id: w.id,
        role: w.role,
        capacityTokens: w.capacityTokens,
        healthy: reachable.has(w.id),
        publishesEvents: w.role === 'decode' && w.kvEndpoints !== undefined,
      })),
    })
    for (const w of this.workers.all()) {
      if (!reachable.has(w.id)) {
        for (let i = 0; i < this.config.health.failureThreshold; i++)
          this.workers.health.recordFailure(w.url, new Error('unreachable at startup'))
      }
      if (w.pageSize !== undefined && w.role === 'decode' && w.pageSize !== router.params.pageSize) {
        this.#warn('page size differs from the router (set router.pageSize to the workers’ page size)', {
          worker: w.id,
          workerPageSize: w.pageSize,
          routerPageSize: router.params.pageSize,
        })
      }
    }
    // The driver also wakes a waiting turn when a seed ends and frees the pending-seed slot the
    // turn is first in line for, rather than let the slot idle until its backoff runs out.
    this.#driver = new TurnDriver(router)
    this.#router = router
    await this.workers.start(router)
    const every = this.config.topology.sampleIntervalMs
    if (every > 0 && !this.#closing) {
      this.#topologyTimer = setInterval(() => this.topology.sample(), every)
      this.#topologyTimer.unref()
    }
  }

  /**
   * Readiness: a healthy D worker (and, if the policy ever seeds, a healthy P worker). A degraded
   * shared store is reported (`degraded`) and, with `stateStore.readyWhenDegraded: false`, makes
   * the replica unready.
   */
  readiness(): { ready: boolean; reason: string | undefined; degraded: boolean } {
    const r = this.#workersReadiness()
    const degraded = this.#store?.degraded === true
    if (!r.ready || !degraded) return { ...r, degraded }
    return this.config.stateStore.readyWhenDegraded
      ? { ready: true, reason: 'state store degraded: routing on the last view', degraded }
      : { ready: false, reason: 'state store degraded', degraded }
  }

  #workersReadiness(): { ready: boolean; reason: string | undefined } {
    if (this.#closing) return { ready: false, reason: 'shutting down' }
    if (this.#router === undefined) return { ready: false, reason: 'starting' }
    const ds = this.workers.all().filter((w) => w.role === 'decode' && this.workers.isHealthy(w.id))
    if (ds.length === 0) return { ready: false, reason: 'no healthy decode worker' }
    const needsP = this.#router.policy.pathMode !== 'direct'
    const ps = this.workers.all().filter((w) => w.role === 'prefill')
    if (needsP && ps.length > 0 && !ps.some((w) => this.workers.isHealthy(w.id)))
      return { ready: false, reason: 'no healthy prefill worker' }
    return { ready: true, reason: undefined }
  }

  /**
   * Runs one turn to its end: every Dispatch action is performed (admission RPC, send through
   * `transport`, timer wait) until the turn completes or fails with a cause. Never throws for a
   * turn's failure: the result says why.
   */
  runTurn(input: TurnInput, transport: TurnTransport, signal?: AbortSignal): Promise<TurnResult> {
    const p = this.#runTurn(input, transport, signal)
    this.#turns.add(p)
    const untrack = (): void => {
      this.#turns.delete(p)
    }
    p.then(untrack, untrack)
    return p
  }

  async #runTurn(input: TurnInput, transport: TurnTransport, signal?: AbortSignal): Promise<TurnResult> {
    const router = this.router
    const driver = this.#driver!
    const ctl = new AbortController()
    const onAbort = (): void => ctl.abort(signal?.reason)
    if (signal?.aborted) ctl.abort(signal.reason)
    signal?.addEventListener('abort', onAbort, { once: true })
    this.#running.add(ctl)
    this.metrics.inflightTurns.inc()
    const startedAt = this.#now()
    // Turn ids become request ids on the workers (`rid`, the admission lease): with several
    // replicas they carry the replica's id, or two replicas' turns of one session would collide.
    const turnId =
      input.turnId ??
      (this.#store === undefined
        ? undefined
        : `${input.sessionId}#${this.#store.replicaId}.${++this.#turnCounter}`)
    const turn = router.dispatch({
      sessionId: input.sessionId,
      ...(turnId === undefined ? {} : { turnId }),
      promptTokens: input.promptTokens,
      ...(input.blocks === undefined ? {} : { blocks: input.blocks }),
      expectedOutputTokens: input.expectedOutputTokens,
      sloClass: input.sloClass,
    })
    let committed = false
    let completion: Completion | undefined
    let upstreamStatus: number | undefined
    let firstByteAt: number | undefined
    let lastSend: ServedBy | undefined
    const effects: TurnEffects = {
      admit: (a, s) => this.#admit(a, s),
      wait: async (a, s) => {
        this.metrics.waits.inc({ reason: a.reason })
        const t0 = this.#now()
        await sleepUntil(a.untilMs, s, this.#clock)
        this.metrics.waitSeconds.inc(Math.max(0, this.#now() - t0) / 1000)
      },
      send: async (a, s) => {
        const served: ServedBy = {
          turnId: a.turnId,
          sessionId: input.sessionId,
          path: a.type === 'sendFast' ? a.path : 'seed',
          decode: this.workers.get(a.type === 'sendFast' ? a.workerId : a.decodeId),
          prefill: a.type === 'sendFast' ? undefined : this.workers.get(a.prefillId),
          migratedFrom: a.migratedFrom,
          rid: a.leaseId ?? `${a.turnId}/s${a.attempt}`,
          attempt: a.attempt,
          retainSession: router.policy.pathMode === 'kvc',
        }
        lastSend = served
        let started: StartedResponse
        try {
          started = await transport.start(served, s)
        } catch (err) {
          const c = s.aborted ? ({ kind: 'aborted' } as const) : classifyUpstreamError(err, served.path)
          if (c.kind === 'aborted') return { type: 'stop', reason: this.#abortCause(ctl.signal) }
          if (c.kind === 'client') {
            upstreamStatus = c.status
            return { type: 'stop', reason: 'bad_request', error: err as Error }
          }
          // Another turn of the session runs on this D (sent through another replica): the
          // client retries once it ended; the D is not at fault.
          if (c.kind === 'busy') return { type: 'stop', reason: 'session_busy', error: err as Error }
          this.metrics.sends.inc({ worker: served.decode.id, path: served.path, result: c.cause })
          return { type: 'failed', cause: c.cause, message: (err as Error).message }
        }
        committed = true
        firstByteAt = this.#now()
        try {
          completion = await started.finish()
        } catch (err) {
          // The response had started: the client cannot be served elsewhere. Tell Dispatch (it
          // counts the failure against the D), then end the turn.
          const c = s.aborted ? ({ kind: 'aborted' } as const) : classifyUpstreamError(err, served.path)
          if (c.kind === 'failed') {
            this.metrics.sends.inc({ worker: served.decode.id, path: served.path, result: c.cause })
            return {
              type: 'stop',
              reason: 'stream_interrupted',
              error: err as Error,
              report: { type: 'failed', cause: c.cause, message: (err as Error).message },
            }
          }
          const reason =
            c.kind === 'aborted'
              ? this.#abortCause(ctl.signal)
              : c.kind === 'busy'
                ? 'session_busy'
                : 'bad_request'
          return { type: 'stop', reason, error: err as Error }
        }
        this.metrics.sends.inc({ worker: served.decode.id, path: served.path, result: 'ok' })
        return { type: 'completed', outputTokens: completion.outputTokens }
      },
    }
    let run: DrivenTurn
    try {
      run = await driver.drive(turn, effects, { signal: ctl.signal })
    } finally {
      signal?.removeEventListener('abort', onAbort)
      this.#running.delete(ctl)
      this.metrics.inflightTurns.dec()
    }
    const final = run.final
    const stop = run.stop
    // The driver's own abort (the client's signal, or close()) carries no error of the turn's.
    const proxyCause =
      stop === undefined ? undefined : stop.reason === 'aborted' ? this.#abortCause(ctl.signal) : stop.reason
    const error = stop === undefined || stop.reason === 'aborted' ? undefined : stop.error
    const endedAt = this.#now()
    const done = final.type === 'done' && proxyCause === undefined
    if (final.type === 'done' && final.migratedFrom !== undefined) {
      this.metrics.migrations.inc()
      // The session moved: its old D releases the slot (locks only; the KV stays in its tree).
      this.workers.releaseSession(final.migratedFrom, input.sessionId)
    }
    if (this.#store !== undefined) {
      this.#lastTurn.set(input.sessionId, {
        at: endedAt,
        workerId: final.type === 'done' ? final.workerId : this.#lastTurn.get(input.sessionId)?.workerId,
      })
    }
    const result: TurnResult = {
      turnId: final.turnId,
      sessionId: input.sessionId,
      status: done ? 'completed' : 'failed',
      cause: done ? undefined : (proxyCause ?? (final.type === 'fail' ? final.cause : 'unknown')),
      path: done ? (final as DoneAction).path : undefined,
      workerId: done ? (final as DoneAction).workerId : lastSend?.decode.id,
      prefillId: done ? (final as DoneAction).prefillId : lastSend?.prefill?.id,
      migratedFrom: final.type === 'done' ? final.migratedFrom : undefined,
      completion,
      committed,
      error: error ?? (final.type === 'fail' && proxyCause === undefined ? final.error : undefined),
      upstreamStatus,
      record: final.record,
      startedAt,
      endedAt,
      firstByteAt,
    }
    this.metrics.turns.inc({
      outcome: result.status,
      path: result.path ?? 'none',
      cause: result.cause ?? '',
    })
    this.#log.write(decisionLine(result, input.promptTokens, input.blocks?.length ?? 0))
    return result
  }

  /**
   * Forgets a session: releases its slot on its D and drops its binding, rejects and exclusions.
   * With a shared store, a session another replica served after this one, within
   * `session.idleTimeoutMs`, is only forgotten here: its D slot, binding and flags stay (that
   * replica forgets it when it is idle there).
   */
  forgetSession(sessionId: string): void {
    const r = this.#router
    if (r === undefined) return
    // A retraction pending for the session dies with it.
    r.cluster.retractions.delete(sessionId)
    if (this.#store !== undefined) {
      const own = this.#lastTurn.get(sessionId)
      this.#lastTurn.delete(sessionId)
      const b = this.#store.getBinding(sessionId)
      const servedElsewhere =
        b !== undefined &&
        (own === undefined || b.updatedAt > own.at) &&
        this.#now() - b.updatedAt < this.config.session.idleTimeoutMs
      if (servedElsewhere) return
      // Idle everywhere (or a one-turn session): its binding may have expired on the server already.
      const w = b?.workerId ?? own?.workerId
      if (w !== undefined) this.workers.releaseSession(w, sessionId)
      this.#store.deleteBinding(sessionId)
      this.#store.resetSession(sessionId)
      return
    }
    const b = r.cluster.store.getBinding(sessionId)
    if (b !== undefined) this.workers.releaseSession(b.workerId, sessionId)
    r.cluster.store.deleteBinding(sessionId)
    r.cluster.store.resetSession(sessionId)
  }

  /**
   * A turn of this replica completed on D `dropped` while another replica had bound the session
   * to D `kept` (two turns of one session raced through two replicas): the binding stays on
   * `kept`, so the session's slot on `dropped` is released, as after a migration.
   */
  /** Another replica's binding won: close the session on the D this replica had placed it on. */
  #onConflict({ sessionId, kept, dropped }: { sessionId: string; kept: string; dropped: string }): void {
    if (kept === dropped || !this.workers.all().some((w) => w.id === dropped)) return
    this.workers.releaseSession(dropped, sessionId)
    const own = this.#lastTurn.get(sessionId)
    if (own?.workerId === dropped) this.#lastTurn.set(sessionId, { ...own, workerId: kept })
  }

  /**
   * Stops the loops, aborts running turns (cause `shutting_down`), closes the log, and closes the
   * shared store once the aborted turns gave their load back (gracefully: this replica's seed
   * slots and load are dropped by the other replicas at once).
   */
  async close(): Promise<void> {
    this.#closing = true
    clearInterval(this.#topologyTimer)
    this.#topologyTimer = undefined
    for (const c of this.#running)
      c.abort(new ProxyError('SHUTTING_DOWN', 'the proxy is shutting down', undefined, 503))
    await this.workers.close()
    await this.#log.close()
    const store = this.#store
    if (store !== undefined) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([
        Promise.allSettled([...this.#turns]),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, 2_000)
        }),
      ])
      clearTimeout(timer)
      await store.close({ timeoutMs: 2_000 }).catch((err: unknown) => {
        this.#warn('state store close failed', { error: (err as Error).message })
      })
      this.#lastTurn.clear()
    }
  }

  /** Why a turn ended by an abort: the proxy shuts down, its deadline passed, or the client went away. */
  #abortCause(signal: AbortSignal): 'shutting_down' | 'deadline_exceeded' | 'client_closed' {
    if (this.#closing) return 'shutting_down'
    return isDeadline(signal.reason) ? 'deadline_exceeded' : 'client_closed'
  }

  async #admit(a: AdmitAction, signal: AbortSignal): Promise<AdmitOutcome> {
    const w = this.workers.get(a.workerId)
    if (w.admission === undefined) return { type: 'admitError', message: `${w.id} has no admission endpoint` }
    try {
      const response = await w.admission.admit(a.request, {
        timeout: a.timeoutMs,
        // Slow is not dead: the timeout tracks the D's observed latency and stretches while it answers.
        maxTimeout: SLOW_TIMEOUT_FACTOR * a.timeoutMs,
        maxRetries: 0,
        signal,
      })
      this.metrics.admissions.inc({
        worker: w.id,
        result: response.admitted ? 'admitted' : `rejected_${response.reason}`,
      })
      return { type: 'admitResult', response }
    } catch (err) {
      const timeout = err instanceof WorkerBindingsError && err.code === 'TIMEOUT'
      this.metrics.admissions.inc({ worker: w.id, result: timeout ? 'timeout' : 'error' })
      return timeout ? { type: 'admitTimeout' } : { type: 'admitError', message: (err as Error).message }
    }
  }
}
