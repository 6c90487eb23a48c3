/**
 * SHA-256 (FIPS 180-4), synchronous and dependency-free (no `node:crypto`, no `Buffer`), so the
 * same code runs in Node and in browsers. Message words are big-endian 32-bit integers; all
 * additions wrap with `| 0`. The message schedule and padding buffers are module-level scratch
 * arrays reused by every call (JavaScript is single-threaded and nothing here re-enters), so
 * hashing allocates only its 32-byte output.
 */

/** Round constants: the first 32 bits of the fractional parts of the cube roots of the first 64 primes. */
// biome-ignore format: table of constants
const K = Int32Array.of(
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
)

/** Initial hash value: the first 32 bits of the fractional parts of the square roots of the first 8 primes. */
// biome-ignore format: table of constants
const IV = Int32Array.of(
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
)

/** Message schedule, shared by every compression (filled by the caller, words 0..15). */
const W = new Int32Array(64)
/** Chaining state of the one-shot functions. */
const STATE = new Int32Array(8)
/** Tail block(s) of a one-shot message: the last partial block, the `0x80` byte, zeros and the length. */
const PAD = new Uint8Array(128)
const PAD_VIEW = new DataView(PAD.buffer)

/** Compresses the block held in `W[0..15]` into `h`. */
function compress(h: Int32Array): void {
  const w = W
  for (let i = 16; i < 64; i++) {
    const x = w[i - 15]!
    const y = w[i - 2]!
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10)
    w[i] = (w[i - 16]! + s0 + w[i - 7]! + s1) | 0
  }
  let a = h[0]!
  let b = h[1]!
  let c = h[2]!
  let d = h[3]!
  let e = h[4]!
  let f = h[5]!
  let g = h[6]!
  let hh = h[7]!
  for (let i = 0; i < 64; i++) {
    const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))
    const ch = (e & f) ^ (~e & g)
    const t1 = (hh + s1 + ch + K[i]! + w[i]!) | 0
    const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))
    const maj = (a & b) ^ (a & c) ^ (b & c)
    hh = g
    g = f
    f = e
    e = (d + t1) | 0
    d = c
    c = b
    b = a
    a = (t1 + s0 + maj) | 0
  }
  h[0] = (h[0]! + a) | 0
  h[1] = (h[1]! + b) | 0
  h[2] = (h[2]! + c) | 0
  h[3] = (h[3]! + d) | 0
  h[4] = (h[4]! + e) | 0
  h[5] = (h[5]! + f) | 0
  h[6] = (h[6]! + g) | 0
  h[7] = (h[7]! + hh) | 0
}

/** Compresses `blocks` consecutive 64-byte blocks read (big-endian) from `view` at byte `offset`. */
function compressView(h: Int32Array, view: DataView, offset: number, blocks: number): void {
  for (let b = 0; b < blocks; b++, offset += 64) {
    for (let i = 0; i < 16; i++) W[i] = view.getInt32(offset + 4 * i)
    compress(h)
  }
}

/**
 * Pads and compresses the final `tailLength` (< 64) message bytes, already copied to `PAD[0..]`, for a
 * message of `totalLength` bytes, then writes the digest to `out` at `outOffset`.
 */
function finish(
  h: Int32Array,
  tailLength: number,
  totalLength: number,
  out: Uint8Array,
  outOffset: number,
): void {
  PAD[tailLength] = 0x80
  const padded = tailLength < 56 ? 64 : 128
  PAD.fill(0, tailLength + 1, padded - 8)
  // Bit length as a 64-bit big-endian integer (exact for any length below 2^53 bits).
  PAD_VIEW.setUint32(padded - 8, Math.floor(totalLength / 0x20000000))
  PAD_VIEW.setUint32(padded - 4, (totalLength * 8) >>> 0)
  compressView(h, PAD_VIEW, 0, padded >>> 6)
  for (let i = 0; i < 8; i++) {
    const v = h[i]!
    const o = outOffset + 4 * i
    out[o] = v >>> 24
    out[o + 1] = v >>> 16
    out[o + 2] = v >>> 8
    out[o + 3] = v
  }
}

let cachedBuffer: ArrayBufferLike | undefined
let cachedView: DataView | undefined

/** A DataView over the whole of `buffer`, reused while consecutive calls hash the same buffer. */
function viewOf(buffer: ArrayBufferLike): DataView {
  if (buffer !== cachedBuffer || cachedView === undefined) {
    cachedView = new DataView(buffer)
    cachedBuffer = buffer
  }
  return cachedView
}

/**
 * SHA-256 digest (32 bytes) of `bytes`, computed synchronously in pure TypeScript.
 *
 * @example
 * ```ts
 * import { sha256 } from '@kvc/radix-cache'
 * const digest = sha256(new TextEncoder().encode('abc'))
 * console.log(digest[0].toString(16)) // 'ba' (ba7816bf...)
 * ```
 */
export function sha256(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(32)
  const length = bytes.length
  const blocks = length >>> 6
  const h = STATE
  h.set(IV)
  if (blocks > 0) compressView(h, viewOf(bytes.buffer), bytes.byteOffset, blocks)
  const tail = length - blocks * 64
  for (let i = 0, j = blocks * 64; i < tail; i++, j++) PAD[i] = bytes[j]!
  finish(h, tail, length, out, 0)
  return out
}

/**
 * SHA-256 digest of a message given as 32-bit words, each standing for 4 bytes in big-endian order
 * (the byte order SHA-256 itself reads): the message is `words[0..wordCount)`, `4 * wordCount` bytes
 * long. This is the allocation-free fast path of the block hashers, which lay out
 * `parent digest || tokens` directly as words. Writes the 32-byte digest to `out` at `outOffset`
 * and returns `out`.
 *
 * @example
 * ```ts
 * import { sha256Words } from '@kvc/radix-cache'
 * // The bytes 61 62 63 64 ('abcd') as one big-endian word.
 * const digest = sha256Words(Int32Array.of(0x61626364), 1, new Uint8Array(32))
 * ```
 */
export function sha256Words(
  words: Int32Array,
  wordCount: number,
  out: Uint8Array,
  outOffset = 0,
): Uint8Array {
  const h = STATE
  h.set(IV)
  const blocks = wordCount >>> 4
  for (let b = 0, o = 0; b < blocks; b++, o += 16) {
    for (let i = 0; i < 16; i++) W[i] = words[o + i]!
    compress(h)
  }
  const tailWords = wordCount - blocks * 16
  for (let i = 0, o = blocks * 16; i < tailWords; i++, o++) PAD_VIEW.setInt32(4 * i, words[o]!)
  finish(h, 4 * tailWords, 4 * wordCount, out, outOffset)
  return out
}

/**
 * Incremental SHA-256: feed the message in pieces with {@link Sha256.update}, then read the digest
 * with {@link Sha256.digest} (which does not consume the state, so more data may follow).
 *
 * @example
 * ```ts
 * import { Sha256 } from '@kvc/radix-cache'
 * const enc = new TextEncoder()
 * const digest = new Sha256().update(enc.encode('ab')).update(enc.encode('c')).digest()
 * // equal to sha256(enc.encode('abc'))
 * ```
 */
export class Sha256 {
  private readonly h = new Int32Array(8)
  private readonly block = new Uint8Array(64)
  private readonly blockView = new DataView(this.block.buffer)
  private blockLength = 0
  private totalLength = 0

  constructor() {
    this.h.set(IV)
  }

  /**
   * Appends `bytes` to the message and returns `this`.
   *
   * @example
   * ```ts
   * import { Sha256 } from '@kvc/radix-cache'
   * const hash = new Sha256()
   * hash.update(Uint8Array.of(1, 2)).update(Uint8Array.of(3))
   * ```
   */
  update(bytes: Uint8Array): this {
    const length = bytes.length
    let i = 0
    this.totalLength += length
    if (this.blockLength > 0) {
      const take = Math.min(64 - this.blockLength, length)
      for (; i < take; i++) this.block[this.blockLength + i] = bytes[i]!
      this.blockLength += take
      if (this.blockLength < 64) return this
      compressView(this.h, this.blockView, 0, 1)
      this.blockLength = 0
    }
    const blocks = (length - i) >>> 6
    if (blocks > 0) {
      compressView(this.h, viewOf(bytes.buffer), bytes.byteOffset + i, blocks)
      i += blocks * 64
    }
    for (; i < length; i++) this.block[this.blockLength++] = bytes[i]!
    return this
  }

  /**
   * The 32-byte digest of everything passed to {@link Sha256.update} so far.
   *
   * @example
   * ```ts
   * import { Sha256 } from '@kvc/radix-cache'
   * const digest = new Sha256().update(new Uint8Array(100)).digest() // 32 bytes
   * ```
   */
  digest(): Uint8Array {
    const out = new Uint8Array(32)
    const h = STATE
    h.set(this.h)
    PAD.set(this.block.subarray(0, this.blockLength))
    finish(h, this.blockLength, this.totalLength, out, 0)
    return out
  }

  /**
   * Forgets the message so far (back to the empty message) and returns `this`.
   *
   * @example
   * ```ts
   * import { Sha256 } from '@kvc/radix-cache'
   * const hash = new Sha256().update(Uint8Array.of(1))
   * hash.reset().digest() // digest of the empty message
   * ```
   */
  reset(): this {
    this.h.set(IV)
    this.blockLength = 0
    this.totalLength = 0
    return this
  }
}
