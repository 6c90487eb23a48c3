import { checkOption } from '../errors/simError.js'

/**
 * The simulation's granularity: `token` (every prompt entry is one token; the caches see tokens)
 * or `block` (hash-id traces: the caches see blocks; the sim README's "Granularity" section).
 *
 * @example
 * ```ts
 * import type { SimGranularity } from '@kvc/sim'
 * const g: SimGranularity = 'block'
 * ```
 */
export type SimGranularity = 'token' | 'block'

/**
 * The granularity `auto` picks for a run: `block` for a hash-id trace (`format` `mooncake`) whose
 * page size (`pageSize`, default the block) is a multiple of its `blockTokens`-token block and
 * whose policies do not run the D→P sync (its sink needs token ids); otherwise `token`.
 *
 * @example
 * ```ts
 * import { autoGranularity } from '@kvc/sim'
 * autoGranularity({ format: 'mooncake' }) // 'block'
 * autoGranularity({ format: 'mooncake', pageSize: 16 }) // 'token'
 * autoGranularity({ format: 'azure' }) // 'token'
 * ```
 */
export function autoGranularity(o: {
  readonly format: string
  readonly pageSize?: number | undefined
  readonly blockTokens?: number | undefined
  readonly sync?: boolean | undefined
}): SimGranularity {
  const block = o.blockTokens ?? 512
  if (o.format !== 'mooncake' || o.sync === true || block % 2 !== 0) return 'token'
  return o.pageSize === undefined || o.pageSize % block === 0 ? 'block' : 'token'
}

/**
 * How the units the worker caches count map to the tokens the router, the cost model and the
 * records count.
 *
 * At token level a unit is a token and every conversion is the identity. At block level (a
 * hash-id trace whose blocks hold `blockTokens` tokens) a sequence that starts at a block
 * boundary counts **two units per full block and one for a partial block**: a prompt of `n`
 * blocks is `2n` units plus one unit for the one token after it that the engine computes, and
 * its output adds two units per full block of output and one for a partial one. With pages of
 * whole blocks (an even number of units), a sequence then fills, shares and splits pages exactly
 * as its tokens would: the partial last page of a request is never inserted into a tree, and a
 * request takes as many pages as at token level, so the block path makes the caches'
 * decisions on a few units per block instead of hundreds of tokens.
 *
 * @example
 * ```ts
 * import { KvGeometry } from '@kvc/sim'
 * const g = new KvGeometry(512, 512) // 512-token pages over 512-token blocks
 * g.pageUnits              // 2
 * g.units(3 * 512 + 1)     // 7: three blocks and the computed token
 * g.promptTokens(7)        // 1537
 * g.tokens(6)              // 1536: three whole blocks
 * ```
 */
export class KvGeometry {
  /** Tokens per block (1 at token level). */
  readonly blockTokens: number
  /** Tokens per page. */
  readonly pageTokens: number
  /** Cache units per page. */
  readonly pageUnits: number
  /** Tokens a unit of a whole block stands for (half a block; 1 at token level). */
  readonly unitTokens: number
  /** Token level: units are tokens. */
  readonly tokenLevel: boolean

  /**
   * `pageTokens`: the page size in tokens; `blockTokens`: 1 (token level) or the trace's block
   * size (even), of which the page must be a multiple.
   */
  constructor(pageTokens: number, blockTokens = 1) {
    checkOption(
      Number.isInteger(blockTokens) && blockTokens >= 1 && (blockTokens === 1 || blockTokens % 2 === 0),
      `block granularity needs an even number of tokens per block, got ${blockTokens}`,
      blockTokens,
    )
    checkOption(
      Number.isInteger(pageTokens) && pageTokens >= 1 && pageTokens % blockTokens === 0,
      `block granularity needs pages of whole blocks: page size ${pageTokens} is not a multiple of the trace's ${blockTokens}-token block (use token granularity)`,
      pageTokens,
    )
    this.blockTokens = blockTokens
    this.pageTokens = pageTokens
    this.tokenLevel = blockTokens === 1
    this.unitTokens = this.tokenLevel ? 1 : blockTokens / 2
    this.pageUnits = pageTokens / this.unitTokens
  }

  /** Units that hold `tokens` tokens of a sequence starting at a block boundary (two per full block, one for a partial one). */
  units(tokens: number): number {
    if (this.tokenLevel) return tokens
    const b = this.blockTokens
    const full = Math.floor(tokens / b)
    return 2 * full + (tokens - full * b > 0 ? 1 : 0)
  }

  /** Tokens of a count of whole-block units (matched, free, evictable, capacity: page multiples). */
  tokens(units: number): number {
    return this.tokenLevel ? units : units * this.unitTokens
  }

  /** Units of a whole-block token count (a page multiple: a capacity); the inverse of {@link KvGeometry.tokens}. */
  wholeUnits(tokens: number): number {
    return this.tokenLevel ? tokens : tokens / this.unitTokens
  }

  /** Tokens of a prompt of `units` entries: its full blocks and the one token after them. */
  promptTokens(units: number): number {
    return this.tokenLevel ? units : ((units - 1) >> 1) * this.blockTokens + 1
  }
}
