import { bench, describe } from 'vitest'
import { AGENTIC, runWorkload, type SyncConfig, type WorkloadResult } from './workload.js'

// The agentic workload of workload.ts (32 sessions, 20-40 turns, 4K shared system prompt, page 64,
// Qwen3-30B-A3B KV = 98,304 B/token, D capacity 1M tokens with an eviction every 5 s), replayed
// with sync off and on for several β. Prints the table in the README, then times a replay.
const kv = 98_304
const base = { bytesPerSecond: 5e9, kvBytesPerToken: kv, roundMs: 100, latencyMs: 0.05 } // 10% of 400 Gb/s
const off: SyncConfig = { ...base, enabled: false, beta: 0 }

function row(label: string, r: WorkloadResult, ref: WorkloadResult): string {
  const saved = ref.reseedPrefillTokens - r.reseedPrefillTokens
  const perReseed = r.reseeds > 0 ? Math.round(r.reseedPrefillTokens / r.reseeds) : 0
  const bytesPerSaved =
    saved > 0
      ? `${Math.round(r.bytesSynced / saved).toLocaleString('en-US')} (${(r.bytesSynced / saved / kv).toFixed(2)}×)`
      : r === ref
        ? '—'
        : '— (worse)'
  return `| ${label} | ${r.reseeds} | ${r.reseedPrefillTokens.toLocaleString('en-US')} | ${perReseed.toLocaleString('en-US')} | ${r.reseedsWithinBudget}/${r.reseeds} | ${r.theoremViolations} | ${(r.bytesSynced / 1e9).toFixed(1)} | ${bytesPerSaved} |`
}

const lines: string[] = []
for (const [pLabel, pcap] of [
  ['P holds the working set (2M tokens)', 2_097_152],
  ['P smaller than the working set (1M tokens)', 1_048_576],
] as const) {
  const o = { ...AGENTIC, prefillCapacityTokens: pcap }
  const ref = runWorkload(o, off)
  lines.push(`\n${pLabel}\n`)
  lines.push(
    '| sync | reseeds | tokens re-prefilled | per reseed | within β at reseed | Theorem 4 violations | GB synced | bytes per saved token |',
  )
  lines.push('|---|---|---|---|---|---|---|---|')
  lines.push(row('off', ref, ref))
  for (const beta of [256, 1024, 4096, 16384])
    lines.push(row(`on, β = ${beta}`, runWorkload(o, { ...base, enabled: true, beta }), ref))
  lines.push(
    row(
      'on, β = 1024, 0.2 GB/s',
      runWorkload(o, { ...base, bytesPerSecond: 2e8, enabled: true, beta: 1024 }),
      ref,
    ),
  )
  if (pcap < 2_000_000) {
    // The source plans for half of P (maxHeldTokens): the other half stays P's own.
    for (const beta of [256, 1024, 4096]) {
      lines.push(
        row(
          `on, β = ${beta}, room ½ P`,
          runWorkload(o, { ...base, enabled: true, beta, maxHeldTokens: pcap / 2 }),
          ref,
        ),
      )
    }
  }
}
console.log(lines.join('\n'))

describe('replay the agentic workload (32 sessions, ~1000 turns)', () => {
  bench('sync off', () => void runWorkload(AGENTIC, off), { iterations: 3, time: 0, warmupIterations: 0 })
  bench('sync on, β = 1024', () => void runWorkload(AGENTIC, { ...base, enabled: true, beta: 1024 }), {
    iterations: 3,
    time: 0,
    warmupIterations: 0,
  })
})
