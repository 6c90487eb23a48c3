/**
 * A parser of the Prometheus text exposition format (0.0.4) and its OpenMetrics variant, as
 * SGLang (Python `prometheus_client`) and the Mooncake master expose it.
 *
 * @module
 */
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * Metric type from a `# TYPE` line (`untyped` when none was given).
 *
 * @example
 * ```ts
 * import type { MetricType } from '@kvc/worker-bindings'
 * const cumulative = (t: MetricType) => t === 'counter' || t === 'histogram'
 * ```
 */
export type MetricType =
  | 'counter'
  | 'gauge'
  | 'histogram'
  | 'summary'
  | 'untyped'
  | 'info'
  | 'stateset'
  | 'gaugehistogram'
  | 'unknown'

/**
 * One sample line.
 *
 * @example
 * ```ts
 * import type { MetricSample } from '@kvc/worker-bindings'
 * const byModel = (s: MetricSample) => s.labels.model_name
 * ```
 */
export interface MetricSample {
  /** The sample's own name (e.g. `sglang:prompt_tokens_total`, `..._bucket`). */
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  /** The value (`NaN`, `±Infinity` allowed). */
  readonly value: number
  /** Optional timestamp (ms since the epoch as written). */
  readonly timestamp: number | undefined
}

/**
 * A metric family: the samples that share a `# TYPE` (or, untyped, a name).
 *
 * @example
 * ```ts
 * import { parsePrometheusText, type MetricFamily } from '@kvc/worker-bindings'
 * const fams: MetricFamily[] = parsePrometheusText('# TYPE up gauge\nup 1\n')
 * fams[0]?.type // 'gauge'
 * ```
 */
export interface MetricFamily {
  /** Family name as declared by `# TYPE` (without `_total` for OpenMetrics-style counters). */
  readonly name: string
  readonly type: MetricType
  readonly help: string | undefined
  readonly samples: readonly MetricSample[]
}

const SUFFIXES = ['_total', '_created', '_bucket', '_count', '_sum', '_gcount', '_gsum', '_info'] as const

/**
 * Parses a Prometheus text exposition into metric families, in the order they appear. Handles
 * `# HELP` / `# TYPE` lines, label values with `\\`, `\"` and `\n` escapes, `NaN` / `+Inf` /
 * `-Inf`, optional timestamps, OpenMetrics `# EOF` and exemplars (`# {...} v`), and samples whose
 * name adds a suffix (`_total`, `_bucket`, `_sum`, `_count`, `_created`) to their family's name.
 *
 * @throws WorkerBindingsError `BAD_RESPONSE` naming the line that is not valid exposition text.
 *
 * @example
 * ```ts
 * import { parsePrometheusText } from '@kvc/worker-bindings'
 * const fams = parsePrometheusText('# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="m"} 0.25\n')
 * fams[0]?.samples[0]?.value // 0.25
 * ```
 */
export function parsePrometheusText(text: string): MetricFamily[] {
  const families: { name: string; type: MetricType; help: string | undefined; samples: MetricSample[] }[] = []
  const byName = new Map<string, (typeof families)[number]>()
  const family = (name: string): (typeof families)[number] => {
    let f = byName.get(name)
    if (f === undefined) {
      f = { name, type: 'untyped', help: undefined, samples: [] }
      byName.set(name, f)
      families.push(f)
    }
    return f
  }
  const lines = text.split(/\r?\n/)
  for (let ln = 0; ln < lines.length; ln++) {
    const line = lines[ln]!
    const trimmed = line.trim()
    if (trimmed.length === 0) continue
    if (trimmed.startsWith('#')) {
      const m = /^#\s*(HELP|TYPE|UNIT|EOF)\b\s*(\S*)\s?(.*)$/.exec(trimmed)
      if (m === null) continue // a plain comment
      const [, kind, name, rest] = m
      if (kind === 'EOF') break
      if (!name) bad(ln, line, 'missing metric name')
      if (kind === 'HELP') family(name).help = unescapeHelp(rest ?? '')
      else if (kind === 'TYPE') family(name).type = parseType(rest ?? '', ln, line)
      continue
    }
    const s = parseSample(line, ln)
    family(familyOf(s.name, byName)).samples.push(s)
  }
  return families
}

function familyOf(sample: string, byName: Map<string, { type: MetricType }>): string {
  if (byName.has(sample)) {
    const t = byName.get(sample)!.type
    // A declared family of its own, unless it is really the `_total` of a counter family.
    if (t !== 'untyped' || !sample.endsWith('_total')) return sample
  }
  for (const suf of SUFFIXES) {
    if (sample.endsWith(suf)) {
      const base = sample.slice(0, -suf.length)
      const f = byName.get(base)
      if (f !== undefined && f.type !== 'untyped') return base
    }
  }
  return sample
}

function parseType(s: string, ln: number, line: string): MetricType {
  const t = s.trim().toLowerCase()
  switch (t) {
    case 'counter':
    case 'gauge':
    case 'histogram':
    case 'summary':
    case 'untyped':
    case 'info':
    case 'stateset':
    case 'gaugehistogram':
    case 'unknown':
      return t
    default:
      return bad(ln, line, `unknown metric type "${t}"`)
  }
}

function parseSample(line: string, ln: number): MetricSample {
  let i = 0
  const n = line.length
  while (i < n && (line[i] === ' ' || line[i] === '\t')) i++
  const nameStart = i
  while (i < n && /[a-zA-Z0-9_:]/.test(line[i]!)) i++
  const name = line.slice(nameStart, i)
  if (name.length === 0 || /^[0-9]/.test(name)) bad(ln, line, 'invalid metric name')
  const labels: Record<string, string> = {}
  if (line[i] === '{') {
    i++
    for (;;) {
      while (i < n && (line[i] === ' ' || line[i] === ',')) i++
      if (line[i] === '}') {
        i++
        break
      }
      const ls = i
      while (i < n && /[a-zA-Z0-9_]/.test(line[i]!)) i++
      const lname = line.slice(ls, i)
      if (lname.length === 0) bad(ln, line, 'invalid label name')
      while (i < n && line[i] === ' ') i++
      if (line[i] !== '=') bad(ln, line, `expected '=' after label ${lname}`)
      i++
      while (i < n && line[i] === ' ') i++
      if (line[i] !== '"') bad(ln, line, `expected '"' to open the value of label ${lname}`)
      i++
      let v = ''
      for (;;) {
        if (i >= n) bad(ln, line, `unterminated value of label ${lname}`)
        const c = line[i]!
        if (c === '\\') {
          const e = line[i + 1]
          if (e === 'n') v += '\n'
          else if (e === '\\') v += '\\'
          else if (e === '"') v += '"'
          else bad(ln, line, `invalid escape \\${e ?? ''} in label ${lname}`)
          i += 2
          continue
        }
        if (c === '"') {
          i++
          break
        }
        v += c
        i++
      }
      labels[lname] = v
    }
  }
  const rest = line.slice(i).trim()
  // OpenMetrics exemplar: "value [timestamp] # {labels} value [timestamp]"
  const hash = rest.indexOf(' #')
  const main = (hash >= 0 ? rest.slice(0, hash) : rest).trim().split(/\s+/)
  if (main.length === 0 || main[0] === '') bad(ln, line, 'missing value')
  const value = parseValue(main[0]!)
  if (value === undefined) bad(ln, line, `invalid value "${main[0]}"`)
  let timestamp: number | undefined
  if (main.length > 1) {
    const t = Number(main[1])
    if (!Number.isFinite(t)) bad(ln, line, `invalid timestamp "${main[1]}"`)
    timestamp = t
  }
  if (main.length > 2) bad(ln, line, 'unexpected text after the timestamp')
  return { name, labels, value, timestamp }
}

function parseValue(s: string): number | undefined {
  switch (s) {
    case 'NaN':
    case 'nan':
      return Number.NaN
    case '+Inf':
    case 'Inf':
    case '+inf':
    case 'inf':
      return Number.POSITIVE_INFINITY
    case '-Inf':
    case '-inf':
      return Number.NEGATIVE_INFINITY
    default: {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) return undefined
      return Number(s)
    }
  }
}

function unescapeHelp(s: string): string {
  return s.replace(/\\(n|\\)/g, (_m, e: string) => (e === 'n' ? '\n' : '\\'))
}

function bad(ln: number, line: string, why: string): never {
  throw new WorkerBindingsError('BAD_RESPONSE', `metrics line ${ln + 1}: ${why}: ${line.slice(0, 200)}`, {
    value: line,
  })
}

/**
 * A histogram read from its `_bucket` / `_sum` / `_count` samples (summed over label sets).
 *
 * @example
 * ```ts
 * import type { HistogramValue } from '@kvc/worker-bindings'
 * const mean = (h: HistogramValue) => (h.count === 0 ? 0 : h.sum / h.count)
 * ```
 */
export interface HistogramValue {
  /** Cumulative buckets, ascending by upper bound (`le`), `+Inf` last. */
  readonly buckets: readonly { readonly le: number; readonly count: number }[]
  readonly sum: number
  readonly count: number
}

/**
 * Reads a histogram family into buckets, sum and count, adding up every label set (all model
 * names, DP ranks...) unless `filter` keeps only some. Returns `undefined` when the family has no
 * bucket samples.
 *
 * @example
 * ```ts
 * import { histogramOf, parsePrometheusText } from '@kvc/worker-bindings'
 * const [fam] = parsePrometheusText(
 *   '# TYPE t histogram\nt_bucket{le="1"} 2\nt_bucket{le="+Inf"} 3\nt_sum 2.5\nt_count 3\n',
 * )
 * histogramOf(fam!)?.count // 3
 * ```
 */
export function histogramOf(
  family: MetricFamily,
  filter: (labels: Readonly<Record<string, string>>) => boolean = () => true,
): HistogramValue | undefined {
  const buckets = new Map<number, number>()
  let sum = 0
  let count = 0
  let seen = false
  for (const s of family.samples) {
    if (!filter(s.labels)) continue
    if (s.name.endsWith('_bucket')) {
      const le = s.labels.le === undefined ? undefined : parseValue(s.labels.le)
      if (le === undefined) continue
      buckets.set(le, (buckets.get(le) ?? 0) + s.value)
      seen = true
    } else if (s.name.endsWith('_sum')) sum += s.value
    else if (s.name.endsWith('_count')) count += s.value
  }
  if (!seen) return undefined
  return {
    buckets: [...buckets.entries()].sort((a, b) => a[0] - b[0]).map(([le, c]) => ({ le, count: c })),
    sum,
    count,
  }
}
