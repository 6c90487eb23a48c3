/**
 * A session's token stream: one growing buffer that holds the session's tokens turn after turn, so
 * that a turn's request copies only the tokens its prompt adds (a 50K-token conversation would
 * otherwise be copied whole at every turn). `stream[0, streamLen)` is never rewritten: the requests
 * that ended on it show views of it (`tokenIds`, the session's committed tokens).
 */
import type { Slot } from './state.js'
import { fail, startsWith } from './tokens.js'

/**
 * The token buffer of a new request of `slot`'s session, on the session's stream, or `undefined`
 * when the prompt cannot share it (another request owns the stream's end, or the prompt does not
 * strictly extend `stream[0, streamLen)`): the caller copies the prompt then. On success,
 * `inputIds` follow the stream's tokens in the returned buffer (the stream, grown to hold them and
 * `spare` more when needed); the caller makes the new request the stream's tail. Invalid token ids
 * throw `INVALID_REQUEST` as {@link toTokens} does, before anything changes.
 */
export function streamTokens(
  slot: Slot,
  inputIds: ArrayLike<number>,
  spare: number,
): Uint32Array | undefined {
  const tail = slot.streamTail
  if (tail !== undefined && (tail.phase === 'created' || tail.phase === 'running')) return undefined
  if (inputIds === null || typeof inputIds !== 'object' || typeof inputIds.length !== 'number')
    return undefined
  const end = slot.streamLen
  const n = inputIds.length
  if (end === 0 || n <= end) return undefined
  let stream = slot.stream
  const typed = inputIds instanceof Uint32Array
  if (typed) {
    if (!startsWith(inputIds, stream.subarray(0, end))) return undefined
  } else {
    for (let i = 0; i < end; i++) if (inputIds[i] !== stream[i]) return undefined
    for (let i = end; i < n; i++) {
      const t = inputIds[i]!
      if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
        fail('INVALID_REQUEST', `token ${String(t)} at index ${i} is not an integer in [0, 2^32)`, t)
      }
    }
  }
  if (n + spare > stream.length) {
    // Grow by half: a session's prompts grow turn by turn, so the copies stay amortized O(1).
    const grown = new Uint32Array(Math.max(n + spare, stream.length + (stream.length >> 1)))
    grown.set(stream.subarray(0, end))
    stream = grown
    slot.stream = grown
  }
  if (typed) stream.set(inputIds.subarray(end), end)
  else for (let i = end; i < n; i++) stream[i] = inputIds[i]!
  return stream
}
