#!/usr/bin/env node
import { readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { Command, CommanderError, Option } from 'commander'
import { POLICY_NAMES, parsePolicySpec } from '../adapters/router.js'
import { type RunResult, peakRssMB } from '../metrics/runResult.js'
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
import { SWEEP_AXES, type SweepAxis, type SweepResult, runSweep } from '../protocol/sweep.js'
import { renderHtmlReport } from '../report/html.js'
import { toStableJson } from '../report/json.js'
import { renderSweepReport } from '../report/sweepHtml.js'
import { renderComparisonTable, renderSweepTable } from '../report/table.js'
import { experimentVerdict, sweepVerdict, verdictText } from '../report/verdict.js'
import { type SimGranularity, autoGranularity } from '../granularity/kvGeometry.js'
import { TRACE_FORMATS, type TraceFormat, detectTraceFormat, loadTrace } from '../workload/loadTrace.js'
import { scenarioByName, SCENARIOS } from '../workload/scenarios.js'
import { computeTraceStats } from '../workload/stats.js'
import { parseHostTier } from '../hostTier/hostTier.js'
import { parseCapacity, parseCount, parsePositive, parseSeeds, parseSlo } from './args.js'
import { prepareOutDir } from './outDir.js'
import { defaultJobs, summaryHelper, threadRunner } from './parallel.js'
import { Progress } from './progress.js'

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
  granularity: string
  topology: string
  seeds: string
  timeScale: string
  capacity: string
  faults: string
  out: string
  pageSize?: string
  sessions?: string
  turnsPerSession?: string
  scenario?: string
  sharedPrefix?: string
  maxConcurrentSessions?: string
  hostTier: string
  bootstrap: string
  slo?: string
  jobs?: string
  progress: boolean
  records?: boolean
}

function addCommon(cmd: Command, defaults: { seeds: string }): Command {
  return cmd
    .option('--trace <path>', 'replay a trace instead of the built-in agentic workload')
    .addOption(new Option('--format <format>', 'trace format').choices([...TRACE_FORMATS]).default('auto'))
    .addOption(
      new Option(
        '--granularity <unit>',
        'what the caches count: token, block (hash-id traces: one unit per half block, the same pages), or auto (block when a hash-id trace allows it)',
      )
        .choices(['auto', 'token', 'block'])
        .default('auto'),
    )
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
    .addOption(
      new Option(
        '--scenario <name>',
        'a named setting of the built-in workload and cluster (dynamo-agentic: 2,200 sessions × 20 turns, 8 workers of 16,384 × 64-token blocks, 1,024 sessions at once); flags given replace its values',
      ).choices(Object.keys(SCENARIOS)),
    )
    .option('--sessions <n>', 'sessions of the built-in workload (default 52)')
    .option(
      '--turns-per-session <n>',
      'every session of the built-in workload has exactly n turns (default: a session ends at its drawn peak input)',
    )
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
    .option(
      '--slo <slos>',
      'goodput SLOs: ttft=<time>,tpot=<time> (default ttft=2s,tpot=25ms; times in s or ms)',
    )
    .option('--jobs <n>', 'runs in parallel (worker threads; default: the number of cores)')
    .option('--no-progress', 'no progress bar')
}

/**
 * `o` with a `--scenario`'s values for the flags not given on the command line (`given` says
 * whether a flag was).
 */
function applyScenario(o: CommonOpts, given: (flag: keyof CommonOpts) => boolean): CommonOpts {
  if (o.scenario === undefined) return o
  if (o.trace !== undefined) {
    throw new SimError(
      'INVALID_OPTION',
      '--scenario applies to the built-in workload only, not to --trace',
      o.scenario,
    )
  }
  const s = scenarioByName(o.scenario)
  const out: Record<string, unknown> = { ...o }
  const set = (flag: keyof CommonOpts, v: number | string | undefined) => {
    if (!given(flag) && v !== undefined) out[flag] = String(v)
  }
  set('topology', s.topology)
  set('capacity', s.capacityTokens)
  set('pageSize', s.pageSize)
  set('maxConcurrentSessions', s.maxConcurrentSessions)
  set('sessions', s.workload.sessions)
  set('turnsPerSession', s.workload.turnsPerSession)
  set('sharedPrefix', s.workload.sharedPrefixTokens)
  return out as unknown as CommonOpts
}

function buildConfig(
  o0: CommonOpts,
  policies: readonly string[],
  given: (flag: keyof CommonOpts) => boolean = () => true,
): ExperimentConfig {
  const o = applyScenario(o0, given)
  const topology = parseTopology(o.topology)
  for (const p of policies) parsePolicySpec(p)
  const seeds = parseSeeds(o.seeds)
  const timeScale = parsePositive('--time-scale', o.timeScale)
  const capacity = parseCapacity(o.capacity)
  const faults = parseFaults(o.faults)
  const hostTier = parseHostTier(o.hostTier)
  const pageSize = o.pageSize === undefined ? undefined : parseCount('--page-size', o.pageSize, 1)
  if (o.trace === undefined && o.granularity === 'block') {
    throw new SimError(
      'INVALID_OPTION',
      '--granularity block needs a hash-id trace (--trace, Mooncake format); the built-in workload is token-level',
      o.granularity,
    )
  }
  if (o.trace === undefined && o.format !== 'auto') {
    throw new SimError(
      'INVALID_OPTION',
      '--format needs --trace (the built-in workload has no format)',
      o.format,
    )
  }
  for (const [flag, v] of [
    ['--sessions', o.sessions],
    ['--turns-per-session', o.turnsPerSession],
    ['--shared-prefix', o.sharedPrefix],
  ] as const) {
    if (o.trace !== undefined && v !== undefined) {
      throw new SimError('INVALID_OPTION', `${flag} applies to the built-in workload only, not to --trace`, v)
    }
  }
  const workload: WorkloadSource =
    o.trace === undefined
      ? {
          kind: 'agentic',
          ...(o.sessions === undefined &&
          o.sharedPrefix === undefined &&
          o.turnsPerSession === undefined &&
          o.scenario === undefined
            ? {}
            : {
                options: {
                  ...(o.scenario === undefined ? {} : scenarioByName(o.scenario).workload),
                  ...(o.sessions === undefined ? {} : { sessions: parseCount('--sessions', o.sessions, 1) }),
                  ...(o.turnsPerSession === undefined
                    ? {}
                    : { turnsPerSession: parseCount('--turns-per-session', o.turnsPerSession, 1) }),
                  ...(o.sharedPrefix === undefined
                    ? {}
                    : { sharedPrefixTokens: parseCount('--shared-prefix', o.sharedPrefix) }),
                },
              }),
        }
      : {
          kind: 'trace',
          path: o.trace,
          format: o.format as TraceFormat,
          granularity:
            o.granularity === 'auto'
              ? autoGranularity({
                  format: o.format === 'auto' ? detectTraceFormat(o.trace) : o.format,
                  pageSize,
                  sync: policies.some((p) => parsePolicySpec(p).sync !== undefined),
                })
              : (o.granularity as SimGranularity),
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
    ...(o.slo === undefined ? {} : { slo: parseSlo(o.slo) }),
    ...(pageSize === undefined ? {} : { pageSize }),
    ...(o.maxConcurrentSessions === undefined
      ? {}
      : { maxConcurrentSessions: parseCount('--max-concurrent-sessions', o.maxConcurrentSessions, 1) }),
  }
}

/** Whether a flag of `cmd` was given on the command line (not its default). */
function givenOn(cmd: Command): (flag: keyof CommonOpts) => boolean {
  return (flag) => cmd.getOptionValueSource(flag) === 'cli'
}

function jobsOf(o: CommonOpts): number {
  return o.jobs === undefined ? defaultJobs() : parseCount('--jobs', o.jobs, 1)
}

async function execute(
  o: CommonOpts,
  config: ExperimentConfig,
  io: Io,
  onResults?: (results: readonly RunResult[]) => void,
): Promise<ExperimentResult> {
  const tasks = config.policies.length * config.seeds.length
  const jobs = jobsOf(o)
  const progress = new Progress(
    io,
    o.progress,
    tasks,
    `${tasks} run${tasks === 1 ? '' : 's'} (${config.policies.length} ${config.policies.length === 1 ? 'policy' : 'policies'} × ${config.seeds.length} seed${config.seeds.length === 1 ? '' : 's'}) on ${Math.min(jobs, tasks)} thread${Math.min(jobs, tasks) === 1 ? '' : 's'}…`,
  )
  const helper = summaryHelper(jobs, tasks, config.workload)
  try {
    return await runExperiment(config, {
      runner: threadRunner(jobs),
      ...(helper === undefined ? {} : { prepare: helper.prepare }),
      ...(helper?.share === undefined ? {} : { share: helper.share }),
      ...(onResults === undefined ? {} : { onResults }),
      onProgress: (task, ended, total) => progress.update(task, ended, total),
    })
  } finally {
    helper?.close()
    progress.stop()
  }
}

/**
 * What running the command took: wall time and the process's peak resident set size (every
 * worker thread included). Printed, never written to `results.json`, which stays byte-identical
 * for the same configuration.
 */
interface Resources {
  readonly wallS: number
  readonly peakRssMB: number
}

function writeOutputs(
  outDir: string,
  result: ExperimentResult,
  io: Io,
  started: number,
  sweep?: SweepResult,
): void {
  const dir = prepareOutDir(outDir)
  const resources: Resources = {
    wallS: Math.round(performance.now() - started) / 1000,
    peakRssMB: peakRssMB(),
  }
  writeFileSync(join(dir, 'results.json'), toStableJson(result))
  writeFileSync(join(dir, 'report.html'), renderHtmlReport(result, sweep === undefined ? {} : { sweep }))
  io.out('')
  io.out(`report:  ${join(outDir, 'report.html')}`)
  io.out(`metrics: ${join(outDir, 'results.json')}`)
  io.out(`took:    ${resources.wallS.toFixed(1)} s, peak RSS ${resources.peakRssMB} MB`)
}

function splitList(s: string): string[] {
  return s
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '')
}

const DEFAULT_SWEEP_VALUES: Record<Exclude<SweepAxis, 'pd-ratio'>, string> = {
  'time-scale': '1,1.5,2,3,4,6,8,10',
  'max-concurrent-sessions': '4,8,16,32,52',
  sessions: '13,26,52,78,104',
  capacity: '100k,150k,200k,300k,400k',
}

/** The grid of `--values` (or the axis's default), parsed as the axis's own option would be. */
function sweepValues(axis: SweepAxis, given: string | undefined, topology: string): (number | string)[] {
  if (axis === 'pd-ratio') {
    if (given !== undefined) return splitList(given).map((t) => formatTopologyOf(t))
    const t = parseTopology(topology)
    const n = t.kind === 'pd' ? t.prefill + t.decode : t.workers
    const out: string[] = []
    for (let p = 1; p <= n - p; p++) out.push(`${p}P${n - p}D`)
    return out
  }
  const list = splitList(given ?? DEFAULT_SWEEP_VALUES[axis])
  switch (axis) {
    case 'time-scale':
      return list.map((v) => parsePositive('--values', v))
    case 'capacity':
      return list.map(parseCapacity)
    default:
      return list.map((v) => parseCount('--values', v, 1))
  }
}

function formatTopologyOf(t: string): string {
  const p = parseTopology(t)
  return p.kind === 'pd' ? `${p.prefill}P${p.decode}D` : `${p.workers}xDP`
}

/** A sweep.json for `compare --sweep`: readable, a sweep, and about some of these policies. */
function readSweep(path: string, policies: readonly string[]): SweepResult {
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'))
  } catch (err) {
    throw new SimError(
      'INVALID_OPTION',
      `--sweep ${path}: cannot read it as JSON (${(err as Error).message})`,
      path,
    )
  }
  const s = parsed as Partial<SweepResult>
  if (s.config === undefined || !Array.isArray(s.points) || !Array.isArray(s.crossovers)) {
    throw new SimError(
      'INVALID_OPTION',
      `--sweep ${path}: not a kvc-sim sweep.json (no config, points, crossovers)`,
      path,
    )
  }
  const shared = s.config.policies.filter((p) => policies.includes(p))
  if (!shared.includes(s.config.reference) || shared.length < 2) {
    throw new SimError(
      'INVALID_OPTION',
      `--sweep ${path}: its policies (${s.config.policies.join(', ')}) do not include this comparison's reference and another of its policies`,
      path,
    )
  }
  return s as SweepResult
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
      )
      .option(
        '--sweep <file>',
        "a kvc-sim sweep's sweep.json: its crossovers join the verdict (same workload and policies)",
      ),
    { seeds: '3' },
  ).action(async (o: CommonOpts & { policies: string; sweep?: string }, cmd: Command) => {
    const started = performance.now()
    const config = buildConfig(o, splitList(o.policies), givenOn(cmd))
    const sweep = o.sweep === undefined ? undefined : readSweep(o.sweep, config.policies)
    prepareOutDir(o.out)
    const result = await execute(o, config, io)
    io.out(verdictText(experimentVerdict(result, sweep)))
    io.out('')
    io.out(renderComparisonTable(result))
    writeOutputs(o.out, result, io, started, sweep)
  })

  addCommon(
    program
      .command('sweep')
      .description(
        'Run the comparison over a grid of one axis (paired, N seeds per point), name the crossovers, write sweep.html and sweep.json',
      )
      .addOption(new Option('--axis <axis>', 'what to vary').choices([...SWEEP_AXES]).default('time-scale'))
      .option(
        '--values <list>',
        'the grid, comma-separated (default per axis: time-scale 1,1.5,2,3,4,6,8,10; max-concurrent-sessions 4,8,16,32,52; sessions 13,26,52,78,104; capacity 100k,150k,200k,300k,400k; pd-ratio every nPmD split of the topology with n ≤ m)',
      )
      .option(
        '--policies <list>',
        `comma-separated policy specs (${POLICY_NAMES.join(', ')})`,
        DEFAULT_COMPARE_POLICIES.join(','),
      ),
    { seeds: '3' },
  ).action(async (o: CommonOpts & { policies: string; axis: SweepAxis; values?: string }, cmd: Command) => {
    const config = buildConfig(o, splitList(o.policies), givenOn(cmd))
    const values = sweepValues(o.axis, o.values, o.topology)
    prepareOutDir(o.out)
    const tasks = values.length * config.policies.length * config.seeds.length
    const jobs = jobsOf(o)
    const progress = new Progress(
      io,
      o.progress,
      tasks,
      `sweep of ${o.axis} over ${values.length} points: ${tasks} runs (${config.policies.length} policies × ${config.seeds.length} seeds per point) on ${Math.min(jobs, tasks)} threads…`,
    )
    const started = performance.now()
    let result: SweepResult
    try {
      result = await runSweep(
        { ...config, axis: o.axis, values },
        { runner: threadRunner(jobs), onProgress: (t, e, n) => progress.update(t, e, n) },
      )
    } finally {
      progress.stop()
    }
    const wallS = (performance.now() - started) / 1000
    io.out(verdictText(sweepVerdict(result)))
    io.out('')
    io.out(renderSweepTable(result))
    const dir = prepareOutDir(o.out)
    writeFileSync(join(dir, 'sweep.json'), toStableJson(result))
    writeFileSync(join(dir, 'sweep.html'), renderSweepReport(result))
    io.out('')
    io.out(`${tasks} runs in ${wallS.toFixed(1)} s wall on ${Math.min(jobs, tasks)} threads`)
    io.out(`report:  ${join(o.out, 'sweep.html')}`)
    io.out(`metrics: ${join(o.out, 'sweep.json')}`)
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
  ).action(async (o: CommonOpts & { policy: string; records?: boolean }, cmd: Command) => {
    const started = performance.now()
    const config = buildConfig(o, [o.policy], givenOn(cmd))
    prepareOutDir(o.out)
    let runs: readonly RunResult[] = []
    const result = await execute(o, config, io, (r) => {
      runs = r
    })
    io.out(verdictText(experimentVerdict(result)))
    io.out('')
    io.out(renderComparisonTable(result))
    writeOutputs(o.out, result, io, started)
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
        const pageSize = o.pageSize === undefined ? undefined : parseCount('--page-size', o.pageSize, 1)
        // Block granularity when the trace allows it: the same figures from far fewer entries.
        const granularity = autoGranularity({
          format: o.format === 'auto' ? detectTraceFormat(p) : o.format,
          pageSize,
        })
        const w = loadTrace(p, { format: o.format as TraceFormat, granularity })
        const s = computeTraceStats(w, pageSize)
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
