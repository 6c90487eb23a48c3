import type { DtoPSyncErrorCode } from '../errors/dtoPSyncError.js'

/**
 * One full page of a session's committed history: `pageSize` token ids, the page's chained block
 * hash (the radix cache's `BlockHasher` id, so D and P agree) and its parent's hash
 * (`null` for the first page of a chain).
 *
 * @example
 * ```ts
 * import type { SyncBlock } from '@kvc/dto-p-sync'
 * const block: SyncBlock = { hash: 42n, parentHash: null, tokens: Uint32Array.of(1, 2, 3, 4) }
 * ```
 */
export interface SyncBlock {
  /** Chained block id of this page (depends on every earlier page of the chain). */
  readonly hash: bigint
  /** Id of the previous page of the chain, `null` for the first page. */
  readonly parentHash: bigint | null
  /** The page's token ids (`pageSize` of them). */
  readonly tokens: Uint32Array
}

/**
 * What D offers after a turn commits: the session's **newly committed full pages** (never the
 * newest sampled token, whose KV does not exist yet), chained onto the pages offered before.
 *
 * `firstPage` is the chain position of `blocks[0]`. It equals the previous chain length when the
 * history only grew; it is smaller when the client rewrote the history (the chain is cut there and
 * continues with the new pages). `committedTokens` is the whole history length (what the next
 * prompt starts with), including the unaligned tail and the newest sampled token, so that the
 * staleness `committedTokens - syncedTokens` is exactly the re-prefill a reseed would pay.
 *
 * @example
 * ```ts
 * import { OfferBuilder, type Offer } from '@kvc/dto-p-sync'
 * const offers = new OfferBuilder({ pageSize: 4 })
 * const offer: Offer = offers.commitTurn('s1', [1, 2, 3, 4, 5, 6, 7, 8, 9])
 * // offer.blocks.length === 2 (tokens 1..8), offer.committedTokens === 9
 * ```
 */
export interface Offer {
  readonly sessionId: string
  /** Per-session commit counter, starting at 1 and increasing with every commit. */
  readonly version: number
  /** Namespace (LoRA id, cache salt) of the session's pages; `''` for the default one. */
  readonly extraKey: string
  /** Tokens of the session's history after this commit (prompt + output). */
  readonly committedTokens: number
  /** Chain position (page index from the root) of `blocks[0]`. */
  readonly firstPage: number
  /** The newly committed full pages, in chain order. */
  readonly blocks: readonly SyncBlock[]
}

/**
 * A block inside a transfer. `withKv: false` means D believes P already holds the page and sends
 * only its identity (a few bytes): P checks it and pins it, or answers `missing-kv`.
 *
 * @example
 * ```ts
 * import type { TransferBlock } from '@kvc/dto-p-sync'
 * const b: TransferBlock = { hash: 7n, parentHash: null, tokens: Uint32Array.of(1, 2), withKv: true }
 * ```
 */
export interface TransferBlock extends SyncBlock {
  /** Whether the page's KV travels with this message. */
  readonly withKv: boolean
}

/**
 * One D→P transfer: a contiguous segment of a session's chain, starting at chain position
 * `startPage`. `(origin, sessionId, seq)` identifies the message (a network duplicate has the
 * same triple); `version` is D's commit version of the session when the message was planned, and
 * P ignores messages older than the newest version it applied from the same origin.
 *
 * @example
 * ```ts
 * import type { TransferMessage } from '@kvc/dto-p-sync'
 * const msg: TransferMessage = {
 *   sessionId: 's1', version: 3, seq: 0, extraKey: '', startPage: 0,
 *   blocks: [{ hash: 7n, parentHash: null, tokens: Uint32Array.of(1, 2), withKv: true }],
 * }
 * ```
 */
export interface TransferMessage {
  /**
   * The sending D (its `SyncSourceOptions.origin`; absent: `''`). P keeps each origin's versions,
   * sequence numbers and pins apart, so a session that moves from one D to another is synced by
   * both without one's numbering hiding the other's messages.
   */
  readonly origin?: string
  readonly sessionId: string
  readonly version: number
  /** Per-session message number on D, increasing. */
  readonly seq: number
  readonly extraKey: string
  /** Chain position of `blocks[0]`; `blocks[0].parentHash` is `null` exactly when this is 0. */
  readonly startPage: number
  readonly blocks: readonly TransferBlock[]
}

/**
 * Outcome of a transfer on P:
 *
 * | status | meaning |
 * |---|---|
 * | `applied` | every block is now in P's cache |
 * | `partial` | the transfer broke off: the blocks before `heldPages` are in, the rest was dropped (slots freed) |
 * | `duplicate` | this `(sessionId, seq)` was already applied: nothing changed (the original outcome is repeated) |
 * | `stale` | the message's version is older than one P already applied: ignored |
 * | `unknown-parent` | P does not hold the parent of the first block (`missingHash`): D must send from further back |
 * | `missing-kv` | a block sent without KV is not on P (`missingHash`): D must send it with KV |
 * | `no-space` | P could not allocate KV slots even after evicting |
 * | `rejected` | the message was malformed (`error` holds the {@link DtoPSyncErrorCode}) |
 *
 * @example
 * ```ts
 * import type { ReplyStatus } from '@kvc/dto-p-sync'
 * const resend = (s: ReplyStatus) => s === 'unknown-parent' || s === 'missing-kv' || s === 'partial'
 * ```
 */
export type ReplyStatus =
  | 'applied'
  | 'partial'
  | 'duplicate'
  | 'stale'
  | 'unknown-parent'
  | 'missing-kv'
  | 'no-space'
  | 'rejected'

/**
 * P's answer to one {@link TransferMessage}. `heldPages`/`throughHash` say how far P now holds the
 * session's chain (through the last block of this message it has); `pinnedUntil` says until when
 * P guarantees not to evict that path (a TTL pin), `null` when it did not pin.
 *
 * @example
 * ```ts
 * import type { SyncReply } from '@kvc/dto-p-sync'
 * function onReply(r: SyncReply): void {
 *   if (r.status === 'unknown-parent') console.log('P lacks', r.missingHash)
 * }
 * ```
 */
export interface SyncReply {
  readonly sessionId: string
  readonly version: number
  readonly seq: number
  readonly status: ReplyStatus
  /** Chain pages P holds contiguously through this message (0 when unknown or none). */
  readonly heldPages: number
  /** Hash of chain page `heldPages - 1` (`null` when `heldPages` is 0). */
  readonly throughHash: bigint | null
  /** P pinned the path through `throughHash` until this time (ms), or did not pin (`null`). */
  readonly pinnedUntil: number | null
  /** The block P lacks (`unknown-parent`, `missing-kv`), else `null`. */
  readonly missingHash: bigint | null
  /** Blocks of this message P inserted with their KV. */
  readonly ingestedBlocks: number
  /** Blocks of this message P already held (KV not needed). */
  readonly skippedBlocks: number
  /** Error code of a `rejected` message, else `null`. */
  readonly error: DtoPSyncErrorCode | null
}

/**
 * A set of block hashes: which pages a worker holds (from its KV events or a query), which are in
 * flight, which D still has.
 *
 * @example
 * ```ts
 * import type { HoldingsView } from '@kvc/dto-p-sync'
 * const held = new Set([1n, 2n])
 * const view: HoldingsView = { has: (h) => held.has(h) }
 * ```
 */
export interface HoldingsView {
  has(hash: bigint): boolean
}
