import { readFileSync } from 'node:fs'
import { type RouterParamsInput, SLO_CLASSES, type SloClass, resolveRouterParams } from '@kvc/kvc-router'
import { ProxyError } from './errors.js'
import { DEFAULT_DEADLINES, type DeadlinesConfig, resolveDeadlines } from './limits/deadlines.js'
import {
  type AuthConfig,
  type AuthConfigInput,
  DEFAULT_AUTH,
  resolveAuth,
  resolveCacheSaltField,
} from './tenancy/authConfig.js'
import type { CacheSaltField } from './tenancy/requestScope.js'
import {
  DEFAULT_TENANT_DEFAULTS,
  type TenantDefaults,
  type TenantDefaultsInput,
  resolveTenantDefaults,
} from './tenancy/tenants.js'

/** Where a session id comes from, tried in the configured order. */
export type SessionSource = 'header' | 'session_id' | 'user' | 'prefix-hash'

/** How the proxy counts a request's prompt tokens and hashes its blocks. */
export type TokenizerMode = 'estimate' | 'emulator'

/** Names of the routing policies the proxy can run (all from `@kvc/kvc-router`). */
export const PROXY_POLICIES = [
  'kvc',
  'round-robin',
  'random',
  'power-of-two',
  'sticky-session',
  'sglang-cache-aware',
  'dynamo-kv-cost',
] as const

/** One of {@link PROXY_POLICIES}. */
export type ProxyPolicyName = (typeof PROXY_POLICIES)[number]

/** KV events of a D worker: discovered from `/server_info` (`auto`), off, or given. */
export type KvEventsConfig = 'auto' | 'off' | { readonly endpoint: string; readonly replayEndpoint?: string }

/** One upstream SGLang worker. */
export interface WorkerConfig {
  /** Unique id (used in metrics labels, logs and the router). */
  readonly id: string
  readonly role: 'prefill' | 'decode'
  /** Base URL of the SGLang HTTP server, e.g. `http://10.0.0.6:30000`. */
  readonly url: string
  /** KV pool size in tokens; default: `max_total_num_tokens` from `/server_info` at startup. */
  readonly capacityTokens?: number
  /** D only: base URL of the admission RPC (default: `url`; the emulator serves it). */
  readonly admissionUrl?: string
  /** P only: the bootstrap port of the PD transfer (default: `/server_info`, else 8998). */
  readonly bootstrapPort?: number
  /** D only: KV events feeding the residency index (default: the global `kvEvents`). */
  readonly kvEvents?: KvEventsConfig
}

/**
 * Where the router's shared state lives: session bindings, in-flight load, pending seeds, pause
 * hints, rejects and exclusions (`ClusterStateStore` of `@kvc/kvc-router`). `memory` keeps it in
 * this process (one replica); a `nats://` or `redis://` URL shares it between every replica
 * configured with the same URL and `name` (`@kvc/router-state`).
 */
export interface StateStoreConfig {
  /**
   * `memory` (default), `nats://host:port` (several servers separated by commas; JetStream must be
   * on), or `redis://host:port[/db]` / `rediss://…`.
   */
  readonly url: string
  /** One name per group of replicas: the NATS buckets' and subjects' prefix, the Redis key prefix. */
  readonly name: string
  /** Unique per replica (default: host name, process id and random bytes). */
  readonly replicaId?: string
  /** Idle TTL of a session's binding on the server (default: `session.idleTimeoutMs`). */
  readonly bindingTtlMs: number
  /** A replica not heard from for this long stops counting: its load and seed slots expire. */
  readonly replicaTtlMs?: number
  /** How often a replica publishes its whole load (its liveness signal). */
  readonly heartbeatMs?: number
  /** A store operation slower than this marks the replica degraded. */
  readonly opTimeoutMs?: number
  /**
   * `/ready` answers 200 while the store is degraded (the replica keeps routing on its last view):
   * `true` (default), or `false` to take a degraded replica out of its load balancer.
   */
  readonly readyWhenDegraded: boolean
}

/** The resolved configuration (every default filled in). */
export interface ProxyConfig {
  readonly listen: { readonly host: string; readonly port: number }
  readonly workers: readonly WorkerConfig[]
  readonly policy: ProxyPolicyName
  /** `@kvc/kvc-router` parameters (`pageSize`, `tauAppend`, `tauReject`, ...). */
  readonly router: RouterParamsInput
  readonly tokenizer: TokenizerMode
  /** How sessions are identified and kept (see `identifySession`). */
  readonly session: {
    readonly sources: readonly SessionSource[]
    /** The first of `headers` (kept for configurations that name one header). */
    readonly header: string
    /**
     * Headers carrying the session id (`header` source), tried in order: `x-session-id`, SGLang
     * model gateway's `x-smg-routing-key` and llm-d's `x-session-token` by default.
     */
    readonly headers: readonly string[]
    /** A session idle this long is forgotten and its KV released on its D (`/close_session`). */
    readonly idleTimeoutMs: number
    /** Turns of one session queued behind the running one before 429. */
    readonly maxQueuedTurns: number
    /** Sessions tracked at most; past it the least recently used idle one is forgotten. */
    readonly maxSessions: number
    /** Bytes of per-session state (block hashes) kept at most; past it, as for `maxSessions`. */
    readonly maxTableBytes: number
  }
  readonly limits: {
    /** Largest request body; larger ones get 413. */
    readonly maxBodyBytes: number
    /** Longest prompt (tokens, as the proxy counts them); longer ones get 400. */
    readonly maxPromptTokens: number
    /**
     * Longest prompt in characters, checked before tokenizing (400 above): a prompt this long is
     * refused without the CPU to count its tokens. Default: 8 × `maxPromptTokens`.
     */
    readonly maxPromptChars: number
    /** Deepest nesting of arrays and objects in a request body, checked before parsing (400 above). */
    readonly maxJsonDepth: number
    /** `max_tokens` when the request gives none (the decode reserve). */
    readonly defaultMaxTokens: number
    /** Largest `max_tokens` accepted. */
    readonly maxMaxTokens: number
    /** Turns in progress at once over every tenant (reading, queued, routed, streaming); 429 past it. */
    readonly maxConcurrentTurns: number
  }
  /** How long a turn, a request body and request headers may take. */
  readonly deadlines: DeadlinesConfig
  /** API keys and tenants; off (one implicit tenant) when no tenant is configured. */
  readonly auth: AuthConfig
  /** What every configured tenant gets unless it says otherwise. */
  readonly tenantDefaults: TenantDefaults
  /** The worker request field carrying a tenant's cache salt. */
  readonly cacheSaltField: CacheSaltField
  readonly defaultSloClass: SloClass
  /** Probes of every worker's `/health` (and recovery of unhealthy ones). */
  readonly health: {
    readonly intervalMs: number
    readonly timeoutMs: number
    readonly failureThreshold: number
  }
  /** Polling of `/v1/loads` for capacity reports (0 disables it). */
  readonly loads: { readonly intervalMs: number }
  /**
   * Sampling of the workers for the elastic topology advice (`GET /topology/advice`, the
   * `kvc_proxy_topology_*` metrics): every `sampleIntervalMs` (0 disables it), averaged over the
   * last `windowSamples` samples.
   */
  readonly topology: { readonly sampleIntervalMs: number; readonly windowSamples: number }
  /** KV events of the D workers, unless a worker says otherwise. */
  readonly kvEvents: 'auto' | 'off'
  /** Worker calls: idle timeout of a generation (ms between chunks). */
  readonly upstreamTimeoutMs: number
  /** One JSON line per routing decision: `stdout`, `stderr`, `off`, or a file path (appended). */
  readonly decisionLog: string
  readonly metrics: {
    /** Also export prom-client's default process metrics (CPU, memory, event loop). */
    readonly processMetrics: boolean
  }
  /** The router's shared state: in this process, or on NATS / Redis for several replicas. */
  readonly stateStore: StateStoreConfig
}

/** A configuration as written in a file or built in code: everything but `workers` optional. */
export interface ProxyConfigInput {
  readonly listen?: Partial<ProxyConfig['listen']>
  readonly workers?: readonly WorkerConfig[]
  readonly policy?: string
  readonly router?: RouterParamsInput
  readonly tokenizer?: string
  readonly session?: Partial<ProxyConfig['session']>
  readonly limits?: Partial<ProxyConfig['limits']>
  readonly defaultSloClass?: string
  readonly health?: Partial<ProxyConfig['health']>
  readonly loads?: Partial<ProxyConfig['loads']>
  readonly topology?: Partial<ProxyConfig['topology']>
  readonly kvEvents?: string
  readonly upstreamTimeoutMs?: number
  readonly decisionLog?: string
  readonly metrics?: Partial<ProxyConfig['metrics']>
  /** A store URL (`memory`, `nats://…`, `redis://…`) or the whole object. */
  readonly stateStore?: string | Partial<StateStoreConfig>
  readonly deadlines?: Partial<DeadlinesConfig>
  readonly auth?: AuthConfigInput
  readonly tenantDefaults?: TenantDefaultsInput
  readonly cacheSaltField?: string
}

/** The defaults: every key but `workers` (and `stateStore.bindingTtlMs`, `session.idleTimeoutMs` by default). */
export type DefaultConfig = Omit<ProxyConfig, 'workers' | 'stateStore'> & {
  readonly stateStore: Omit<StateStoreConfig, 'bindingTtlMs'>
}

/** Defaults of every key (see the README's configuration reference). */
export const DEFAULT_CONFIG: DefaultConfig = Object.freeze({
  listen: { host: '127.0.0.1', port: 8080 },
  policy: 'kvc',
  router: {},
  tokenizer: 'estimate',
  session: {
    sources: ['header', 'prefix-hash'],
    header: 'x-session-id',
    headers: ['x-session-id', 'x-smg-routing-key', 'x-session-token'],
    idleTimeoutMs: 30 * 60_000,
    maxQueuedTurns: 8,
    maxSessions: 100_000,
    maxTableBytes: 256 * 1024 * 1024,
  },
  limits: {
    maxBodyBytes: 4 * 1024 * 1024,
    maxPromptTokens: 131_072,
    maxPromptChars: 8 * 131_072,
    maxJsonDepth: 64,
    defaultMaxTokens: 512,
    maxMaxTokens: 32_768,
    maxConcurrentTurns: 1_024,
  },
  deadlines: DEFAULT_DEADLINES,
  auth: DEFAULT_AUTH,
  tenantDefaults: DEFAULT_TENANT_DEFAULTS,
  cacheSaltField: 'cache_salt',
  defaultSloClass: 'interactive',
  health: { intervalMs: 2_000, timeoutMs: 1_000, failureThreshold: 3 },
  loads: { intervalMs: 1_000 },
  topology: { sampleIntervalMs: 1_000, windowSamples: 60 },
  kvEvents: 'auto',
  upstreamTimeoutMs: 120_000,
  decisionLog: 'stdout',
  metrics: { processMetrics: false },
  stateStore: { url: 'memory', name: 'kvc', readyWhenDegraded: true },
} satisfies DefaultConfig)

const SESSION_SOURCES: readonly SessionSource[] = ['header', 'session_id', 'user', 'prefix-hash']

function fail(key: string, message: string, value: unknown): never {
  throw new ProxyError('INVALID_CONFIG', `config ${key}: ${message}`, value)
}

function int(key: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min)
    fail(key, `must be an integer >= ${min}, got ${JSON.stringify(v)}`, v)
  return v
}

/** `v` checked as {@link int} does, or `dflt` when it is absent. */
function intOr(key: string, v: unknown, min: number, dflt: number): number {
  return v === undefined ? dflt : int(key, v, min)
}

function url(key: string, v: unknown): string {
  if (typeof v !== 'string') fail(key, 'must be a URL string', v)
  let u: URL
  try {
    u = new URL(v)
  } catch {
    fail(key, `is not a URL: ${JSON.stringify(v)}`, v)
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') fail(key, 'must be an http(s) URL', v)
  return v.replace(/\/+$/, '')
}

/** The kind of store a `stateStore.url` names. */
export function stateStoreKind(u: string): 'memory' | 'nats' | 'redis' {
  if (u === 'memory') return 'memory'
  return u.startsWith('nats://') ? 'nats' : 'redis'
}

function stateStore(v: unknown, idleTimeoutMs: number): StateStoreConfig {
  const d = DEFAULT_CONFIG.stateStore
  const o = typeof v === 'string' ? { url: v } : obj('stateStore', v)
  checkKeys('stateStore', o, [
    'url',
    'name',
    'replicaId',
    'bindingTtlMs',
    'replicaTtlMs',
    'heartbeatMs',
    'opTimeoutMs',
    'readyWhenDegraded',
  ])
  const u = o.url === undefined ? d.url : o.url
  if (typeof u !== 'string')
    fail('stateStore.url', 'must be memory, nats://host:port or redis://host:port', u)
  if (u !== 'memory') {
    const parts = u.startsWith('nats://') ? u.split(',').map((x) => x.trim()) : [u]
    for (const part of parts) {
      let parsed: URL
      try {
        parsed = new URL(part)
      } catch {
        fail('stateStore.url', `is not a URL: ${JSON.stringify(part)}`, u)
      }
      const ok = u.startsWith('nats://')
        ? parsed.protocol === 'nats:'
        : parsed.protocol === 'redis:' || parsed.protocol === 'rediss:'
      if (!ok || parsed.hostname === '')
        fail('stateStore.url', 'must be memory, nats://host:port[,nats://…] or redis://host:port[/db]', u)
    }
  }
  const name = o.name === undefined ? d.name : o.name
  if (typeof name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(name))
    fail('stateStore.name', 'must be 1-64 characters of [A-Za-z0-9_-]', name)
  if (
    o.replicaId !== undefined &&
    (typeof o.replicaId !== 'string' || o.replicaId.length === 0 || o.replicaId.length > 200)
  )
    fail('stateStore.replicaId', 'must be a string of 1-200 characters', o.replicaId)
  const opt = (k: 'replicaTtlMs' | 'heartbeatMs' | 'opTimeoutMs') =>
    o[k] === undefined ? {} : { [k]: int(`stateStore.${k}`, o[k], 1) }
  const timing = { ...opt('replicaTtlMs'), ...opt('heartbeatMs'), ...opt('opTimeoutMs') } as {
    replicaTtlMs?: number
    heartbeatMs?: number
    opTimeoutMs?: number
  }
  // The store's defaults: a heartbeat every second, a replica dead after five.
  if ((timing.heartbeatMs ?? 1_000) >= (timing.replicaTtlMs ?? 5_000))
    fail('stateStore.heartbeatMs', 'must be less than stateStore.replicaTtlMs (5,000 by default)', timing)
  if (o.readyWhenDegraded !== undefined && typeof o.readyWhenDegraded !== 'boolean')
    fail('stateStore.readyWhenDegraded', 'must be true or false', o.readyWhenDegraded)
  return {
    url: u,
    name,
    ...(o.replicaId === undefined ? {} : { replicaId: o.replicaId as string }),
    bindingTtlMs: intOr('stateStore.bindingTtlMs', o.bindingTtlMs, 1, idleTimeoutMs),
    ...timing,
    readyWhenDegraded: (o.readyWhenDegraded as boolean | undefined) ?? d.readyWhenDegraded,
  }
}

function checkKeys(key: string, o: object, allowed: readonly string[]): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) fail(`${key}.${k}`, `unknown key (expected one of ${allowed.join(', ')})`, k)
  }
}

function obj(key: string, v: unknown): Record<string, unknown> {
  if (v === undefined) return {}
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(key, 'must be an object', v)
  return v as Record<string, unknown>
}

function kvEventsOf(key: string, v: unknown): KvEventsConfig | undefined {
  if (v === undefined) return undefined
  if (v === 'auto' || v === 'off') return v
  const o = obj(key, v)
  checkKeys(key, o, ['endpoint', 'replayEndpoint'])
  if (typeof o.endpoint !== 'string' || !o.endpoint.startsWith('tcp://'))
    fail(`${key}.endpoint`, 'must be a tcp:// endpoint', o.endpoint)
  if (o.replayEndpoint !== undefined && typeof o.replayEndpoint !== 'string')
    fail(`${key}.replayEndpoint`, 'must be a tcp:// endpoint', o.replayEndpoint)
  return {
    endpoint: o.endpoint,
    ...(o.replayEndpoint === undefined ? {} : { replayEndpoint: o.replayEndpoint as string }),
  }
}

function worker(i: number, v: unknown): WorkerConfig {
  const key = `workers[${i}]`
  const o = obj(key, v)
  checkKeys(key, o, ['id', 'role', 'url', 'capacityTokens', 'admissionUrl', 'bootstrapPort', 'kvEvents'])
  if (typeof o.id !== 'string' || !/^[A-Za-z0-9_.-]{1,64}$/.test(o.id))
    fail(`${key}.id`, 'must be 1-64 characters of [A-Za-z0-9_.-]', o.id)
  if (o.role !== 'prefill' && o.role !== 'decode')
    fail(`${key}.role`, "must be 'prefill' or 'decode'", o.role)
  const kv = kvEventsOf(`${key}.kvEvents`, o.kvEvents)
  return {
    id: o.id,
    role: o.role,
    url: url(`${key}.url`, o.url),
    ...(o.capacityTokens === undefined
      ? {}
      : { capacityTokens: int(`${key}.capacityTokens`, o.capacityTokens, 1) }),
    ...(o.admissionUrl === undefined ? {} : { admissionUrl: url(`${key}.admissionUrl`, o.admissionUrl) }),
    ...(o.bootstrapPort === undefined
      ? {}
      : { bootstrapPort: int(`${key}.bootstrapPort`, o.bootstrapPort, 1) }),
    ...(kv === undefined ? {} : { kvEvents: kv }),
  }
}

/**
 * Validates a configuration and fills in the defaults. Throws `ProxyError('INVALID_CONFIG')`
 * naming the first bad key; unknown keys are refused (a typo must not be ignored silently).
 */
export function resolveConfig(input: ProxyConfigInput): ProxyConfig {
  const i = obj('(root)', input)
  checkKeys('(root)', i, [
    'listen',
    'workers',
    'policy',
    'router',
    'tokenizer',
    'session',
    'limits',
    'defaultSloClass',
    'health',
    'loads',
    'topology',
    'kvEvents',
    'upstreamTimeoutMs',
    'decisionLog',
    'metrics',
    'stateStore',
    'deadlines',
    'auth',
    'tenantDefaults',
    'cacheSaltField',
  ])
  const d = DEFAULT_CONFIG
  const listenIn = obj('listen', i.listen)
  checkKeys('listen', listenIn, ['host', 'port'])
  const listen = {
    host: listenIn.host === undefined ? d.listen.host : String(listenIn.host),
    port: intOr('listen.port', listenIn.port, 0, d.listen.port),
  }
  if (!Array.isArray(i.workers) || i.workers.length === 0)
    fail('workers', 'give at least one worker (a decode worker at least)', i.workers)
  const workers = (i.workers as unknown[]).map((w, k) => worker(k, w))
  const ids = new Set<string>()
  for (const w of workers) {
    if (ids.has(w.id)) fail('workers', `duplicate worker id ${w.id}`, w.id)
    ids.add(w.id)
  }
  if (!workers.some((w) => w.role === 'decode')) fail('workers', 'need at least one decode worker', workers)
  const policy = i.policy === undefined ? d.policy : i.policy
  if (!(PROXY_POLICIES as readonly string[]).includes(policy as string))
    fail('policy', `unknown policy ${JSON.stringify(policy)} (one of ${PROXY_POLICIES.join(', ')})`, policy)
  const router = obj('router', i.router) as RouterParamsInput
  try {
    resolveRouterParams(router)
  } catch (err) {
    fail('router', (err as Error).message, router)
  }
  const tokenizer = i.tokenizer === undefined ? d.tokenizer : i.tokenizer
  if (tokenizer !== 'estimate' && tokenizer !== 'emulator')
    fail('tokenizer', "must be 'estimate' or 'emulator'", tokenizer)
  const sIn = obj('session', i.session)
  checkKeys('session', sIn, [
    'sources',
    'header',
    'headers',
    'idleTimeoutMs',
    'maxQueuedTurns',
    'maxSessions',
    'maxTableBytes',
  ])
  const sources = sIn.sources === undefined ? d.session.sources : sIn.sources
  if (
    !Array.isArray(sources) ||
    sources.length === 0 ||
    sources.some((s) => !SESSION_SOURCES.includes(s as SessionSource))
  )
    fail('session.sources', `must be a non-empty list of ${SESSION_SOURCES.join(', ')}`, sources)
  if (sIn.header !== undefined && sIn.headers !== undefined)
    fail('session.header', 'give session.header or session.headers, not both', sIn.header)
  const headers =
    sIn.headers !== undefined ? sIn.headers : sIn.header !== undefined ? [sIn.header] : d.session.headers
  if (!Array.isArray(headers) || headers.length === 0)
    fail('session.headers', 'must be a non-empty list of header names', headers)
  for (const h of headers as unknown[])
    if (typeof h !== 'string' || !/^[A-Za-z0-9-]+$/.test(h))
      fail(sIn.header !== undefined ? 'session.header' : 'session.headers', 'must be a header name', h)
  const headerNames = (headers as string[]).map((h) => h.toLowerCase())
  const session = {
    sources: sources as SessionSource[],
    header: headerNames[0]!,
    headers: headerNames,
    idleTimeoutMs: intOr('session.idleTimeoutMs', sIn.idleTimeoutMs, 1, d.session.idleTimeoutMs),
    maxQueuedTurns: intOr('session.maxQueuedTurns', sIn.maxQueuedTurns, 0, d.session.maxQueuedTurns),
    maxSessions: intOr('session.maxSessions', sIn.maxSessions, 1, d.session.maxSessions),
    maxTableBytes: intOr('session.maxTableBytes', sIn.maxTableBytes, 1024, d.session.maxTableBytes),
  }
  const lIn = obj('limits', i.limits)
  checkKeys('limits', lIn, [
    'maxBodyBytes',
    'maxPromptTokens',
    'maxPromptChars',
    'maxJsonDepth',
    'defaultMaxTokens',
    'maxMaxTokens',
    'maxConcurrentTurns',
  ])
  const maxPromptTokens = intOr('limits.maxPromptTokens', lIn.maxPromptTokens, 1, d.limits.maxPromptTokens)
  const limits = {
    maxBodyBytes: intOr('limits.maxBodyBytes', lIn.maxBodyBytes, 64, d.limits.maxBodyBytes),
    maxPromptTokens,
    maxPromptChars: intOr('limits.maxPromptChars', lIn.maxPromptChars, 1, 8 * maxPromptTokens),
    maxJsonDepth: intOr('limits.maxJsonDepth', lIn.maxJsonDepth, 2, d.limits.maxJsonDepth),
    defaultMaxTokens: intOr('limits.defaultMaxTokens', lIn.defaultMaxTokens, 0, d.limits.defaultMaxTokens),
    maxMaxTokens: intOr('limits.maxMaxTokens', lIn.maxMaxTokens, 1, d.limits.maxMaxTokens),
    maxConcurrentTurns: intOr(
      'limits.maxConcurrentTurns',
      lIn.maxConcurrentTurns,
      1,
      d.limits.maxConcurrentTurns,
    ),
  }
  const slo = i.defaultSloClass === undefined ? d.defaultSloClass : i.defaultSloClass
  if (!(SLO_CLASSES as readonly string[]).includes(slo as string))
    fail('defaultSloClass', `must be one of ${SLO_CLASSES.join(', ')}`, slo)
  const hIn = obj('health', i.health)
  checkKeys('health', hIn, ['intervalMs', 'timeoutMs', 'failureThreshold'])
  const health = {
    intervalMs: intOr('health.intervalMs', hIn.intervalMs, 1, d.health.intervalMs),
    timeoutMs: intOr('health.timeoutMs', hIn.timeoutMs, 1, d.health.timeoutMs),
    failureThreshold: intOr('health.failureThreshold', hIn.failureThreshold, 1, d.health.failureThreshold),
  }
  const loIn = obj('loads', i.loads)
  checkKeys('loads', loIn, ['intervalMs'])
  const loads = {
    intervalMs: intOr('loads.intervalMs', loIn.intervalMs, 0, d.loads.intervalMs),
  }
  const toIn = obj('topology', i.topology)
  checkKeys('topology', toIn, ['sampleIntervalMs', 'windowSamples'])
  const topology = {
    sampleIntervalMs: intOr(
      'topology.sampleIntervalMs',
      toIn.sampleIntervalMs,
      0,
      d.topology.sampleIntervalMs,
    ),
    windowSamples: intOr('topology.windowSamples', toIn.windowSamples, 1, d.topology.windowSamples),
  }
  const kvEvents = i.kvEvents === undefined ? d.kvEvents : i.kvEvents
  if (kvEvents !== 'auto' && kvEvents !== 'off') fail('kvEvents', "must be 'auto' or 'off'", kvEvents)
  const tenantDefaults = resolveTenantDefaults(i.tenantDefaults)
  const upstreamTimeoutMs = intOr('upstreamTimeoutMs', i.upstreamTimeoutMs, 1, d.upstreamTimeoutMs)
  const decisionLog = i.decisionLog === undefined ? d.decisionLog : i.decisionLog
  if (typeof decisionLog !== 'string' || decisionLog.length === 0)
    fail('decisionLog', 'must be stdout, stderr, off or a file path', decisionLog)
  const mIn = obj('metrics', i.metrics)
  checkKeys('metrics', mIn, ['processMetrics'])
  if (mIn.processMetrics !== undefined && typeof mIn.processMetrics !== 'boolean')
    fail('metrics.processMetrics', 'must be true or false', mIn.processMetrics)
  return {
    listen,
    workers,
    policy: policy as ProxyPolicyName,
    router,
    tokenizer,
    session,
    limits,
    defaultSloClass: slo as SloClass,
    health,
    loads,
    topology,
    kvEvents,
    upstreamTimeoutMs,
    decisionLog,
    metrics: { processMetrics: (mIn.processMetrics as boolean | undefined) ?? d.metrics.processMetrics },
    stateStore: stateStore(i.stateStore, session.idleTimeoutMs),
    deadlines: resolveDeadlines(i.deadlines),
    auth: resolveAuth(i.auth, tenantDefaults),
    tenantDefaults,
    cacheSaltField: resolveCacheSaltField(i.cacheSaltField),
  }
}

/** Reads a JSON configuration file (not resolved: flags may still override it). */
export function readConfigFile(path: string): ProxyConfigInput {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ProxyError('INVALID_CONFIG', `cannot read config file ${path}: ${(err as Error).message}`, path)
  }
  try {
    return JSON.parse(text) as ProxyConfigInput
  } catch (err) {
    // Where, not what: the parser's message may quote the file, which may hold keys.
    const at = /(at )?position \d+|line \d+ column \d+/.exec((err as Error).message)?.[0]
    throw new ProxyError(
      'INVALID_CONFIG',
      `config file ${path} is not valid JSON${at === undefined ? '' : ` (${at.replace(/^at /, '')})`}`,
      path,
    )
  }
}
