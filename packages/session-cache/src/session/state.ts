/**
 * The session cache's internal mutable state: a request's and a session slot's. Callers see them
 * only through {@link SessionRequest} and snapshots.
 */
import type { NodeHandle } from '@kvc/radix-cache'
import { fail } from './tokens.js'
import type { RequestPhase, SessionMatchResult, SessionRequest } from './types.js'

export const EMPTY_I32 = new Int32Array(0)
export const EMPTY_U32 = new Uint32Array(0)

/** Internal, mutable request state; callers see it through {@link SessionRequest}. */
export class RequestState implements SessionRequest {
  readonly rid: string
  readonly sessionId: string | undefined
  extraKey: string | undefined
  /** Normalized namespace ('' = default). */
  ns: string
  readonly priority: number
  readonly originInputIds: Uint32Array
  readonly outputIds: number[] = []
  /**
   * origin + output tokens in `[0, len)`; room for the expected output after them. A session turn
   * may share its session's token stream (`streamSlot`): then only this request writes past `len`.
   */
  buf: Uint32Array
  len: number
  /** Positions the row is first sized for (the prompt plus the expected output). */
  readonly rowHint: number
  /** The slot whose token stream `buf` is, while this request may append to it. */
  streamSlot: Slot | undefined = undefined
  /** `buf` is the caller's array (`copyInputIds: false`), until a decode step copies it. */
  borrowed = false
  /** The KV row, taken from the cache's row pool at admission and given back at the end (block mode). */
  reqToToken: Int32Array = EMPTY_I32
  cacheProtectedLen = 0
  kvCommittedLen = 0
  kvAllocatedLen = 0
  lastNode: NodeHandle | undefined = undefined
  cachedTokens = 0
  extra: unknown = undefined
  phase: RequestPhase = 'created'
  /** Session mode, later turn: running on the row lent by its session slot. */
  restored = false
  /** Session mode, restored: the slot's `kvAllocatedLen` when lent (its pages stay the slot's on abort). */
  slotAllocated = 0
  /** The cache that created it: a private field, so no other object passes for one of its requests. */
  readonly #owner: object

  /** Whether `o` is a request that `owner` created. */
  static ownedBy(o: unknown, owner: object): o is RequestState {
    return typeof o === 'object' && o !== null && #owner in o && o.#owner === owner
  }

  constructor(
    owner: object,
    rid: string,
    tokens: Uint32Array,
    len: number,
    rowHint: number,
    sessionId: string | undefined,
    extraKey: string | undefined,
    priority: number,
  ) {
    this.#owner = owner
    this.rid = rid
    this.sessionId = sessionId
    this.extraKey = extraKey
    this.ns = extraKey ?? ''
    this.priority = priority
    // `tokens` is a private buffer with spare capacity for the output (see toTokens).
    this.buf = tokens
    this.len = len
    this.rowHint = rowHint
    this.originInputIds = tokens.subarray(0, len)
  }

  get tokenIds(): Uint32Array {
    return this.buf.subarray(0, this.len)
  }

  get prefixIndices(): Int32Array {
    return this.reqToToken.subarray(0, this.kvCommittedLen)
  }
}

/** Internal session slot; callers see snapshots ({@link SessionSlot}, {@link SessionStatus}). */
export class Slot {
  readonly sessionId: string
  readonly ns: string
  lastNode: NodeHandle | undefined = undefined
  lastAccessTime: number
  /** Logical LRU tie-break. */
  seq: number
  extra: unknown
  /** Committed token ids of the session (a view of the last finished request's tokens). */
  committed: Uint32Array = EMPTY_U32
  /**
   * The session's token stream: `stream[0, streamLen)` are the tokens of its last request that
   * ended (prompt and output). Never rewritten there (finished requests' `tokenIds` are views of
   * it): the next turn whose prompt extends them copies only its new tokens after them, and
   * appends its output, as `streamTail`.
   */
  stream: Uint32Array = EMPTY_U32
  streamLen = 0
  /** The request that owns `stream` past `streamLen` (it was created on the stream), if any. */
  streamTail: RequestState | undefined = undefined
  turns = 0
  activeRid: string | undefined = undefined
  /** Tokens its previous incarnation had committed when it was evicted (until its first match). */
  lostCommitted = 0
  /** Demoted: holds a host reference on `lastNode` instead of a device lock. */
  pinned = false
  /** The node whose lock (the slot's) is marked idle in the tree (`markLockIdle`), if any. */
  idleMark: NodeHandle | undefined = undefined
  /** What the slot adds to the cache's running sum of parked tails (`heldBySlot`). */
  heldCounted = 0
  /** Marked idle: the tree tokens only its lock protects, as of `cache.soleLockEpoch()` = `soleEpoch`. */
  sole = 0
  soleEpoch = -1
  // Session mode only: the parked row and its ownership split.
  row: Int32Array | undefined = undefined
  protectedLen = 0
  allocatedLen = 0

  constructor(sessionId: string, ns: string, extra: unknown, now: number, seq: number) {
    this.sessionId = sessionId
    this.ns = ns
    this.extra = extra
    this.lastAccessTime = now
    this.seq = seq
  }
}

/**
 * A {@link SessionMatchResult} whose `indices` (an own, enumerable property) copy
 * `reqToToken[0, length)` when first read, unless given: most callers never read them, and a
 * block-mode request never writes its row below its match, so the copy is the same whenever it is
 * made while the request is in flight. After its end the row is back in the pool: reading them
 * then throws `REQUEST_FINISHED`.
 */
export function matchResult(
  length: number,
  given: Int32Array | undefined,
  r: RequestState,
  lastNode: NodeHandle,
  fromSlot: boolean,
  reprefillTokens: number,
  loadedTokens: number,
): SessionMatchResult {
  return new SessionMatch(length, given, r, lastNode, fromSlot, reprefillTokens, loadedTokens)
}

/**
 * The object {@link matchResult} returns. Its own properties are those of an object literal
 * `{ length, get indices(), lastNode, fromSlot, reprefillTokens, loadedTokens }` (same order,
 * `indices` an enumerable, configurable accessor), but the accessor is one function shared by
 * every match (installed by `defineProperty`), not a closure and an accessor pair per match: an
 * object literal with an accessor is built by the runtime, about five times slower.
 */
class SessionMatch implements SessionMatchResult {
  declare readonly length: number
  declare readonly indices: Int32Array
  declare readonly lastNode: NodeHandle
  declare readonly fromSlot: boolean
  declare readonly reprefillTokens: number
  declare readonly loadedTokens: number
  #indices: Int32Array | undefined
  readonly #r: RequestState

  static readonly #indicesProperty: PropertyDescriptor = {
    get(this: SessionMatch): Int32Array {
      return this.#readIndices()
    },
    enumerable: true,
    configurable: true,
  }

  constructor(
    length: number,
    given: Int32Array | undefined,
    r: RequestState,
    lastNode: NodeHandle,
    fromSlot: boolean,
    reprefillTokens: number,
    loadedTokens: number,
  ) {
    this.#indices = given
    this.#r = r
    this.length = length
    Object.defineProperty(this, 'indices', SessionMatch.#indicesProperty)
    this.lastNode = lastNode
    this.fromSlot = fromSlot
    this.reprefillTokens = reprefillTokens
    this.loadedTokens = loadedTokens
  }

  #readIndices(): Int32Array {
    let indices = this.#indices
    if (indices === undefined) {
      const r = this.#r
      if (r.phase !== 'running') {
        fail(
          'REQUEST_FINISHED',
          `request ${r.rid} is ${r.phase}: read a match's indices while the request is in flight (its KV row is reused after its end)`,
          r.rid,
        )
      }
      indices = r.reqToToken.slice(0, this.length)
      this.#indices = indices
    }
    return indices
  }
}
