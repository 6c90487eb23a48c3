import type { IncomingMessage, ServerResponse } from 'node:http'
import { ProxyError, badRequest } from './errors.js'
import { decodeJsonBody } from './inputLimits.js'
import { readBody } from './limits/body.js'

/** OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`. */
export function errorBody(
  message: string,
  type: string,
  code: string | null,
  param: string | null = null,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return { error: { message, type, param, code, ...extra } }
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.end()
    return
  }
  const text = JSON.stringify(body)
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(text)),
    ...headers,
  })
  res.end(text)
}

/** Answers a `ProxyError` (or anything else, as a 500) in OpenAI's error shape. */
export function sendError(res: ServerResponse, err: unknown): number {
  if (err instanceof ProxyError) {
    const type =
      err.status === 429
        ? 'rate_limit_error'
        : err.status >= 500
          ? 'server_error'
          : err.status === 404
            ? 'not_found_error'
            : 'invalid_request_error'
    const param = (err.value as { param?: string | null } | undefined)?.param ?? null
    // Turns that ended without an answer say why (`error.kvc.cause`).
    const hasCause = typeof err.value === 'object' && err.value !== null && 'cause' in err.value
    const extra = err.code === 'TURN_FAILED' || hasCause ? { kvc: err.value } : {}
    // Headers an error asks for (`www-authenticate` on a 401, `connection: close` on a 408).
    const headers: Record<string, string> = {
      ...(err.value as { headers?: Record<string, string> })?.headers,
    }
    const retry = (err.value as { retryAfterS?: number } | undefined)?.retryAfterS
    if (typeof retry === 'number') headers['retry-after'] = String(retry)
    sendJson(res, err.status, errorBody(err.message, type, err.code.toLowerCase(), param, extra), headers)
    return err.status
  }
  sendJson(
    res,
    500,
    errorBody(`internal error: ${(err as Error)?.message ?? String(err)}`, 'server_error', 'internal'),
  )
  return 500
}

/**
 * Reads a JSON object body: 415 unless `Content-Type: application/json`, 413 above `maxBytes`
 * (answered at once; the rest of the body is read and discarded so the client reads the answer),
 * 408 when it does not arrive within `timeoutMs` (see `readBody`), 400 when it nests deeper than
 * `maxDepth` (checked before parsing; large bodies are decoded in steps, see `decodeJsonBody`),
 * does not parse or is not an object.
 */
export async function readJsonBody(
  req: IncomingMessage,
  maxBytes: number,
  timeoutMs = 30_000,
  maxDepth?: number,
): Promise<Record<string, unknown>> {
  const ct = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase()
  if (ct !== 'application/json') {
    req.resume()
    throw badRequest(`Content-Type must be application/json, got ${JSON.stringify(ct || 'none')}`, 415)
  }
  const body = await readBody(req, { maxBytes, timeoutMs })
  const json = await decodeJsonBody([body], body.length, maxDepth)
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw badRequest('request body must be a JSON object')
  return json as Record<string, unknown>
}
