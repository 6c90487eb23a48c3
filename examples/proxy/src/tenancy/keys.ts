import { createHash, timingSafeEqual } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/**
 * The SHA-256 digest (hex) of an API key: what the proxy keeps instead of the key.
 *
 * @example
 * ```ts
 * import { hashApiKey } from '@kvc/example-proxy'
 * hashApiKey('sk-tenant-a-0123456789').length // 64
 * ```
 */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex')
}

/** Whether `h` is a SHA-256 digest in lower-case hex. */
export function isKeyHash(h: string): boolean {
  return /^[0-9a-f]{64}$/.test(h)
}

/** A digest as printed: its first 8 hex digits only (enough to tell keys apart, not to attack one). */
export function keyFingerprint(hash: string): string {
  return `sha256:${hash.slice(0, 8)}…`
}

/** Longest `Authorization` value read (longer ones are refused before hashing). */
const MAX_AUTH = 1_024

/**
 * The key a request presents: `Authorization: Bearer <key>` (what OpenAI clients send).
 * `undefined` when there is none; `null` when the header is there but malformed.
 */
export function presentedKey(headers: IncomingHttpHeaders): string | undefined | null {
  const h = headers.authorization
  if (h === undefined || h === '') return undefined
  if (h.length > MAX_AUTH) return null
  const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(h)
  return m === null ? null : m[1]!
}

/**
 * Digests of API keys mapped to their owners, looked up in constant time: the presented key's
 * digest is compared with every stored digest (`timingSafeEqual`, no early exit), so the time of
 * a lookup does not depend on which key, if any, matched.
 *
 * @example
 * ```ts
 * import { KeyTable, hashApiKey } from '@kvc/example-proxy'
 * const table = new KeyTable([[hashApiKey('sk-tenant-a-0123456789'), 'a']])
 * table.lookup('sk-tenant-a-0123456789') // 'a'
 * table.lookup('sk-wrong-key-000000000') // undefined
 * ```
 */
export class KeyTable<T> {
  readonly #digests: Buffer[]
  readonly #owners: T[]

  constructor(entries: Iterable<readonly [hash: string, owner: T]>) {
    this.#digests = []
    this.#owners = []
    for (const [h, owner] of entries) {
      this.#digests.push(Buffer.from(h, 'hex'))
      this.#owners.push(owner)
    }
  }

  get size(): number {
    return this.#digests.length
  }

  /** The owner of `key`, or `undefined`. */
  lookup(key: string): T | undefined {
    const d = createHash('sha256').update(key, 'utf8').digest()
    let found = -1
    for (let i = 0; i < this.#digests.length; i++) {
      // Every digest is compared; the match is remembered without leaving the loop.
      if (timingSafeEqual(d, this.#digests[i]!)) found = i
    }
    return found < 0 ? undefined : this.#owners[found]
  }
}
