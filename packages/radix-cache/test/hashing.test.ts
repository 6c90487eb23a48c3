import { createHash } from 'node:crypto'
import { xxh3 } from '@node-rs/xxhash'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type BlockHasher,
  computeBlockHashes,
  type KvEvent,
  RadixCache,
  RadixCacheError,
  sglangBlockHasher,
  xxh3BlockHasher,
} from '../src/index.js'
import { Sha256, sha256, sha256Words } from '../src/hashing/sha256.js'
import { xxh3_64 } from '../src/hashing/xxh3.js'
import { localBlockHash } from '../src/hashing/xxh3BlockHasher.js'

const U32 = 2 ** 32

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex')
const nodeSha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex')
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s)

/** Hashes every full page and returns `[digest hex, blockId]` per page. */
function chain(hasher: BlockHasher, tokens: number[], pageSize: number, extraKey?: string) {
  const t = Uint32Array.from(tokens)
  const out: [string, bigint][] = []
  let parent: Uint8Array | undefined
  for (let p = 0; p + pageSize <= t.length; p += pageSize) {
    parent = hasher.hashBlock(parent, t.subarray(p, p + pageSize), extraKey)
    out.push([hex(parent), hasher.blockId(parent)])
  }
  return out
}

function expectRadixError(fn: () => unknown, code: string, value: unknown): void {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(RadixCacheError)
    expect((err as RadixCacheError).code).toBe(code)
    expect((err as RadixCacheError).value).toStrictEqual(value)
    return
  }
  expect.unreachable('expected a RadixCacheError')
}

// -----------------------------------------------------------------------------------------------
// SHA-256
// -----------------------------------------------------------------------------------------------

describe('sha256', () => {
  it('matches the FIPS 180-4 examples', () => {
    expect(hex(sha256(new Uint8Array(0)))).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    )
    expect(hex(sha256(utf8('abc')))).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
    expect(hex(sha256(utf8('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq')))).toBe(
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    )
  })

  it('matches node:crypto at every padding boundary', () => {
    for (let len = 0; len <= 300; len++) {
      const bytes = Uint8Array.from({ length: len }, (_, i) => (i * 37 + len) & 0xff)
      expect(hex(sha256(bytes))).toBe(nodeSha256(bytes))
    }
  })

  it('matches node:crypto on random inputs (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 3000 }), (bytes) => {
        expect(hex(sha256(bytes))).toBe(nodeSha256(bytes))
      }),
      { numRuns: 300 },
    )
  })

  it('hashes subarrays (non-zero byteOffset) correctly', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), fc.nat(64), (bytes, cut) => {
        const start = Math.min(cut, bytes.length)
        const view = bytes.subarray(start)
        expect(hex(sha256(view))).toBe(nodeSha256(view))
      }),
      { numRuns: 200 },
    )
  })

  it('incremental Sha256 equals one-shot for any split (property)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 1000 }),
        fc.array(fc.nat(1000), { maxLength: 6 }),
        (bytes, cuts) => {
          const points = [...new Set(cuts.map((c) => Math.min(c, bytes.length)))].sort((a, b) => a - b)
          const h = new Sha256()
          let prev = 0
          for (const p of [...points, bytes.length]) {
            h.update(bytes.subarray(prev, p))
            prev = p
          }
          const expected = nodeSha256(bytes)
          expect(hex(h.digest())).toBe(expected)
          // digest() does not consume the state
          expect(hex(h.digest())).toBe(expected)
          expect(hex(h.reset().digest())).toBe(nodeSha256(new Uint8Array(0)))
        },
      ),
      { numRuns: 200 },
    )
  })

  it('sha256Words hashes big-endian words', () => {
    const words = Int32Array.of(0x61626364, -1, 0)
    const bytes = Uint8Array.of(0x61, 0x62, 0x63, 0x64, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)
    const out = new Uint8Array(40)
    expect(sha256Words(words, 3, out, 8)).toBe(out)
    expect(hex(out.subarray(8))).toBe(nodeSha256(bytes))
    expect(hex(sha256Words(words, 1, new Uint8Array(32)))).toBe(nodeSha256(utf8('abcd')))
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { maxLength: 100 }), (ws) => {
        const w = Int32Array.from(ws)
        const be = new Uint8Array(4 * ws.length)
        const dv = new DataView(be.buffer)
        for (let i = 0; i < ws.length; i++) dv.setInt32(4 * i, ws[i]!)
        expect(hex(sha256Words(w, ws.length, new Uint8Array(32)))).toBe(nodeSha256(be))
      }),
      { numRuns: 100 },
    )
  })
})

// -----------------------------------------------------------------------------------------------
// SGLang block hasher (golden vectors from python3 hashlib, reproducing SGLang's get_hash_str and
// hash_str_to_int64 exactly; see the script in the comment below).
// -----------------------------------------------------------------------------------------------
//
//   def get_hash_str(token_ids, prior_hash=None):
//       hasher = hashlib.sha256()
//       if prior_hash: hasher.update(bytes.fromhex(prior_hash))
//       for t in token_ids: hasher.update(t.to_bytes(4, byteorder="little", signed=False))
//       return hasher.hexdigest()
//   def hash_str_to_int64(h):
//       v = int(h[:16], 16)
//       return v - 2**64 if v >= 2**63 else v
//   # chain: prior = get_hash_str(page, prior) for each full page, prior = None for the first

const TOKENS_P1 = [0, 1, U32 - 1, U32 - 2, 123456789]
const GOLDEN_P1: [string, bigint][] = [
  ['df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119', -2360060374177730597n],
  ['53f69ec6a1c7effbd864307243e74feaafa8b26bbdc9d066fe8b22ed64a010bb', 6050197725373788155n],
  ['fe6d1e3db87cdc1f39e33917dab889bbfa0c46666a57e944d55110fc568d7c04', -113401165177365473n],
  ['1010fe059b8a8bab1edb7d9fee36b159f297e0d334557fdc781ecd6d246771c3', 1157704404272057259n],
  ['c576b1ab818f7cd6790fae5460a069a7ee295597a3f9a036d6a58e51f98e5c1c', -4217988650814702378n],
]

/** python: t = [(i * 2654435761 + 12345) % 2**32 for i in range(53)]; t[5] = 2**32-1; t[20] = 2**32-2; t[33] = 2**31 */
const TOKENS_P16 = Array.from({ length: 53 }, (_, i) => (i * 2654435761 + 12345) % U32)
TOKENS_P16[5] = U32 - 1
TOKENS_P16[20] = U32 - 2
TOKENS_P16[33] = 2 ** 31
const GOLDEN_P16: [string, bigint][] = [
  ['13b87b8495d5a2735167ef328824144488fc172bd01f775f3ebf3190b8e149c7', 1421021491815096947n],
  ['303489281012d7cdef879927a7d32414c07006e1156158ab0b8130a10215bff0', 3473552017770862541n],
  ['94900748fee8bb424f73c1bb4694b7d10da2040832fff695010c97396445e15d', -7741679749354177726n],
]

/** python: t = [(i * 40503 + 7) % 2**32 for i in range(128)]; t[0] = 2**32-1; t[127] = 2**32-3 */
const TOKENS_P64 = Array.from({ length: 128 }, (_, i) => (i * 40503 + 7) % U32)
TOKENS_P64[0] = U32 - 1
TOKENS_P64[127] = U32 - 3
const GOLDEN_P64: [string, bigint][] = [
  ['bac73cdc0e6b4e78910403c599d7ea89a8317cc0fbdb5808e388fe4736f98115', -4987951146457149832n],
  ['26d10c94dc4f67d713f3fc1861a26ec672261650b2f79f3b37a59e1071c734be', 2797030677064673239n],
]

/** Pages [1..4], [5..8], page size 4, upstream (no namespace). */
const GOLDEN_PLAIN_1_8: [string, bigint][] = [
  ['cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72', -3488128144981237669n],
  ['4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6', 5674439469042975057n],
]

/** Same pages with the first prior = sha256(b"kvc-ns:lora-a") (our namespaceInSeed extension). */
const GOLDEN_NS_1_8: [string, bigint][] = [
  ['479fab8c96ff6ab1ec9cdf2eb6e196203f427413e333a3b6a05272432d93c705', 5161032318306970289n],
  ['900da3e06951acb6058324711d6937999b21b76bc3d8369bd37ee6bbc1f95026', -8066611173315728202n],
]

describe('sglangBlockHasher', () => {
  it('reproduces SGLang get_hash_str / hash_str_to_int64 (page sizes 1, 16, 64)', () => {
    const h = sglangBlockHasher()
    expect(h.name).toBe('sglang-sha256')
    expect(chain(h, TOKENS_P1, 1)).toStrictEqual(GOLDEN_P1)
    expect(chain(h, TOKENS_P16, 16)).toStrictEqual(GOLDEN_P16)
    expect(chain(h, TOKENS_P64, 64)).toStrictEqual(GOLDEN_P64)
    expect(computeBlockHashes(h, TOKENS_P16, 16)).toStrictEqual(GOLDEN_P16.map(([, id]) => id))
    expect(computeBlockHashes(h, Uint32Array.from(TOKENS_P64), 64)).toStrictEqual(
      GOLDEN_P64.map(([, id]) => id),
    )
    expect(computeBlockHashes(h, TOKENS_P1, 1)).toStrictEqual(GOLDEN_P1.map(([, id]) => id))
  })

  it('blockId wraps to signed int64 (both signs appear)', () => {
    const ids = GOLDEN_P1.map(([, id]) => id)
    expect(ids.some((id) => id < 0n)).toBe(true)
    expect(ids.some((id) => id > 0n)).toBe(true)
    for (const id of ids) expect(BigInt.asIntN(64, id)).toBe(id)
  })

  it('ignores extraKey by default (upstream behaviour)', () => {
    const h = sglangBlockHasher()
    expect(chain(h, [1, 2, 3, 4, 5, 6, 7, 8], 4, 'lora-a')).toStrictEqual(GOLDEN_PLAIN_1_8)
    expect(chain(h, [1, 2, 3, 4, 5, 6, 7, 8], 4)).toStrictEqual(GOLDEN_PLAIN_1_8)
  })

  it('namespaceInSeed seeds the first page with sha256("kvc-ns:" + extraKey)', () => {
    const h = sglangBlockHasher({ namespaceInSeed: true })
    expect(chain(h, [1, 2, 3, 4, 5, 6, 7, 8], 4, 'lora-a')).toStrictEqual(GOLDEN_NS_1_8)
    // No or empty namespace: identical to upstream.
    expect(chain(h, [1, 2, 3, 4, 5, 6, 7, 8], 4)).toStrictEqual(GOLDEN_PLAIN_1_8)
    expect(chain(h, [1, 2, 3, 4, 5, 6, 7, 8], 4, '')).toStrictEqual(GOLDEN_PLAIN_1_8)
    // Alternating namespaces (memo invalidation).
    expect(chain(h, [1, 2, 3, 4], 4, 'lora-b')[0]).not.toStrictEqual(GOLDEN_NS_1_8[0])
    expect(chain(h, [1, 2, 3, 4, 5, 6, 7, 8], 4, 'lora-a')).toStrictEqual(GOLDEN_NS_1_8)
  })

  it('matches a node:crypto reference chain for random pages (property)', () => {
    const h = sglangBlockHasher()
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 70 }),
        fc.array(fc.integer({ min: 0, max: U32 - 1 }), { maxLength: 300 }),
        (pageSize, tokens) => {
          let prior: Buffer | undefined
          const expected: bigint[] = []
          for (let p = 0; p + pageSize <= tokens.length; p += pageSize) {
            const hash = createHash('sha256')
            if (prior) hash.update(prior)
            hash.update(new Uint8Array(Uint32Array.from(tokens.slice(p, p + pageSize)).buffer))
            prior = hash.digest()
            expected.push(prior.readBigInt64BE(0))
          }
          expect(computeBlockHashes(h, tokens, pageSize)).toStrictEqual(expected)
        },
      ),
      { numRuns: 200 },
    )
  })

  it('rejects digests of the wrong length', () => {
    const h = sglangBlockHasher()
    expectRadixError(
      () => h.hashBlock(new Uint8Array(16), Uint32Array.of(1), undefined),
      'INVALID_OPTION',
      16,
    )
    expectRadixError(() => h.blockId(new Uint8Array(8)), 'INVALID_OPTION', 8)
  })
})

// -----------------------------------------------------------------------------------------------
// XXH3-64
// -----------------------------------------------------------------------------------------------

const MAX_U64 = 2n ** 64n - 1n

/** Literal vectors from @node-rs/xxhash (xxh3.xxh64), input byte i = (i * 31 + 7) & 0xff, seeds 0, 1337, 2^64-1. */
const XXH3_VECTORS: [number, [bigint, bigint, bigint]][] = [
  [0, [0x2d06800538d394c2n, 0xd1f3e77444430ab9n, 0x4c093276ae47a555n]],
  [1, [0x4c5cca45d0f4811fn, 0xcb2872d8fd455c72n, 0x36ce6de3f8ce2550n]],
  [2, [0xa7e250c97710ff27n, 0xe46ccb65d29ac9abn, 0x21fec988cc6cab28n]],
  [3, [0x15f7093b173d005cn, 0xd1feebb19bc75eefn, 0xdc48f60472a5945bn]],
  [4, [0xdca012f95811b6b9n, 0x700cc6826a5db0een, 0xacf1f1587e5776f2n]],
  [7, [0x7561869c23da3c1bn, 0xdeb93f229997ffe1n, 0x8d35144e380fa70an]],
  [8, [0xdec6a9a43575982en, 0x6f9b12fbf21b1ed1n, 0x741c19391db323dan]],
  [9, [0xcbe393399f17ffbdn, 0x361bfb4042ed4e1en, 0x5dd664a79a86b534n]],
  [15, [0x545e19990471dc37n, 0x921e83ed0bfe19c3n, 0x28c895e4a08d1c59n]],
  [16, [0x7e484c18d74895d0n, 0xce8caf12e7c0d894n, 0x1a57687741b7a2d0n]],
  [17, [0x208bde5ee2bed407n, 0x8cf7f897d294c873n, 0x5d842dea22207c52n]],
  [32, [0x3df0ac5255d1446n, 0x8ae9e8ad41e255e4n, 0xb4614a68c1483b97n]],
  [33, [0x199a362122d71f46n, 0x193f58c41fa5172bn, 0x74cc636becb57b93n]],
  [64, [0xdd30702ab46b3745n, 0xc5708aa9e4e63a96n, 0x2a06f83283f9785an]],
  [65, [0xfab36b851b94ce20n, 0x4be00be215ecbed5n, 0xf6a9791f1be6c1efn]],
  [96, [0xd245cd2541582982n, 0xaed1c070c97ebc2cn, 0xdcf798f9a84a49a9n]],
  [97, [0x60e3e1d0d43785b3n, 0x15be15f6f2f9c761n, 0x61d64ea4dbdd5a40n]],
  [128, [0xf92b70eaa21a6288n, 0x96732b1b44137ed6n, 0xe9b23ee2b23d4c61n]],
  [129, [0xf8f76713f2bb60fan, 0x51a53b34690890b2n, 0xbd1a12cf26346841n]],
  [200, [0x12fdb864685f344dn, 0x6636ed8a67e44e08n, 0x3f8e2e02a73d8205n]],
  [240, [0xccc7375172c41f03n, 0xe59320de74094615n, 0xf4782c461925e993n]],
  [241, [0xb3b630948ce4a00n, 0x7cc5324f5ce83674n, 0xccb19c329f32dff4n]],
  [512, [0xefc2e52d1c2ffbaan, 0x2da6dd9307409724n, 0x52f515f9a4f1d677n]],
  [1024, [0x23bc880ebf0d29c6n, 0x6ecf6516c6c1fc2bn, 0xd2c14611469ea1en]],
  [1025, [0xc09fdfbc398c7d82n, 0xfecb5594e9e4924n, 0x74e4ffbb27ee59adn]],
  [2048, [0x19f6f9c987331373n, 0x1921684049253244n, 0xd68e121fd74a4b8bn]],
  [4099, [0x8289fd6cadd0c49en, 0xcda824a5582de614n, 0xbd13588a3fff3d1fn]],
]

const seedArb = fc.oneof(
  fc.bigInt({ min: 0n, max: MAX_U64 }),
  fc.constantFrom(0n, 1337n, MAX_U64, 2n ** 32n - 1n, 2n ** 32n, 2n ** 63n),
)

describe('xxh3_64', () => {
  it('matches literal vectors for every length class', () => {
    for (const [len, expected] of XXH3_VECTORS) {
      const bytes = Uint8Array.from({ length: len }, (_, i) => (i * 31 + 7) & 0xff)
      expect([xxh3_64(bytes, 0n), xxh3_64(bytes, 1337n), xxh3_64(bytes, MAX_U64)]).toStrictEqual(expected)
    }
    expect(xxh3_64(utf8('abc'), 0n)).toBe(0x78af5f94892f3950n)
    expect(xxh3_64(utf8('abc'))).toBe(0x78af5f94892f3950n)
  })

  it('matches @node-rs/xxhash on random inputs of 0..600 bytes and random seeds (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), seedArb, (bytes, seed) => {
        expect(xxh3_64(bytes, seed)).toBe(xxh3.xxh64(bytes, seed))
      }),
      { numRuns: 2000 },
    )
  })

  it('matches @node-rs/xxhash on long multi-block inputs (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 900, maxLength: 5000 }), seedArb, (bytes, seed) => {
        expect(xxh3_64(bytes, seed)).toBe(xxh3.xxh64(bytes, seed))
      }),
      // Shrinking multi-kilobyte arrays takes minutes: report the first counterexample as is.
      { numRuns: 200, endOnFailure: true },
    )
  })

  it('matches @node-rs/xxhash at every length up to 2100 (fixed data, three seeds)', () => {
    const data = Uint8Array.from({ length: 2100 }, (_, i) => (i * 131 + 17) & 0xff)
    for (let len = 0; len <= 2100; len++) {
      const bytes = data.subarray(0, len)
      for (const seed of [0n, 1337n, 0x9e3779b97f4a7c15n]) {
        if (xxh3_64(bytes, seed) !== xxh3.xxh64(bytes, seed)) {
          expect.unreachable(`mismatch at length ${len}, seed ${seed}`)
        }
      }
    }
  })

  it('hashes subarrays at any byte offset (unaligned reads)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 700 }), fc.nat(16), seedArb, (bytes, cut, seed) => {
        const view = bytes.subarray(Math.min(cut, bytes.length))
        expect(xxh3_64(view, seed)).toBe(xxh3.xxh64(view, seed))
      }),
      { numRuns: 500 },
    )
  })

  it('takes the seed modulo 2^64', () => {
    const bytes = utf8('hello world, this is longer than 16 bytes')
    expect(xxh3_64(bytes, -1n)).toBe(xxh3_64(bytes, MAX_U64))
    expect(xxh3_64(bytes, 2n ** 64n + 5n)).toBe(xxh3_64(bytes, 5n))
  })
})

// -----------------------------------------------------------------------------------------------
// XXH3 block hasher (Dynamo)
// -----------------------------------------------------------------------------------------------

const le32 = (tokens: number[]): Uint8Array => new Uint8Array(Uint32Array.from(tokens).buffer)
function le64pair(a: bigint, b: bigint): Uint8Array {
  const d = new DataView(new ArrayBuffer(16))
  d.setBigUint64(0, a, true)
  d.setBigUint64(8, b, true)
  return new Uint8Array(d.buffer)
}

/** Reference Dynamo chain computed with the native @node-rs/xxhash. */
function dynamoReference(tokens: number[], pageSize: number, seed: bigint): [bigint, bigint][] {
  const out: [bigint, bigint][] = []
  let seq: bigint | undefined
  for (let p = 0; p + pageSize <= tokens.length; p += pageSize) {
    const local = xxh3.xxh64(le32(tokens.slice(p, p + pageSize)), seed)
    seq = seq === undefined ? local : xxh3.xxh64(le64pair(seq, local), seed)
    out.push([seq, local])
  }
  return out
}

/** python-style tokens of the SGLang p16 case, first 48 tokens, t[5] = 2^32 - 1. */
const DYNAMO_TOKENS = Array.from({ length: 48 }, (_, i) => (i * 2654435761 + 12345) % U32)
DYNAMO_TOKENS[5] = U32 - 1
/** [seq, local] per page of 16 tokens, from @node-rs/xxhash. */
const DYNAMO_GOLDEN_1337: [bigint, bigint][] = [
  [0x5be0cbf986786a5cn, 0x5be0cbf986786a5cn],
  [0x4a630a893c2f8fbfn, 0x58a9ecc3e63ceccfn],
  [0x87b418b75799d537n, 0xe69034ba3286c7fdn],
]
const DYNAMO_GOLDEN_0: [bigint, bigint][] = [
  [0x64d8a4233b0c2715n, 0x64d8a4233b0c2715n],
  [0xfa20c0df588708dn, 0x56ba26f5f9409e64n],
  [0xa3263410e145b61n, 0x712f17fbf2dbfb3bn],
]
/** Pages [1..4], [5..8] with extraKey 'lora-a': seed = xxh3_64(utf8('lora-a'), 1337). */
const DYNAMO_GOLDEN_NS: [bigint, bigint][] = [
  [0xb8478ccedf78f9e8n, 0xb8478ccedf78f9e8n],
  [0xee6edbb096737cf0n, 0xc3e0e1d392738133n],
]

function xxh3Chain(hasher: BlockHasher, tokens: number[], pageSize: number, extraKey?: string) {
  const t = Uint32Array.from(tokens)
  const out: [bigint, bigint][] = []
  let parent: Uint8Array | undefined
  for (let p = 0; p + pageSize <= t.length; p += pageSize) {
    parent = hasher.hashBlock(parent, t.subarray(p, p + pageSize), extraKey)
    expect(parent.length).toBe(16)
    out.push([hasher.blockId(parent), localBlockHash(parent)])
  }
  return out
}

describe('xxh3BlockHasher', () => {
  it('reproduces Dynamo local and sequence hashes (literal vectors)', () => {
    const h = xxh3BlockHasher()
    expect(h.name).toBe('xxh3-64')
    expect(xxh3Chain(h, DYNAMO_TOKENS, 16)).toStrictEqual(DYNAMO_GOLDEN_1337)
    expect(xxh3Chain(xxh3BlockHasher({ seed: 0n }), DYNAMO_TOKENS, 16)).toStrictEqual(DYNAMO_GOLDEN_0)
    expect(computeBlockHashes(h, DYNAMO_TOKENS, 16)).toStrictEqual(DYNAMO_GOLDEN_1337.map(([s]) => s))
  })

  it('lays the digest out as seq (u64 LE) then local (u64 LE)', () => {
    const h = xxh3BlockHasher()
    const d = h.hashBlock(undefined, Uint32Array.from(DYNAMO_TOKENS.slice(0, 16)), undefined)
    const d2 = h.hashBlock(d, Uint32Array.from(DYNAMO_TOKENS.slice(16, 32)), undefined)
    const view = new DataView(d2.buffer, d2.byteOffset, 16)
    expect(view.getBigUint64(0, true)).toBe(DYNAMO_GOLDEN_1337[1]![0])
    expect(view.getBigUint64(8, true)).toBe(DYNAMO_GOLDEN_1337[1]![1])
  })

  it('seeds with xxh3_64(utf8(extraKey), seed) for a non-empty extraKey', () => {
    const h = xxh3BlockHasher()
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    expect(xxh3Chain(h, tokens, 4, 'lora-a')).toStrictEqual(DYNAMO_GOLDEN_NS)
    expect(xxh3Chain(h, tokens, 4, '')).toStrictEqual(dynamoReference(tokens, 4, 1337n))
    expect(xxh3Chain(h, tokens, 4)).toStrictEqual(dynamoReference(tokens, 4, 1337n))
    const nsSeed = xxh3.xxh64(utf8('lora-b'), 1337n)
    expect(xxh3Chain(h, tokens, 4, 'lora-b')).toStrictEqual(dynamoReference(tokens, 4, nsSeed))
    expect(xxh3Chain(h, tokens, 4, 'lora-a')).toStrictEqual(DYNAMO_GOLDEN_NS)
  })

  it('matches a native reference chain for random pages and seeds (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.integer({ min: 0, max: U32 - 1 }), { maxLength: 700 }),
        seedArb,
        (pageSize, tokens, seed) => {
          const h = xxh3BlockHasher({ seed })
          expect(xxh3Chain(h, tokens, pageSize)).toStrictEqual(dynamoReference(tokens, pageSize, seed))
        },
      ),
      { numRuns: 200 },
    )
  })

  it('hashes pages that are views into a larger token buffer', () => {
    const h = xxh3BlockHasher()
    const big = new Uint32Array(1 + DYNAMO_TOKENS.length)
    big.set(DYNAMO_TOKENS, 1)
    const d = h.hashBlock(undefined, big.subarray(1, 17), undefined)
    expect(h.blockId(d)).toBe(DYNAMO_GOLDEN_1337[0]![0])
  })

  it('rejects digests of the wrong length and non-bigint seeds', () => {
    const h = xxh3BlockHasher()
    expectRadixError(
      () => h.hashBlock(new Uint8Array(32), Uint32Array.of(1), undefined),
      'INVALID_OPTION',
      32,
    )
    expectRadixError(() => h.blockId(new Uint8Array(8)), 'INVALID_OPTION', 8)
    expectRadixError(() => localBlockHash(new Uint8Array(15)), 'INVALID_OPTION', 15)
    expectRadixError(() => xxh3BlockHasher({ seed: 5 as unknown as bigint }), 'INVALID_OPTION', 5)
  })
})

// -----------------------------------------------------------------------------------------------
// computeBlockHashes validation
// -----------------------------------------------------------------------------------------------

describe('computeBlockHashes', () => {
  const hashers = [sglangBlockHasher(), xxh3BlockHasher()]

  it('rejects a pageSize that is not a positive integer', () => {
    for (const h of hashers) {
      for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        expectRadixError(() => computeBlockHashes(h, [1, 2, 3], bad), 'INVALID_OPTION', bad)
      }
    }
  })

  it('rejects tokens outside [0, 2^32) or not integers', () => {
    for (const h of hashers) {
      for (const bad of [-1, U32, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
        expectRadixError(() => computeBlockHashes(h, [1, 2, bad, 4], 2), 'INVALID_TOKEN', bad)
      }
    }
  })

  it('ignores the trailing partial page and accepts boundary tokens', () => {
    for (const h of hashers) {
      expect(computeBlockHashes(h, [], 4)).toStrictEqual([])
      expect(computeBlockHashes(h, [1, 2, 3], 4)).toStrictEqual([])
      const full = computeBlockHashes(h, [0, U32 - 1, 7, 8], 2)
      expect(full).toHaveLength(2)
      expect(computeBlockHashes(h, [0, U32 - 1, 7, 8, 9], 2)).toStrictEqual(full)
      expect(computeBlockHashes(h, Uint32Array.of(0, U32 - 1, 7, 8), 2)).toStrictEqual(full)
    }
  })

  it('equal prefixes give equal leading ids, and a different first page changes every id', () => {
    for (const h of hashers) {
      const a = computeBlockHashes(h, [1, 2, 3, 4, 5, 6], 2)
      const b = computeBlockHashes(h, [1, 2, 3, 4, 9, 9], 2)
      const c = computeBlockHashes(h, [0, 2, 3, 4, 5, 6], 2)
      expect(b.slice(0, 2)).toStrictEqual(a.slice(0, 2))
      expect(b[2]).not.toBe(a[2])
      for (let i = 0; i < 3; i++) expect(c[i]).not.toBe(a[i])
    }
  })
})

describe('block digests in the tree', () => {
  it('are stored per node and give the events the hasher’s ids, across splits; a digest of another length is refused', () => {
    const events: KvEvent[] = []
    const hasher = xxh3BlockHasher()
    const cache = new RadixCache({
      pageSize: 2,
      trackValues: false,
      blockHasher: hasher,
      onEvent: (e) => events.push(e),
    })
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    const { lastNode } = cache.insert(tokens)
    cache.insert([1, 2, 3, 4, 9, 9]) // splits the first node after two pages
    const want = computeBlockHashes(hasher, tokens, 2)
    const up = cache.parentOf(lastNode)!
    expect([...cache.blockHashesOf(up), ...cache.blockHashesOf(lastNode)]).toEqual(want)
    expect(cache.blockHashDump().blockHashes).toHaveLength(5)
    expect(events.flatMap((e) => (e.type === 'BlockStored' ? e.blockHashes : []))).toEqual([
      ...want,
      computeBlockHashes(hasher, [1, 2, 3, 4, 9, 9], 2)[2]!,
    ])
    // A hasher whose digests change length breaks its contract: refused before the tree changes.
    let calls = 0
    const odd: BlockHasher = {
      name: 'odd',
      hashBlock: (p, page, ns) => {
        const d = hasher.hashBlock(p, page, ns)
        return calls++ === 2 ? d.subarray(0, 4) : d
      },
      blockId: (d) => hasher.blockId(d),
    }
    const bad = new RadixCache({ pageSize: 2, trackValues: false, blockHasher: odd, onEvent: () => {} })
    bad.insert([1, 2, 3, 4])
    const dump = bad.blockHashDump()
    expect(() => bad.insert([5, 6, 7, 8])).toThrowError(RadixCacheError)
    expect(bad.blockHashDump()).toEqual(dump) // no event, no node
    expect(bad.totalSize()).toBe(4)
    expect(bad.matchPrefix([5, 6, 7, 8]).length).toBe(0)
  })
})

describe('hashers that hash runs of pages in place (hashPagesInto, blockIdAt)', () => {
  /** `base` with the optional in-place methods, built on its own hashBlock / blockId. */
  function inPlace(base: BlockHasher, digestLength: number): BlockHasher {
    return {
      name: `${base.name}-in-place`,
      hashBlock: (p, page, ns) => base.hashBlock(p, page, ns),
      blockId: (d) => base.blockId(d),
      digestLength,
      hashPagesInto(parent, parentAt, tokens, from, pageSize, pages, extraKey, out, outAt) {
        let prev: Uint8Array | undefined = parent?.slice(parentAt, parentAt + digestLength)
        for (let p = 0; p < pages; p++) {
          const at = from + p * pageSize
          const d = base.hashBlock(prev, tokens.subarray(at, at + pageSize), extraKey)
          out.set(d, outAt + p * digestLength)
          prev = d
        }
      },
      blockIdAt: (d, at) => base.blockId(d.slice(at, at + digestLength)),
    }
  }

  it('give a cache the same digests and events as hashing page by page (property)', () => {
    const op = fc.oneof(
      fc.record({
        insert: fc.array(fc.nat(3), { minLength: 1, maxLength: 24 }),
        ns: fc.constantFrom(undefined, 'a'),
      }),
      fc.record({ evict: fc.nat(12) }),
    )
    fc.assert(
      fc.property(
        fc.constantFrom(1, 2, 4),
        fc.constantFrom('page', 'node'),
        fc.array(op, { maxLength: 40 }),
        (ps, batching, ops) => {
          const base = xxh3BlockHasher()
          const run = (hasher: BlockHasher) => {
            const events: KvEvent[] = []
            const cache = new RadixCache({
              pageSize: ps,
              trackValues: false,
              blockHasher: hasher,
              eventBatching: batching as 'page' | 'node',
              onEvent: (e) => events.push(e),
            })
            for (const o of ops) {
              if ('insert' in o)
                cache.insert(o.insert, undefined, o.ns === undefined ? {} : { extraKey: o.ns })
              else cache.evict(o.evict)
            }
            return [events, cache.blockHashDump()] as const
          }
          expect(run(inPlace(base, 16))).toEqual(run(base))
        },
      ),
    )
  })

  it('are refused without a positive integer digestLength', () => {
    const base = xxh3BlockHasher()
    for (const digestLength of [undefined, 0, 1.5]) {
      const { digestLength: _, ...rest } = inPlace(base, 16)
      const h = (digestLength === undefined ? rest : { ...rest, digestLength }) as BlockHasher
      expectRadixError(
        () => new RadixCache({ pageSize: 2, trackValues: false, blockHasher: h, onEvent: () => {} }),
        'INVALID_OPTION',
        digestLength,
      )
    }
  })
})
