#!/usr/bin/env node
import { mkdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { SingleBar } from 'cli-progress'
import { Command, CommanderError, Option } from 'commander'
import { POLICY_NAMES, parsePolicySpec } from '../adapters/router.js'
import type { RunResult } from '../metrics/runResult.js'
import { parseTopology } from '../cluster/topology.js'
import { DEFAULT_COST_MODEL } from '../cost/costModel.js'
import { SimError } from '../errors/simError.js'
import { parseFaults } from '../faults/faults.js'
import {
  type ExperimentConfig,
  type ExperimentResult,
  type WorkloadSource,
  runExperiment,
} from '../protocol/experiment.js'
import { renderHtmlReport } from '../report/html.js'
import { toStableJson } from '../report/json.js'
import { renderComparisonTable } from '../report/table.js'
import { TRACE_FORMATS, type TraceFormat, loadTrace } from '../workload/loadTrace.js'
import { computeTraceStats } from '../workload/stats.js'
import { parseHostTier } from '../hostTier/hostTier.js'
import { parseCapacity, parseCount, parsePositive, parseSeeds } from './args.js'
import { defaultJobs, threadRunner } from './parallel.js'

/** The policies `kvc-sim compare` runs by default (see the README for why the baselines use sgl-router's Rust defaults). */
export const DEFAULT_COMPARE_POLICIES = [
  'kvc',
  'dp-cache-aware:defaults=rust',
  'sglang-cache-aware:defaults=rust',
  'round-robin',
] as const

interface CommonOpts {
  trace?: string
  format: string
  topology: string
  seeds: string
  timeScale: string
  capacity: string
  faults: string
  out: string
  pageSize?: string
  sessions?: string
  sharedPrefix?: string
  maxConcurrentSessions?: string
  hostTier: string
  bootstrap: string
  jobs?: string
  progress: boolean
  records?: boolean
}

function addCommon(cmd: Command, defaults: { seeds: string }): Command {
  return cmd
    .option('--trace <path>', 'replay a trace instead of the built-in agentic workload')
    .addOption(new Option('--format <format>', 'trace format').choices([...TRACE_FORMATS]).default('auto'))
    .option('--topology <shape>', 'cluster shape: nPmD (2P6D) or NxDP (8xDP)', '2P6D')
    .option('--seeds <seeds>', 'trial seeds: a count (3), a list (1,5,9) or a range (1..5)', defaults.seeds)
    .option('--time-scale <x>', 'divide think times and arrival gaps by x (10 = 10x compressed)', '1')
    .option('--capacity <tokens>', 'KV capacity per worker in tokens (200k, 1.5M) or unlimited', '200k')
    .option(
      '--faults <spec>',
      'fault schedule, e.g. "d-death:d1@120s+60s, admit-timeout~0.05", or a .json file',
      'none',
    )
    .option('--out <dir>', 'output folder for report.html and results.json', 'kvc-sim-out')
    .option('--page-size <tokens>', 'KV page size (default: 512 for Mooncake traces, else 16)')
    .option('--sessions <n>', 'sessions of the built-in workload (default 52)')
    .option(
      '--shared-prefix <tokens>',
      'tokens of the system prompt every session of the built-in workload starts with (default 6000)',
    )
    .option(
      '--max-concurrent-sessions <n>',
      "the replayer's session concurrency: at most n sessions at once, the next starts when one ends (default: no limit)",
    )
    .option(
      '--host-tier <size>',
      'a host KV tier per worker: none, a multiple of its KV pool (2x) or tokens (400k), optionally :disk',
      'none',
    )
    .option('--bootstrap <n>', 'bootstrap resamples for the 95% intervals', '200')
    .option('--jobs <n>', 'runs in parallel (worker threads; default: the number of cores)')
    .option('--no-progress', 'no progress bar')
}

function buildConfig(o: CommonOpts, policies: readonly string[]): ExperimentConfig {
  const topology = parseTopology(o.topology)
  for (const p of policies) parsePolicySpec(p)
  const seeds = parseSeeds(o.seeds)
  const timeScale = parsePositive('--time-scale', o.timeScale)
  const capacity = parseCapacity(o.capacity)
  const faults = parseFaults(o.faults)
  const hostTier = parseHostTier(o.hostTier)
  const workload: WorkloadSource =
    o.trace === undefined
      ? {
          kind: 'agentic',
          ...(o.sessions === undefined && o.sharedPrefix === undefined
            ? {}
            : {
                options: {
                  ...(o.sessions === undefined ? {} : { sessions: parseCount('--sessions', o.sessions, 1) }),
                  ...(o.sharedPrefix === undefined
                    ? {}
                    : { sharedPrefixTokens: parseCount('--shared-prefix', o.sharedPrefix) }),
                },
              }),
        }
      : { kind: 'trace', path: o.trace, format: o.format as TraceFormat }
  if (o.trace === undefined && o.format !== 'auto') {
    throw new SimError(
      'INVALID_OPTION',
      '--format needs --trace (the built-in workload has no format)',
      o.format,
    )
  }
  for (const [flag, v] of [
    ['--sessions', o.sessions],
    ['--shared-prefix', o.sharedPrefix],
  ] as const) {
    if (o.trace !== undefined && v !== undefined) {
      throw new SimError('INVALID_OPTION', `${flag} applies to the built-in workload only, not to --trace`, v)
    }
  }
  return {
    workload,
    topology,
    policies,
    seeds,
    timeScale,
    costModel: { capacityTokens: capacity },
    faults,
    ...(hostTier === undefined ? {} : { hostTier }),
    bootstrapResamples: parseCount('--bootstrap', o.bootstrap),
    ...(o.pageSize === undefined ? {} : { pageSize: parseCount('--page-size', o.pageSize, 1) }),
    ...(o.maxConcurrentSessions === undefined
      ? {}
      : { maxConcurrentSessions: parseCount('--max-concurrent-sessions', o.maxConcurrentSessions, 1) }),
  }
}

async function execute(
  o: CommonOpts,
  config: ExperimentConfig,
  io: Io,
  onResults?: (results: readonly RunResult[]) => void,
): Promise<ExperimentResult> {
  const tasks = config.policies.length * config.seeds.length
  const jobs = o.jobs === undefined ? defaultJobs() : parseCount('--jobs', o.jobs, 1)
  const progress = new Map<number, [number, number]>()
  const showBar = o.progress && io.isTTY
  const bar = showBar
    ? new SingleBar({
        format: ' {bar} {percentage}% | runs {runs}/{tasks} | {turns} turns | ETA {eta_formatted}',
        hideCursor: true,
        clearOnComplete: true,
        stream: process.stderr,
        etaBuffer: 50,
      })
    : undefined
  let finished = 0
  bar?.start(1000, 0, { runs: 0, tasks, turns: 0 })
  const started = performance.now()
  const result = await runExperiment(config, {
    runner: threadRunner(jobs),
    ...(onResults === undefined ? {} : { onResults }),
    onProgress: (task, ended, total) => {
      progress.set(task, [ended, total])
      let frac = 0
      let turns = 0
      finished = 0
      for (const [e, t] of progress.values()) {
        frac += t === 0 ? 1 : e / t
        turns += e
        if (e === t) finished++
      }
      if (bar !== undefined) bar.update(Math.floor((1000 * frac) / tasks), { runs: finished, tasks, turns })
      else if (ended === total && o.progress) {
        io.err(
          `kvc-sim: run ${finished}/${tasks} done (${((performance.now() - started) / 1000).toFixed(1)} s)`,
        )
      }
    },
  })
  bar?.stop()
  return result
}

function writeOutputs(outDir: string, result: ExperimentResult, io: Io): void {
  const dir = resolve(outDir)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'results.json'), toStableJson(result))
  writeFileSync(join(dir, 'report.html'), renderHtmlReport(result))
  io.out('')
  io.out(`report:  ${join(outDir, 'report.html')}`)
  io.out(`metrics: ${join(outDir, 'results.json')}`)
}

/** Where the CLI writes (replaceable in tests). */
export interface Io {
  readonly out: (line: string) => void
  readonly err: (line: string) => void
  readonly isTTY: boolean
}

const defaultIo: Io = {
  out: (l) => process.stdout.write(`${l}\n`),
  err: (l) => process.stderr.write(`${l}\n`),
  isTTY: process.stderr.isTTY === true,
}

/**
 * Build the `kvc-sim` command line program.
 *
 * @example
 * ```ts
 * import { buildProgram } from '@kvc/sim'
 * buildProgram().name() // 'kvc-sim'
 * ```
 */
export function buildProgram(io: Io = defaultIo): Command {
  const program = new Command('kvc-sim')
    .description(
      'Simulate a P/D LLM cluster in which the real kvc packages make every decision, and compare routing designs on agentic workloads.',
    )
    .version('0.0.0')
    .showHelpAfterError('(run kvc-sim --help for usage)')
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) })
    .exitOverride()

  addCommon(
    program
      .command('compare')
      .description(
        'Run several policies on the same trials (paired), print a comparison table, write report.html and results.json',
      )
      .option(
        '--policies <list>',
        `comma-separated policy specs (${POLICY_NAMES.join(', ')})`,
        DEFAULT_COMPARE_POLICIES.join(','),
      ),
    { seeds: '3' },
  ).action(async (o: CommonOpts & { policies: string }) => {
    const policies = o.policies
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '')
    const config = buildConfig(o, policies)
    const result = await execute(o, config, io)
    io.out(renderComparisonTable(result))
    writeOutputs(o.out, result, io)
  })

  addCommon(
    program
      .command('run')
      .description('Run one policy (one or more seeds) and write report.html and results.json')
      .option(
        '--policy <spec>',
        `policy spec (${POLICY_NAMES.join(', ')}), e.g. kvc:granularity=session`,
        'kvc',
      )
      .option('--records', 'also write every turn of every run to records.jsonl'),
    { seeds: '1' },
  ).action(async (o: CommonOpts & { policy: string; records?: boolean }) => {
    const config = buildConfig(o, [o.policy])
    let runs: readonly RunResult[] = []
    const result = await execute(o, config, io, (r) => {
      runs = r
    })
    io.out(renderComparisonTable(result))
    writeOutputs(o.out, result, io)
    if (o.records === true) {
      const lines: string[] = []
      for (const r of runs) for (const rec of r.records) lines.push(JSON.stringify({ seed: r.seed, ...rec }))
      writeFileSync(join(resolve(o.out), 'records.jsonl'), `${lines.join('\n')}\n`)
      io.out(`records: ${join(o.out, 'records.jsonl')}`)
    }
  })

  const trace = program.command('trace').description('Inspect trace files')
  trace
    .command('stats')
    .description('Sizes, rates, length distributions and the ideal prefix hit ratio of a trace')
    .argument('[path]', 'trace file or folder (or use --trace)')
    .option('--trace <path>', 'trace file or folder')
    .addOption(new Option('--format <format>', 'trace format').choices([...TRACE_FORMATS]).default('auto'))
    .option(
      '--page-size <tokens>',
      'page size of the ideal-cache computation (default: the trace block, else 16)',
    )
    .option('--json', 'print JSON instead of text')
    .action(
      (
        path: string | undefined,
        o: { trace?: string; format: string; pageSize?: string; json?: boolean },
      ) => {
        const p = path ?? o.trace
        if (p === undefined)
          throw new SimError(
            'INVALID_OPTION',
            'trace stats needs a trace path (argument or --trace)',
            undefined,
          )
        const w = loadTrace(p, { format: o.format as TraceFormat })
        const s = computeTraceStats(
          w,
          o.pageSize === undefined ? undefined : parseCount('--page-size', o.pageSize, 1),
        )
        if (o.json === true) {
          io.out(toStableJson({ ...s, notes: w.notes }).trimEnd())
          return
        }
        const f = (x: number) => (Number.isInteger(x) ? x.toLocaleString('en') : x.toFixed(2))
        const sum = (
          label: string,
          v: { mean: number; p50: number; p99: number; max: number } | undefined,
          unit = '',
        ) =>
          v === undefined
            ? []
            : [
                `${label.padEnd(24)} mean ${f(v.mean)}${unit} · p50 ${f(v.p50)}${unit} · p99 ${f(v.p99)}${unit} · max ${f(v.max)}${unit}`,
              ]
        const lines = [
          `${'trace'.padEnd(24)} ${s.name} (${s.source})`,
          `${'requests'.padEnd(24)} ${f(s.requests)}${s.sessions > 0 ? ` in ${f(s.sessions)} sessions` : ' (no sessions)'}`,
          ...sum('turns per session', s.turnsPerSession),
          `${'span'.padEnd(24)} ${f(s.spanS)} s · ${f(s.ratePerS)} requests/s`,
          ...sum('input tokens', s.inputTokens),
          ...sum('output tokens', s.outputTokens),
          ...sum('think time', s.thinkS, ' s'),
          `${'pages'.padEnd(24)} ${f(s.totalPages)} of ${s.pageSize} tokens, ${f(s.distinctPages)} distinct`,
          `${'ideal prefix hit ratio'.padEnd(24)} ${(s.idealHitRatioPages * 100).toFixed(2)}% of pages · ${(s.idealHitRatioTokens * 100).toFixed(2)}% of tokens (unlimited cache)`,
          ...w.notes.map((n) => `${'note'.padEnd(24)} ${n}`),
        ]
        for (const l of lines) io.out(l)
      },
    )
  return program
}

/**
 * Run the CLI with `argv` (without the node and script entries); resolves to the exit code:
 * 0 success, 1 bad usage (unknown flag, missing argument), 2 bad input (a flag's value, a trace,
 * a fault spec), 70 an internal error. Never prints a stack trace unless `KVC_SIM_DEBUG` is set.
 *
 * @example
 * ```ts
 * import { runCli } from '@kvc/sim'
 * // a trace fetched as docs/design/traces.md says
 * const code = await runCli(['trace', 'stats', 'traces/synthetic_trace.jsonl'])
 * ```
 */
export async function runCli(argv: readonly string[], io: Io = defaultIo): Promise<number> {
  const program = buildProgram(io)
  try {
    await program.parseAsync([...argv], { from: 'user' })
    return 0
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander already printed its message (help and version exit with code 0).
      return err.exitCode === 0 ? 0 : 1
    }
    if (err instanceof SimError) {
      io.err(`kvc-sim: ${err.message}`)
      return 2
    }
    const e = err as Error
    io.err(`kvc-sim: internal error: ${e?.message ?? String(err)}`)
    if (process.env.KVC_SIM_DEBUG !== undefined && e?.stack !== undefined) io.err(e.stack)
    else io.err('(set KVC_SIM_DEBUG=1 for details)')
    return 70
  }
}

/** Default KV capacity, for help texts and docs. */
export const DEFAULT_CAPACITY_TOKENS: number = DEFAULT_COST_MODEL.capacityTokens

const isMain = (() => {
  const entry = process.argv[1]
  if (entry === undefined) return false
  const self = new URL(import.meta.url).pathname
  return resolve(entry) === self || /[/\\]kvc-sim(\.js|\.cjs|\.mjs)?$/.test(entry)
})()

if (isMain) {
  runCli(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code
    },
    () => {
      process.exitCode = 70
    },
  )
}
