import { DtoPSyncError, DtoPSyncErrorCode, invalidMessage, invalidOption } from '../errors/dtoPSyncError.js'
import type { Offer, SyncReply, TransferMessage } from './types.js'

const REPLY_STATUSES = new Set([
  'applied',
  'partial',
  'duplicate',
  'stale',
  'unknown-parent',
  'missing-kv',
  'no-space',
  'rejected',
])

/** @internal */
export function checkSessionId(id: unknown): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) {
    throw new DtoPSyncError(
      DtoPSyncErrorCode.InvalidSessionId,
      `session id must be a non-empty string, got ${describe(id)}`,
      id,
    )
  }
}

/** @internal */
export function checkPageSize(pageSize: unknown): number {
  if (typeof pageSize !== 'number' || !Number.isInteger(pageSize) || pageSize <= 0) {
    throw invalidOption(`pageSize must be a positive integer, got ${describe(pageSize)}`, pageSize)
  }
  return pageSize
}

/** @internal */
export function checkNonNegative(name: string, v: unknown, integer = false): number {
  if (typeof v !== 'number' || Number.isNaN(v) || v < 0 || (integer && !Number.isInteger(v))) {
    throw invalidOption(
      `${name} must be a non-negative ${integer ? 'integer' : 'number'}, got ${describe(v)}`,
      v,
    )
  }
  return v
}

/** @internal */
export function checkPositive(name: string, v: unknown): number {
  if (typeof v !== 'number' || Number.isNaN(v) || v <= 0) {
    throw invalidOption(`${name} must be a positive number, got ${describe(v)}`, v)
  }
  return v
}

/** @internal */
export function checkFraction(name: string, v: unknown): number {
  if (typeof v !== 'number' || Number.isNaN(v) || v < 0 || v > 1) {
    throw invalidOption(`${name} must be a number in [0, 1], got ${describe(v)}`, v)
  }
  return v
}

/** @internal */
export function checkClock(now: unknown): () => number {
  if (typeof now !== 'function') throw invalidOption('now must be a function returning milliseconds', now)
  return now as () => number
}

/**
 * @internal
 * A reader of the injected clock (checked as {@link checkClock} does) that refuses a reading
 * that is not a number (`INVALID_OPTION`) or that is earlier than the previous one
 * (`TIME_WENT_BACKWARDS`).
 */
export function monotonicClock(now: unknown): () => number {
  const read = checkClock(now)
  let last = Number.NEGATIVE_INFINITY
  return () => {
    const t = read()
    if (typeof t !== 'number' || Number.isNaN(t)) throw invalidOption(`now() returned ${describe(t)}`, t)
    if (t < last) {
      throw new DtoPSyncError(DtoPSyncErrorCode.TimeWentBackwards, `clock went from ${last} back to ${t}`, t)
    }
    last = t
    return t
  }
}

/** @internal */
export function checkExtraKey(extraKey: unknown): string {
  if (extraKey === undefined) return ''
  if (typeof extraKey !== 'string') {
    throw invalidOption(`extraKey must be a string, got ${describe(extraKey)}`, extraKey)
  }
  return extraKey
}

/**
 * Validate token ids and return them as a `Uint32Array` (zero-copy for a `Uint32Array`).
 * @internal
 */
export function toTokens(tokens: unknown): Uint32Array {
  if (tokens instanceof Uint32Array) return tokens
  if (
    tokens === null ||
    typeof tokens !== 'object' ||
    typeof (tokens as ArrayLike<number>).length !== 'number'
  ) {
    throw new DtoPSyncError(
      DtoPSyncErrorCode.InvalidTokens,
      `tokens must be an array of token ids, got ${describe(tokens)}`,
      tokens,
    )
  }
  const arr = tokens as ArrayLike<unknown>
  const out = new Uint32Array(arr.length)
  for (let i = 0; i < arr.length; i++) {
    const t = arr[i]
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new DtoPSyncError(
        DtoPSyncErrorCode.InvalidTokens,
        `token ${describe(t)} at index ${i} is not an integer in [0, 2^32)`,
        t,
      )
    }
    out[i] = t
  }
  return out
}

function checkVersionLike(name: string, v: unknown, min: number): void {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw invalidMessage(`${name} must be an integer >= ${min}, got ${describe(v)}`, v)
  }
}

function checkHash(name: string, h: unknown, nullable: boolean): void {
  if (typeof h === 'bigint') return
  if (nullable && h === null) return
  throw invalidMessage(`${name} must be a bigint${nullable ? ' or null' : ''}, got ${describe(h)}`, h)
}

function checkChain(
  blocks: readonly { hash: unknown; parentHash: unknown; tokens: unknown }[],
  firstPage: number,
  pageSize: number,
  what: string,
): void {
  for (let i = 0; i < blocks.length; i++) {
    const b = blocks[i]
    if (b === null || typeof b !== 'object') throw invalidMessage(`${what}.blocks[${i}] is not an object`, b)
    checkHash(`${what}.blocks[${i}].hash`, b.hash, false)
    checkHash(`${what}.blocks[${i}].parentHash`, b.parentHash, true)
    if (!(b.tokens instanceof Uint32Array)) {
      throw invalidMessage(`${what}.blocks[${i}].tokens must be a Uint32Array`, b.tokens)
    }
    if (b.tokens.length !== pageSize) {
      throw invalidMessage(
        `${what}.blocks[${i}] has ${b.tokens.length} tokens, pages have ${pageSize}`,
        b.tokens.length,
      )
    }
    if (i === 0) {
      if ((b.parentHash === null) !== (firstPage === 0)) {
        throw invalidMessage(
          `${what}.blocks[0].parentHash must be null exactly when the segment starts at page 0 (starts at ${firstPage})`,
          b.parentHash,
        )
      }
    } else if (b.parentHash !== blocks[i - 1]!.hash) {
      throw invalidMessage(
        `${what}.blocks[${i}].parentHash does not chain onto blocks[${i - 1}].hash`,
        b.parentHash,
      )
    }
  }
}

/**
 * Structural validation of a transfer message (no state needed). Throws `INVALID_SESSION_ID` or
 * `INVALID_MESSAGE`.
 * @internal
 */
export function validateTransferMessage(msg: TransferMessage, pageSize: number): void {
  if (msg === null || typeof msg !== 'object')
    throw invalidMessage('a transfer message must be an object', msg)
  if (msg.origin !== undefined && typeof msg.origin !== 'string')
    throw invalidMessage('origin must be a string', msg.origin)
  checkSessionId(msg.sessionId)
  checkVersionLike('version', msg.version, 1)
  checkVersionLike('seq', msg.seq, 0)
  checkVersionLike('startPage', msg.startPage, 0)
  if (typeof msg.extraKey !== 'string') throw invalidMessage('extraKey must be a string', msg.extraKey)
  if (!Array.isArray(msg.blocks) || msg.blocks.length === 0) {
    throw invalidMessage('a transfer message carries at least one block', msg.blocks)
  }
  checkChain(msg.blocks, msg.startPage, pageSize, 'message')
  for (let i = 0; i < msg.blocks.length; i++) {
    if (typeof msg.blocks[i]!.withKv !== 'boolean') {
      throw invalidMessage(`message.blocks[${i}].withKv must be a boolean`, msg.blocks[i]!.withKv)
    }
  }
}

/**
 * Structural validation of an offer. Throws `INVALID_SESSION_ID` or `INVALID_MESSAGE`.
 * @internal
 */
export function validateOffer(offer: Offer, pageSize: number): void {
  if (offer === null || typeof offer !== 'object') throw invalidMessage('an offer must be an object', offer)
  checkSessionId(offer.sessionId)
  checkVersionLike('version', offer.version, 1)
  checkVersionLike('firstPage', offer.firstPage, 0)
  checkVersionLike('committedTokens', offer.committedTokens, 0)
  if (typeof offer.extraKey !== 'string') throw invalidMessage('extraKey must be a string', offer.extraKey)
  if (!Array.isArray(offer.blocks)) throw invalidMessage('offer.blocks must be an array', offer.blocks)
  checkChain(offer.blocks, offer.firstPage, pageSize, 'offer')
  if ((offer.firstPage + offer.blocks.length) * pageSize > offer.committedTokens) {
    throw invalidMessage(
      `offer covers ${(offer.firstPage + offer.blocks.length) * pageSize} tokens, more than committedTokens ${offer.committedTokens}`,
      offer.committedTokens,
    )
  }
}

/**
 * Structural validation of a reply. Throws `INVALID_SESSION_ID` or `INVALID_MESSAGE`.
 * @internal
 */
export function validateReply(reply: SyncReply): void {
  if (reply === null || typeof reply !== 'object') throw invalidMessage('a reply must be an object', reply)
  checkSessionId(reply.sessionId)
  checkVersionLike('version', reply.version, 1)
  checkVersionLike('seq', reply.seq, 0)
  checkVersionLike('heldPages', reply.heldPages, 0)
  if (!REPLY_STATUSES.has(reply.status))
    throw invalidMessage(`unknown reply status ${describe(reply.status)}`, reply.status)
  checkHash('throughHash', reply.throughHash, true)
  checkHash('missingHash', reply.missingHash, true)
  if ((reply.throughHash === null) !== (reply.heldPages === 0)) {
    throw invalidMessage('throughHash must be null exactly when heldPages is 0', reply.throughHash)
  }
  if (
    reply.pinnedUntil !== null &&
    (typeof reply.pinnedUntil !== 'number' || Number.isNaN(reply.pinnedUntil))
  ) {
    throw invalidMessage(
      `pinnedUntil must be a number or null, got ${describe(reply.pinnedUntil)}`,
      reply.pinnedUntil,
    )
  }
}

/** @internal */
export function describe(v: unknown): string {
  if (v === null) return 'null'
  if (typeof v === 'string') return JSON.stringify(v)
  if (typeof v === 'bigint') return `${v}n`
  if (typeof v === 'number' || typeof v === 'boolean' || v === undefined) return String(v)
  if (typeof v === 'function') return 'a function'
  return Array.isArray(v) ? 'an array' : typeof v
}
