import type { Router } from '@kvc/kvc-router'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { TopologyAdviceReport } from './topology/topologyAdvice.js'
import type { WorkerPool } from './workers.js'

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128]

/**
 * The proxy's Prometheus metrics, on a registry of its own (several proxies can live in one
 * process). Counters are updated as turns run; gauges of the cluster view (health, pauses,
 * in-flight load, available tokens, sessions) are read from the router at scrape time.
 */
export class ProxyMetrics {
  readonly registry = new Registry()
  readonly httpRequests: Counter<'route' | 'status'>
  readonly turns: Counter<'outcome' | 'path' | 'cause'>
  readonly ttft: Histogram<'path'>
  readonly e2e: Histogram<'path'>
  readonly admissions: Counter<'worker' | 'result'>
  readonly sends: Counter<'worker' | 'path' | 'result'>
  readonly waits: Counter<'reason'>
  readonly waitSeconds: Counter
  readonly migrations: Counter
  readonly inflightTurns: Gauge
  readonly queuedTurns: Gauge
  readonly #extraText: (() => string) | undefined

  constructor(options: {
    readonly router: () => Router | undefined
    readonly workers: WorkerPool
    readonly sessions: () => number
    readonly processMetrics: boolean
    /** More exposition text appended at scrape time (the shared state store's metrics). */
    readonly extraText?: () => string
    /** The elastic topology advice at scrape time (`kvc_proxy_topology_*`; absent: none). */
    readonly topology?: () => TopologyAdviceReport | undefined
  }) {
    this.#extraText = options.extraText
    const registers = [this.registry]
    this.httpRequests = new Counter({
      name: 'kvc_proxy_http_requests_total',
      help: 'HTTP requests answered by the proxy, by route and status code.',
      labelNames: ['route', 'status'],
      registers,
    })
    this.turns = new Counter({
      name: 'kvc_proxy_turns_total',
      help: 'Turns that ended, by outcome (completed|failed), path (fast|seed|direct|none) and failure cause.',
      labelNames: ['outcome', 'path', 'cause'],
      registers,
    })
    this.ttft = new Histogram({
      name: 'kvc_proxy_ttft_seconds',
      help: 'Time from the request to the first token sent to the client, completed turns.',
      labelNames: ['path'],
      buckets: LATENCY_BUCKETS,
      registers,
    })
    this.e2e = new Histogram({
      name: 'kvc_proxy_e2e_seconds',
      help: 'Time from the request to the end of the response, completed turns.',
      labelNames: ['path'],
      buckets: LATENCY_BUCKETS,
      registers,
    })
    this.admissions = new Counter({
      name: 'kvc_proxy_admissions_total',
      help: 'Admission RPCs to D workers, by result (admitted|rejected_<reason>|timeout|error).',
      labelNames: ['worker', 'result'],
      registers,
    })
    this.sends = new Counter({
      name: 'kvc_proxy_sends_total',
      help: 'Turns sent to workers, by D worker, path and result (ok|<failure cause>).',
      labelNames: ['worker', 'path', 'result'],
      registers,
    })
    this.waits = new Counter({
      name: 'kvc_proxy_waits_total',
      help: 'Waits of turns (pause hints, every D rejecting, admission retries), by reason.',
      labelNames: ['reason'],
      registers,
    })
    this.waitSeconds = new Counter({
      name: 'kvc_proxy_wait_seconds_total',
      help: 'Seconds turns spent waiting (backpressure).',
      registers,
    })
    this.migrations = new Counter({
      name: 'kvc_proxy_migrations_total',
      help: 'Turns whose session moved to another D worker.',
      registers,
    })
    this.inflightTurns = new Gauge({
      name: 'kvc_proxy_inflight_turns',
      help: 'Turns being dispatched or streamed.',
      registers,
    })
    this.queuedTurns = new Gauge({
      name: 'kvc_proxy_queued_turns',
      help: 'Turns queued behind a running turn of the same session.',
      registers,
    })
    const { router, workers, sessions } = options
    new Gauge({
      name: 'kvc_proxy_sessions',
      help: 'Sessions the proxy tracks.',
      registers,
      collect() {
        this.set(sessions())
      },
    })
    new Gauge({
      name: 'kvc_proxy_worker_healthy',
      help: 'Whether a worker is healthy (1) or not (0).',
      labelNames: ['worker', 'role'],
      registers,
      collect() {
        for (const w of workers.all())
          this.set({ worker: w.id, role: w.role }, workers.isHealthy(w.id) ? 1 : 0)
      },
    })
    const perWorker = (
      name: string,
      help: string,
      value: (r: Router, id: string) => number,
      role: 'decode' | 'any' = 'decode',
    ) =>
      new Gauge({
        name,
        help,
        labelNames: ['worker'],
        registers,
        collect() {
          const r = router()
          if (r === undefined) return
          for (const w of workers.all()) {
            if ((role === 'decode' && w.role !== 'decode') || !r.cluster.has(w.id)) continue
            this.set({ worker: w.id }, value(r, w.id))
          }
        },
      })
    perWorker(
      'kvc_proxy_worker_paused',
      'Whether a D worker is paused by a backpressure hint (1) or not (0).',
      (r, id) => (r.cluster.isPaused(id) ? 1 : 0),
    )
    perWorker(
      'kvc_proxy_worker_inflight',
      'Turns in flight on a worker (the router load).',
      (r, id) => r.cluster.worker(id).load.turns,
      'any',
    )
    perWorker(
      'kvc_proxy_worker_available_tokens',
      'KV tokens the router believes a D worker can take (free + evictable − reserved).',
      (r, id) => r.cluster.worker(id).availableTokens,
    )
    new Counter({
      name: 'kvc_proxy_kv_events_total',
      help: 'KV events received from a D worker.',
      labelNames: ['worker'],
      registers,
      collect() {
        this.reset()
        for (const w of workers.all()) if (w.role === 'decode') this.inc({ worker: w.id }, w.kvEventsReceived)
      },
    })
    const topology = options.topology
    if (topology !== undefined) {
      const advice = topology
      new Gauge({
        name: 'kvc_proxy_topology_advised_workers',
        help: 'Workers the elastic topology advisor recommends per role (prefill|decode).',
        labelNames: ['role'],
        registers,
        collect() {
          this.reset()
          const a = advice()
          if (a === undefined) return
          this.set({ role: 'prefill' }, a.prefill)
          this.set({ role: 'decode' }, a.decode)
        },
      })
      new Gauge({
        name: 'kvc_proxy_topology_switch_advised',
        help: 'A role switch the advisor recommends (1): drain the worker, restart it in role `to`.',
        labelNames: ['worker', 'from', 'to'],
        registers,
        collect() {
          this.reset()
          for (const sw of advice()?.switches ?? [])
            this.set({ worker: sw.workerId, from: sw.from, to: sw.to }, 1)
        },
      })
      const figure = (name: string, help: string, value: (a: TopologyAdviceReport) => number) =>
        new Gauge({
          name,
          help,
          registers,
          collect() {
            this.reset()
            const a = advice()
            if (a !== undefined) this.set(value(a))
          },
        })
      figure(
        'kvc_proxy_topology_prefill_utilization',
        'Mean share of the sampling window the P workers spent prefilling (the advisor’s input).',
        (a) => a.prefillUtilization,
      )
      figure(
        'kvc_proxy_topology_prefill_queue_seconds',
        'Mean prefill work queued on the P workers, seconds (the advisor’s input).',
        (a) => a.prefillQueueS,
      )
      figure(
        'kvc_proxy_topology_decode_kv_pressure',
        'Mean KV pressure of the D workers (the advisor’s input).',
        (a) => a.decodePressure,
      )
    }
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'kvc_proxy_' })
  }

  /** The exposition text (`GET /metrics`), then the shared state store's (`kvc_router_state_*`). */
  async text(): Promise<string> {
    const own = await this.registry.metrics()
    const extra = this.#extraText?.() ?? ''
    if (extra === '') return own
    return `${own}${own.endsWith('\n') || own === '' ? '' : '\n'}${extra}`
  }

  get contentType(): string {
    return this.registry.contentType
  }
}
