/**
 * The HTTP routing of the emulated worker: SGLang's paths and methods, the kvc admission RPC, and
 * FastAPI's 404 / 405 answers.
 *
 * @internal
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { ADMIT_HTTP_PATH } from '@kvc/kvc-router'
import { sendJson, sendText } from '@kvc/worker-bindings'
import { generateError } from '../sglang/errors.js'
import { parseCloseSession, parseOpenSession, readJsonBody } from '../sglang/request.js'
import { getLoad, modelInfo, serverInfo, v1Loads, v1Models } from '../sglang/responses.js'
import type { ServerContext } from './context.js'
import { handleChat, handleGenerate } from './generation.js'

const PROMETHEUS_TEXT = 'text/plain; version=0.0.4; charset=utf-8'
const FLUSH_TEXT =
  'Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n'

/** The routing context: the handlers' plus the admission RPC's handler. @internal */
export interface RouteContext extends ServerContext {
  readonly admission: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>
}

/** Serves one request (after fault injection). Throws `SglangHttpError` for a refusal. @internal */
export async function route(ctx: RouteContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://localhost')
  const path = url.pathname
  const method = req.method ?? 'GET'
  if (await ctx.faults.apply(path, req, res)) return
  if (path === ADMIT_HTTP_PATH) {
    await ctx.admission(req, res)
    return
  }
  const { config, engine } = ctx
  const legacy = config.legacyApi
  const allow = (...methods: string[]): boolean => {
    if (methods.includes(method)) return true
    req.resume()
    sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: methods.join(', ') })
    return false
  }
  switch (path) {
    case '/health':
    case '/health_generate':
      if (!allow('GET')) return
      req.resume()
      res.writeHead(ctx.faults.healthy && !engine.closed ? 200 : 503).end()
      return
    case '/ping':
      if (!allow('GET')) return
      req.resume()
      res.writeHead(200).end()
      return
    case '/get_model_info':
    case '/model_info':
      if (path === '/model_info' && legacy) break
      if (!allow('GET')) return
      req.resume()
      sendJson(res, 200, modelInfo(config))
      return
    case '/get_server_info':
    case '/server_info':
      if (path === '/server_info' && legacy) break
      if (!allow('GET')) return
      req.resume()
      sendJson(res, 200, serverInfo(config, ctx.endpoints()))
      return
    case '/get_load':
      if (!allow('GET')) return
      req.resume()
      sendJson(res, 200, getLoad(engine.load()))
      return
    case '/v1/loads': {
      if (legacy) break
      if (!allow('GET')) return
      req.resume()
      const answer = v1Loads(url, config, engine.load(), engine.counters.cacheHitRate())
      if ('text' in answer) sendText(res, 200, answer.text, PROMETHEUS_TEXT)
      else sendJson(res, 200, answer.json)
      return
    }
    case '/v1/models':
      if (!allow('GET')) return
      req.resume()
      sendJson(res, 200, v1Models(config))
      return
    case '/metrics':
      if (!allow('GET')) return
      req.resume()
      sendText(res, 200, engine.metricsText(config.modelName), PROMETHEUS_TEXT)
      return
    case '/flush_cache':
      if (!allow('GET', 'POST')) return
      req.resume()
      sendText(res, engine.flushCache() ? 200 : 400, FLUSH_TEXT)
      return
    case '/open_session': {
      if (!allow('GET', 'POST')) return
      const { json } = await readJsonBody(req, config.maxBodyBytes)
      const { id, timeoutMs } = parseOpenSession(json, config.enableStreamingSession)
      if (!engine.sessions.open(id, timeoutMs)) {
        throw generateError('Failed to open the session. Check if a session with the same id is still open.')
      }
      sendJson(res, 200, id)
      return
    }
    case '/close_session': {
      if (!allow('GET', 'POST')) return
      const { json } = await readJsonBody(req, config.maxBodyBytes)
      engine.closeSession(parseCloseSession(json))
      res.writeHead(200).end()
      return
    }
    case '/abort_request': {
      if (!allow('POST')) return
      const { rid, abort_all } = (await readJsonBody(req, config.maxBodyBytes)).json
      const reason = new Error('aborted by /abort_request')
      if (abort_all === true) engine.abort(undefined, reason)
      else if (typeof rid === 'string') engine.abort(rid, reason)
      res.writeHead(200).end()
      return
    }
    case '/generate':
      if (!allow('POST', 'PUT')) return
      await handleGenerate(ctx, req, res)
      return
    case '/v1/chat/completions':
      if (!allow('POST')) return
      await handleChat(ctx, req, res)
      return
    default:
      break
  }
  req.resume()
  sendJson(res, 404, { detail: 'Not Found' })
}
