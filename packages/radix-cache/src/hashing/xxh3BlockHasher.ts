import type { BlockHasher } from './blockHasher.js'

/** Options of {@link xxh3BlockHasher}. */
export interface Xxh3BlockHasherOptions {
  /** Seed of XXH3-64 (Dynamo: 1337). */
  readonly seed?: bigint
}

/**
 * Dynamo / Mooncake-compatible XXH3-64 rolling block hasher (placeholder).
 *
 * @example
 * ```ts
 * import { xxh3BlockHasher } from '@kvc/radix-cache'
 * const h = xxh3BlockHasher()
 * ```
 */
export function xxh3BlockHasher(_options: Xxh3BlockHasherOptions = {}): BlockHasher {
  throw new Error('not implemented yet')
}
