import { type BlockHasher, sglangBlockHasher } from '@kvc/radix-cache'
import { invalidOption } from '../errors/dtoPSyncError.js'
import { checkExtraKey, checkPageSize, checkSessionId, toTokens } from '../protocol/validate.js'
import type { Offer, SyncBlock } from '../protocol/types.js'

/**
 * Options of {@link OfferBuilder}.
 *
 * @example
 * ```ts
 * import { sglangBlockHasher } from '@kvc/radix-cache'
 * import { OfferBuilder, type OfferBuilderOptions } from '@kvc/dto-p-sync'
 * const opts: OfferBuilderOptions = { pageSize: 64, blockHasher: sglangBlockHasher() }
 * const offers = new OfferBuilder(opts)
 * ```
 */
export interface OfferBuilderOptions {
  /** Tokens per page; must equal the radix caches' `pageSize` on D and P. */
  readonly pageSize: number
  /**
   * Block hasher; must be the one P's radix cache uses for its KV events (its `blockHasher`
   * option), so both sides name pages alike. Default: `sglangBlockHasher()`, the radix cache's
   * own default.
   */
  readonly blockHasher?: BlockHasher
}

/**
 * Options of {@link OfferBuilder.commitTurn}.
 *
 * @example
 * ```ts
 * import { OfferBuilder, type CommitOptions } from '@kvc/dto-p-sync'
 * const opts: CommitOptions = { extraKey: 'lora-a', newestSampled: true }
 * new OfferBuilder({ pageSize: 4 }).commitTurn('s', [1, 2, 3, 4, 5], opts)
 * ```
 */
export interface CommitOptions {
  /** Namespace of the session's pages (LoRA id, cache salt); default `''`. */
  readonly extraKey?: string
  /**
   * The last token of `history` is the newest sampled token, whose KV does not exist yet
   * (default `true`: TensorRT-LLM's rule, the stable prefix only). Pass `false` when every token
   * of `history` went through the model (for example a prompt-only commit).
   */
  readonly newestSampled?: boolean
}

/**
 * What {@link OfferBuilder} knows about one session.
 *
 * @example
 * ```ts
 * import { OfferBuilder, type OfferSessionInfo } from '@kvc/dto-p-sync'
 * const offers = new OfferBuilder({ pageSize: 2 })
 * offers.commitTurn('s', [1, 2, 3])
 * const info: OfferSessionInfo | undefined = offers.session('s') // version 1, 1 block
 * ```
 */
export interface OfferSessionInfo {
  readonly sessionId: string
  readonly version: number
  readonly extraKey: string
  readonly committedTokens: number
  /** The chain of committed full pages, from the root (shared, do not mutate). */
  readonly blocks: readonly SyncBlock[]
}

interface Chain {
  version: number
  extraKey: string
  committedTokens: number
  blocks: SyncBlock[]
  digests: Uint8Array[]
}

/**
 * D side: turns each committed turn of a session into an {@link Offer} of its newly committed
 * full pages, hashed with the radix cache's block hasher so that D and P agree on block ids.
 *
 * Rules (`docs/design/algorithms.md#d-to-p-sync`):
 * - only **full pages** of tokens whose KV exists are offered: with `newestSampled` (default),
 *   the last token of the history is left out, its KV is not materialised yet;
 * - the history normally grows turn after turn; when it does not extend the previous one (the
 *   client rewrote or truncated it), the chain is cut at the first differing page and the offer
 *   continues from there (`firstPage` < previous chain length);
 * - every commit bumps the session's `version`, even one that adds no full page (the staleness
 *   grows with `committedTokens`).
 *
 * @example
 * ```ts
 * import { OfferBuilder } from '@kvc/dto-p-sync'
 * const offers = new OfferBuilder({ pageSize: 4 })
 * const turn1 = offers.commitTurn('s1', [1, 2, 3, 4, 5, 6, 7, 8, 9]) // prompt + output
 * // turn1.blocks: pages [1,2,3,4] and [5,6,7,8]; token 9 (the newest sampled one) stays on D
 * const turn2 = offers.commitTurn('s1', [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
 * // turn2.firstPage === 2, turn2.blocks: page [9,10,11,12], chained onto page 2's hash
 * ```
 */
export class OfferBuilder {
  /** Tokens per page. */
  readonly pageSize: number
  /** The block hasher shared with P's radix cache. */
  readonly blockHasher: BlockHasher
  readonly #sessions = new Map<string, Chain>()
  /** Last versions of ended sessions, so that a session that comes back keeps counting up. */
  readonly #retired = new Map<string, number>()

  constructor(options: OfferBuilderOptions) {
    if (options === null || typeof options !== 'object')
      throw invalidOption('options must be an object', options)
    this.pageSize = checkPageSize(options.pageSize)
    const hasher = options.blockHasher ?? sglangBlockHasher()
    if (typeof hasher.hashBlock !== 'function' || typeof hasher.blockId !== 'function') {
      throw invalidOption('blockHasher must implement hashBlock and blockId', hasher)
    }
    this.blockHasher = hasher
  }

  /**
   * Record that session `sessionId` committed a turn whose whole history (every prompt and output
   * token so far) is `history`, and return the offer of its newly committed full pages.
   *
   * @example
   * ```ts
   * import { OfferBuilder } from '@kvc/dto-p-sync'
   * const offers = new OfferBuilder({ pageSize: 2 })
   * offers.commitTurn('s', [5, 6, 7], { newestSampled: false }).blocks.length // 1
   * ```
   */
  commitTurn(sessionId: string, history: ArrayLike<number>, options: CommitOptions = {}): Offer {
    checkSessionId(sessionId)
    const tokens = toTokens(history)
    const extraKey = checkExtraKey(options.extraKey)
    const newestSampled = options.newestSampled ?? true
    if (typeof newestSampled !== 'boolean')
      throw invalidOption('newestSampled must be a boolean', newestSampled)
    const ps = this.pageSize
    const kvLen = newestSampled ? Math.max(0, tokens.length - 1) : tokens.length
    const pages = Math.floor(kvLen / ps)

    let chain = this.#sessions.get(sessionId)
    if (chain === undefined) {
      const version = this.#retired.get(sessionId) ?? 0
      this.#retired.delete(sessionId)
      chain = { version, extraKey, committedTokens: 0, blocks: [], digests: [] }
      this.#sessions.set(sessionId, chain)
    }
    // Keep the pages the history still agrees with (a namespace change agrees with nothing).
    let common = 0
    if (chain.extraKey === extraKey) {
      const limit = Math.min(pages, chain.blocks.length)
      while (common < limit && samePage(chain.blocks[common]!.tokens, tokens, common * ps)) common++
    }
    chain.blocks.length = common
    chain.digests.length = common
    chain.extraKey = extraKey
    const fresh: SyncBlock[] = []
    if (pages > common) {
      const copy = tokens.slice(common * ps, pages * ps)
      const hasher = this.blockHasher
      const nsArg = extraKey === '' ? undefined : extraKey
      let prevDigest = common > 0 ? chain.digests[common - 1] : undefined
      let prevHash = common > 0 ? chain.blocks[common - 1]!.hash : null
      for (let p = common; p < pages; p++) {
        const page = copy.subarray((p - common) * ps, (p - common + 1) * ps)
        const digest = hasher.hashBlock(prevDigest, page, nsArg)
        const block: SyncBlock = { hash: hasher.blockId(digest), parentHash: prevHash, tokens: page }
        chain.blocks.push(block)
        chain.digests.push(digest)
        fresh.push(block)
        prevDigest = digest
        prevHash = block.hash
      }
    }
    chain.version++
    chain.committedTokens = tokens.length
    return {
      sessionId,
      version: chain.version,
      extraKey,
      committedTokens: tokens.length,
      firstPage: common,
      blocks: fresh,
    }
  }

  /**
   * The session's current chain and counters, or `undefined` for an unknown session.
   *
   * @example
   * ```ts
   * import { OfferBuilder } from '@kvc/dto-p-sync'
   * const offers = new OfferBuilder({ pageSize: 2 })
   * offers.commitTurn('s', [1, 2, 3])
   * offers.session('s')?.blocks.length // 1
   * ```
   */
  session(sessionId: string): OfferSessionInfo | undefined {
    const c = this.#sessions.get(sessionId)
    if (c === undefined) return undefined
    return {
      sessionId,
      version: c.version,
      extraKey: c.extraKey,
      committedTokens: c.committedTokens,
      blocks: c.blocks,
    }
  }

  /**
   * Forget a session (finished or released on D). Returns whether it was known. Its version is
   * remembered (the last {@link RETIRED_SESSIONS_KEPT} ended sessions): if it commits again here,
   * its versions go on from there, so P does not take the new turns for stale ones.
   *
   * @example
   * ```ts
   * import { OfferBuilder } from '@kvc/dto-p-sync'
   * const offers = new OfferBuilder({ pageSize: 2 })
   * offers.commitTurn('s', [1, 2, 3])
   * offers.endSession('s') // true
   * ```
   */
  endSession(sessionId: string): boolean {
    const chain = this.#sessions.get(sessionId)
    if (chain === undefined) return false
    this.#sessions.delete(sessionId)
    retire(this.#retired, sessionId, chain.version)
    return true
  }

  /**
   * Ids of the sessions this builder tracks.
   *
   * @example
   * ```ts
   * import { OfferBuilder } from '@kvc/dto-p-sync'
   * const offers = new OfferBuilder({ pageSize: 2 })
   * offers.commitTurn('a', [1, 2, 3])
   * offers.sessionIds() // ['a']
   * ```
   */
  sessionIds(): string[] {
    return [...this.#sessions.keys()]
  }
}

function samePage(page: Uint32Array, tokens: Uint32Array, off: number): boolean {
  for (let i = 0; i < page.length; i++) if (page[i] !== tokens[off + i]) return false
  return true
}

/**
 * How many ended sessions an {@link OfferBuilder} (their versions) and a `SyncSource` (their
 * message numbers) remember, so that a session coming back to the same D keeps counting up.
 *
 * @example
 * ```ts
 * import { RETIRED_SESSIONS_KEPT } from '@kvc/dto-p-sync'
 * console.log(RETIRED_SESSIONS_KEPT) // 65536
 * ```
 */
export const RETIRED_SESSIONS_KEPT = 65_536

/** @internal Remember `value` for an ended session, forgetting the oldest beyond the cap. */
export function retire(map: Map<string, number>, sessionId: string, value: number): void {
  map.delete(sessionId)
  map.set(sessionId, value)
  if (map.size > RETIRED_SESSIONS_KEPT) map.delete(map.keys().next().value!)
}
