import type { TransferMessage } from './types.js'

/**
 * Bytes of a message header on the wire (ids, version, sequence number, namespace).
 *
 * @example
 * ```ts
 * import { MESSAGE_HEADER_BYTES } from '@kvc/dto-p-sync'
 * console.log(MESSAGE_HEADER_BYTES) // 64
 * ```
 */
export const MESSAGE_HEADER_BYTES = 64

/**
 * Bytes of a block's identity on the wire, besides its tokens (hash and parent hash).
 *
 * @example
 * ```ts
 * import { BLOCK_HEADER_BYTES } from '@kvc/dto-p-sync'
 * console.log(BLOCK_HEADER_BYTES) // 16
 * ```
 */
export const BLOCK_HEADER_BYTES = 16

/**
 * Bytes of a reply (P → D) on the wire.
 *
 * @example
 * ```ts
 * import { REPLY_BYTES, InMemoryNetwork } from '@kvc/dto-p-sync'
 * const net = new InMemoryNetwork()
 * const back = net.link({ bytesPerSecond: 1e9, latencyMs: 0.01 })
 * back.send({ ok: true }, REPLY_BYTES)
 * ```
 */
export const REPLY_BYTES = 96

/**
 * Bytes a transfer message puts on the link: a header, each block's hashes and token ids (4 bytes
 * each), and `pageSize * kvBytesPerToken` of KV for every block sent with its KV. The KV dominates:
 * 98,304 B/token for Qwen3-30B-A3B against 4 B for the token id.
 *
 * @example
 * ```ts
 * import { messageBytes } from '@kvc/dto-p-sync'
 * const msg = {
 *   sessionId: 's', version: 1, seq: 0, extraKey: '', startPage: 0,
 *   blocks: [{ hash: 1n, parentHash: null, tokens: new Uint32Array(16), withKv: true }],
 * }
 * messageBytes(msg, 98_304) // 64 + 16 + 64 + 16 * 98_304
 * ```
 */
export function messageBytes(message: TransferMessage, kvBytesPerToken: number): number {
  let bytes = MESSAGE_HEADER_BYTES
  for (const b of message.blocks) bytes += blockBytes(b.tokens.length, b.withKv, kvBytesPerToken)
  return bytes
}

/** @internal */
export function blockBytes(pageSize: number, withKv: boolean, kvBytesPerToken: number): number {
  return BLOCK_HEADER_BYTES + 4 * pageSize + (withKv ? pageSize * kvBytesPerToken : 0)
}
