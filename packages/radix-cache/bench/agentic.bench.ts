import { bench, describe } from 'vitest'
import { RadixCache } from '../src/index.js'
import { NaiveRadixCache } from './baseline/naiveRadix.js'
import { agenticScript, totalTokens } from './workload.js'

// An agentic workload (shared 4K system prefix, 24 sessions x 12 turns, histories up to ~25K
// tokens), page 16, with a capacity that forces evictions. Reports tokens/s for match and insert;
// the baseline is a port-style cache (object nodes, string child keys, heap rebuilt per evict)
// run on the same script. For scale: upstream SGLang's Python RadixCache runs such scripts at
// about 45 M tokens/s (match) and 63 M tokens/s (insert) on this kind of machine.
const ops = agenticScript({ sessions: 24, turns: 12, systemTokens: 4096 })
const capacity = 256 * 1024
const matchTokens = totalTokens(ops, 'match')
const insertTokens = totalTokens(ops, 'insert')
const values = new Int32Array(64 * 1024)

function replayOurs(): RadixCache {
  const c = new RadixCache({ pageSize: 16, evictGranularity: 'leaf' })
  for (const op of ops) {
    if (op.kind === 'match') c.matchPrefix(op.tokens)
    else {
      c.insert(op.tokens, values.subarray(0, op.tokens.length))
      if (c.totalSize() > capacity) c.evict(c.totalSize() - capacity)
    }
  }
  return c
}

function replayNaive(): NaiveRadixCache {
  const c = new NaiveRadixCache(16)
  for (const op of ops) {
    if (op.kind === 'match') c.matchPrefix(op.tokens)
    else {
      c.insert(op.tokens, values.subarray(0, op.tokens.length))
      if (c.evictable > capacity) c.evict(c.evictable - capacity)
    }
  }
  return c
}

// Matches alone, on a warm cache holding every history (no eviction), so both sides match the
// same prefixes.
const warmOurs = new RadixCache({ pageSize: 16 })
const warmNaive = new NaiveRadixCache(16)
for (const op of ops) {
  if (op.kind === 'insert') {
    warmOurs.insert(op.tokens, values.subarray(0, op.tokens.length))
    warmNaive.insert(op.tokens, values.subarray(0, op.tokens.length))
  }
}
const matchOps = ops.filter((o) => o.kind === 'match').map((o) => o.tokens)

let sink = 0
describe(`agentic script: ${(matchTokens / 1e6).toFixed(1)}M match + ${(insertTokens / 1e6).toFixed(1)}M insert tokens`, () => {
  bench('ours: full replay (match + insert + evict)', () => {
    sink ^= replayOurs().totalSize()
  })
  bench('baseline: full replay (match + insert + evict)', () => {
    sink ^= replayNaive().evictable
  })
})

const row = new Int32Array(64 * 1024)
const insertOps = ops.filter((o) => o.kind === 'insert').map((o) => o.tokens)

// The memory-bound floor on this script: compare each match op's tokens with a stored copy.
const matchCopies = matchOps.map((t) => t.slice())

describe(`matchPrefix only: ${(matchTokens / 1e6).toFixed(1)}M tokens per iteration`, () => {
  bench('floor: plain compare of the same tokens with a stored copy', () => {
    for (let j = 0; j < matchOps.length; j++) {
      const a = matchOps[j]!
      const b = matchCopies[j]!
      let i = 0
      const n = a.length
      while (i < n && a[i] === b[i]) i++
      sink ^= i
    }
  })
  bench('ours, indices into a request row', () => {
    for (const t of matchOps) sink ^= warmOurs.matchPrefix(t, { into: row }).length
  })
  bench('ours, allocated indices', () => {
    for (const t of matchOps) sink ^= warmOurs.matchPrefix(t).length
  })
  bench('baseline', () => {
    for (const t of matchOps) sink ^= warmNaive.matchPrefix(t).length
  })
})

export { sink }

describe(`insert only (+ evict to capacity): ${(insertTokens / 1e6).toFixed(1)}M tokens per iteration`, () => {
  bench('ours', () => {
    const c = new RadixCache({ pageSize: 16 })
    for (const t of insertOps) {
      c.insert(t, values.subarray(0, t.length))
      if (c.totalSize() > capacity) c.evict(c.totalSize() - capacity)
    }
    sink ^= c.totalSize()
  })
  bench('baseline', () => {
    const c = new NaiveRadixCache(16)
    for (const t of insertOps) {
      c.insert(t, values.subarray(0, t.length))
      if (c.evictable > capacity) c.evict(c.evictable - capacity)
    }
    sink ^= c.evictable
  })
})
