import { bench, describe } from 'vitest'
import {
  halfOnHost,
  matchOps,
  plain,
  prompt,
  row,
  tiered,
  warmPlain,
  warmTiered,
} from './hostTierFixtures.js'

// What the optional host tier costs when it is on: matchPrefix of the same device-resident
// content on a cache without a host tier and on one with a host tier (write_back, twice the
// device pool), in one run. Target: with / without <= 1.2x. A third case matches a prompt whose
// second half was demoted to the host (the match walks host nodes and reports hostLength).

let sink = 0
describe('matchPrefix with vs without a host tier: 32K cached tokens in 16 nodes, indices into a row', () => {
  bench('without a host tier', () => {
    sink ^= plain.matchPrefix(prompt, { into: row }).length
  })
  bench('with a host tier (all on the device)', () => {
    sink ^= tiered.matchPrefix(prompt, { into: row }).length
  })
  bench('with a host tier, second half host-only (reports hostLength)', () => {
    const m = halfOnHost.matchPrefix(prompt, { into: row })
    sink ^= m.length + m.hostLength
  })
})

describe('matchPrefix with vs without a host tier: agentic script matches, lengths only', () => {
  bench('without a host tier', () => {
    for (const t of matchOps) sink ^= warmPlain.matchPrefix(t).length
  })
  bench('with a host tier', () => {
    for (const t of matchOps) sink ^= warmTiered.matchPrefix(t).length
  })
})

export { sink }
