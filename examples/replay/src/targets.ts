import { readFileSync } from 'node:fs'
import type { AdmitOptions, PathMode } from '@kvc/kvc-router'
import type { WorkerConfig } from '@kvc/example-proxy'
import { type PolicySpec, type Topology, admitOptionsFor, formatTopology } from '@kvc/sim'
import { type SglangEmulator, createSglangEmulator } from '@kvc/sglang-emulator'
import { SglangClient } from '@kvc/worker-bindings'

/** The workers of one run. */
export interface RunCluster {
  readonly workers: readonly WorkerConfig[]
  /** The topology actually used (a colocated policy runs on `N×DP`). */
  readonly topology: string
  /** KV capacity of a D (or colocated) worker, tokens (0 if unknown: read from `/server_info`). */
  readonly capacityTokens: number
  /** Emulators of the run (when the replay started them): their pool accounting and eviction counters. */
  readonly emulators: ReadonlyMap<string, SglangEmulator>
  close(): Promise<void>
}

/** Where the replay's workers come from. */
export interface ReplayTarget {
  /** `emulated` or `external`. */
  readonly kind: string
  /** Starts (or prepares) the workers of one run of `spec` on `topology`. */
  open(run: {
    readonly topology: Topology
    readonly spec: PolicySpec
    /** The policy's path mode: `direct` policies run on colocated workers. */
    readonly pathMode: PathMode
    readonly pageSize: number
  }): Promise<RunCluster>
}

/** Options of {@link emulatedTarget}. */
export interface EmulatedTargetOptions {
  /** KV pool of every worker, tokens (default 200,000: the simulator's default capacity). */
  readonly capacityTokens?: number
  /** Emulator time scale (1 = the emulator's calibrated latencies; smaller is faster). */
  readonly scale?: number
  /** Admission options of the D workers (default: the policy's, as the simulator's D workers use). */
  readonly admission?: Partial<AdmitOptions>
}

/**
 * Fresh SGLang emulators for every run (`createSglangEmulator` of `@kvc/sglang-emulator`), shaped
 * like the simulator's cluster: `nPmD` for P/D policies (D workers with the policy's session-cache
 * granularity and admission options), `(n+m)×DP` colocated workers for a colocated policy.
 */
export function emulatedTarget(options: EmulatedTargetOptions = {}): ReplayTarget {
  const capacity = options.capacityTokens ?? 200_000
  const timing = { scale: options.scale ?? 1 }
  return {
    kind: 'emulated',
    async open({ topology, spec, pathMode, pageSize }) {
      const direct = pathMode === 'direct'
      const topo: Topology =
        direct && topology.kind === 'pd'
          ? { kind: 'dp', workers: topology.prefill + topology.decode }
          : topology
      const admission = { ...admitOptionsFor(spec), ...options.admission }
      const emus = new Map<string, SglangEmulator>()
      const workers: WorkerConfig[] = []
      const start = async (id: string, role: 'prefill' | 'decode' | 'colocated') => {
        const e = await createSglangEmulator({
          role,
          capacityTokens: capacity,
          pageSize,
          timing,
          granularity: spec.granularity,
          admission,
          enableCacheReport: true,
          // P workers publish nothing the router reads.
          ...(role === 'prefill' ? { kvEvents: false as const } : {}),
        })
        emus.set(id, e)
        workers.push({ id, role: role === 'prefill' ? 'prefill' : 'decode', url: e.url })
      }
      try {
        if (topo.kind === 'dp') for (let i = 0; i < topo.workers; i++) await start(`w${i}`, 'colocated')
        else {
          for (let i = 0; i < topo.prefill; i++) await start(`p${i}`, 'prefill')
          for (let i = 0; i < topo.decode; i++) await start(`d${i}`, 'decode')
        }
      } catch (err) {
        await Promise.all([...emus.values()].map((e) => e.close()))
        throw err
      }
      return {
        workers,
        topology: formatTopology(topo),
        capacityTokens: capacity,
        emulators: emus,
        close: async () => {
          await Promise.all([...emus.values()].map((e) => e.close()))
        },
      }
    },
  }
}

/**
 * A real cluster (SGLang workers, or anything that speaks their HTTP API): the same worker list for
 * every run, its radix caches flushed (`/flush_cache`) before each run so runs start cold.
 */
export function externalTarget(workers: readonly WorkerConfig[]): ReplayTarget {
  return {
    kind: 'external',
    async open() {
      await Promise.all(
        workers.map(async (w) => {
          const c = new SglangClient({ baseURL: w.url, timeout: 10_000, maxRetries: 0 })
          // Refused (400) while requests run: a previous run's stragglers; retry briefly.
          for (let i = 0; i < 20; i++) {
            let r: { success: boolean }
            try {
              r = await c.flushCache()
            } catch (err) {
              throw new Error(
                `worker ${w.id} (${w.url}) did not answer /flush_cache: ${(err as Error).message}`,
              )
            }
            if (r.success) return
            await new Promise((res) => setTimeout(res, 250))
          }
        }),
      )
      const p = workers.filter((w) => w.role === 'prefill').length
      const d = workers.length - p
      return {
        workers,
        topology: p === 0 ? `${d}xDP` : `${p}P${d}D`,
        capacityTokens: workers.find((w) => w.role === 'decode')?.capacityTokens ?? 0,
        emulators: new Map(),
        close: async () => {},
      }
    },
  }
}

/** Reads a worker list: a JSON file with `workers` (the proxy's configuration format) or a bare array. */
export function readWorkersFile(path: string): WorkerConfig[] {
  const json = JSON.parse(readFileSync(path, 'utf8')) as unknown
  const list = Array.isArray(json) ? json : (json as { workers?: unknown }).workers
  if (!Array.isArray(list) || list.length === 0)
    throw new Error(`${path}: expected a "workers" list (the proxy's configuration format)`)
  return list as WorkerConfig[]
}
