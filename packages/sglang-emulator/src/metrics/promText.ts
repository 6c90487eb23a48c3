/**
 * Renders the emulator's counters in the Prometheus text format as Python's `prometheus_client`
 * writes SGLang's metrics (`# HELP` / `# TYPE` per family, counters as `<name>_total`, floats
 * like `1.0`, histograms with `_bucket{le=...}`, `_count`, `_sum`).
 *
 * @internal
 * @module
 */

/** @internal */
export class PromHistogram {
  readonly bounds: readonly number[]
  readonly counts: number[]
  sum = 0
  count = 0
  constructor(bounds: readonly number[]) {
    this.bounds = bounds
    this.counts = new Array<number>(bounds.length).fill(0)
  }
  observe(v: number): void {
    this.sum += v
    this.count++
    for (let i = 0; i < this.bounds.length; i++) if (v <= this.bounds[i]!) this.counts[i]!++
  }
}

/** @internal */
export interface PromFamily {
  readonly name: string
  readonly help: string
  readonly type: 'counter' | 'gauge' | 'histogram'
  readonly value?: number
  readonly histogram?: PromHistogram
}

function fmt(v: number): string {
  if (Number.isNaN(v)) return 'NaN'
  if (v === Number.POSITIVE_INFINITY) return '+Inf'
  if (v === Number.NEGATIVE_INFINITY) return '-Inf'
  return Number.isInteger(v) ? `${v}.0` : String(v)
}

/** @internal */
export function renderPrometheus(
  families: readonly PromFamily[],
  labels: Readonly<Record<string, string>>,
): string {
  const ls = Object.entries(labels)
    .map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`)
    .join(',')
  const withLe = (le: string): string => `{${ls ? `${ls},` : ''}le="${le}"}`
  const plain = ls ? `{${ls}}` : ''
  let out = ''
  for (const f of families) {
    const base = f.type === 'counter' ? f.name.replace(/_total$/, '') : f.name
    out += `# HELP ${base} ${f.help}\n# TYPE ${base} ${f.type}\n`
    if (f.type === 'histogram' && f.histogram !== undefined) {
      const h = f.histogram
      for (let i = 0; i < h.bounds.length; i++)
        out += `${base}_bucket${withLe(fmt(h.bounds[i]!))} ${fmt(h.counts[i]!)}\n`
      out += `${base}_bucket${withLe('+Inf')} ${fmt(h.count)}\n`
      out += `${base}_count${plain} ${fmt(h.count)}\n`
      out += `${base}_sum${plain} ${fmt(h.sum)}\n`
    } else if (f.type === 'counter') {
      out += `${base}_total${plain} ${fmt(f.value ?? 0)}\n`
    } else {
      out += `${base}${plain} ${fmt(f.value ?? 0)}\n`
    }
  }
  return out
}
