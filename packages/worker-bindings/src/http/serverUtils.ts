/**
 * Small helpers for the package's HTTP servers (the admission handler, the emulator).
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http'

/** The body was larger than the limit. */
export class BodyTooLargeError extends Error {
  override readonly name = 'BodyTooLargeError'
  constructor(readonly limit: number) {
    super(`request body larger than ${limit} bytes`)
  }
}

/**
 * Reads a request body as UTF-8 text, refusing more than `limit` bytes (a `content-length` above
 * the limit is refused before reading). On refusal the rest of the body is drained, so the
 * connection can still carry the error answer.
 *
 * @internal
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

/** @internal */
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

/** @internal */
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

/** Media type of a request (`application/json` from `application/json; charset=utf-8`). @internal */
export function mediaType(req: IncomingMessage): string {
  return (req.headers['content-type'] ?? '').split(';', 1)[0]!.trim().toLowerCase()
}
