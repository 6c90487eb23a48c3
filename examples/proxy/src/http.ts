import type { IncomingMessage, ServerResponse } from 'node:http'
import { ProxyError, badRequest } from './errors.js'
import { decodeJsonBody } from './inputLimits.js'

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
    const headers: Record<string, string> = {}
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
 * (the rest of the body is drained so the client reads the answer), 400 when it nests deeper than
 * `maxDepth` (checked before parsing), does not parse or is not an object.
 */
export function readJsonBody(
  req: IncomingMessage,
  maxBytes: number,
  maxDepth?: number,
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const ct = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase()
    if (ct !== 'application/json') {
      req.resume()
      reject(badRequest(`Content-Type must be application/json, got ${JSON.stringify(ct || 'none')}`, 415))
      return
    }
    const chunks: Buffer[] = []
    let size = 0
    let tooLarge = false
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size > maxBytes) {
        tooLarge = true
        chunks.length = 0
        // Past four times the limit the client is abusive: stop reading and drop the connection.
        if (size > 4 * maxBytes) req.destroy()
        return
      }
      chunks.push(c)
    })
    req.on('error', (e) => reject(badRequest(`request body: ${e.message}`)))
    req.on('close', () => {
      if (!req.complete) reject(badRequest('the request body was cut short'))
    })
    req.on('end', () => {
      if (tooLarge) {
        reject(badRequest(`request body of ${size} bytes exceeds the limit of ${maxBytes} bytes`, 413))
        return
      }
      decodeJsonBody(chunks, size, maxDepth).then((json) => {
        if (typeof json !== 'object' || json === null || Array.isArray(json)) {
          reject(badRequest('request body must be a JSON object'))
          return
        }
        resolve(json as Record<string, unknown>)
      }, reject)
    })
  })
}
