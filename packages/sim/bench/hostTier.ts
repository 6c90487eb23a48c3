/**
 * The host tier's measurement (`docs/guides/host-tier.md`): KVC on the built-in workload (or a
 * trace) with a host tier of 1×, 2× and 4× the device pool against none, on several seeds, paired.
 * Prints a Markdown table: re-prefilled tokens, reseeds, load-backs per seed, and TTFT p99 with
 * its paired 95% interval against no tier.
 *
 *   node --conditions=@kvc/source --import tsx packages/sim/bench/hostTier.ts [--trace <dir>] [--seeds 1..3] [--jobs 2] [--capacity 200k] [--sessions 52]
 */
import { parseArgs } from 'node:util'
import { threadRunner } from '../src/cli/parallel.js'
import { parseCapacity, parseSeeds } from '../src/cli/args.js'
import { type RunResult, hostTierFigures, runExperiment } from '../src/index.js'

const { values } = parseArgs({
  options: {
    trace: { type: 'string' },
    seeds: { type: 'string', default: '1..3' },
    jobs: { type: 'string', default: '2' },
    capacity: { type: 'string', default: '200k' },
    sessions: { type: 'string' },
    tiers: { type: 'string', default: 'none,1x,2x,4x' },
    topology: { type: 'string', default: '2P6D' },
  },
})
const seeds = parseSeeds(values.seeds!)
const tiers = values.tiers!.split(',')
const policies = tiers.map((t) => `kvc:hostTier=${t}`)
let raw: readonly RunResult[] = []
const res = await runExperiment(
  {
    workload:
      values.trace === undefined
        ? {
            kind: 'agentic',
            ...(values.sessions === undefined ? {} : { options: { sessions: Number(values.sessions) } }),
          }
        : { kind: 'trace', path: values.trace, format: 'auto' },
    topology: values.topology!,
    policies,
    seeds,
    costModel: { capacityTokens: parseCapacity(values.capacity!) },
  },
  { runner: threadRunner(Number(values.jobs)), onResults: (r) => (raw = r) },
)
const fmt = (x: number) =>
  x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : x >= 1e3 ? `${(x / 1e3).toFixed(0)}K` : `${x}`
const s3 = (x: number) => x.toFixed(3)
console.log(
  `workload: ${values.trace ?? 'built-in'}; ${values.topology}; seeds ${seeds.join(', ')}; capacity ${values.capacity}`,
)
console.log(
  '| host tier | re-prefilled tokens per seed | × fewer than the first | reseeds | load-backs (tokens) | failed | TTFT p99 | Δ TTFT p99 vs the first [95% CI] |',
)
console.log('|---|---|---|---|---|---|---|---|')
const per = (i: number) => raw.slice(i * seeds.length, (i + 1) * seeds.length).map(hostTierFigures)
const base = per(0)
for (let i = 0; i < policies.length; i++) {
  const f = per(i)
  const p = res.policies[i]!
  const ratios = f.map((x, j) => base[j]!.reprefilledTokens / Math.max(1, x.reprefilledTokens))
  const pr = i === 0 ? undefined : res.paired[i - 1]!.metrics.ttft_p99
  console.log(
    `| ${tiers[i]} | ${f.map((x) => fmt(x.reprefilledTokens)).join(' / ')} | ${i === 0 ? '—' : ratios.map((r) => r.toFixed(2)).join(' / ')} | ${f.map((x) => x.reseeds).join(' / ')} | ${f.map((x) => `${x.loadBacks} (${fmt(x.loadedBackTokens)})`).join(' / ')} | ${p.failed} | ${s3(p.estimates.ttft_p99.value)} s | ${pr === undefined ? '—' : `${s3(pr.diff)} s [${s3(pr.lo)}, ${s3(pr.hi)}]`} |`,
  )
}
console.log('')
console.log('Re-prefilled tokens by cause, all seeds together (migrations: reseeds onto another D):')
console.log(
  '| host tier | × fewer, pooled | same-D reseed | migration (count) | local seed | fast path | peer fetches (tokens) |',
)
console.log('|---|---|---|---|---|---|---|')
const total = (i: number) => per(i).reduce((a, x) => a + x.reprefilledTokens, 0)
for (let i = 0; i < policies.length; i++) {
  const f = per(i)
  const sum = (k: keyof (typeof f)[number]['reprefilledBy']) => f.reduce((a, x) => a + x.reprefilledBy[k], 0)
  const moves = f.reduce((a, x) => a + x.migrations, 0)
  const fetches = f.reduce((a, x) => a + x.peerFetches, 0)
  const fetched = f.reduce((a, x) => a + x.peerFetchedTokens, 0)
  console.log(
    `| ${tiers[i]} | ${i === 0 ? '—' : (total(0) / Math.max(1, total(i))).toFixed(2)} | ${fmt(sum('sameDecodeReseed'))} | ${fmt(sum('migration'))} (${moves}) | ${fmt(sum('localSeed'))} | ${fmt(sum('fastPath'))} | ${fetches} (${fmt(fetched)}) |`,
  )
}
