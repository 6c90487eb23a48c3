import { pathToFileURL } from 'node:url'
import {
  type AgenticWorkloadOptions,
  type ExperimentConfig,
  POLICY_NAMES,
  TRACE_FORMATS,
  type WorkloadSource,
  parseCapacity,
  parseCount,
  parsePolicySpec,
  parsePositive,
  parseSeeds,
  parseTopology,
  renderComparisonTable,
} from '@kvc/sim'
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander'
import { type ReplayOptions, type Via, runReplay } from './replay.js'
import { compareResults, renderComparison, writeOutputs } from './report.js'
import { emulatedTarget, externalTarget, readWorkersFile } from './targets.js'

/** Output of the command (injectable for tests). */
export interface Io {
  out(line: string): void
  err(line: string): void
}

const stdio: Io = { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) }

const AGENTIC_KEYS = [
  'sessions',
  'sharedPrefixTokens',
  'taskTokensMedian',
  'taskTokensSigma',
  'appendMedian',
  'appendSigma',
  'appendMin',
  'appendMax',
  'outputMedian',
  'outputSigma',
  'outputMin',
  'outputMax',
  'peakInputMin',
  'peakInputMax',
  'maxTurnsPerSession',
  'sessionStartMeanS',
  'vocabSize',
]

function keyValue(v: string, prev: Record<string, number> = {}): Record<string, number> {
  const m = /^([A-Za-z]+)=([0-9.eE+-]+)$/.exec(v)
  if (m === null || Number.isNaN(Number(m[2])))
    throw new InvalidArgumentError(`expected key=number, got ${JSON.stringify(v)}`)
  if (!AGENTIC_KEYS.includes(m[1]!))
    throw new InvalidArgumentError(`unknown workload option ${m[1]} (one of ${AGENTIC_KEYS.join(', ')})`)
  return { ...prev, [m[1]!]: Number(m[2]) }
}

/** The `kvc-replay` command. */
export function replayCommand(io: Io = stdio): Command {
  return new Command('kvc-replay')
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) })
    .description(
      'Replay a workload (the simulator’s agentic generator or a trace) against real SGLang workers or emulators, record the simulator’s metrics, and optionally compare with the simulation.',
    )
    .option('--trace <path>', 'replay a trace file instead of the built-in agentic workload')
    .addOption(new Option('--format <format>', 'trace format').choices([...TRACE_FORMATS]).default('auto'))
    .option('--trace-block-tokens <n>', 'Mooncake traces: tokens per hash id (default 512)')
    .option('--page-tokens <n>', 'Mooncake traces: tokens each hash id expands to (default: the block)')
    .option('--sessions <n>', 'sessions of the built-in workload (default 52)')
    .option(
      '--workload <key=value>',
      'an option of the built-in workload, e.g. maxTurnsPerSession=4 (repeatable)',
      keyValue,
    )
    .option(
      '--topology <shape>',
      'nPmD or NxDP (emulated workers: what is started; real workers: must match)',
      '1P2D',
    )
    .option(
      '--policies <list>',
      `comma-separated policy specs (${POLICY_NAMES.join(', ')}, with :key=value options)`,
      'kvc',
    )
    .option('--seeds <seeds>', 'trial seeds: a count, a list or a range', '1')
    .option('--time-scale <x>', 'divide think times and arrival gaps by x', '1')
    .option('--capacity <tokens>', 'KV capacity per worker (emulated workers; the simulation)', '200k')
    .option('--page-size <tokens>', 'KV page size (default: the workload’s, else 16)')
    .option(
      '--workers <where>',
      '"emulate" (start emulators per run) or a JSON file with a "workers" list',
      'emulate',
    )
    .option('--emulator-scale <x>', 'emulated workers: latency scale (1 = calibrated, smaller = faster)', '1')
    .option(
      '--via <how>',
      '"direct" (embedded router), "proxy" (a kvc proxy in process) or a proxy URL',
      'direct',
    )
    .option('--vocab-size <n>', 'token ids are sent modulo this (the model’s vocabulary)', '151936')
    .option('--horizon <seconds>', 'turns still running this long after a run started fail (cause horizon)')
    .option('--compare-sim', 'also simulate the same experiment and print both verdicts side by side')
    .option('--bootstrap <n>', 'bootstrap resamples for the 95% intervals', '200')
    .option(
      '--out <dir>',
      'output folder (results.json, report.html; simulated.* with --compare-sim)',
      'kvc-replay-out',
    )
    .exitOverride()
}

/** Parses the command line into the experiment and the replay options. */
export function parseReplayArgs(
  argv: readonly string[],
  io: Io = stdio,
): {
  config: ExperimentConfig
  options: ReplayOptions & { compare: boolean }
  out: string
  describe: { target: string; via: string; vocabSize: number }
} {
  const cmd = replayCommand(io)
  cmd.parse([...argv], { from: 'user' })
  const o = cmd.opts<Record<string, string | boolean | Record<string, number> | undefined>>()
  let workload: WorkloadSource
  if (typeof o.trace === 'string') {
    if (o.sessions !== undefined || o.workload !== undefined)
      throw new Error('--sessions and --workload apply to the built-in workload, not to --trace')
    workload = {
      kind: 'trace',
      path: o.trace,
      format: o.format as never,
      ...(o.traceBlockTokens === undefined
        ? {}
        : { traceBlockTokens: parseCount('--trace-block-tokens', o.traceBlockTokens as string, 1) }),
      ...(o.pageTokens === undefined
        ? {}
        : { pageTokens: parseCount('--page-tokens', o.pageTokens as string, 1) }),
    }
  } else {
    const opts: Partial<AgenticWorkloadOptions> = { ...(o.workload as Record<string, number> | undefined) }
    if (o.sessions !== undefined)
      (opts as Record<string, number>).sessions = parseCount('--sessions', o.sessions as string, 1)
    workload = { kind: 'agentic', options: opts }
  }
  const policies = (o.policies as string)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
  for (const p of policies) parsePolicySpec(p) // named errors before anything starts
  const topology = parseTopology(o.topology as string)
  const capacity = parseCapacity(o.capacity as string)
  const config: ExperimentConfig = {
    workload,
    topology,
    policies,
    seeds: parseSeeds(o.seeds as string),
    timeScale: parsePositive('--time-scale', o.timeScale as string),
    costModel: { capacityTokens: capacity },
    bootstrapResamples: parseCount('--bootstrap', o.bootstrap as string),
    ...(o.pageSize === undefined ? {} : { pageSize: parseCount('--page-size', o.pageSize as string, 1) }),
  }
  const workers = o.workers as string
  const target =
    workers === 'emulate'
      ? emulatedTarget({
          capacityTokens: Number.isFinite(capacity) ? capacity : 1_000_000,
          scale: parsePositive('--emulator-scale', o.emulatorScale as string),
        })
      : externalTarget(readWorkersFile(workers))
  const viaArg = o.via as string
  const via: Via =
    viaArg === 'direct'
      ? { kind: 'direct' }
      : viaArg === 'proxy'
        ? { kind: 'proxy' }
        : /^https?:\/\//.test(viaArg)
          ? { kind: 'url', url: viaArg.replace(/\/+$/, '') }
          : (() => {
              throw new Error(`--via must be direct, proxy or an http(s) URL, got ${JSON.stringify(viaArg)}`)
            })()
  if (via.kind === 'url' && policies.length > 1)
    throw new Error('--via <url>: the proxy runs one policy; give exactly one in --policies (its label)')
  const vocabSize = parseCount('--vocab-size', o.vocabSize as string, 2)
  return {
    config,
    options: {
      target,
      via,
      vocabSize,
      compare: o.compareSim === true,
      ...(o.horizon === undefined ? {} : { horizonS: parsePositive('--horizon', o.horizon as string) }),
    },
    out: o.out as string,
    describe: { target: workers === 'emulate' ? 'emulated workers' : workers, via: viaArg, vocabSize },
  }
}

/** Runs the command; returns the exit code (2: bad arguments, 1: the replay failed). */
export async function main(argv: readonly string[], io: Io = stdio): Promise<number> {
  let parsed: ReturnType<typeof parseReplayArgs>
  try {
    parsed = parseReplayArgs(argv, io)
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2
    io.err(`kvc-replay: ${(err as Error).message}`)
    return 2
  }
  const { config, options, out, describe } = parsed
  const started = new Date()
  let last = 0
  try {
    const { real, simulated } = await runReplay(config, {
      ...options,
      onProgress: (task, ended, total) => {
        const t = performance.now()
        if (ended === total || t - last > 2_000) {
          last = t
          io.err(`run ${task + 1}: ${ended}/${total} turns`)
        }
      },
    })
    const info = {
      ...describe,
      startedAt: started.toISOString(),
      wallS: (Date.now() - started.getTime()) / 1000,
    }
    io.out(renderComparisonTable(real))
    if (simulated !== undefined) {
      io.out('\nsimulated (same workload, topology, policies, seeds):')
      io.out(renderComparisonTable(simulated))
      io.out('\nsimulated vs replayed:')
      io.out(renderComparison(compareResults(simulated, real)))
    }
    for (const f of writeOutputs(out, real, info, simulated)) io.out(`wrote ${f}`)
    return 0
  } catch (err) {
    io.err(`kvc-replay: ${(err as Error).message}`)
    return 1
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code
    },
    (err: unknown) => {
      process.stderr.write(`kvc-replay: ${(err as Error)?.stack ?? String(err)}\n`)
      process.exitCode = 1
    },
  )
}
