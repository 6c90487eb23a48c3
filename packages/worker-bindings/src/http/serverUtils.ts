/**
 * Small helpers for HTTP servers on `node:http`: the admission handler of this package and the
 * SGLang emulator (`@kvc/sglang-emulator`) read and answer requests with them.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * A request body was larger than the limit given to {@link readBody} (code `BODY_TOO_LARGE`,
 * `value` and `limit` the limit in bytes). Answer it with a 413.
 *
 * @example
 * ```ts
 * import { BodyTooLargeError } from '@kvc/worker-bindings'
 * const err = new BodyTooLargeError(1_024)
 * err.code // 'BODY_TOO_LARGE'
 * ```
 */
export class BodyTooLargeError extends WorkerBindingsError {
  override readonly name: string = 'BodyTooLargeError'
  /** The limit, bytes. */
  readonly limit: number
  constructor(limit: number) {
    super('BODY_TOO_LARGE', `request body larger than ${limit} bytes`, { value: limit })
    this.limit = limit
  }
}

/**
 * Reads a request body as UTF-8 text, refusing more than `limit` bytes (a `content-length` above
 * the limit is refused before reading). On refusal the rest of the body is drained, so the
 * connection can still carry the error answer.
 *
 * @throws BodyTooLargeError (rejects with it) above the limit.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { BodyTooLargeError, readBody, sendJson } from '@kvc/worker-bindings'
 * const server = createServer(async (req, res) => {
 *   try {
 *     sendJson(res, 200, { length: (await readBody(req, 1_024)).length })
 *   } catch (err) {
 *     if (err instanceof BodyTooLargeError) sendJson(res, 413, { error: { message: err.message } })
 *     else throw err
 *   }
 * })
 * server.close()
 * ```
 */
export function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'])
    if (Number.isFinite(declared) && declared > limit) {
      req.resume()
      reject(new BodyTooLargeError(limit))
      return
    }
    const chunks: Buffer[] = []
    let size = 0
    let over = false
    req.on('data', (c: Buffer) => {
      if (over) return
      size += c.length
      if (size > limit) {
        over = true
        chunks.length = 0
        return
      }
      chunks.push(c)
    })
    req.on('end', () => {
      if (over) reject(new BodyTooLargeError(limit))
      else resolve(Buffer.concat(chunks).toString('utf8'))
    })
    req.on('error', reject)
  })
}

/**
 * Answers `status` with `body` as JSON (`content-type: application/json` and its length; a string
 * body with an explicit `content-type` header is sent as is). Once headers were sent it only ends
 * the response.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { sendJson } from '@kvc/worker-bindings'
 * const server = createServer((_req, res) => sendJson(res, 404, { detail: 'Not Found' }))
 * server.close()
 * ```
 */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {},
): void {
  const text = typeof body === 'string' && headers['content-type'] !== undefined ? body : JSON.stringify(body)
  if (res.headersSent) {
    res.end()
    return
  }
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  })
  res.end(text)
}

/**
 * Answers `status` with `text` (default `text/plain; charset=utf-8`). Once headers were sent it
 * only ends the response.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http'
 * import { sendText } from '@kvc/worker-bindings'
 * const server = createServer((_req, res) => sendText(res, 200, 'OK'))
 * server.close()
 * ```
 */
export function sendText(
  res: ServerResponse,
  status: number,
  text: string,
  contentType = 'text/plain; charset=utf-8',
): void {
  if (res.headersSent) {
    res.end()
    return
  }
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/**
 * Media type of a request, lower-case and without parameters (`application/json` from
 * `application/json; charset=utf-8`; `''` without a `content-type`).
 *
 * @example
 * ```ts
 * import type { IncomingMessage } from 'node:http'
 * import { mediaType } from '@kvc/worker-bindings'
 * const isJson = (req: IncomingMessage) => mediaType(req) === 'application/json'
 * ```
 */
export function mediaType(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? '').split(';', 1)[0]!.trim().toLowerCase()
}
