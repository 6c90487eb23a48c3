import { bench, describe } from 'vitest'
import { RadixCache } from '../src/index.js'
import { lcg } from './workload.js'

// matchPrefix of a fully cached 32K-token prompt (pageSize 16) against the memory-bound floor: a
// plain loop comparing the same tokens with a stored Uint32Array copy. Target: within 3x.
const rand = lcg(1)
const prompt = Uint32Array.from({ length: 32 * 1024 }, () => Math.floor(rand() * 150000))
const stored = prompt.slice()
const values = Int32Array.from({ length: prompt.length }, (_, i) => i)

// The cache holds the prompt as one 32K node (a fresh insert) or as the 2K-token pieces a
// growing agent session leaves behind (16 turns of 2K appends).
const single = new RadixCache({ pageSize: 16 })
single.insert(prompt, values)
const pieces = new RadixCache({ pageSize: 16 })
for (let n = 2048; n <= prompt.length; n += 2048) {
  pieces.insert(prompt.subarray(0, n), values.subarray(0, n))
  pieces.matchPrefix(prompt.subarray(0, n))
}
const lengthsOnly = new RadixCache({ pageSize: 16, trackValues: false })
lengthsOnly.insert(prompt)

const row = new Int32Array(prompt.length)
let sink = 0
describe('matchPrefix, 32K cached tokens, pageSize 16', () => {
  bench('floor: plain compare loop', () => {
    let i = 0
    const n = prompt.length
    while (i < n && stored[i] === prompt[i]) i++
    sink ^= i
  })
  bench('RadixCache.matchPrefix (one node, with indices)', () => {
    sink ^= single.matchPrefix(prompt).length
  })
  bench('RadixCache.matchPrefix (one node, indices into a request row)', () => {
    sink ^= single.matchPrefix(prompt, { into: row }).length
  })
  bench('RadixCache.matchPrefix (16 nodes, with indices)', () => {
    sink ^= pieces.matchPrefix(prompt).length
  })
  bench('RadixCache.matchPrefix (lengths only)', () => {
    sink ^= lengthsOnly.matchPrefix(prompt).length
  })
  bench('RadixCache.matchPrefix readOnly', () => {
    sink ^= single.matchPrefix(prompt, { readOnly: true }).length
  })
})

export { sink }
