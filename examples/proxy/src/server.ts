import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { WorkerApiError } from '@kvc/worker-bindings'
import type { ProxyConfig } from './config.js'
import { ProxyError, badRequest } from './errors.js'
import { Gateway, type GatewayOptions, type TurnResult } from './gateway.js'
import { errorBody, readJsonBody, sendError, sendJson } from './http.js'
import { promptChars } from './inputLimits.js'
import { armDeadline, deadlineExceeded } from './limits/deadlines.js'
import { RequestLimiter } from './limits/limiter.js'
import { ChatTransport, CompletionTransport, parseChat, parseCompletion } from './openai.js'
import { promptTokensAsync } from './promptTokens.js'
import { registerSessionTableMetrics } from './sessionMetrics.js'
import { type PrefixSessionLease, PrefixSessions } from './sessionIdentity/prefixSessions.js'
import { SessionTable, identifySession } from './sessions.js'
import { checkExposure } from './tenancy/authConfig.js'
import { TenantRegistry, type TenantReloadEvent } from './tenancy/registry.js'
import type { RequestScope } from './tenancy/requestScope.js'
import { TenantMetrics } from './tenancy/tenantMetrics.js'
import { type Tenant, cacheSaltOf, clientSaltOf } from './tenancy/tenants.js'
import { createTokenizer } from './tokens.js'

/** Options of {@link createProxy}: the gateway's, and those of shared use. */
export interface ProxyOptions extends GatewayOptions {
  /** Clock of the tenants' rate limits (token buckets), ms. Default `performance.now`; tests inject one. */
  readonly limitsNow?: () => number
  /** Read for the tenants' `keysEnv` (default `process.env`). */
  readonly env?: Readonly<Record<string, string | undefined>>
  /** Outcome of every tenants reload. Default: a JSON line on stderr (no key in it). */
  readonly onTenantsReload?: (event: TenantReloadEvent) => void
}

/** A running proxy. */
export interface KvcProxy {
  /** `http://host:port` it listens on. */
  readonly url: string
  readonly port: number
  readonly gateway: Gateway
  readonly sessions: SessionTable
  /** The tenants and their keys (see `TenantRegistry`). */
  readonly tenants: TenantRegistry
  /** The per-tenant limits and concurrency caps. */
  readonly limiter: RequestLimiter
  /** Sessions identified by their conversation's opening (see `PrefixSessions`). */
  readonly prefixSessions: PrefixSessions
  /**
   * Rotates keys without a restart: re-reads `auth.tenantsFile` and, given a configuration (the
   * file re-read on `SIGHUP`), takes its `auth.tenants`. Other settings need a restart. All or
   * nothing: a reload that does not resolve throws and leaves the previous keys valid.
   */
  reloadTenants(config?: ProxyConfig): void
  /** Stops accepting requests, ends running turns (`shutting_down`), closes every socket and timer. */
  close(): Promise<void>
}

/** Causes of a failed turn that are worth retrying later (503 with `retry-after`); the others answer 502. */
const RETRYABLE = new Set([
  'all_paused',
  'all_rejecting',
  'seed_budget',
  'admission_timeouts',
  'all_unhealthy',
  'all_draining',
  'all_excluded',
  'no_decode_workers',
  'no_prefill',
  'shutting_down',
])

const ROUTES: Record<string, readonly string[]> = {
  '/health': ['GET'],
  '/ready': ['GET'],
  '/metrics': ['GET'],
  '/topology/advice': ['GET'],
  '/v1/models': ['GET'],
  '/v1/chat/completions': ['POST'],
  '/v1/completions': ['POST'],
}

function failureError(r: TurnResult): ProxyError {
  const cause = r.cause ?? 'unknown'
  const retryable = RETRYABLE.has(cause)
  // The router found the turn larger than any D (capacities changed since the proxy checked).
  const status = cause === 'too_large' ? 400 : retryable ? 503 : 502
  const msg = r.error?.message ?? `turn ${r.turnId} of session ${r.sessionId} failed: ${cause}`
  return new ProxyError(
    'TURN_FAILED',
    msg,
    {
      cause,
      turn_id: r.turnId,
      session_id: r.sessionId,
      attempts: r.record.attempts,
      ...(retryable ? { retryAfterS: 1 } : {}),
    },
    status,
  )
}

/**
 * Starts the proxy: discovers the workers, builds the router, and listens. See the README for the
 * HTTP surface (OpenAI chat completions and completions, `/metrics`, `/health`, `/ready`).
 */
export async function createProxy(config: ProxyConfig, options: ProxyOptions = {}): Promise<KvcProxy> {
  // Refused before anything starts: no open proxy beyond loopback, no unreadable tenants file.
  checkExposure(config.listen.host, config.auth)
  const tenantMetrics: { m?: TenantMetrics } = {}
  const registry = new TenantRegistry({
    tenants: config.auth.tenants,
    tenantsFile: config.auth.tenantsFile,
    reloadIntervalMs: config.auth.reloadIntervalMs,
    defaults: config.tenantDefaults,
    ...(options.env === undefined ? {} : { env: options.env }),
    onReload: (e) => {
      tenantMetrics.m?.reloads.inc({ result: e.type })
      ;(
        options.onTenantsReload ??
        ((ev: TenantReloadEvent) =>
          process.stderr.write(
            `${JSON.stringify({ ts: new Date().toISOString(), level: ev.type === 'reloaded' ? 'info' : 'warn', msg: `tenants ${ev.type}`, ...ev, type: undefined })}\n`,
          ))
      )(e)
    },
  })
  let sessions: SessionTable | undefined
  const gateway = new Gateway(config, { sessions: () => sessions?.size ?? 0, ...options })
  try {
    await gateway.start()
  } catch (err) {
    await gateway.close()
    throw err
  }
  const limiter = new RequestLimiter({
    maxConcurrentTurns: config.limits.maxConcurrentTurns,
    ...(options.limitsNow === undefined ? {} : { now: options.limitsNow }),
    onLimited: (tenant, cause) => tenantMetrics.m?.limited.inc({ tenant, cause }),
  })
  tenantMetrics.m = new TenantMetrics(gateway.metrics.registry, () => limiter.runningByTenant())
  registry.onChange((tenants) => limiter.update(tenants))
  registry.watch()
  const prefixSessions = new PrefixSessions()
  const table = new SessionTable(config, gateway.router.params.pageSize, (id) => {
    prefixSessions.forget(id)
    gateway.forgetSession(id)
  })
  sessions = table
  registerSessionTableMetrics(gateway.metrics.registry, table)
  /** A tenant's session id: `<tenant>/<id>` once keys are on, so no tenant can name another's. */
  const namespaced = (tenant: Tenant, id: string): string => (registry.enabled ? `${tenant.id}/${id}` : id)
  /** The tenant of a request (401 without a valid key), counted when refused. */
  const authenticate = (req: IncomingMessage): Tenant => {
    try {
      return registry.authenticate(req.headers)
    } catch (err) {
      tenantMetrics.m?.authFailures.inc({
        reason: req.headers.authorization === undefined ? 'missing' : 'invalid',
      })
      throw err
    }
  }
  /** An admin tenant's request, else 401 / 403. */
  const requireAdmin = (req: IncomingMessage, path: string): void => {
    if (authenticate(req).admin) return
    tenantMetrics.m?.authFailures.inc({ reason: 'not_admin' })
    throw new ProxyError('FORBIDDEN', `${path} needs an admin tenant's key`, { param: null }, 403)
  }
  const tokenizer = createTokenizer(config.tokenizer)
  // The largest KV pool of a D worker: a turn needing more can never be admitted.
  const largestDecode = Math.max(
    0,
    ...gateway.workers.all().flatMap((w) => (w.role === 'decode' ? [w.capacityTokens] : [])),
  )
  const model =
    gateway.workers.all().find((w) => w.role === 'decode' && w.modelName !== undefined)?.modelName ??
    'default'
  let closing = false
  const { headersMs, bodyReadMs } = config.deadlines
  const server = createServer(
    {
      headersTimeout: headersMs,
      // Node's backstop for bodies on every route, after ours: turns answer 408 after bodyReadMs,
      // and discard the rest of an oversized body for up to twice that.
      requestTimeout: headersMs + 2 * bodyReadMs + 1_000,
      // How often Node checks those two: often enough to keep them near their value.
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(headersMs / 4))),
    },
    (req, res) => {
      const path = (req.url ?? '/').split('?')[0]!
      const route = ROUTES[path] === undefined ? 'other' : path
      res.once('finish', () => gateway.metrics.httpRequests.inc({ route, status: String(res.statusCode) }))
      handle(req, res, path).catch((err: unknown) => {
        if (!res.headersSent) sendError(res, err)
        else if (!res.writableEnded) res.end()
      })
    },
  )

  async function handle(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const methods = ROUTES[path]
    if (methods === undefined) {
      req.resume()
      sendJson(res, 404, errorBody(`no route ${path}`, 'not_found_error', 'not_found'))
      return
    }
    if (!methods.includes(req.method ?? '')) {
      req.resume()
      sendJson(
        res,
        405,
        errorBody(`${req.method} is not allowed on ${path}`, 'invalid_request_error', 'method_not_allowed'),
        {
          allow: methods.join(', '),
        },
      )
      return
    }
    switch (path) {
      case '/health':
        req.resume()
        sendJson(res, closing ? 503 : 200, { status: closing ? 'shutting down' : 'ok' })
        return
      case '/ready': {
        req.resume()
        const r = gateway.readiness()
        // Workers' URLs and the topology only to an admin key when keys are on; the status to anyone.
        const details =
          !registry.enabled ||
          config.auth.ready === 'public' ||
          (req.headers.authorization !== undefined && authenticate(req).admin)
        if (!details) {
          sendJson(res, r.ready ? 200 : 503, { ready: r.ready, reason: r.reason ?? null })
          return
        }
        const workers = gateway.workers.all().map((w) => ({
          id: w.id,
          role: w.role,
          url: w.url,
          healthy: gateway.workers.isHealthy(w.id),
          paused: w.role === 'decode' && gateway.router.cluster.isPaused(w.id),
        }))
        sendJson(res, r.ready ? 200 : 503, {
          ready: r.ready,
          reason: r.reason ?? null,
          workers,
          stateStore: gateway.stateStoreInfo(),
        })
        return
      }
      case '/metrics': {
        req.resume()
        if (registry.enabled && config.auth.metrics === 'admin') requireAdmin(req, path)
        const text = await gateway.metrics.text()
        res.writeHead(200, { 'content-type': gateway.metrics.contentType })
        res.end(text)
        return
      }
      case '/topology/advice': {
        req.resume()
        // Worker ids and loads: an admin's, when keys are on.
        if (registry.enabled) requireAdmin(req, path)
        const a = gateway.topology.advice()
        if (a === undefined) {
          sendJson(
            res,
            404,
            errorBody(
              'no P/D topology to advise on (no prefill or no decode worker)',
              'not_found_error',
              'no_topology',
            ),
          )
          return
        }
        sendJson(res, 200, {
          prefill: a.prefill,
          decode: a.decode,
          switches: a.switches,
          prefill_utilization: a.prefillUtilization,
          prefill_queue_s: a.prefillQueueS,
          decode_kv_pressure: a.decodePressure,
          reason: a.reason,
          samples: a.samples,
          workers: a.workers.map((w) => ({
            id: w.id,
            role: w.role,
            prefill_busy: w.prefillBusy,
            prefill_queue_s: w.prefillQueueS,
            kv_pressure: w.kvPressure,
            transfer_queue_depth: w.transferQueueDepth ?? 0,
          })),
        })
        return
      }
      case '/v1/models': {
        req.resume()
        authenticate(req)
        const d = gateway.workers.all().find((w) => w.role === 'decode' && gateway.workers.isHealthy(w.id))
        if (d === undefined)
          throw new ProxyError('TURN_FAILED', 'no healthy decode worker', { cause: 'all_unhealthy' }, 503)
        sendJson(
          res,
          200,
          await d.client.http.json(
            { method: 'GET', path: '/v1/models', idempotent: true },
            { timeout: config.health.timeoutMs * 5 },
          ),
        )
        return
      }
      default:
        await turn(req, res, path === '/v1/chat/completions' ? 'chat' : 'completion')
    }
  }

  async function turn(req: IncomingMessage, res: ServerResponse, kind: 'chat' | 'completion'): Promise<void> {
    if (closing) {
      req.resume()
      throw new ProxyError('SHUTTING_DOWN', 'the proxy is shutting down', undefined, 503)
    }
    const t0 = gateway.now()
    // Who, how often, how many at once: refused before the body is read.
    let tenant: Tenant
    let release: () => void
    try {
      tenant = authenticate(req)
      limiter.admitRequest(tenant)
      release = limiter.acquireTurn(tenant)
    } catch (err) {
      req.resume()
      throw err
    }
    try {
      await limitedTurn(req, res, kind, tenant, t0)
    } finally {
      release()
    }
  }

  async function limitedTurn(
    req: IncomingMessage,
    res: ServerResponse,
    kind: 'chat' | 'completion',
    tenant: Tenant,
    t0: number,
  ): Promise<void> {
    const body = await readJsonBody(req, config.limits.maxBodyBytes, bodyReadMs, config.limits.maxJsonDepth)
    const sloHeader = req.headers['x-kvc-slo-class']
    const slo = typeof sloHeader === 'string' ? sloHeader : undefined
    const parsed = kind === 'chat' ? parseChat(body, slo, config) : parseCompletion(body, slo, config)
    const param = kind === 'chat' ? 'messages' : 'prompt'
    // Cheap limits first: the character count before the CPU to tokenize is spent.
    const chars = promptChars(parsed.messages, parsed.promptText)
    if (chars > config.limits.maxPromptChars) {
      throw badRequest(
        `the prompt has ${chars} characters, more than the limit of ${config.limits.maxPromptChars} (limits.maxPromptChars)`,
        400,
        param,
      )
    }
    // Tokenized in slices: other requests (and /health) go on meanwhile.
    const tokens = await promptTokensAsync(parsed, tokenizer)
    if (tokens.length === 0) throw badRequest('the prompt is empty', 400, param)
    if (tokens.length > config.limits.maxPromptTokens) {
      throw badRequest(
        `the prompt has ${tokens.length} tokens, more than the limit of ${config.limits.maxPromptTokens}`,
        400,
        param,
      )
    }
    if (tokens.length + parsed.maxTokens > largestDecode) {
      // No D can ever hold it: refuse now rather than let the router try every worker.
      throw badRequest(
        `the prompt (${tokens.length} tokens) plus max_tokens (${parsed.maxTokens}) needs ${tokens.length + parsed.maxTokens} tokens of KV cache, more than the largest decode worker holds (${largestDecode} tokens)`,
        400,
        param,
      )
    }
    const scope: RequestScope = {
      exposeCacheInfo: tenant.exposeCacheInfo,
      cacheSalt: cacheSaltOf(tenant, clientSaltOf(body)),
      cacheSaltField: config.cacheSaltField,
    }
    // Prompt plus the output it may produce; what it does not produce is given back at the end
    // (all of it for a turn that never ran: refused by its session's queue, or past its deadline).
    const charged = tokens.length + parsed.maxTokens
    limiter.chargeTokens(tenant, charged)
    let refund = charged
    const ident = identifySession(req.headers, body, parsed.messages, config)
    // A prefix-hash id names a family of look-alike conversations: the turn gets one of its sessions.
    const lease: PrefixSessionLease | undefined =
      ident.source === 'prefix-hash' && parsed.messages !== undefined
        ? prefixSessions.acquire(namespaced(tenant, ident.id), parsed.messages)
        : undefined
    const sessionId = lease?.id ?? namespaced(tenant, ident.id)
    const controller = new AbortController()
    res.once('close', () => {
      if (!res.writableFinished) controller.abort(new Error('the client closed the connection'))
    })
    const disarm = armDeadline(controller, tenant.turnDeadlineMs ?? config.deadlines.turnMs)
    // A turn still queued behind its session's running turn when its deadline passes is answered
    // at once (and skipped when its place comes); a running one ends through the gateway.
    let started = false
    const whileQueued = new Promise<never>((_, reject) => {
      controller.signal.addEventListener('abort', () => {
        if (!started) reject(controller.signal.reason)
      })
    })
    whileQueued.catch(() => {})
    let chat: ChatTransport | undefined
    let completed = false
    gateway.metrics.queuedTurns.set(table.queued)
    try {
      const run = table.run(sessionId, async () => {
        started = true
        if (controller.signal.aborted) return
        gateway.metrics.queuedTurns.set(table.queued)
        refund = parsed.maxTokens
        const blocks = await table.hashBlocks(sessionId, tokens, scope.cacheSalt)
        const transport =
          kind === 'chat'
            ? (chat = new ChatTransport(parsed, res, tokens.length, model, scope))
            : new CompletionTransport(parsed, res, tokens.length, model, scope)
        const result = await gateway.runTurn(
          {
            sessionId,
            promptTokens: tokens.length,
            blocks,
            expectedOutputTokens: parsed.maxTokens,
            sloClass: parsed.sloClass,
          },
          transport,
          controller.signal,
        )
        if (result.completion !== undefined)
          refund = Math.max(0, parsed.maxTokens - result.completion.outputTokens)
        if (result.status === 'completed') {
          completed = true
          const path = result.path ?? 'none'
          if (result.firstByteAt !== undefined)
            gateway.metrics.ttft.observe({ path }, (result.firstByteAt - t0) / 1000)
          gateway.metrics.e2e.observe({ path }, (result.endedAt - t0) / 1000)
          return
        }
        if (result.cause === 'client_closed') return
        if (result.cause === 'deadline_exceeded')
          tenantMetrics.m?.limited.inc({ tenant: tenant.id, cause: 'deadline_exceeded' })
        if (!res.headersSent) {
          if (result.cause === 'deadline_exceeded') {
            const e = deadlineExceeded(tenant.turnDeadlineMs ?? config.deadlines.turnMs)
            throw new ProxyError(
              e.code,
              e.message,
              { cause: 'deadline_exceeded', turn_id: result.turnId, session_id: result.sessionId },
              504,
            )
          }
          if (result.cause === 'session_busy') {
            throw new ProxyError(
              'SESSION_BUSY',
              `session ${result.sessionId} has a turn running through another replica; retry when it ended`,
              { cause: 'session_busy', turn_id: result.turnId, session_id: result.sessionId, retryAfterS: 1 },
              429,
            )
          }
          if (result.cause === 'bad_request') {
            const msg =
              (result.error as { serverMessage?: string } | undefined)?.serverMessage ??
              result.error?.message ??
              'bad request'
            const sent = result.error instanceof WorkerApiError
            throw badRequest(
              `${sent ? 'the worker refused the request' : 'the request cannot be sent to the workers'}: ${msg}`,
              result.upstreamStatus ?? 400,
            )
          }
          throw failureError(result)
        }
        // The response had started: report the failure inside the stream, then end it.
        if (parsed.stream && !res.writableEnded) {
          const e = failureError(result)
          res.write(
            `data: ${JSON.stringify(errorBody(e.message, 'server_error', 'turn_failed', null, { kvc: e.value }))}\n\n`,
          )
          res.end('data: [DONE]\n\n')
        } else if (!res.writableEnded) res.destroy()
      })
      run.catch(() => {})
      await Promise.race([run, whileQueued])
    } catch (err) {
      if (err instanceof ProxyError && err.code === 'SESSION_BUSY') limiter.count(tenant.id, 'session_queue')
      if (err instanceof ProxyError && err.code === 'DEADLINE_EXCEEDED' && !started)
        tenantMetrics.m?.limited.inc({ tenant: tenant.id, cause: 'deadline_exceeded' })
      throw err
    } finally {
      disarm()
      limiter.refundTokens(tenant, refund)
      lease?.end(completed ? (chat?.reply ?? '') : undefined)
      gateway.metrics.queuedTurns.set(table.queued)
      if (ident.source === 'anonymous') table.drop(sessionId)
    }
  }

  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject)
    server.listen(config.listen.port, config.listen.host, () => {
      server.off('error', reject)
      resolve((server.address() as AddressInfo).port)
    })
  }).catch(async (err: unknown) => {
    table.close()
    registry.close()
    await gateway.close()
    throw err
  })
  const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host
  let closed: Promise<void> | undefined
  return {
    url: `http://${host}:${port}`,
    port,
    gateway,
    sessions: table,
    tenants: registry,
    limiter,
    prefixSessions,
    reloadTenants: (c) => registry.reload(c?.auth.tenants),
    close: () => {
      closed ??= (async () => {
        closing = true
        table.close()
        registry.close()
        await gateway.close()
        await closeServer(server)
      })()
      return closed
    },
  }
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve())
    server.closeIdleConnections()
    // Give in-flight answers (turns just aborted answer 503) a moment, then drop what is left.
    const t = setTimeout(() => server.closeAllConnections(), 200)
    t.unref()
    server.once('close', () => clearTimeout(t))
  })
}
