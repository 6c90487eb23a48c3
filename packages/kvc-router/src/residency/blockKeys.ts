import { type BlockHasher, computeBlockHashes } from '@kvc/radix-cache'
import { RouterError, checkLength } from '../errors/routerError.js'
import { checkRouterParam } from '../route/params.js'
import { HI, LO, b64, w32 } from './split64.js'

/**
 * A prompt's chained block hashes in the router's compact form: each 64-bit hash is split once
 * into two unsigned 32-bit halves (`hi`, `lo`), so lookups never touch a `bigint` again. Signed
 * (SGLang) and unsigned (vLLM, Dynamo) spellings of the same 64 bits give the same key.
 *
 * Build one per turn (or extend the previous turn's with {@link BlockKeys.pushHash}) and pass it
 * to `ResidencyIndex.overlapInto` or `Router.route`.
 *
 * @example
 * ```ts
 * import { BlockKeys } from '@kvc/kvc-router'
 * const keys = BlockKeys.fromHashes([1n, 2n, -3n])
 * keys.length // 3
 * keys.hashAt(2) // 18446744073709551613n (the unsigned spelling of -3n)
 * ```
 */
export class BlockKeys {
  /** High 32 bits of each block hash (only the first {@link BlockKeys.length} entries are used). */
  hi: Uint32Array
  /** Low 32 bits of each block hash. */
  lo: Uint32Array
  /** Number of blocks. */
  length = 0

  constructor(capacity = 16) {
    this.hi = new Uint32Array(Math.max(1, capacity))
    this.lo = new Uint32Array(Math.max(1, capacity))
  }

  /**
   * Keys of a list of 64-bit block hashes (signed or unsigned).
   *
   * @example
   * ```ts
   * import { BlockKeys } from '@kvc/kvc-router'
   * BlockKeys.fromHashes([10n, 11n]).length // 2
   * ```
   */
  static fromHashes(hashes: readonly bigint[]): BlockKeys {
    const k = new BlockKeys(hashes.length)
    for (let i = 0; i < hashes.length; i++) k.pushHash(hashes[i]!)
    return k
  }

  /**
   * Keys of the full pages of `tokens` under a chained block hasher (the same one the engines
   * use to publish their KV events, with the same page size and namespace).
   *
   * @example
   * ```ts
   * import { sglangBlockHasher } from '@kvc/radix-cache'
   * import { BlockKeys } from '@kvc/kvc-router'
   * BlockKeys.fromTokens(sglangBlockHasher(), [1, 2, 3, 4, 5], 2).length // 2 (the partial page is ignored)
   * ```
   */
  static fromTokens(
    hasher: BlockHasher,
    tokens: ArrayLike<number>,
    pageSize: number,
    extraKey?: string,
  ): BlockKeys {
    checkRouterParam('pageSize', pageSize)
    return BlockKeys.fromHashes(computeBlockHashes(hasher, tokens, pageSize, extraKey))
  }

  /**
   * Keys of small integer block ids (for example the `hash_ids` of Mooncake traces, which are
   * already prefix hashes): id `x` is the 64-bit hash `BigInt(x)`.
   *
   * @example
   * ```ts
   * import { BlockKeys } from '@kvc/kvc-router'
   * BlockKeys.fromIds([0, 14, 15]).hashAt(1) // 14n
   * ```
   */
  static fromIds(ids: ArrayLike<number>): BlockKeys {
    const k = new BlockKeys(ids.length)
    for (let i = 0; i < ids.length; i++) {
      const x = ids[i]!
      if (!Number.isSafeInteger(x) || x < 0) throw new RouterError('INVALID_MESSAGE', `block id ${x}`, x)
      k.#push(Math.floor(x / 0x1_0000_0000) >>> 0, x >>> 0)
    }
    return k
  }

  /**
   * Appends one 64-bit hash.
   *
   * @example
   * ```ts
   * import { BlockKeys } from '@kvc/kvc-router'
   * const k = new BlockKeys()
   * k.pushHash(42n)
   * k.length // 1
   * ```
   */
  pushHash(hash: bigint): void {
    if (typeof hash !== 'bigint')
      throw new RouterError('INVALID_MESSAGE', `block hash must be a bigint`, hash)
    b64[0] = hash // wraps modulo 2^64: signed and unsigned spellings agree
    this.#push(w32[HI]!, w32[LO]!)
  }

  #push(hi: number, lo: number): void {
    if (this.length === this.hi.length) {
      const h = new Uint32Array(this.hi.length * 2)
      const l = new Uint32Array(this.hi.length * 2)
      h.set(this.hi)
      l.set(this.lo)
      this.hi = h
      this.lo = l
    }
    this.hi[this.length] = hi
    this.lo[this.length] = lo
    this.length++
  }

  /**
   * The unsigned 64-bit hash of block `i`.
   *
   * @example
   * ```ts
   * import { BlockKeys } from '@kvc/kvc-router'
   * BlockKeys.fromHashes([7n]).hashAt(0) // 7n
   * ```
   */
  hashAt(i: number): bigint {
    if (!Number.isInteger(i) || i < 0 || i >= this.length) {
      throw new RouterError('INVALID_LENGTH', `block index ${i} out of range [0, ${this.length})`, i)
    }
    return (BigInt(this.hi[i]!) << 32n) | BigInt(this.lo[i]!)
  }

  /**
   * Drops blocks past `length` (keeps the buffers).
   *
   * @example
   * ```ts
   * import { BlockKeys } from '@kvc/kvc-router'
   * const k = BlockKeys.fromHashes([1n, 2n, 3n])
   * k.truncate(1)
   * k.length // 1
   * ```
   */
  truncate(length: number): void {
    checkLength('length', length)
    if (length < this.length) this.length = length
  }
}
