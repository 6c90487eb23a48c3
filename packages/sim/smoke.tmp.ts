import { runSimulation } from './src/cluster/simulation.ts'
import { generateAgenticWorkload } from './src/workload/agentic.ts'
const w = generateAgenticWorkload({ seed: 1 })
for (const policy of (process.argv[2] ?? 'kvc,dp-cache-aware,sglang-cache-aware,round-robin').split(',')) {
  const r = runSimulation({ workload: w, topology: { kind: 'pd', prefill: 2, decode: 6 }, policy, seed: 1 })
  const done = r.records.filter((x) => x.status === 'completed')
  const ttft = done.map((x) => (x.firstTokenMs - x.arrivalMs) / 1000).sort((a, b) => a - b)
  const e2e = done.map((x) => (x.endMs - x.arrivalMs) / 1000).sort((a, b) => a - b)
  const paths: Record<string, number> = {}
  for (const x of done) paths[x.path!] = (paths[x.path!] ?? 0) + 1
  console.log(
    policy,
    'wall',
    r.wallMs.toFixed(0),
    'ms',
    'events',
    r.counters.events,
    'makespan',
    r.makespanS.toFixed(0),
    JSON.stringify(r.accounting.failedByCause),
    'ok',
    done.length,
    'ttft p50',
    ttft[Math.floor(ttft.length / 2)]?.toFixed(3),
    'mean',
    (ttft.reduce((a, b) => a + b, 0) / ttft.length).toFixed(3),
    'e2e p50',
    e2e[Math.floor(e2e.length / 2)]?.toFixed(3),
    JSON.stringify(paths),
    'evict',
    JSON.stringify(
      r.evictions
        .filter((e) => e.evictions > 0)
        .map((e) => [e.workerId, e.evictions, Math.round(e.meanTokensPerEviction)]),
    ),
    'pools',
    r.accounting.poolsBalanced,
    JSON.stringify(r.counters),
  )
}
