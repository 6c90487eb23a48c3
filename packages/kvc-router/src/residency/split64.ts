/**
 * @internal
 * Splitting a 64-bit bigint into two unsigned 32-bit halves without allocating: assigning a
 * bigint to a `BigUint64Array` element wraps it modulo 2^64 (so signed and unsigned spellings of
 * the same bits agree) and the two `Uint32Array` views over the same memory give the halves.
 * `HI` / `LO` index those views on either endianness.
 */
const b64 = new BigUint64Array(1)
/** @internal 32-bit view over `b64`: read `w32[HI]` and `w32[LO]` after `b64[0] = hash`. */
export const w32 = new Uint32Array(b64.buffer)
const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1
/** @internal */
export const HI = littleEndian ? 1 : 0
/** @internal */
export const LO = littleEndian ? 0 : 1
export { b64 }
