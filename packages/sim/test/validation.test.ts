import { describe, expect, it } from 'vitest'
import { computeTraceStats, loadMooncakeTrace, runSimulation } from '../src/index.js'
import { tracePath } from './helpers.js'

/**
 * Validation against independent numbers (docs/design/traces.md#mooncake-statistics): one worker with unlimited capacity must
 * reuse exactly the blocks that repeat an earlier block — 36.64% (conversation) and 63.96%
 * (synthetic) of blocks, 37.36% and 65.12% of tokens. Each hash id is one full page, so the
 * block-level ratio does not depend on the tokens per page: 16-token pages keep the run small.
 */
const CASES = [
  ['conversation_trace.jsonl', 0.3664, 0.3736],
  ['synthetic_trace.jsonl', 0.6396, 0.6512],
] as const

describe('validation: unlimited single-worker prefix hit ratio equals the ideal ratio', () => {
  // Token granularity on 16-token pages, and block granularity (the default for these traces:
  // the caches count units of blocks, pages are whole blocks): the same ratios.
  for (const [name, blocks, tokens] of CASES) {
    for (const granularity of ['token', 'block'] as const) {
      const path = tracePath(name)
      const page = granularity === 'token' ? 16 : 512
      it.skipIf(path === undefined)(
        `${name}, ${granularity} granularity: ${(blocks * 100).toFixed(2)}% of blocks`,
        () => {
          const w =
            granularity === 'token'
              ? loadMooncakeTrace(path!, { pageTokens: 16 })
              : loadMooncakeTrace(path!, { granularity })
          // Computed from the trace alone (no cache): the numbers of docs/design/traces.md.
          const ideal = computeTraceStats(w, page)
          expect(ideal.idealHitRatioPages).toBeCloseTo(blocks, 4)
          expect(ideal.idealHitRatioTokens).toBeCloseTo(tokens, 4)
          // Simulated: the real RadixCache / SessionCache of one colocated worker.
          const r = runSimulation({
            workload: w,
            topology: { kind: 'dp', workers: 1 },
            policy: 'dp-cache-aware',
            seed: 1,
            pageSize: page,
            costModel: { capacityTokens: Number.POSITIVE_INFINITY },
          })
          expect(r.accounting.failed).toBe(0)
          let total = 0
          let hit = 0
          let inTok = 0
          let hitTok = 0
          for (const x of r.records) {
            const b = Math.ceil(x.inputLength / 512)
            const h = Math.min(b, Math.floor(x.matchedTokens / page))
            total += b
            hit += h
            inTok += x.inputLength
            hitTok += Math.min(x.inputLength, h * 512)
          }
          expect(hit / total).toBeCloseTo(blocks, 4)
          expect(hitTok / inTok).toBeCloseTo(tokens, 4)
        },
      )
    }
  }
})
