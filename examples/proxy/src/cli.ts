import { pathToFileURL } from 'node:url'
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander'
import {
  PROXY_POLICIES,
  type ProxyConfig,
  type ProxyConfigInput,
  type WorkerConfig,
  readConfigFile,
  resolveConfig,
} from './config.js'
import { ProxyError } from './errors.js'
import { createProxy } from './server.js'
import { maskSecrets } from './tenancy/authConfig.js'

function intArg(name: string) {
  return (v: string): number => {
    if (!/^\d+$/.test(v)) throw new InvalidArgumentError(`${name} must be a non-negative integer`)
    return Number(v)
  }
}

function workerArg(role: 'prefill' | 'decode') {
  return (v: string, prev: WorkerConfig[] = []): WorkerConfig[] => {
    const eq = v.indexOf('=')
    if (eq <= 0) throw new InvalidArgumentError(`expected id=url, got ${JSON.stringify(v)}`)
    return [...prev, { id: v.slice(0, eq), role, url: v.slice(eq + 1) }]
  }
}

function keyValue(v: string, prev: Record<string, unknown> = {}): Record<string, unknown> {
  const eq = v.indexOf('=')
  if (eq <= 0) throw new InvalidArgumentError(`expected key=value, got ${JSON.stringify(v)}`)
  const raw = v.slice(eq + 1)
  const value =
    raw === 'true'
      ? true
      : raw === 'false'
        ? false
        : raw !== '' && !Number.isNaN(Number(raw))
          ? Number(raw)
          : raw
  return { ...prev, [v.slice(0, eq)]: value }
}

/** The command line: every option of the configuration file, flags winning over the file. */
export function proxyCommand(): Command {
  return new Command('kvc-proxy')
    .description(
      'OpenAI-compatible, session-aware proxy in front of SGLang prefill (P) and decode (D) workers, routing with kvc-router.',
    )
    .option('-c, --config <file>', 'JSON configuration file (flags override it)')
    .option('--host <host>', 'listen address (listen.host)')
    .option('-p, --port <port>', 'listen port (listen.port; 0 = any)', intArg('--port'))
    .option(
      '--prefill <id=url>',
      'a prefill worker (repeatable; replaces the file’s workers)',
      workerArg('prefill'),
    )
    .option(
      '--decode <id=url>',
      'a decode worker (repeatable; replaces the file’s workers)',
      workerArg('decode'),
    )
    .addOption(new Option('--policy <name>', 'routing policy').choices(PROXY_POLICIES))
    .addOption(new Option('--tokenizer <mode>', 'prompt token counting').choices(['estimate', 'emulator']))
    .option('--page-size <n>', 'router.pageSize: tokens per KV block, as the workers', intArg('--page-size'))
    .option(
      '--tau-append <n>',
      'router.tauAppend: largest append a D prefills itself',
      intArg('--tau-append'),
    )
    .option('--router <key=value>', 'any kvc-router parameter, e.g. tauReject=3 (repeatable)', keyValue)
    .option('--session-header <name>', 'header carrying the session id (session.header)')
    .option(
      '--session-sources <list>',
      'comma list of header, session_id, user, prefix-hash (session.sources)',
    )
    .option('--max-body-bytes <n>', 'limits.maxBodyBytes', intArg('--max-body-bytes'))
    .option('--max-prompt-tokens <n>', 'limits.maxPromptTokens', intArg('--max-prompt-tokens'))
    .addOption(new Option('--kv-events <mode>', 'KV events of the D workers').choices(['auto', 'off']))
    .option('--decision-log <dest>', 'stdout, stderr, off, or a file (appended)')
    .option('--health-interval-ms <n>', 'health.intervalMs', intArg('--health-interval-ms'))
    .option('--loads-interval-ms <n>', 'loads.intervalMs (0 = no polling)', intArg('--loads-interval-ms'))
    .option('--process-metrics', 'also export process metrics (CPU, memory, event loop)')
    .option(
      '--state-store <url>',
      'shared router state for several replicas: memory (default), nats://host:port or redis://host:port (stateStore.url)',
    )
    .option('--state-store-name <name>', 'one name per group of replicas sharing the store (stateStore.name)')
    .option('--replica-id <id>', 'this replica’s id in the shared store (stateStore.replicaId)')
    .option(
      '--tenants-file <file>',
      'JSON file {"tenants": [...]} of API keys and tenants, reloaded on SIGHUP and when it changes (auth.tenantsFile)',
    )
    .option('--turn-deadline-ms <n>', 'deadlines.turnMs: a turn’s deadline', intArg('--turn-deadline-ms'))
    .option('--print-config', 'print the resolved configuration and exit')
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) })
}

/** Parses the command line (without the node and script arguments) into a resolved configuration. */
export function configFromArgs(argv: readonly string[]): { config: ProxyConfig; printConfig: boolean } {
  const cmd = proxyCommand()
  cmd.parse([...argv], { from: 'user' })
  const o = cmd.opts<Record<string, unknown>>()
  const file: ProxyConfigInput = typeof o.config === 'string' ? readConfigFile(o.config) : {}
  const workers = [...((o.prefill as WorkerConfig[]) ?? []), ...((o.decode as WorkerConfig[]) ?? [])]
  const router = {
    ...file.router,
    ...(o.pageSize === undefined ? {} : { pageSize: o.pageSize as number }),
    ...(o.tauAppend === undefined ? {} : { tauAppend: o.tauAppend as number }),
    ...((o.router as Record<string, unknown>) ?? {}),
  }
  const input: ProxyConfigInput = {
    ...file,
    listen: {
      ...file.listen,
      ...(o.host === undefined ? {} : { host: o.host as string }),
      ...(o.port === undefined ? {} : { port: o.port as number }),
    },
    ...(workers.length === 0 ? {} : { workers }),
    ...(o.policy === undefined ? {} : { policy: o.policy as string }),
    ...(o.tokenizer === undefined ? {} : { tokenizer: o.tokenizer as string }),
    router,
    session: {
      ...file.session,
      ...(o.sessionHeader === undefined ? {} : { header: o.sessionHeader as string }),
      ...(o.sessionSources === undefined
        ? {}
        : { sources: (o.sessionSources as string).split(',').map((s) => s.trim()) as never }),
    },
    limits: {
      ...file.limits,
      ...(o.maxBodyBytes === undefined ? {} : { maxBodyBytes: o.maxBodyBytes as number }),
      ...(o.maxPromptTokens === undefined ? {} : { maxPromptTokens: o.maxPromptTokens as number }),
    },
    ...(o.kvEvents === undefined ? {} : { kvEvents: o.kvEvents as string }),
    ...(o.decisionLog === undefined ? {} : { decisionLog: o.decisionLog as string }),
    health: {
      ...file.health,
      ...(o.healthIntervalMs === undefined ? {} : { intervalMs: o.healthIntervalMs as number }),
    },
    loads: {
      ...file.loads,
      ...(o.loadsIntervalMs === undefined ? {} : { intervalMs: o.loadsIntervalMs as number }),
    },
    metrics: { ...file.metrics, ...(o.processMetrics === true ? { processMetrics: true } : {}) },
    ...(o.tenantsFile === undefined ? {} : { auth: { ...file.auth, tenantsFile: o.tenantsFile as string } }),
    ...(o.turnDeadlineMs === undefined
      ? {}
      : { deadlines: { ...file.deadlines, turnMs: o.turnDeadlineMs as number } }),
    ...(o.stateStore === undefined && o.stateStoreName === undefined && o.replicaId === undefined
      ? {}
      : {
          stateStore: {
            ...(typeof file.stateStore === 'string' ? { url: file.stateStore } : file.stateStore),
            ...(o.stateStore === undefined ? {} : { url: o.stateStore as string }),
            ...(o.stateStoreName === undefined ? {} : { name: o.stateStoreName as string }),
            ...(o.replicaId === undefined ? {} : { replicaId: o.replicaId as string }),
          },
        }),
  }
  return { config: resolveConfig(input), printConfig: o.printConfig === true }
}

/** Runs the proxy until SIGINT / SIGTERM. Returns the process exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  let parsed: ReturnType<typeof configFromArgs>
  try {
    parsed = configFromArgs(argv)
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode
    if (err instanceof ProxyError) {
      process.stderr.write(`kvc-proxy: ${err.message}\n`)
      return 2
    }
    throw err
  }
  if (parsed.printConfig) {
    // Key digests as fingerprints, the state store's password masked.
    process.stdout.write(`${JSON.stringify(maskSecrets(parsed.config), null, 2)}\n`)
    return 0
  }
  let proxy: Awaited<ReturnType<typeof createProxy>>
  try {
    proxy = await createProxy(parsed.config)
  } catch (err) {
    process.stderr.write(`kvc-proxy: ${(err as Error).message}\n`)
    return 1
  }
  process.stderr.write(
    `${JSON.stringify({ ts: new Date().toISOString(), level: 'info', msg: 'listening', url: proxy.url, policy: parsed.config.policy, stateStore: proxy.gateway.stateStoreInfo(), workers: parsed.config.workers.map((w) => `${w.role}:${w.id}`) })}\n`,
  )
  // SIGHUP rotates keys: the configuration file's tenants and the tenants file are read again
  // (all or nothing: a bad reload keeps the previous keys and logs why).
  const reload = (): void => {
    let config: ProxyConfig
    try {
      config = configFromArgs(argv).config
    } catch (err) {
      process.stderr.write(
        `${JSON.stringify({ ts: new Date().toISOString(), level: 'warn', msg: 'tenants refused', error: (err as Error).message })}\n`,
      )
      return
    }
    try {
      proxy.reloadTenants(config)
    } catch {
      // reported on stderr by the proxy (tenants refused); the previous keys stay valid
    }
  }
  await new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop)
      process.off('SIGTERM', stop)
      process.off('SIGHUP', reload)
      resolve()
    }
    process.on('SIGINT', stop)
    process.on('SIGTERM', stop)
    process.on('SIGHUP', reload)
  })
  await proxy.close()
  return 0
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code
    },
    (err: unknown) => {
      process.stderr.write(`kvc-proxy: ${(err as Error)?.stack ?? String(err)}\n`)
      process.exitCode = 1
    },
  )
}
