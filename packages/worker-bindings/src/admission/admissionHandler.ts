/**
 * The worker side of the admission RPC: a request handler a D worker's sidecar mounts on its
 * HTTP server.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import {
  ADMIT_HTTP_PATH,
  type AdmitRequest,
  type AdmitResponse,
  admitRequestJsonSchema,
  parseAdmitRequest,
  parseAdmitResponse,
} from '@kvc/kvc-router'
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js'
import { BodyTooLargeError, mediaType, readBody, sendJson } from '../http/serverUtils.js'

/**
 * Decides one admission request (for example `kvc-router`'s `admit` over the worker's state).
 *
 * @example
 * ```ts
 * import type { AdmitFunction } from '@kvc/worker-bindings'
 * const refuseAll: AdmitFunction = (req) => ({
 *   requestId: req.requestId, admitted: false, reason: 'capacity', residentTokens: 0, needTokens: req.appendTokens,
 *   tokenUsageAfter: 1, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 2_000,
 * })
 * ```
 */
export type AdmitFunction = (request: AdmitRequest) => AdmitResponse | Promise<AdmitResponse>

/**
 * Options of {@link createAdmissionHandler}.
 *
 * @example
 * ```ts
 * import { createAdmissionHandler, type AdmissionHandlerOptions } from '@kvc/worker-bindings'
 * const opts: AdmissionHandlerOptions = {
 *   maxBodyBytes: 16_384,
 *   admit: (req) => ({
 *     requestId: req.requestId, admitted: false, reason: 'draining', residentTokens: 0, needTokens: 0,
 *     tokenUsageAfter: 0, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 1_000,
 *   }),
 * }
 * const handler = createAdmissionHandler(opts)
 * ```
 */
export interface AdmissionHandlerOptions {
  /** The decision. Its answer is validated before it is sent (500 `INVALID_RESPONSE` if invalid). */
  readonly admit: AdmitFunction
  /** Path to serve (default `ADMIT_HTTP_PATH`, `/kvc/v1/admit`). */
  readonly path?: string
  /** Largest accepted body in bytes (default 65,536). */
  readonly maxBodyBytes?: number
}

/**
 * Error answer of the admission endpoint, in the `{"error": {"message"}}` shape SGLang uses, plus
 * a machine-readable `code` and, for schema failures, the schema `details`.
 *
 * | status | code | when |
 * |---|---|---|
 * | 405 | `METHOD_NOT_ALLOWED` | not a `POST` |
 * | 415 | `UNSUPPORTED_MEDIA_TYPE` | content type is not `application/json` |
 * | 413 | `BODY_TOO_LARGE` | body above `maxBodyBytes` |
 * | 400 | `INVALID_JSON` | the body is not JSON |
 * | 400 | `INVALID_MESSAGE` | the JSON does not satisfy the `AdmitRequest` schema (or `appendTokens > promptTokens`) |
 * | 500 | `ADMIT_FAILED` | the admit function threw |
 * | 500 | `INVALID_RESPONSE` | the admit function answered an invalid `AdmitResponse` |
 *
 * @example
 * ```ts
 * import type { AdmissionErrorBody } from '@kvc/worker-bindings'
 * const body: AdmissionErrorBody = { error: { message: 'bad', code: 'INVALID_JSON' } }
 * ```
 */
export interface AdmissionErrorBody {
  readonly error: {
    readonly message: string
    readonly code: string
    readonly details?: readonly { readonly path: string; readonly message: string }[]
  }
}

let validator: ValidateFunction | undefined
/** The schema validator, compiled once per process (a few hundred ms on a loaded machine). */
function schemaValidator(): ValidateFunction {
  validator ??= new Ajv2020({ allErrors: true, strict: false }).compile(admitRequestJsonSchema)
  return validator
}
function validateSchema(x: unknown): readonly ErrorObject[] | undefined {
  const v = schemaValidator()
  return v(x) ? undefined : (v.errors ?? [])
}

/**
 * Creates a `(req, res) => Promise<boolean>` handler for `node:http` (or any framework that
 * exposes Node's request and response). It answers requests to its path and returns `true`;
 * other paths return `false` untouched, so handlers can be chained. The body is validated
 * against `admitRequestJsonSchema` (with Ajv, JSON Schema 2020-12) and `parseAdmitRequest`
 * before `admit` sees it; errors answer {@link AdmissionErrorBody}.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { createAdmissionHandler } from '@kvc/worker-bindings'
 * const admission = createAdmissionHandler({
 *   admit: (req) => ({
 *     requestId: req.requestId, admitted: true, reason: 'ok', residentTokens: 0, needTokens: req.promptTokens,
 *     tokenUsageAfter: 0.5, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 0, leaseMs: 5_000,
 *   }),
 * })
 * const server = createServer(async (req, res) => {
 *   if (!(await admission(req, res))) res.writeHead(404).end()
 * })
 * server.listen(0, '127.0.0.1')
 * ```
 */
export function createAdmissionHandler(
  options: AdmissionHandlerOptions,
): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  const path = options.path ?? ADMIT_HTTP_PATH
  const limit = options.maxBodyBytes ?? 65_536
  const admit = options.admit
  // Compile the schema now: the first admission RPC must not spend its (500 ms) budget on it.
  schemaValidator()
  return async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost')
    if (url.pathname !== path) return false
    if (req.method !== 'POST') {
      req.resume()
      sendJson(res, 405, errorBody('METHOD_NOT_ALLOWED', `${req.method} is not allowed; use POST`), {
        allow: 'POST',
      })
      return true
    }
    if (mediaType(req) !== 'application/json') {
      req.resume()
      sendJson(
        res,
        415,
        errorBody('UNSUPPORTED_MEDIA_TYPE', "Unsupported Media Type: Only 'application/json' is allowed"),
      )
      return true
    }
    let text: string
    try {
      text = await readBody(req, limit)
    } catch (err) {
      if (err instanceof BodyTooLargeError) {
        sendJson(res, 413, errorBody('BODY_TOO_LARGE', err.message))
        return true
      }
      throw err
    }
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch (err) {
      sendJson(res, 400, errorBody('INVALID_JSON', `JSON decode error: ${(err as Error).message}`))
      return true
    }
    const schemaErrors = validateSchema(json)
    if (schemaErrors !== undefined) {
      const details = schemaErrors.map((e) => ({
        path: e.instancePath || '/',
        message: e.message ?? e.keyword,
      }))
      sendJson(res, 400, {
        error: {
          message: `invalid AdmitRequest: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`,
          code: 'INVALID_MESSAGE',
          details,
        },
      })
      return true
    }
    let request: AdmitRequest
    try {
      request = parseAdmitRequest(json)
    } catch (err) {
      sendJson(res, 400, errorBody('INVALID_MESSAGE', (err as Error).message))
      return true
    }
    let answer: AdmitResponse
    try {
      answer = await admit(request)
    } catch (err) {
      sendJson(res, 500, errorBody('ADMIT_FAILED', `admit failed: ${(err as Error)?.message ?? String(err)}`))
      return true
    }
    let checked: AdmitResponse
    try {
      checked = parseAdmitResponse(answer)
      if (checked.requestId !== request.requestId) throw new Error(`answer for ${checked.requestId}`)
    } catch (err) {
      sendJson(
        res,
        500,
        errorBody('INVALID_RESPONSE', `admit answered an invalid AdmitResponse: ${(err as Error).message}`),
      )
      return true
    }
    sendJson(res, 200, checked)
    return true
  }
}

function errorBody(code: string, message: string): AdmissionErrorBody {
  return { error: { message, code } }
}
