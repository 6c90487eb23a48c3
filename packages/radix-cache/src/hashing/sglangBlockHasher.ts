import type { BlockHasher } from './blockHasher.js'

/** Options of {@link sglangBlockHasher}. */
export interface SglangBlockHasherOptions {
  /** Seed the chain with the namespace (`extraKey`). Upstream SGLang does not (default `false`). */
  readonly namespaceInSeed?: boolean
}

/**
 * SGLang-compatible block hasher (placeholder, implemented in the hashing module).
 *
 * @example
 * ```ts
 * import { sglangBlockHasher } from '@kvc/radix-cache'
 * const h = sglangBlockHasher()
 * ```
 */
export function sglangBlockHasher(_options: SglangBlockHasherOptions = {}): BlockHasher {
  throw new Error('not implemented yet')
}
