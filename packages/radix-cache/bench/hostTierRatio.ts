// Paired ratios for the host tier (run by `pnpm bench` after the vitest benchmarks): matchPrefix on
// a cache with a host tier against the same device-resident content without one. Target <= 1.2x.
// Paired rounds (see paired.ts) because the vitest figures of two separate benchmarks drift by
// tens of percent on a shared 2-core machine.
import { formatPaired, paired } from './paired.js'
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

let sink = 0
const results = [
  formatPaired(
    paired(
      'matchPrefix, 32K tokens in 16 nodes, indices into a row',
      () => {
        sink ^= plain.matchPrefix(prompt, { into: row }).length
      },
      () => {
        sink ^= tiered.matchPrefix(prompt, { into: row }).length
      },
    ),
    'no tier',
    'host tier',
  ),
  formatPaired(
    paired(
      'matchPrefix, same prompt, second half host-only',
      () => {
        sink ^= plain.matchPrefix(prompt, { into: row }).length
      },
      () => {
        const m = halfOnHost.matchPrefix(prompt, { into: row })
        sink ^= m.length + m.hostLength
      },
    ),
    'no tier',
    'host tier',
  ),
  formatPaired(
    paired(
      'matchPrefix, agentic script (192 matches, 3.2M tokens), lengths only',
      () => {
        for (const t of matchOps) sink ^= warmPlain.matchPrefix(t).length
      },
      () => {
        for (const t of matchOps) sink ^= warmTiered.matchPrefix(t).length
      },
      { rounds: 30, batchMs: 20 },
    ),
    'no tier',
    'host tier',
  ),
]
for (const line of results) console.log(line)
if (sink === 0.5) console.log(sink)
