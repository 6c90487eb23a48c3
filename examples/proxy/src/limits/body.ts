import type { IncomingMessage } from 'node:http'
import { ProxyError, badRequest } from '../errors.js'

/** Limits of {@link readBody}. */
export interface BodyLimits {
  /** Largest body; larger ones get 413 at once. */
  readonly maxBytes: number
  /** The whole body must arrive within this (ms) of the call; else 408. */
  readonly timeoutMs: number
}

function tooLarge(size: number, maxBytes: number, declared: boolean): ProxyError {
  return badRequest(
    `request body of ${declared ? 'a declared ' : 'at least '}${size} bytes exceeds the limit of ${maxBytes} bytes`,
    413,
  )
}

/**
 * Reads a request body under a size limit and a deadline.
 *
 * - Over `maxBytes` (by its `Content-Length`, or as it streams) it rejects with 413 **at once**,
 *   so the answer goes out while the client is still sending, and keeps reading the rest of the
 *   body to discard it: the connection is not reset under the client (which would lose the
 *   answer), and stays usable once the body ends.
 * - Not complete within `timeoutMs` it rejects with 408 (`REQUEST_TIMEOUT`, the answer closes the
 *   connection). A body still being discarded then gets the end of the connection (our side is
 *   closed, its bytes still read, so the answer is not lost to a reset), and is cut off after
 *   `timeoutMs` more.
 * - A body the client cuts short rejects with 400.
 */
export function readBody(req: IncomingMessage, limits: BodyLimits): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const { maxBytes, timeoutMs } = limits
    const chunks: Buffer[] = []
    let size = 0
    let settled = false
    let discarding = false
    const settle = (err: ProxyError | undefined, body?: Buffer): void => {
      if (settled) return
      settled = true
      if (err === undefined) {
        clearTimeout(timer)
        resolve(body!)
      } else reject(err)
    }
    const timer = setTimeout(() => {
      if (!settled) {
        req.off('data', onData)
        req.resume()
        settle(
          new ProxyError(
            'REQUEST_TIMEOUT',
            `the request body did not arrive within ${timeoutMs} ms (deadlines.bodyReadMs)`,
            { param: null, headers: { connection: 'close' } },
            408,
          ),
        )
      } else if (discarding && !req.complete) {
        // The answer (413) went out long ago and the client is still sending: close our side
        // (FIN after the answer) but go on reading, so no reset wipes the answer from the
        // client's buffer; a client that still does not stop is cut off after as long again.
        req.socket.end()
        const cut = setTimeout(() => req.socket.destroy(), timeoutMs)
        cut.unref?.()
        req.socket.once('close', () => clearTimeout(cut))
      }
    }, timeoutMs)
    timer.unref?.()
    const discard = (err: ProxyError): void => {
      discarding = true
      chunks.length = 0
      settle(err)
    }
    const onData = (c: Buffer): void => {
      size += c.length
      if (discarding) return
      if (size > maxBytes) {
        discard(tooLarge(size, maxBytes, false))
        return
      }
      chunks.push(c)
    }
    const declared = Number(req.headers['content-length'])
    if (Number.isFinite(declared) && declared > maxBytes) discard(tooLarge(declared, maxBytes, true))
    req.on('data', onData)
    req.on('error', (e) => settle(badRequest(`request body: ${e.message}`)))
    req.on('close', () => {
      if (!req.complete) settle(badRequest('the request body was cut short'))
      clearTimeout(timer)
    })
    req.on('end', () => {
      clearTimeout(timer)
      settle(undefined, Buffer.concat(chunks, size))
    })
  })
}
