import { SimError, SimErrorCode } from '../errors/simError.js'
import { loadAzureTrace } from './azure.js'
import { type LmcacheTraceOptions, loadLmcacheTrace } from './lmcache.js'
import { loadMooncakeTrace, type MooncakeTraceOptions } from './mooncake.js'
import { isDirectory } from './traceFiles.js'
import type { Workload } from './types.js'

/**
 * Trace formats `kvc-sim --format` accepts (`auto` picks by path: a directory is `lmcache`,
 * `*.csv` is `azure`, anything else `mooncake`).
 *
 * @example
 * ```ts
 * import { TRACE_FORMATS } from '@kvc/sim'
 * TRACE_FORMATS // ['auto', 'mooncake', 'lmcache', 'azure']
 * ```
 */
export const TRACE_FORMATS = ['auto', 'mooncake', 'lmcache', 'azure'] as const

/**
 * One of {@link TRACE_FORMATS}.
 *
 * @example
 * ```ts
 * import type { TraceFormat } from '@kvc/sim'
 * const f: TraceFormat = 'mooncake'
 * ```
 */
export type TraceFormat = (typeof TRACE_FORMATS)[number]

/**
 * Options of {@link loadTrace}: the union of the loaders' options.
 *
 * @example
 * ```ts
 * import type { LoadTraceOptions } from '@kvc/sim'
 * const o: LoadTraceOptions = { format: 'mooncake', pageTokens: 16 }
 * ```
 */
export interface LoadTraceOptions extends MooncakeTraceOptions, LmcacheTraceOptions {
  readonly format?: TraceFormat
}

/**
 * The format `auto` resolves to for `path`.
 *
 * @example
 * ```ts
 * import { detectTraceFormat } from '@kvc/sim'
 * detectTraceFormat('x/AzureLLMInferenceTrace_code.csv') // 'azure'
 * ```
 */
export function detectTraceFormat(path: string): Exclude<TraceFormat, 'auto'> {
  if (path.toLowerCase().endsWith('.csv')) return 'azure'
  if (isDirectory(path)) return 'lmcache'
  return 'mooncake'
}

/**
 * Load a trace in any supported format (see {@link TRACE_FORMATS}).
 *
 * @example
 * ```ts
 * import { loadTrace } from '@kvc/sim'
 * // a trace fetched as docs/design/traces.md says
 * const w = loadTrace('traces/synthetic_trace.jsonl') // auto: mooncake
 * w.turns.length // 3993
 * ```
 */
export function loadTrace(path: string, options: LoadTraceOptions = {}): Workload {
  const format = options.format ?? 'auto'
  const f = format === 'auto' ? detectTraceFormat(path) : format
  if (options.granularity === 'block' && f !== 'mooncake') {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `block granularity needs a hash-id trace (Mooncake); ${path} is ${f}: use token granularity`,
      options.granularity,
    )
  }
  switch (f) {
    case 'mooncake':
      return loadMooncakeTrace(path, options)
    case 'lmcache':
      return loadLmcacheTrace(path, options)
    case 'azure':
      return loadAzureTrace(path)
    default:
      throw new SimError(SimErrorCode.InvalidOption, `unknown trace format ${String(format)}`, format)
  }
}
