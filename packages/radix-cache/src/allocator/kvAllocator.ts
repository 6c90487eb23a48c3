/**
 * The part of a KV slot pool the caches need: giving slots back. A serving engine plugs its own
 * pool in here; {@link PagedAllocator} is a ready-made one.
 *
 * @example
 * ```ts
 * import type { KvAllocator } from '@kvc/radix-cache'
 * const freed: number[] = []
 * const pool: KvAllocator = { free: (indices) => { freed.push(...indices) } }
 * ```
 */
export interface KvAllocator {
  /** Return KV slots to the pool. Must reject (throw) slots that are already free. */
  free(indices: Int32Array): void
}
