/**
 * Test helpers of `@kvc/worker-bindings`: recorded-format upstream payloads for contract tests,
 * fast-check arbitraries that split byte streams (for SSE decoders), small stream helpers, and an
 * open-handle leak check for tests that start servers and clients.
 * `fast-check` is an optional peer dependency needed only here.
 *
 * @module
 */
import fc from 'fast-check'

export { upstreamFixtures } from './fixtures.js'
export { handleCounts, leakedSince } from './handles.js'

/**
 * Splits `bytes` into chunks at the given cut points (sorted, deduplicated, clamped).
 *
 * @example
 * ```ts
 * import { splitAt } from '@kvc/worker-bindings/testing'
 * splitAt(new Uint8Array([1, 2, 3]), [1]).map((c) => c.length) // [1, 2]
 * ```
 */
export function splitAt(bytes: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const points = [...new Set(cuts.map((c) => Math.max(0, Math.min(bytes.length, Math.floor(c)))))].sort(
    (a, b) => a - b,
  )
  const out: Uint8Array[] = []
  let prev = 0
  for (const p of points) {
    if (p > prev) out.push(bytes.subarray(prev, p))
    prev = Math.max(prev, p)
  }
  if (prev < bytes.length || bytes.length === 0) out.push(bytes.subarray(prev))
  return out
}

/**
 * An arbitrary chunking of `bytes`: every way to cut it (including 1-byte chunks and cuts inside
 * multi-byte characters or between `\r` and `\n`).
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { chunkings } from '@kvc/worker-bindings/testing'
 * fc.assert(fc.property(chunkings(new Uint8Array([1, 2, 3])), (chunks) => chunks.length >= 1))
 * ```
 */
export function chunkings(bytes: Uint8Array): fc.Arbitrary<Uint8Array[]> {
  return fc
    .oneof(
      fc.array(fc.nat({ max: bytes.length }), { maxLength: Math.min(64, bytes.length + 1) }),
      fc.constant(Array.from({ length: bytes.length }, (_, i) => i)),
    )
    .map((cuts) => splitAt(bytes, cuts))
}

/**
 * An async iterable over `chunks` (a test double of an HTTP body).
 *
 * @example
 * ```ts
 * import { fromChunks } from '@kvc/worker-bindings/testing'
 * for await (const c of fromChunks([new Uint8Array([1])])) console.log(c.length) // 1
 * ```
 */
export async function* fromChunks(chunks: Iterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  for (const c of chunks) yield c
}

/**
 * Collects an async iterable into an array.
 *
 * @example
 * ```ts
 * import { collect, fromChunks } from '@kvc/worker-bindings/testing'
 * const all = await collect(fromChunks([new Uint8Array([1]), new Uint8Array([2])]))
 * all.length // 2
 * ```
 */
export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}
