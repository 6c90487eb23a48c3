import type { FlagOp, FlagsValue } from './backend.js'

/** @internal A key safe for NATS KV and Redis: `k` + the id in base64url. */
export function encodeKey(id: string): string {
  return `k${Buffer.from(id, 'utf8').toString('base64url')}`
}

/** @internal */
export function decodeKey(key: string): string {
  return Buffer.from(key.slice(1), 'base64url').toString('utf8')
}

/** @internal JSON from bytes or a string; `undefined` if it does not parse to an object. */
export function decodeJson<T>(data: Uint8Array | string): T | undefined {
  try {
    const v = JSON.parse(typeof data === 'string' ? data : Buffer.from(data).toString('utf8'))
    return typeof v === 'object' && v !== null ? (v as T) : undefined
  } catch {
    return undefined
  }
}

/** @internal A session's flags after one change (`undefined`: none left). */
export function applyFlagOp(cur: FlagsValue | undefined, op: FlagOp): FlagsValue | undefined {
  if (op.t === 'reset') return undefined
  const r: Record<string, number> = { ...(cur?.r ?? {}) }
  const x = new Set(cur?.x ?? [])
  if (op.t === 'reject') r[op.d] = (r[op.d] ?? 0) + 1
  else x.add(op.d)
  return { r, x: [...x] }
}

/** @internal Seed slots held by the replicas other than `me` that count (`live`, or all). */
export function sumSeeds(
  entries: Readonly<Record<string, number>>,
  me: string,
  live: ReadonlySet<string> | 'all',
): number {
  let n = 0
  for (const [r, k] of Object.entries(entries)) {
    if (r !== me && (live === 'all' || live.has(r)) && typeof k === 'number' && k > 0) n += k
  }
  return n
}
