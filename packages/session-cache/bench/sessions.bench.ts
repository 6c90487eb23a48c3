import { bench, describe } from 'vitest'
import {
  agenticWorkload,
  type RunWorkloadConfig,
  runWorkload,
  type WorkloadReport,
} from '../src/testing/index.js'

// A multi-session agentic workload under memory pressure (16 conversations x 12 turns, shared 1K
// boilerplate, first prompts 2-6K, appends 0.2-1.2K, outputs 100-500 tokens; page 16, prefill
// chunk 1024), run turn by turn as a serving engine drives it. Three engines on the same turns:
//   block   - SessionCache, granularity 'block' (this package's design, docs/design/algorithms.md)
//   session - SessionCache, granularity 'session' (the legacy streaming-session behaviour)
//   bare    - the bare radix cache with SGLang's request flow, no sessions (BareRadixEngine)
// Quality (deterministic) is printed once: tokens freed per eviction (mean, max) and tokens
// re-prefilled per later turn, at two pool sizes, with and without TTL reaping of idle sessions.
// Operation cost is the vitest bench below: whole-workload replays, relative to the bare cache.
const workload = agenticWorkload({
  sessions: 16,
  turns: 12,
  systemTokens: 1024,
  firstTokens: [2000, 6000],
  appendTokens: [200, 1200],
  outputTokens: [100, 500],
  seed: 3,
})
const workingSet = workload.reduce((s, t) => s + t.append.length + t.output.length, 0)
const pool = (fraction: number) => Math.floor((workingSet * fraction) / 16) * 16

const fmt = (r: WorkloadReport) =>
  [
    r.engine.padEnd(8),
    String(r.evictions).padStart(6),
    r.freedPerEvictionMean.toFixed(0).padStart(8),
    String(r.freedPerEvictionMax).padStart(7),
    r.reprefillPerTurn.toFixed(0).padStart(9),
    String(r.sessionsEvicted).padStart(6),
  ].join(' | ')

const lines: string[] = [
  `working set ${workingSet} tokens, ${workload.length} turns`,
  'scenario                          | engine   | evicts | mean/ev | max/ev | reprefill/turn | sess.evicted',
]
for (const fraction of [0.7, 0.85]) {
  for (const idleTtl of [undefined, 24]) {
    for (const [engine, evictGranularity] of [
      ['block', 'page'],
      ['block', 'leaf'],
      ['session', 'page'],
      ['bare', 'page'],
    ] as const) {
      const config: RunWorkloadConfig = {
        engine,
        pageSize: 16,
        poolSize: pool(fraction),
        evictGranularity,
        chunk: 1024,
        ...(idleTtl !== undefined ? { idleTtl } : {}),
      }
      const label = `pool ${fraction * 100}%${idleTtl ? `, TTL ${idleTtl} turns` : ''}, ${evictGranularity}`
      lines.push(`${label.padEnd(33)} | ${fmt(runWorkload(config, workload))}`)
    }
  }
}
console.log(lines.join('\n'))

// The host tier (write_back, load-back on match, demotion of idle sessions under pressure): the
// same block-level engine with a host tier of 1x, 2x and 4x the device pool against none.
// Deterministic; re-prefilled tokens are what later turns recompute, loaded-back what they copy.
const tierLines: string[] = [
  'scenario                   | host tier | reprefilled | per turn | loaded back | demoted | released',
]
for (const fraction of [0.5, 0.7, 0.85]) {
  for (const idleTtl of [undefined, 24]) {
    for (const ratio of [0, 1, 2, 4]) {
      const r = runWorkload(
        {
          engine: 'block',
          pageSize: 16,
          poolSize: pool(fraction),
          evictGranularity: 'page',
          chunk: 1024,
          ...(idleTtl !== undefined ? { idleTtl } : {}),
          ...(ratio > 0 ? { hostTier: { ratio } } : {}),
        },
        workload,
      )
      const label = `pool ${fraction * 100}%${idleTtl ? `, TTL ${idleTtl} turns` : ''}`
      tierLines.push(
        [
          label.padEnd(26),
          (ratio === 0 ? 'none' : `${ratio}x`).padStart(9),
          String(r.reprefilledTokens).padStart(11),
          r.reprefillPerTurn.toFixed(0).padStart(8),
          String(r.loadedBackTokens).padStart(11),
          String(r.sessionsDemoted).padStart(7),
          String(r.sessionsEvicted).padStart(8),
        ].join(' | '),
      )
    }
  }
}
console.log(tierLines.join('\n'))

let sink = 0
const opts = { iterations: 20, warmupIterations: 3, time: 0 }
for (const fraction of [0.7, 0.85]) {
  describe(`whole workload, pool ${fraction * 100}% of the working set, page eviction`, () => {
    const base = { pageSize: 16, poolSize: pool(fraction), evictGranularity: 'page', chunk: 1024 } as const
    bench(
      'bare radix cache (SGLang request flow, no sessions)',
      () => {
        sink ^= runWorkload({ engine: 'bare', ...base }, workload).evictions
      },
      opts,
    )
    bench(
      'SessionCache, block granularity',
      () => {
        sink ^= runWorkload({ engine: 'block', ...base }, workload).evictions
      },
      opts,
    )
    bench(
      'SessionCache, session granularity (legacy)',
      () => {
        sink ^= runWorkload({ engine: 'session', ...base }, workload).evictions
      },
      opts,
    )
    bench(
      'SessionCache, block granularity, host tier 2x (write_back)',
      () => {
        sink ^= runWorkload({ engine: 'block', ...base, hostTier: { ratio: 2 } }, workload).evictions
      },
      opts,
    )
  })
}

export { sink }
