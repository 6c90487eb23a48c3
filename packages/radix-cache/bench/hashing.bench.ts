import { createHash } from 'node:crypto'
import { xxh3 } from '@node-rs/xxhash'
import { bench, describe } from 'vitest'
import { sglangBlockHasher, xxh3BlockHasher } from '../src/index.js'
import { sha256 } from '../src/hashing/sha256.js'
import { xxh3_64 } from '../src/hashing/xxh3.js'

// Pure-TypeScript hashes against native baselines, in the same run:
//   our sha256 vs node:crypto, our xxh3_64 vs @node-rs/xxhash (Rust, N-API),
// on 64-byte pages (16 tokens) and 2048-byte pages (512 tokens), plus the 16-byte input of
// Dynamo's sequence-hash step and the full block hashers (one hashBlock + blockId per page).
// Run: pnpm bench packages/radix-cache/bench/hashing.bench.ts

const SEED = 1337n

function page(bytes: number): Uint8Array {
  return Uint8Array.from({ length: bytes }, (_, i) => (i * 131 + 7) & 0xff)
}

for (const size of [64, 2048]) {
  const data = page(size)

  describe(`sha256, ${size}-byte page`, () => {
    bench('kvc sha256 (pure TS)', () => {
      sha256(data)
    })
    bench('node:crypto createHash', () => {
      createHash('sha256').update(data).digest()
    })
  })

  describe(`xxh3-64, ${size}-byte page`, () => {
    bench('kvc xxh3_64 (pure TS)', () => {
      xxh3_64(data, SEED)
    })
    bench('@node-rs/xxhash xxh3.xxh64', () => {
      xxh3.xxh64(data, SEED)
    })
  })
}

describe('xxh3-64, 16-byte input (sequence-hash step)', () => {
  const data = page(16)
  bench('kvc xxh3_64 (pure TS)', () => {
    xxh3_64(data, SEED)
  })
  bench('@node-rs/xxhash xxh3.xxh64', () => {
    xxh3.xxh64(data, SEED)
  })
})

for (const tokens of [16, 512]) {
  describe(`block hashers, ${tokens}-token page (hashBlock + blockId)`, () => {
    const tokenPage = Uint32Array.from({ length: tokens }, (_, i) => (i * 2654435761) % 2 ** 32)
    const sglang = sglangBlockHasher()
    const dynamo = xxh3BlockHasher()
    const sglangParent = sglang.hashBlock(undefined, tokenPage, undefined)
    const dynamoParent = dynamo.hashBlock(undefined, tokenPage, undefined)
    bench('sglangBlockHasher (sha256 chain)', () => {
      sglang.blockId(sglang.hashBlock(sglangParent, tokenPage, undefined))
    })
    bench('xxh3BlockHasher (Dynamo local + sequence hash)', () => {
      dynamo.blockId(dynamo.hashBlock(dynamoParent, tokenPage, undefined))
    })
  })
}
