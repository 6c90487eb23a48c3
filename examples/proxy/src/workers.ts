import type { Router } from '@kvc/kvc-router'
import {
  AdmissionClient,
  DEFAULT_BOOTSTRAP_PORT,
  EndpointHealthTracker,
  KvEventSubscriber,
  SglangClient,
  WorkerApiError,
  bootstrapHostOf,
  residencyFeeder,
} from '@kvc/worker-bindings'
import type { ProxyConfig, WorkerConfig } from './config.js'
import { ProxyError } from './errors.js'

/**
 * How far a control call's timeout (admission RPC, health probe, loads poll) may stretch, as a
 * multiple of its configured value, while the worker keeps answering other calls: slow is not
 * dead (`maxTimeout` of `@kvc/worker-bindings`' calls). A worker that answers nothing still times
 * out at the configured value.
 */
export const SLOW_TIMEOUT_FACTOR = 8

/** One upstream worker with its clients and what was discovered about it. */
export interface WorkerHandle {
  readonly id: string
  readonly role: 'prefill' | 'decode'
  readonly url: string
  readonly client: SglangClient
  /** D only. */
  readonly admission: AdmissionClient | undefined
  capacityTokens: number
  /** P only: where D workers fetch the KV from (`bootstrap_host`, `bootstrap_port`). */
  bootstrapHost: string
  bootstrapPort: number | null
  /** `served_model_name` from `/server_info`, if known. */
  modelName: string | undefined
  /** Page size the worker reported (compared with the router's at startup). */
  pageSize: number | undefined
  /** D only: the KV-event endpoints (configured, or discovered from `/server_info`). */
  kvEndpoints: { readonly endpoint: string; readonly replayEndpoint?: string } | undefined
  kvEvents: KvEventSubscriber | undefined
  kvEventsReceived: number
  kvEventGaps: number
  /** KV events the residency index refused (corrupt); each leaves a gap that flags a resync. */
  kvEventsRefused: number
}

/** Options of {@link WorkerPool}. */
export interface WorkerPoolOptions {
  /** Called when a worker turns healthy or unhealthy. */
  readonly onHealth?: (workerId: string, healthy: boolean, reason: string | undefined) => void
  /** Called with non-fatal problems (a failed poll, an undecodable KV event). */
  readonly onWarning?: (message: string, detail: Record<string, unknown>) => void
}

/**
 * The upstream workers: an `SglangClient` per worker (and an `AdmissionClient` per D) sharing one
 * `EndpointHealthTracker`, discovery through `/server_info`, a `/health` probe loop, a
 * `/v1/loads` poll that feeds the router's capacity view, and a KV-event subscriber per D worker
 * that feeds the router's residency index.
 */
export class WorkerPool {
  readonly health: EndpointHealthTracker
  readonly #config: ProxyConfig
  readonly #options: WorkerPoolOptions
  readonly #workers = new Map<string, WorkerHandle>()
  readonly #byUrl = new Map<string, string>()
  #router: Router | undefined
  #probeTimer: ReturnType<typeof setInterval> | undefined
  #loadTimer: ReturnType<typeof setInterval> | undefined
  #probing = false
  #polling = false
  #closed = false
  readonly #inflight = new Set<AbortController>()

  constructor(config: ProxyConfig, options: WorkerPoolOptions = {}) {
    this.#config = config
    this.#options = options
    this.health = new EndpointHealthTracker({
      failureThreshold: config.health.failureThreshold,
      onChange: (h) => {
        const id = this.#byUrl.get(h.endpoint)
        if (id === undefined) return
        this.#setHealth(id, h.healthy, h.lastError)
      },
    })
    for (const w of config.workers) this.#add(w)
  }

  /** Every worker, P and D, in configuration order. */
  all(): WorkerHandle[] {
    return [...this.#workers.values()]
  }

  get(id: string): WorkerHandle {
    const w = this.#workers.get(id)
    if (w === undefined) throw new ProxyError('INVALID_CONFIG', `unknown worker ${id}`, id)
    return w
  }

  isHealthy(id: string): boolean {
    return this.health.isHealthy(this.get(id).url)
  }

  /**
   * Discovers every worker (`/server_info`: capacity, page size, bootstrap port, KV-event
   * endpoints). A worker that does not answer is registered unhealthy if its capacity is
   * configured; otherwise startup fails with `WORKER_UNREACHABLE`.
   */
  async discover(): Promise<{ reachable: Set<string> }> {
    const reachable = new Set<string>()
    await Promise.all(
      this.all().map(async (w) => {
        const cfg = this.#config.workers.find((c) => c.id === w.id)!
        try {
          const info = await w.client.serverInfo({
            timeout: this.#config.health.timeoutMs * 5,
            maxRetries: 2,
          })
          reachable.add(w.id)
          if (cfg.capacityTokens === undefined && typeof info.max_total_num_tokens === 'number')
            w.capacityTokens = info.max_total_num_tokens
          if (typeof info.page_size === 'number') w.pageSize = info.page_size
          if (typeof info.served_model_name === 'string') w.modelName = info.served_model_name
          if (w.role === 'prefill' && cfg.bootstrapPort === undefined) {
            const port = info.disaggregation_bootstrap_port
            w.bootstrapPort = typeof port === 'number' ? port : DEFAULT_BOOTSTRAP_PORT
          }
          const kv = cfg.kvEvents ?? this.#config.kvEvents
          if (w.role === 'decode' && kv === 'auto' && typeof info.kv_events_config === 'string') {
            try {
              const k = JSON.parse(info.kv_events_config) as { endpoint?: unknown; replay_endpoint?: unknown }
              if (typeof k.endpoint === 'string') {
                // Publishers bind to `tcp://*:port`: connect to the worker's own host instead.
                const host = bootstrapHostOf(w.url)
                const at = (e: string) =>
                  e.replace(
                    /^tcp:\/\/(\*|0\.0\.0\.0|\[::\])(?=:)/,
                    `tcp://${host.includes(':') ? `[${host}]` : host}`,
                  )
                w.kvEndpoints = {
                  endpoint: at(k.endpoint),
                  ...(typeof k.replay_endpoint === 'string' ? { replayEndpoint: at(k.replay_endpoint) } : {}),
                }
              }
            } catch {
              this.#options.onWarning?.('kv_events_config is not JSON', { worker: w.id })
            }
          }
        } catch (err) {
          if (cfg.capacityTokens === undefined) {
            throw new ProxyError(
              'WORKER_UNREACHABLE',
              `worker ${w.id} (${w.url}) did not answer /server_info and workers[].capacityTokens is not set: ${(err as Error).message}`,
              w.id,
            )
          }
        }
        if (w.capacityTokens <= 0) {
          throw new ProxyError(
            'WORKER_UNREACHABLE',
            `worker ${w.id}: capacity unknown (set workers[].capacityTokens)`,
            w.id,
          )
        }
      }),
    )
    return { reachable }
  }

  /**
   * Starts the background loops against `router` (registered workers): health probes, the loads
   * poll, and the KV-event subscribers. Every timer is cleared by {@link WorkerPool.close}.
   */
  async start(router: Router): Promise<void> {
    this.#router = router
    const { health, loads } = this.#config
    this.#probeTimer = setInterval(() => void this.#probeAll(), health.intervalMs)
    this.#probeTimer.unref?.()
    if (loads.intervalMs > 0) {
      this.#loadTimer = setInterval(() => void this.#pollLoads(), loads.intervalMs)
      this.#loadTimer.unref?.()
    }
    for (const w of this.all()) {
      if (w.role !== 'decode') continue
      const cfg = this.#config.workers.find((c) => c.id === w.id)!
      const kv = cfg.kvEvents ?? this.#config.kvEvents
      const endpoints = typeof kv === 'object' ? kv : w.kvEndpoints
      if (kv === 'off' || endpoints === undefined) continue
      const sub = new KvEventSubscriber({
        endpoint: endpoints.endpoint,
        ...(endpoints.replayEndpoint === undefined ? {} : { replayEndpoint: endpoints.replayEndpoint }),
        startSeq: 0n,
        onBatch: (m) => {
          w.kvEventsReceived += m.batch.events.length
          feed(m)
        },
        onGap: (gap) => {
          w.kvEventGaps++
          if (!gap.recovered)
            this.#options.onWarning?.('KV-event gap not recovered', {
              worker: w.id,
              from: String(gap.from),
              to: String(gap.to),
              reason: gap.reason,
            })
        },
        onError: (err) => this.#options.onWarning?.('KV-event error', { worker: w.id, error: String(err) }),
      })
      // A corrupt event (a hash past 64 bits, a wrong block size, an id out of order) is skipped,
      // the rest of its batch applied, and the hole it leaves flags the worker for a resync.
      const feed = residencyFeeder(router, w.id, 0, {
        onRefused: (err, e) => {
          w.kvEventsRefused++
          if (w.kvEventsRefused === 1 || w.kvEventsRefused % 1_000 === 0)
            this.#options.onWarning?.('KV event refused', {
              worker: w.id,
              refused: w.kvEventsRefused,
              eventId: e.eventId,
              error: String(err),
            })
        },
      })
      w.kvEvents = sub
      try {
        await sub.start()
      } catch (err) {
        w.kvEvents = undefined
        await sub.close().catch(() => {})
        this.#options.onWarning?.('KV-event subscriber did not start', { worker: w.id, error: String(err) })
      }
    }
  }

  /** A call context whose signal is aborted by {@link WorkerPool.close}. */
  track(): { signal: AbortSignal; done: () => void } {
    const c = new AbortController()
    this.#inflight.add(c)
    return { signal: c.signal, done: () => this.#inflight.delete(c) }
  }

  /** Fire-and-forget `/close_session` on a worker (migration, idle sessions); failures are ignored. */
  releaseSession(workerId: string, sessionId: string): void {
    const w = this.#workers.get(workerId)
    if (w === undefined || this.#closed) return
    const t = this.track()
    w.client
      .closeSession(sessionId, { timeout: this.#config.health.timeoutMs, maxRetries: 0, signal: t.signal })
      .catch(() => {})
      .finally(t.done)
  }

  async close(): Promise<void> {
    this.#closed = true
    if (this.#probeTimer !== undefined) clearInterval(this.#probeTimer)
    if (this.#loadTimer !== undefined) clearInterval(this.#loadTimer)
    this.#probeTimer = undefined
    this.#loadTimer = undefined
    for (const c of this.#inflight) c.abort(new Error('the proxy is shutting down'))
    this.health.close()
    await Promise.all(
      this.all().map(async (w) => {
        const s = w.kvEvents
        w.kvEvents = undefined
        if (s !== undefined) await s.close().catch(() => {})
      }),
    )
  }

  #add(cfg: WorkerConfig): void {
    const common = {
      timeout: this.#config.upstreamTimeoutMs,
      healthTracker: this.health,
    }
    const client = new SglangClient({ baseURL: cfg.url, ...common })
    const admission =
      cfg.role === 'decode'
        ? new AdmissionClient({
            baseURL: cfg.admissionUrl ?? cfg.url,
            healthTracker: this.health,
            // Dispatch retries admission itself (admissionTries, with backoff): one try per action.
            maxRetries: 0,
          })
        : undefined
    const w: WorkerHandle = {
      id: cfg.id,
      role: cfg.role,
      url: client.baseURL,
      client,
      admission,
      capacityTokens: cfg.capacityTokens ?? 0,
      bootstrapHost: bootstrapHostOf(cfg.url),
      bootstrapPort: cfg.bootstrapPort ?? DEFAULT_BOOTSTRAP_PORT,
      modelName: undefined,
      pageSize: undefined,
      kvEndpoints: undefined,
      kvEvents: undefined,
      kvEventsReceived: 0,
      kvEventGaps: 0,
      kvEventsRefused: 0,
    }
    this.#workers.set(cfg.id, w)
    this.#byUrl.set(client.baseURL, cfg.id)
    if (admission !== undefined && admission.baseURL !== client.baseURL)
      this.#byUrl.set(admission.baseURL, cfg.id)
  }

  #setHealth(id: string, healthy: boolean, reason: string | undefined): void {
    const r = this.#router
    if (r?.cluster.has(id)) r.cluster.setHealth(id, healthy)
    this.#options.onHealth?.(id, healthy, reason)
  }

  async #probeAll(): Promise<void> {
    if (this.#probing || this.#closed) return
    this.#probing = true
    try {
      await Promise.all(
        this.all().map(async (w) => {
          const t = this.track()
          try {
            // The client reports the outcome to the shared health tracker; as a probe, the call
            // goes through even while the tracker refuses calls to an unhealthy worker.
            const timeout = this.#config.health.timeoutMs
            await this.health.probe(w.client.baseURL, () =>
              w.client.health({
                timeout,
                maxTimeout: SLOW_TIMEOUT_FACTOR * timeout,
                maxRetries: 0,
                signal: t.signal,
              }),
            )
          } catch {
            // recorded by the tracker (connection errors, timeouts, 5xx)
          } finally {
            t.done()
          }
        }),
      )
    } finally {
      this.#probing = false
    }
  }

  async #pollLoads(): Promise<void> {
    const router = this.#router
    if (this.#polling || this.#closed || router === undefined) return
    this.#polling = true
    try {
      await Promise.all(
        this.all().map(async (w) => {
          if (w.role !== 'decode' || !this.health.isHealthy(w.url)) return
          const t = this.track()
          try {
            const res = await w.client.loads(
              { include: ['core', 'disagg'] },
              {
                timeout: this.#config.health.timeoutMs,
                maxTimeout: SLOW_TIMEOUT_FACTOR * this.#config.health.timeoutMs,
                maxRetries: 0,
                signal: t.signal,
              },
            )
            const l = res.loads[0]
            if (l === undefined || !router.cluster.has(w.id)) return
            const cap = typeof l.max_total_num_tokens === 'number' ? l.max_total_num_tokens : w.capacityTokens
            const used = typeof l.num_used_tokens === 'number' ? l.num_used_tokens : 0
            const dis = l.disaggregation as Record<string, unknown> | undefined
            router.cluster.reportCapacity(w.id, {
              freeTokens: Math.max(0, cap - used),
              evictableTokens: 0,
              ...(typeof dis?.decode_transfer_queue_reqs === 'number'
                ? { transferQueueDepth: dis.decode_transfer_queue_reqs }
                : {}),
              ...(typeof dis?.decode_retracted_queue_reqs === 'number'
                ? { retractedQueueDepth: dis.decode_retracted_queue_reqs }
                : {}),
            })
          } catch (err) {
            if (err instanceof WorkerApiError && err.status === 404) return // an older SGLang without /v1/loads
            if (!this.#closed)
              this.#options.onWarning?.('loads poll failed', { worker: w.id, error: (err as Error).message })
          } finally {
            t.done()
          }
        }),
      )
    } finally {
      this.#polling = false
    }
  }
}
