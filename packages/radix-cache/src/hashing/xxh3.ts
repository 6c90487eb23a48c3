/**
 * XXH3-64 (xxHash v0.8 "XXH3_64bits_withSeed"), implemented from the xxHash specification in pure
 * TypeScript: no native code, no `Buffer`, runs unchanged in browsers.
 *
 * 64-bit values are carried as two unsigned 32-bit halves (`hi`, `lo`) in plain numbers; only the
 * public entry point converts from and to `bigint`. Products use `Math.imul` for the low 32 bits
 * and a double-precision product for the high 32 bits (exact after rounding, see {@link mulHigh}).
 * Per-seed values (bit flips, seeded secret keys, the custom secret of long inputs) are derived
 * once when the seed changes and cached, so the hot paths do no seed arithmetic.
 *
 * Internal helpers return the low half of a 64-bit result and leave the high half in `RH`.
 */

const INV32 = 1 / 4294967296

// Primes of the specification, as hi/lo halves.
const P32_1 = 0x9e3779b1
const P32_2 = 0x85ebca77
const P32_3 = 0xc2b2ae3d
const P64_1H = 0x9e3779b1
const P64_1L = 0x85ebca87
const P64_2H = 0xc2b2ae3d
const P64_2L = 0x27d4eb4f
const P64_3H = 0x165667b1
const P64_3L = 0x9e3779f9
const P64_4H = 0x85ebca77
const P64_4L = 0xc2b2ae63
const P64_5H = 0x27d4eb2f
const P64_5L = 0x165667c5
const MX1H = 0x16566791
const MX1L = 0x9e3779f9
const MX2H = 0x9fb21c65
const MX2L = 0x1e98df25

/** The default 192-byte secret (`kSecret`) of the specification. */
// biome-ignore format: table of constants
const K_SECRET = Uint8Array.of(
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
  0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
  0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
  0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
  0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
  0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
  0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
  0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
  0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
  0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
  0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
  0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
)
const SECRET_SIZE = 192
const K_SECRET_VIEW = new DataView(K_SECRET.buffer)

/** Low / high 32 bits of the little-endian 64-bit word of the default secret at byte `offset`. */
function secretLo(offset: number): number {
  return K_SECRET_VIEW.getUint32(offset, true)
}
function secretHi(offset: number): number {
  return K_SECRET_VIEW.getUint32(offset + 4, true)
}

// Seed-independent secret combinations of the short-input paths.
const S1TO3 = (secretLo(0) ^ secretLo(4)) >>> 0 // 32-bit words at 0 and 4
const S4TO8H = (secretHi(8) ^ secretHi(16)) >>> 0
const S4TO8L = (secretLo(8) ^ secretLo(16)) >>> 0
const S9A_H = (secretHi(24) ^ secretHi(32)) >>> 0
const S9A_L = (secretLo(24) ^ secretLo(32)) >>> 0
const S9B_H = (secretHi(40) ^ secretHi(48)) >>> 0
const S9B_L = (secretLo(40) ^ secretLo(48)) >>> 0
const S0_H = (secretHi(56) ^ secretHi(64)) >>> 0
const S0_L = (secretLo(56) ^ secretLo(64)) >>> 0

/**
 * Byte offsets in the secret of the 16-byte keys used by `mix16B` for inputs of 17..240 bytes:
 * entries 0..7 at 16·i, entries 8..14 at 16·i + 3 (XXH3_MIDSIZE_STARTOFFSET), entry 15 at
 * 136 − 17 = 119 (XXH3_SECRET_SIZE_MIN − XXH3_MIDSIZE_LASTOFFSET).
 */
const MIX_OFFSETS = [0, 16, 32, 48, 64, 80, 96, 112, 3, 19, 35, 51, 67, 83, 99, 119]

/** High half of the last 64-bit result. */
let RH = 0

/**
 * High 32 bits of the 64-bit product of two unsigned 32-bit integers, given its low half `lo`.
 * `a * b` in doubles is off by at most 2^11 and so is the subtraction; divided by 2^32 the error
 * stays below 2^-20, so rounding gives the exact high half.
 */
function mulHigh(a: number, b: number, lo: number): number {
  return Math.round((a * b - lo) * INV32)
}

/** 64 × 64 → 64-bit product (mod 2^64). `al`, `bl` must be unsigned. */
function mul64(ah: number, al: number, bh: number, bl: number): number {
  const lo = Math.imul(al, bl) >>> 0
  RH = (mulHigh(al, bl, lo) + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0
  return lo
}

/** 64 × 64 → 128-bit product, folded: low 64 bits XOR high 64 bits (`XXH3_mul128_fold64`). */
function mul128Fold(ah: number, al: number, bh: number, bl: number): number {
  const p00l = Math.imul(al, bl) >>> 0
  const p00h = mulHigh(al, bl, p00l)
  const p01l = Math.imul(al, bh) >>> 0
  const p01h = mulHigh(al, bh, p01l)
  const p10l = Math.imul(ah, bl) >>> 0
  const p10h = mulHigh(ah, bl, p10l)
  const p11l = Math.imul(ah, bh) >>> 0
  const p11h = mulHigh(ah, bh, p11l)
  const w1 = p00h + p01l + p10l
  const w2 = p01h + p10h + p11l + Math.floor(w1 * INV32)
  const w3 = p11h + Math.floor(w2 * INV32)
  RH = (w1 ^ w3) >>> 0
  return (p00l ^ w2) >>> 0
}

/** XXH64's final mix (`XXH64_avalanche`). */
function avalanche64(hi: number, lo: number): number {
  lo = (lo ^ (hi >>> 1)) >>> 0
  lo = mul64(hi, lo, P64_2H, P64_2L)
  hi = RH
  lo = (lo ^ ((lo >>> 29) | (hi << 3))) >>> 0
  hi = (hi ^ (hi >>> 29)) >>> 0
  lo = mul64(hi, lo, P64_3H, P64_3L)
  hi = RH
  return (lo ^ hi) >>> 0
}

/** XXH3's final mix (`XXH3_avalanche`). */
function avalanche3(hi: number, lo: number): number {
  lo = (lo ^ (hi >>> 5)) >>> 0
  lo = mul64(hi, lo, MX1H, MX1L)
  return (lo ^ RH) >>> 0
}

/** `XXH3_rrmxmx`, the final mix of 4..8-byte inputs. */
function rrmxmx(hi: number, lo: number, len: number): number {
  const h = hi ^ ((lo << 17) | (hi >>> 15)) ^ ((hi << 24) | (lo >>> 8))
  const l = lo ^ ((hi << 17) | (lo >>> 15)) ^ ((lo << 24) | (hi >>> 8))
  lo = mul64(h >>> 0, l >>> 0, MX2H, MX2L)
  hi = RH
  lo = (lo ^ ((hi >>> 3) + len)) >>> 0
  lo = mul64(hi, lo, MX2H, MX2L)
  hi = RH
  RH = (hi ^ (hi >>> 28)) >>> 0
  return (lo ^ ((lo >>> 28) | (hi << 4))) >>> 0
}

function bswap32(x: number): number {
  return ((x << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24)) >>> 0
}

// ---------------------------------------------------------------------------------------------
// Per-seed state
// ---------------------------------------------------------------------------------------------

let seedHi = 0
let seedLo = 0
let seedValid = false
let bf13H = 0
let bf13L = 0
let bf48H = 0
let bf48L = 0
let bf9aH = 0
let bf9aL = 0
let bf9bH = 0
let bf9bL = 0
/** Seeded mix16B keys: per entry of {@link MIX_OFFSETS}, `(lo, hi)` of `key0 + seed` then of `key1 - seed`. */
const MIX_KEYS = new Uint32Array(64)
/**
 * Secret of long inputs for the current seed, as little-endian 32-bit words: `[0, 48)` the whole
 * 192-byte secret, `[48, 64)` the 64 bytes at 121 (last stripe), `[64, 80)` the 64 bytes at 11
 * (merge). Derived lazily: the default secret for seed 0, else `XXH3_initCustomSecret`.
 */
const LONG_SECRET = new Uint32Array(80)
const DEFAULT_LONG_SECRET = new Uint32Array(80)
const CUSTOM_SECRET = new Uint8Array(SECRET_SIZE)
const CUSTOM_SECRET_VIEW = new DataView(CUSTOM_SECRET.buffer)
let customSecretReady = false

/** Fills `words` (see {@link LONG_SECRET}) from the 192-byte secret in `view`. */
function loadLongSecret(view: DataView, words: Uint32Array): void {
  for (let i = 0; i < 48; i++) words[i] = view.getUint32(4 * i, true)
  for (let i = 0; i < 16; i++) {
    words[48 + i] = view.getUint32(SECRET_SIZE - 64 - 7 + 4 * i, true)
    words[64 + i] = view.getUint32(11 + 4 * i, true)
  }
}
loadLongSecret(K_SECRET_VIEW, DEFAULT_LONG_SECRET)

/** 64-bit addition `(ah, al) + (bh, bl)`. */
function add64(ah: number, al: number, bh: number, bl: number): number {
  const lo = al + bl
  RH = (ah + bh + (lo > 0xffffffff ? 1 : 0)) >>> 0
  return lo >>> 0
}

/** 64-bit subtraction `(ah, al) − (bh, bl)`. */
function sub64(ah: number, al: number, bh: number, bl: number): number {
  const lo = al - bl
  RH = (ah - bh - (lo < 0 ? 1 : 0)) >>> 0
  return lo >>> 0
}

/** Makes `(hi, lo)` the current seed, deriving its cached values if it changed. */
function useSeed(hi: number, lo: number): void {
  if (seedValid && hi === seedHi && lo === seedLo) return
  seedHi = hi
  seedLo = lo
  seedValid = true
  customSecretReady = false
  bf13L = add64(0, S1TO3, hi, lo)
  bf13H = RH
  // 4..8 bytes: seed ^= (u64)bswap32((u32)seed) << 32, bitflip = secret combination - seed.
  bf48L = sub64(S4TO8H, S4TO8L, (hi ^ bswap32(lo)) >>> 0, lo)
  bf48H = RH
  bf9aL = add64(S9A_H, S9A_L, hi, lo)
  bf9aH = RH
  bf9bL = sub64(S9B_H, S9B_L, hi, lo)
  bf9bH = RH
  for (let e = 0; e < 16; e++) {
    const o = MIX_OFFSETS[e]!
    const k = 4 * e
    MIX_KEYS[k] = add64(secretHi(o), secretLo(o), hi, lo)
    MIX_KEYS[k + 1] = RH
    MIX_KEYS[k + 2] = sub64(secretHi(o + 8), secretLo(o + 8), hi, lo)
    MIX_KEYS[k + 3] = RH
  }
}

/** The secret of inputs over 240 bytes: the default one for seed 0, else `XXH3_initCustomSecret`. */
function longSecret(): Uint32Array {
  if (seedHi === 0 && seedLo === 0) return DEFAULT_LONG_SECRET
  if (!customSecretReady) {
    for (let o = 0; o < SECRET_SIZE; o += 16) {
      CUSTOM_SECRET_VIEW.setUint32(o, add64(secretHi(o), secretLo(o), seedHi, seedLo), true)
      CUSTOM_SECRET_VIEW.setUint32(o + 4, RH, true)
      CUSTOM_SECRET_VIEW.setUint32(o + 8, sub64(secretHi(o + 8), secretLo(o + 8), seedHi, seedLo), true)
      CUSTOM_SECRET_VIEW.setUint32(o + 12, RH, true)
    }
    loadLongSecret(CUSTOM_SECRET_VIEW, LONG_SECRET)
    customSecretReady = true
  }
  return LONG_SECRET
}

// ---------------------------------------------------------------------------------------------
// Length classes
// ---------------------------------------------------------------------------------------------

function len1to3(v: DataView, p: number, len: number): number {
  const c1 = v.getUint8(p)
  const c2 = v.getUint8(p + (len >>> 1))
  const c3 = v.getUint8(p + len - 1)
  const combined = (c1 << 16) | (c2 << 24) | c3 | (len << 8)
  return avalanche64(bf13H, (combined ^ bf13L) >>> 0)
}

function len4to8(v: DataView, p: number, len: number): number {
  const in1 = v.getUint32(p, true)
  const in2 = v.getUint32(p + len - 4, true)
  // input64 = in2 + (in1 << 32)
  return rrmxmx((in1 ^ bf48H) >>> 0, (in2 ^ bf48L) >>> 0, len)
}

/** Final step of 9..16-byte inputs, given the two keyed 64-bit input words. */
function finish9to16(len: number, lh: number, ll: number, hh: number, hl: number): number {
  const fl = mul128Fold(lh, ll, hh, hl)
  // acc = len + bswap64(inputLo) + inputHi + fold
  const lo = len + bswap32(lh) + hl + fl
  const hi = (bswap32(ll) + hh + RH + Math.floor(lo * INV32)) >>> 0
  return avalanche3(hi, lo >>> 0)
}

function len9to16(v: DataView, p: number, len: number): number {
  const q = p + len - 8
  return finish9to16(
    len,
    (v.getUint32(p + 4, true) ^ bf9aH) >>> 0,
    (v.getUint32(p, true) ^ bf9aL) >>> 0,
    (v.getUint32(q + 4, true) ^ bf9bH) >>> 0,
    (v.getUint32(q, true) ^ bf9bL) >>> 0,
  )
}

/** `XXH3_mix16B` of the 16 input bytes at `p` with the seeded key entry `e` of {@link MIX_KEYS}. */
function mix16(v: DataView, p: number, e: number): number {
  const k = 4 * e
  return mul128Fold(
    (v.getUint32(p + 4, true) ^ MIX_KEYS[k + 1]!) >>> 0,
    (v.getUint32(p, true) ^ MIX_KEYS[k]!) >>> 0,
    (v.getUint32(p + 12, true) ^ MIX_KEYS[k + 3]!) >>> 0,
    (v.getUint32(p + 8, true) ^ MIX_KEYS[k + 2]!) >>> 0,
  )
}

function len17to128(v: DataView, p: number, len: number): number {
  let sl = mul64(0, len, P64_1H, P64_1L)
  let sh = RH
  // Sums of up to 9 unsigned 32-bit halves stay exact in doubles; carries are folded at the end.
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        sl += mix16(v, p + 48, 6)
        sh += RH
        sl += mix16(v, p + len - 64, 7)
        sh += RH
      }
      sl += mix16(v, p + 32, 4)
      sh += RH
      sl += mix16(v, p + len - 48, 5)
      sh += RH
    }
    sl += mix16(v, p + 16, 2)
    sh += RH
    sl += mix16(v, p + len - 32, 3)
    sh += RH
  }
  sl += mix16(v, p, 0)
  sh += RH
  sl += mix16(v, p + len - 16, 1)
  sh += RH
  return avalanche3((sh + Math.floor(sl * INV32)) >>> 0, sl >>> 0)
}

function len129to240(v: DataView, p: number, len: number): number {
  let sl = mul64(0, len, P64_1H, P64_1L)
  let sh = RH
  for (let i = 0; i < 8; i++) {
    sl += mix16(v, p + 16 * i, i)
    sh += RH
  }
  const al = avalanche3((sh + Math.floor(sl * INV32)) >>> 0, sl >>> 0)
  const ah = RH
  let el = mix16(v, p + len - 16, 15)
  let eh = RH
  const rounds = len >>> 4
  for (let i = 8; i < rounds; i++) {
    el += mix16(v, p + 16 * i, i)
    eh += RH
  }
  el += al
  eh += ah
  return avalanche3((eh + Math.floor(el * INV32)) >>> 0, el >>> 0)
}

/** The 8 accumulators of long inputs, as `(lo, hi)` pairs. */
const ACC = new Float64Array(16)

/** `XXH3_accumulate_512` of the 64-byte stripe at `p` with the secret words from index `s`. */
function accumulate512(v: DataView, p: number, secret: Uint32Array, s: number): void {
  const acc = ACC
  for (let j = 0; j < 16; j += 4) {
    // Lanes j/2 and j/2 + 1: each adds the other's input word (acc[i ^ 1] += data) and its own
    // 32 × 32 → 64 product of the keyed word's halves.
    const d0l = v.getUint32(p + 4 * j, true)
    const d0h = v.getUint32(p + 4 * j + 4, true)
    const d1l = v.getUint32(p + 4 * j + 8, true)
    const d1h = v.getUint32(p + 4 * j + 12, true)
    const k0l = (d0l ^ secret[s + j]!) >>> 0
    const k0h = (d0h ^ secret[s + j + 1]!) >>> 0
    const k1l = (d1l ^ secret[s + j + 2]!) >>> 0
    const k1h = (d1h ^ secret[s + j + 3]!) >>> 0
    const m0l = Math.imul(k0l, k0h) >>> 0
    const m0h = mulHigh(k0l, k0h, m0l)
    const m1l = Math.imul(k1l, k1h) >>> 0
    const m1h = mulHigh(k1l, k1h, m1l)
    const s0 = acc[j]! + d1l + m0l
    acc[j] = s0 >>> 0
    acc[j + 1] = (acc[j + 1]! + d1h + m0h + Math.floor(s0 * INV32)) >>> 0
    const s1 = acc[j + 2]! + d0l + m1l
    acc[j + 2] = s1 >>> 0
    acc[j + 3] = (acc[j + 3]! + d0h + m1h + Math.floor(s1 * INV32)) >>> 0
  }
}

/** `XXH3_scrambleAcc` with the last 64 bytes of the secret. */
function scramble(secret: Uint32Array): void {
  const acc = ACC
  for (let j = 0; j < 16; j += 2) {
    // Secret bytes 128 + 4j (words 32 + j).
    const hi = acc[j + 1]!
    const lo = (acc[j]! ^ (hi >>> 15) ^ secret[32 + j]!) >>> 0
    const h = (hi ^ secret[32 + j + 1]!) >>> 0
    const nl = Math.imul(lo, P32_1) >>> 0
    acc[j] = nl
    acc[j + 1] = (mulHigh(lo, P32_1, nl) + Math.imul(h, P32_1)) >>> 0
  }
}

function hashLong(v: DataView, p: number, len: number): number {
  const secret = longSecret()
  const acc = ACC
  acc[0] = P32_3
  acc[1] = 0
  acc[2] = P64_1L
  acc[3] = P64_1H
  acc[4] = P64_2L
  acc[5] = P64_2H
  acc[6] = P64_3L
  acc[7] = P64_3H
  acc[8] = P64_4L
  acc[9] = P64_4H
  acc[10] = P32_2
  acc[11] = 0
  acc[12] = P64_5L
  acc[13] = P64_5H
  acc[14] = P32_1
  acc[15] = 0
  // (192 - 64) / 8 = 16 stripes of 64 bytes per 1024-byte block, then a scramble.
  const blocks = Math.floor((len - 1) / 1024)
  let q = p
  for (let b = 0; b < blocks; b++) {
    for (let s = 0; s < 16; s++, q += 64) accumulate512(v, q, secret, 2 * s)
    scramble(secret)
  }
  const stripes = ((len - 1 - 1024 * blocks) / 64) | 0
  for (let s = 0; s < stripes; s++, q += 64) accumulate512(v, q, secret, 2 * s)
  // Last stripe: the final 64 input bytes, secret at 192 - 64 - 7 (XXH_SECRET_LASTACC_START).
  accumulate512(v, p + len - 64, secret, 48)
  // Merge, secret from byte 11 (XXH_SECRET_MERGEACCS_START).
  let sl = mul64(0, len, P64_1H, P64_1L)
  let sh = RH
  for (let i = 0; i < 4; i++) {
    const j = 4 * i
    sl += mul128Fold(
      (acc[j + 1]! ^ secret[64 + j + 1]!) >>> 0,
      (acc[j]! ^ secret[64 + j]!) >>> 0,
      (acc[j + 3]! ^ secret[64 + j + 3]!) >>> 0,
      (acc[j + 2]! ^ secret[64 + j + 2]!) >>> 0,
    )
    sh += RH
  }
  return avalanche3((sh + Math.floor(sl * INV32)) >>> 0, sl >>> 0)
}

/** Hashes `len` bytes of `v` from byte `p` with the current seed; returns lo, leaves hi in `RH`. */
function hashView(v: DataView, p: number, len: number): number {
  if (len <= 16) {
    if (len > 8) return len9to16(v, p, len)
    if (len >= 4) return len4to8(v, p, len)
    if (len > 0) return len1to3(v, p, len)
    return avalanche64((seedHi ^ S0_H) >>> 0, (seedLo ^ S0_L) >>> 0)
  }
  if (len <= 128) return len17to128(v, p, len)
  if (len <= 240) return len129to240(v, p, len)
  return hashLong(v, p, len)
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

let cachedBuffer: ArrayBufferLike | undefined
let cachedView: DataView | undefined

/**
 * A DataView over the whole of `buffer`, reused while consecutive calls read the same buffer
 * (internal helper of the block hashers; it keeps the last buffer seen reachable).
 *
 * @internal
 * @example
 * ```ts
 * const tokens = Uint32Array.of(1, 2, 3)
 * const view = viewOf(tokens.buffer) // read at tokens.byteOffset + 4 * i
 * ```
 */
export function viewOf(buffer: ArrayBufferLike): DataView {
  if (buffer !== cachedBuffer || cachedView === undefined) {
    cachedView = new DataView(buffer)
    cachedBuffer = buffer
  }
  return cachedView
}

/**
 * XXH3-64 of `length` bytes of `view` starting at byte `offset`, seeded with the 64-bit seed
 * `(seedHi, seedLo)` (unsigned 32-bit halves). Writes the hash into `out` as `[lo, hi]`
 * (internal allocation-free entry point of the block hashers).
 *
 * @internal
 * @example
 * ```ts
 * const bytes = Uint8Array.of(1, 2, 3)
 * const out = new Uint32Array(2)
 * xxh3Into(new DataView(bytes.buffer), 0, 3, 0, 1337, out) // out = [lo, hi] of xxh3_64(bytes, 1337n)
 * ```
 */
export function xxh3Into(
  view: DataView,
  offset: number,
  length: number,
  seedHi: number,
  seedLo: number,
  out: Uint32Array,
): void {
  useSeed(seedHi >>> 0, seedLo >>> 0)
  out[0] = hashView(view, offset, length)
  out[1] = RH
}

/**
 * XXH3-64 of the 16-byte input `le64(a) || le64(b)` (Dynamo's sequence-hash step), with the words
 * and the seed given as unsigned 32-bit halves. Writes the hash into `out` as `[lo, hi]`.
 *
 * @internal
 * @example
 * ```ts
 * const out = new Uint32Array(2)
 * xxh3PairInto(0, 1, 0, 2, 0, 1337, out) // xxh3_64(le64(1n) || le64(2n), 1337n)
 * ```
 */
export function xxh3PairInto(
  aHi: number,
  aLo: number,
  bHi: number,
  bLo: number,
  seedHi: number,
  seedLo: number,
  out: Uint32Array,
): void {
  useSeed(seedHi >>> 0, seedLo >>> 0)
  out[0] = finish9to16(16, (aHi ^ bf9aH) >>> 0, (aLo ^ bf9aL) >>> 0, (bHi ^ bf9bH) >>> 0, (bLo ^ bf9bL) >>> 0)
  out[1] = RH
}

const IO_BYTES = new Uint8Array(8)
const IO_VIEW = new DataView(IO_BYTES.buffer)
let lastSeed: bigint | undefined
let lastSeedHi = 0
let lastSeedLo = 0

/**
 * Splits a seed into unsigned 32-bit halves `[hi, lo]` (the seed is taken modulo 2^64, so
 * negative seeds wrap like a C `uint64_t`).
 *
 * @internal
 * @example
 * ```ts
 * splitSeed(0x1_0000_0002n) // [1, 2]
 * ```
 */
export function splitSeed(seed: bigint): [hi: number, lo: number] {
  IO_VIEW.setBigUint64(0, seed, true)
  return [IO_VIEW.getUint32(4, true), IO_VIEW.getUint32(0, true)]
}

/**
 * The unsigned 64-bit integer with 32-bit halves `hi`, `lo` as a `bigint`.
 *
 * @internal
 * @example
 * ```ts
 * joinU64(1, 2) // 0x1_0000_0002n
 * ```
 */
export function joinU64(hi: number, lo: number): bigint {
  IO_VIEW.setUint32(0, lo, true)
  IO_VIEW.setUint32(4, hi, true)
  return IO_VIEW.getBigUint64(0, true)
}

/**
 * XXH3-64 of `bytes` with a 64-bit `seed` (xxHash's `XXH3_64bits_withSeed`), as an unsigned
 * `bigint`. Every input length is supported (the specification's 0, 1–3, 4–8, 9–16, 17–128,
 * 129–240 and long-input paths; long inputs with a non-zero seed use the seeded custom secret).
 * The seed is taken modulo 2^64.
 *
 * @example
 * ```ts
 * import { xxh3_64 } from '@kvc/radix-cache'
 * const h = xxh3_64(new TextEncoder().encode('abc'), 0n) // 0x78af5f94892f3950n
 * const seeded = xxh3_64(Uint8Array.of(1, 0, 0, 0), 1337n)
 * ```
 */
export function xxh3_64(bytes: Uint8Array, seed: bigint = 0n): bigint {
  if (seed !== lastSeed) {
    IO_VIEW.setBigUint64(0, seed, true)
    lastSeedLo = IO_VIEW.getUint32(0, true)
    lastSeedHi = IO_VIEW.getUint32(4, true)
    lastSeed = seed
  }
  useSeed(lastSeedHi, lastSeedLo)
  const lo = hashView(viewOf(bytes.buffer), bytes.byteOffset, bytes.length)
  return joinU64(RH, lo)
}
