/**
 * The replay end marker: sequence −1 as 8 big-endian bytes (`0xff` × 8).
 *
 * @example
 * ```ts
 * import { END_SEQ, decodeSeq } from '@kvc/worker-bindings'
 * const isEnd = (frame: Uint8Array) => decodeSeq(frame) === END_SEQ
 * ```
 */
export const END_SEQ = -1n

/**
 * A sequence number as the 8-byte big-endian frame of a KV-event message.
 *
 * @example
 * ```ts
 * import { encodeSeq } from '@kvc/worker-bindings'
 * encodeSeq(1n) // <Buffer 00 00 00 00 00 00 00 01>
 * ```
 */
export function encodeSeq(seq: bigint): Buffer {
  const b = Buffer.alloc(8)
  b.writeBigInt64BE(BigInt.asIntN(64, seq))
  return b
}

/**
 * The sequence number of an 8-byte big-endian frame (signed: the replay end marker is −1);
 * `undefined` when the frame is not 8 bytes long.
 *
 * @example
 * ```ts
 * import { decodeSeq, encodeSeq } from '@kvc/worker-bindings'
 * decodeSeq(encodeSeq(42n)) // 42n
 * ```
 */
export function decodeSeq(frame: Uint8Array): bigint | undefined {
  if (frame.length !== 8) return undefined
  return Buffer.from(frame.buffer, frame.byteOffset, 8).readBigInt64BE(0)
}
