/**
 * Tiny SVG chart builders for the self-contained HTML report: no script, no external resource;
 * every mark carries a `<title>` (a native tooltip with the exact value).
 */

/** Colors of the series, in order (colorblind-friendly Okabe–Ito palette). */
export const PALETTE = [
  '#0072B2',
  '#E69F00',
  '#009E73',
  '#CC79A7',
  '#56B4E9',
  '#D55E00',
  '#F0E442',
  '#000000',
]

/** Escape text for HTML and SVG. */
export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

/** A number for display: 3 significant digits, `failed` for Infinity, `−∞` for its negative, `–` for NaN. */
export function fmt(x: number, unit = ''): string {
  if (Number.isNaN(x)) return '–'
  if (x === Number.POSITIVE_INFINITY) return 'failed'
  if (x === Number.NEGATIVE_INFINITY) return '−∞'
  if (x === 0) return `0${unit}`
  const a = Math.abs(x)
  const s = a >= 1000 ? x.toFixed(0) : a >= 100 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : x.toPrecision(3)
  return `${s}${unit}`
}

/**
 * A paired difference (policy − reference) for display: signed, `failed` where only the policy
 * failed at that percentile, `reference failed` where only the reference did.
 */
export function fmtDiff(x: number, unit = ''): string {
  if (x === Number.NEGATIVE_INFINITY) return 'reference failed'
  return `${x > 0 && Number.isFinite(x) ? '+' : ''}${fmt(x, unit)}`
}

interface Scale {
  (v: number): number
  ticks: number[]
}

function niceTicks(lo: number, hi: number, n = 5): number[] {
  const span = hi - lo || 1
  const step0 = span / n
  const mag = 10 ** Math.floor(Math.log10(step0))
  const norm = step0 / mag
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag
  const out: number[] = []
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push(Number(v.toPrecision(12)))
  return out
}

function linear(lo: number, hi: number, a: number, b: number): Scale {
  const f = ((v: number) => a + ((v - lo) / (hi - lo || 1)) * (b - a)) as Scale
  f.ticks = niceTicks(lo, hi)
  return f
}

function logScale(lo: number, hi: number, a: number, b: number): Scale {
  const l0 = Math.log10(lo)
  const l1 = Math.log10(hi)
  const f = ((v: number) => a + ((Math.log10(Math.max(v, lo)) - l0) / (l1 - l0 || 1)) * (b - a)) as Scale
  const ticks: number[] = []
  for (let e = Math.floor(l0); e <= Math.ceil(l1); e++) {
    const v = 10 ** e
    if (v >= lo * 0.999 && v <= hi * 1.001) ticks.push(v)
  }
  f.ticks = ticks
  return f
}

function tickLabel(v: number): string {
  if (v === 0) return '0'
  if (v >= 100_000 || v < 0.01) return v.toExponential(0)
  return String(Number(v.toPrecision(3)))
}

/** What every chart takes: a title, the y axis's title and a size (default 600 × 300). */
interface ChartOptions {
  readonly title: string
  readonly yLabel: string
  readonly width?: number
  readonly height?: number
}

/** Chart margins: room for the y tick labels (left), the title (top), the x labels and the legend (bottom). */
const M = { l: 64, r: 12, t: 34, b: 64 }

/** Grid lines across the plot at the y scale's ticks, each labelled on the left. */
function yGrid(parts: string[], y: Scale, W: number, label: (t: number) => string): void {
  for (const t of y.ticks) {
    const yy = y(t)
    parts.push(`<line x1="${M.l}" x2="${W - M.r}" y1="${yy}" y2="${yy}" class="grid"/>`)
    parts.push(`<text x="${M.l - 6}" y="${yy + 4}" text-anchor="end" class="tick">${label(t)}</text>`)
  }
}

/** The y axis's title, written upwards along the left edge, centred on the plot. */
function yTitle(text: string, H: number): string {
  const mid = (M.t + H - M.b) / 2
  return `<text x="14" y="${mid}" transform="rotate(-90 14 ${mid})" text-anchor="middle" class="tick">${esc(text)}</text>`
}

/** Closes a chart: the x axis line, the legend of `names` at `legendY`, the `<svg>` around `parts`. */
function finishChart(
  parts: string[],
  W: number,
  H: number,
  title: string,
  names: readonly string[],
  legendY: number,
): string {
  parts.push(`<line x1="${M.l}" x2="${W - M.r}" y1="${H - M.b}" y2="${H - M.b}" class="axis"/>`)
  parts.push(legend(names, M.l, legendY, W - M.l - M.r))
  return svg(W, H, title, parts)
}

/** One series of a grouped bar chart: a value per group, optionally with an interval. */
export interface BarSeries {
  readonly name: string
  readonly values: readonly number[]
  readonly lo?: readonly number[]
  readonly hi?: readonly number[]
}

/**
 * A grouped bar chart (optionally log-scaled, with 95% whiskers). `Infinity` values are drawn as
 * a hatched full-height bar labelled "failed".
 */
export function barChart(
  o: ChartOptions & {
    readonly groups: readonly string[]
    readonly series: readonly BarSeries[]
    readonly log?: boolean
    readonly percent?: boolean
  },
): string {
  const W = o.width ?? 600
  const H = o.height ?? 300
  const finite: number[] = []
  for (const s of o.series) {
    for (const arr of [s.values, s.hi ?? [], s.lo ?? []])
      for (const v of arr) if (Number.isFinite(v) && v > 0) finite.push(v)
  }
  const maxV = finite.length === 0 ? 1 : Math.max(...finite)
  const minV = finite.length === 0 ? 0.001 : Math.min(...finite)
  const log = o.log === true && maxV / Math.max(minV, 1e-12) > 20
  const y = log
    ? logScale(10 ** Math.floor(Math.log10(minV)), 10 ** Math.ceil(Math.log10(maxV)), H - M.b, M.t)
    : linear(0, o.percent === true ? Math.max(0.05, Math.min(1, maxV * 1.1)) : maxV * 1.1, H - M.b, M.t)
  const baseY = H - M.b
  const gw = (W - M.l - M.r) / Math.max(1, o.groups.length)
  const bw = Math.max(2, Math.min(28, (gw * 0.8) / Math.max(1, o.series.length)))
  const parts: string[] = []
  parts.push(`<text x="${W / 2}" y="18" text-anchor="middle" class="ct">${esc(o.title)}</text>`)
  yGrid(parts, y, W, (t) => (o.percent === true ? `${Math.round(t * 100)}%` : tickLabel(t)))
  parts.push(yTitle(o.yLabel, H))
  o.groups.forEach((g, gi) => {
    const gx = M.l + gi * gw + (gw - bw * o.series.length) / 2
    parts.push(
      `<text x="${M.l + gi * gw + gw / 2}" y="${baseY + 16}" text-anchor="middle" class="tick">${esc(g)}</text>`,
    )
    o.series.forEach((s, si) => {
      const v = s.values[gi]!
      const x = gx + si * bw
      const color = PALETTE[si % PALETTE.length]!
      const label = `${s.name} · ${g}: ${o.percent === true && Number.isFinite(v) ? `${(v * 100).toFixed(1)}%` : fmt(v)}${
        s.lo !== undefined && s.hi !== undefined ? ` [${fmt(s.lo[gi]!)}, ${fmt(s.hi[gi]!)}]` : ''
      }`
      if (v === Number.POSITIVE_INFINITY) {
        parts.push(
          `<rect class="bar failed" x="${x}" y="${M.t}" width="${bw - 2}" height="${baseY - M.t}" fill="url(#hatch)" stroke="${color}"><title>${esc(label)}</title></rect>`,
        )
        return
      }
      if (!Number.isFinite(v)) return
      const top = log && v <= 0 ? baseY : y(v)
      parts.push(
        `<rect class="bar" x="${x}" y="${top}" width="${bw - 2}" height="${Math.max(0, baseY - top)}" fill="${color}"><title>${esc(label)}</title></rect>`,
      )
      if (s.lo !== undefined && s.hi !== undefined) {
        const lo = s.lo[gi]!
        const hi = s.hi[gi]!
        if (Number.isFinite(lo)) {
          const y1 = y(Math.max(lo, log ? 1e-12 : 0))
          const y2 = Number.isFinite(hi) ? y(hi) : M.t
          const cx = x + (bw - 2) / 2
          parts.push(`<line class="whisker" x1="${cx}" x2="${cx}" y1="${y1}" y2="${y2}"/>`)
          parts.push(`<line class="whisker" x1="${cx - 3}" x2="${cx + 3}" y1="${y1}" y2="${y1}"/>`)
          parts.push(`<line class="whisker" x1="${cx - 3}" x2="${cx + 3}" y1="${y2}" y2="${y2}"/>`)
        }
      }
    })
  })
  return finishChart(
    parts,
    W,
    H,
    o.title,
    o.series.map((s) => s.name),
    H - 22,
  )
}

/** One line of a line chart. */
export interface LineSeries {
  readonly name: string
  readonly points: readonly (readonly [number, number])[]
}

/** A line chart (optionally log-scaled on x). */
export function lineChart(
  o: ChartOptions & {
    /** A second, smaller title line. */
    readonly subtitle?: string
    readonly series: readonly LineSeries[]
    readonly xLabel: string
    readonly xLog?: boolean
    readonly yMax?: number
    readonly percentY?: boolean
    readonly step?: boolean
  },
): string {
  const W = o.width ?? 600
  const H = o.height ?? 300
  const xs: number[] = []
  const ys: number[] = []
  for (const s of o.series) {
    for (const [x, y] of s.points) {
      if (Number.isFinite(x) && (o.xLog !== true || x > 0)) xs.push(x)
      if (Number.isFinite(y)) ys.push(y)
    }
  }
  const xMin = xs.length === 0 ? 0 : Math.min(...xs)
  const xMax = xs.length === 0 ? 1 : Math.max(...xs)
  const x =
    o.xLog === true && xMin > 0 && xMax / xMin > 10
      ? logScale(10 ** Math.floor(Math.log10(xMin)), 10 ** Math.ceil(Math.log10(xMax)), M.l, W - M.r)
      : linear(o.xLog === true ? 0 : Math.min(0, xMin), xMax === xMin ? xMin + 1 : xMax, M.l, W - M.r)
  const yTop = o.yMax ?? (ys.length === 0 ? 1 : Math.max(...ys) * 1.05 || 1)
  const y = linear(0, yTop, H - M.b, M.t)
  const parts: string[] = []
  parts.push(`<text x="${W / 2}" y="16" text-anchor="middle" class="ct">${esc(o.title)}</text>`)
  if (o.subtitle !== undefined) {
    parts.push(`<text x="${W / 2}" y="29" text-anchor="middle" class="tick">${esc(o.subtitle)}</text>`)
  }
  yGrid(parts, y, W, (t) => (o.percentY === true ? `${Math.round(t * 100)}%` : tickLabel(t)))
  for (const t of x.ticks) {
    parts.push(
      `<text x="${x(t)}" y="${H - M.b + 16}" text-anchor="middle" class="tick">${tickLabel(t)}</text>`,
    )
  }
  parts.push(
    `<text x="${(M.l + W - M.r) / 2}" y="${H - M.b + 32}" text-anchor="middle" class="tick">${esc(o.xLabel)}</text>`,
  )
  parts.push(yTitle(o.yLabel, H))
  o.series.forEach((s, si) => {
    const pts = s.points.filter(
      ([a, b]) => Number.isFinite(a) && Number.isFinite(b) && (o.xLog !== true || a > 0),
    )
    if (pts.length === 0) return
    let d = ''
    pts.forEach(([a, b], i) => {
      const px = x(a).toFixed(1)
      const py = y(Math.min(b, yTop)).toFixed(1)
      if (i === 0) d += `M${px},${py}`
      else if (o.step === true) d += `H${px}V${py}`
      else d += `L${px},${py}`
    })
    const color = PALETTE[si % PALETTE.length]!
    const last = pts[pts.length - 1]!
    parts.push(
      `<path class="line" d="${d}" fill="none" stroke="${color}" stroke-width="1.8"><title>${esc(`${s.name}: ${pts.length} points, last (${fmt(last[0])}, ${fmt(last[1])})`)}</title></path>`,
    )
  })
  return finishChart(
    parts,
    W,
    H,
    o.title,
    o.series.map((s) => s.name),
    H - 14,
  )
}

/** A stacked bar per group (for example failures by cause per policy). */
export function stackedBarChart(
  o: ChartOptions & {
    readonly groups: readonly string[]
    readonly stacks: readonly { readonly name: string; readonly values: readonly number[] }[]
    readonly percent?: boolean
  },
): string {
  const W = o.width ?? 600
  const H = o.height ?? 300
  const totals = o.groups.map((_, gi) => o.stacks.reduce((a, s) => a + (s.values[gi] ?? 0), 0))
  const maxT = Math.max(...totals, 0)
  const y = linear(0, maxT > 0 ? maxT * 1.1 : o.percent === true ? 0.01 : 1, H - M.b, M.t)
  const gw = (W - M.l - M.r) / Math.max(1, o.groups.length)
  const bw = Math.min(60, gw * 0.6)
  const parts: string[] = []
  parts.push(`<text x="${W / 2}" y="18" text-anchor="middle" class="ct">${esc(o.title)}</text>`)
  yGrid(parts, y, W, (t) => (o.percent === true ? `${(t * 100).toFixed(t < 0.1 ? 1 : 0)}%` : tickLabel(t)))
  parts.push(yTitle(o.yLabel, H))
  o.groups.forEach((g, gi) => {
    const x = M.l + gi * gw + (gw - bw) / 2
    let acc = 0
    o.stacks.forEach((s, si) => {
      const v = s.values[gi] ?? 0
      if (v <= 0) return
      const y1 = y(acc)
      const y2 = y(acc + v)
      acc += v
      const shown = o.percent === true ? `${(v * 100).toFixed(2)}%` : fmt(v)
      parts.push(
        `<rect class="bar" x="${x}" y="${y2}" width="${bw}" height="${Math.max(0, y1 - y2)}" fill="${PALETTE[si % PALETTE.length]}"><title>${esc(`${g} · ${s.name}: ${shown}`)}</title></rect>`,
      )
    })
    if (acc === 0) {
      parts.push(
        `<text x="${x + bw / 2}" y="${H - M.b - 6}" text-anchor="middle" class="tick">none</text><rect class="bar" x="${x}" y="${H - M.b - 1}" width="${bw}" height="1" fill="#999"><title>${esc(`${g}: no failures`)}</title></rect>`,
      )
    }
    parts.push(
      `<text x="${M.l + gi * gw + gw / 2}" y="${H - M.b + 16}" text-anchor="middle" class="tick">${esc(g)}</text>`,
    )
  })
  return finishChart(
    parts,
    W,
    H,
    o.title,
    o.stacks.map((s) => s.name),
    H - 22,
  )
}

function legend(names: readonly string[], x0: number, y0: number, width: number): string {
  let x = x0
  let y = y0
  const out: string[] = []
  names.forEach((n, i) => {
    const w = 18 + Math.min(40, n.length) * 6.2
    if (x + w > x0 + width && x > x0) {
      x = x0
      y += 14
    }
    out.push(
      `<rect x="${x}" y="${y - 8}" width="10" height="10" fill="${PALETTE[i % PALETTE.length]}"/><text x="${x + 14}" y="${y + 1}" class="tick">${esc(n.length > 40 ? `${n.slice(0, 39)}…` : n)}</text>`,
    )
    x += w
  })
  return `<g class="legend">${out.join('')}</g>`
}

function svg(w: number, h: number, title: string, parts: readonly string[]): string {
  return `<svg class="chart" role="img" aria-label="${esc(title)}" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" xmlns="http://www.w3.org/2000/svg">${parts.join('')}</svg>`
}
