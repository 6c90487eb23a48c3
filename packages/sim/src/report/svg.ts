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
  if (Math.abs(v) >= 100_000 || Math.abs(v) < 0.001) return v.toExponential(0)
  return String(Number(v.toPrecision(3)))
}

/**
 * What every chart takes: a title (wrapped to two lines), an optional subtitle, the y axis's
 * title and a size (default 600 wide, a 230 px plot; the legend adds rows below as needed).
 */
interface ChartOptions {
  readonly title: string
  readonly subtitle?: string
  readonly yLabel: string
  readonly width?: number
  /** Height of the plot area, px. */
  readonly plotHeight?: number
}

/** Chart margins: room for the y tick labels (left) and the right edge. */
const M = { l: 64, r: 14 }

/** Grid lines across the plot at the y scale's ticks, each labelled on the left. */
function yGrid(parts: string[], y: Scale, W: number, label: (t: number) => string): void {
  for (const t of y.ticks) {
    const yy = y(t)
    parts.push(`<line x1="${M.l}" x2="${W - M.r}" y1="${yy}" y2="${yy}" class="grid"/>`)
    parts.push(`<text x="${M.l - 6}" y="${yy + 4}" text-anchor="end" class="tick">${label(t)}</text>`)
  }
}

/** The y axis's title, written upwards along the left edge, centred on the plot. */
function yTitle(text: string, top: number, bottom: number): string {
  const mid = (top + bottom) / 2
  return `<text x="14" y="${mid}" transform="rotate(-90 14 ${mid})" text-anchor="middle" class="tick">${esc(text)}</text>`
}

/** Approximate width of `text` in px at the tick font (11 px system-ui). */
function textWidth(text: string, px = 11): number {
  return [...text].length * px * 0.56
}

/**
 * Split `text` into lines of at most `maxPx` pixels at `px` font size, breaking after spaces,
 * colons, hyphens and commas (a single long word stays whole).
 */
export function wrapText(text: string, maxPx: number, px = 11): string[] {
  const parts = text.match(/[^\s:,-]+[\s:,-]*|[\s:,-]+/g) ?? [text]
  const lines: string[] = []
  let cur = ''
  for (const p of parts) {
    if (cur !== '' && textWidth((cur + p).trimEnd(), px) > maxPx) {
      lines.push(cur.trimEnd())
      cur = p.trimStart()
    } else cur += p
  }
  if (cur.trim() !== '') lines.push(cur.trimEnd())
  return lines
}

/** `<text>` with one `<tspan>` per line, the first at `y`, then every `lh` px. */
function multiline(
  lines: readonly string[],
  x: number,
  y: number,
  cls: string,
  lh = 13,
  anchor = 'middle',
): string {
  return `<text x="${x}" y="${y}" text-anchor="${anchor}" class="${cls}">${lines
    .map((l, i) => `<tspan x="${x}" dy="${i === 0 ? 0 : lh}">${esc(l)}</tspan>`)
    .join('')}</text>`
}

/** The chart's title (bold, wrapped to two lines at most) and optional subtitle; returns the plot's top. */
function titles(parts: string[], W: number, title: string, subtitle?: string): number {
  const lines = wrapText(title, W - 24, 14 * 1.1)
  parts.push(multiline(lines.slice(0, 2), W / 2, 18, 'ct', 17))
  let y = 18 + (Math.min(2, lines.length) - 1) * 17
  if (subtitle !== undefined) {
    const sub = wrapText(subtitle, W - 24)
    parts.push(multiline(sub.slice(0, 2), W / 2, y + 15, 'tick', 13))
    y += 15 + (Math.min(2, sub.length) - 1) * 13
  }
  return y + 14
}

/**
 * Closes a chart: the x axis line at `plotBottom`, the legend of `names` from `legendY` down
 * (wrapped, never truncated), and the `<svg>` around `parts`, as tall as its content.
 */
function finishChart(
  parts: string[],
  W: number,
  plotBottom: number,
  title: string,
  names: readonly string[],
  legendY: number,
  colors?: readonly string[],
): string {
  parts.push(`<line x1="${M.l}" x2="${W - M.r}" y1="${plotBottom}" y2="${plotBottom}" class="axis"/>`)
  const { svg: leg, bottom } = legend(names, M.l, legendY, W - M.l - M.r, colors)
  parts.push(leg)
  return svg(W, Math.ceil(bottom + 10), title, parts)
}

/** One series of a grouped bar chart: a value per group, optionally with an interval. */
export interface BarSeries {
  readonly name: string
  /** Its color (default: the palette's, by position). */
  readonly color?: string
  readonly values: readonly number[]
  readonly lo?: readonly number[]
  readonly hi?: readonly number[]
}

/** A whisker (95% interval) from `y1` to `y2` at `cx`. */
function whisker(parts: string[], cx: number, y1: number, y2: number): void {
  parts.push(`<line class="whisker" x1="${cx}" x2="${cx}" y1="${y1}" y2="${y2}"/>`)
  parts.push(`<line class="whisker" x1="${cx - 3}" x2="${cx + 3}" y1="${y1}" y2="${y1}"/>`)
  parts.push(`<line class="whisker" x1="${cx - 3}" x2="${cx + 3}" y1="${y2}" y2="${y2}"/>`)
}

/**
 * A grouped bar chart (optionally log-scaled, with 95% whiskers). `Infinity` values are drawn as
 * a hatched full-height bar labelled "failed"; `NaN` values draw nothing.
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
  const parts: string[] = []
  const top = titles(parts, W, o.title, o.subtitle)
  const baseY = top + (o.plotHeight ?? 230)
  const finite: number[] = []
  for (const s of o.series) {
    for (const arr of [s.values, s.hi ?? [], s.lo ?? []])
      for (const v of arr) if (Number.isFinite(v) && v > 0) finite.push(v)
  }
  const maxV = finite.length === 0 ? 1 : Math.max(...finite)
  const minV = finite.length === 0 ? 0.001 : Math.min(...finite)
  const log = o.log === true && maxV / Math.max(minV, 1e-12) > 20
  const y = log
    ? logScale(10 ** Math.floor(Math.log10(minV)), 10 ** Math.ceil(Math.log10(maxV)), baseY, top)
    : linear(0, o.percent === true ? Math.max(0.05, Math.min(1, maxV * 1.1)) : maxV * 1.1, baseY, top)
  const gw = (W - M.l - M.r) / Math.max(1, o.groups.length)
  const bw = Math.max(2, Math.min(28, (gw * 0.8) / Math.max(1, o.series.length)))
  yGrid(parts, y, W, (t) => (o.percent === true ? `${Math.round(t * 100)}%` : tickLabel(t)))
  parts.push(yTitle(o.yLabel, top, baseY))
  let labelRows = 1
  o.groups.forEach((g, gi) => {
    const gx = M.l + gi * gw + (gw - bw * o.series.length) / 2
    const lines = wrapText(g, gw - 4)
    labelRows = Math.max(labelRows, lines.length)
    parts.push(multiline(lines, M.l + gi * gw + gw / 2, baseY + 16, 'tick'))
    o.series.forEach((s, si) => {
      const v = s.values[gi]!
      const x = gx + si * bw
      const color = s.color ?? PALETTE[si % PALETTE.length]!
      const label = `${s.name} · ${g}: ${o.percent === true && Number.isFinite(v) ? `${(v * 100).toFixed(1)}%` : fmt(v)}${
        s.lo !== undefined && s.hi !== undefined ? ` [${fmt(s.lo[gi]!)}, ${fmt(s.hi[gi]!)}]` : ''
      }`
      if (v === Number.POSITIVE_INFINITY) {
        parts.push(
          `<rect class="bar failed" x="${x}" y="${top}" width="${bw - 2}" height="${baseY - top}" fill="url(#hatch)" stroke="${color}"><title>${esc(label)}</title></rect>`,
        )
        return
      }
      if (!Number.isFinite(v)) return
      const barTop = log && v <= 0 ? baseY : y(v)
      parts.push(
        `<rect class="bar" x="${x}" y="${barTop}" width="${bw - 2}" height="${Math.max(0, baseY - barTop)}" fill="${color}"><title>${esc(label)}</title></rect>`,
      )
      if (s.lo !== undefined && s.hi !== undefined) {
        const lo = s.lo[gi]!
        const hi = s.hi[gi]!
        if (Number.isFinite(lo)) {
          const y1 = y(Math.max(lo, log ? 1e-12 : 0))
          const y2 = Number.isFinite(hi) ? y(hi) : top
          whisker(parts, x + (bw - 2) / 2, y1, y2)
        }
      }
    })
  })
  return finishChart(
    parts,
    W,
    baseY,
    o.title,
    o.series.map((s) => s.name),
    baseY + 16 + labelRows * 13 + 8,
    o.series.map((s, i) => s.color ?? PALETTE[i % PALETTE.length]!),
  )
}

/** One line of a line chart, optionally with a 95% interval per point (drawn as whiskers). */
export interface LineSeries {
  readonly name: string
  readonly points: readonly (readonly [number, number])[]
  readonly lo?: readonly number[]
  readonly hi?: readonly number[]
}

/** A line chart (optionally log-scaled on x, with a shared x range, or categorical x ticks). */
export function lineChart(
  o: ChartOptions & {
    readonly series: readonly LineSeries[]
    readonly xLabel: string
    readonly xLog?: boolean
    /** The x range (to give several panels the same one); default: the data's. */
    readonly xMin?: number
    readonly xMax?: number
    /** Tick positions and their labels (default: nice numbers). */
    readonly xTicks?: readonly (readonly [number, string])[]
    readonly yMax?: number
    /** Bottom of a linear y axis (default 0). */
    readonly yMin?: number
    /** Log-scale the y axis (when the data spans more than 20×). */
    readonly yLog?: boolean
    readonly percentY?: boolean
    readonly step?: boolean
    /** Draw a marker at every point. */
    readonly markers?: boolean
  },
): string {
  const W = o.width ?? 600
  const parts: string[] = []
  const top = titles(parts, W, o.title, o.subtitle)
  const bottom = top + (o.plotHeight ?? 230)
  const xs: number[] = []
  const ys: number[] = []
  o.series.forEach((s) => {
    s.points.forEach(([x, y], i) => {
      if (Number.isFinite(x) && (o.xLog !== true || x > 0)) xs.push(x)
      if (Number.isFinite(y)) ys.push(y)
      const hi = s.hi?.[i]
      if (hi !== undefined && Number.isFinite(hi)) ys.push(hi)
    })
  })
  const xMin = o.xMin ?? (xs.length === 0 ? 0 : Math.min(...xs))
  const xMax = o.xMax ?? (xs.length === 0 ? 1 : Math.max(...xs))
  const pad = o.xTicks !== undefined ? (xMax - xMin || 1) * 0.04 : 0
  const x =
    o.xLog === true && xMin > 0 && xMax / xMin > 10
      ? logScale(10 ** Math.floor(Math.log10(xMin)), 10 ** Math.ceil(Math.log10(xMax)), M.l, W - M.r)
      : linear(
          o.xTicks !== undefined ? xMin - pad : o.xLog === true ? 0 : Math.min(0, xMin),
          (xMax === xMin ? xMin + 1 : xMax) + pad,
          M.l,
          W - M.r,
        )
  const pos = ys.filter((v) => v > 0)
  const yLog = o.yLog === true && pos.length > 0 && Math.max(...pos) / Math.min(...pos) > 20
  const yTop = yLog
    ? 10 ** Math.ceil(Math.log10(Math.max(...pos)))
    : (o.yMax ?? (ys.length === 0 ? 1 : Math.max(...ys) * 1.05 || 1))
  const y = yLog
    ? logScale(10 ** Math.floor(Math.log10(Math.min(...pos))), yTop, bottom, top)
    : linear(0, yTop, bottom, top)
  yGrid(parts, y, W, (t) => (o.percentY === true ? `${Math.round(t * 100)}%` : tickLabel(t)))
  const ticks = o.xTicks ?? x.ticks.map((t) => [t, tickLabel(t)] as const)
  for (const [t, label] of ticks) {
    parts.push(
      `<text x="${x(t)}" y="${bottom + 16}" text-anchor="middle" class="tick xtick">${esc(label)}</text>`,
    )
  }
  parts.push(
    `<text x="${(M.l + W - M.r) / 2}" y="${bottom + 32}" text-anchor="middle" class="tick">${esc(o.xLabel)}</text>`,
  )
  parts.push(yTitle(o.yLabel, top, bottom))
  o.series.forEach((s, si) => {
    const idx = s.points
      .map((_, i) => i)
      .filter((i) => {
        const [a, b] = s.points[i]!
        return Number.isFinite(a) && Number.isFinite(b) && (o.xLog !== true || a > 0)
      })
    if (idx.length === 0) return
    const color = PALETTE[si % PALETTE.length]!
    let d = ''
    idx.forEach((i, k) => {
      const [a, b] = s.points[i]!
      const px = x(a).toFixed(1)
      const py = y(Math.min(b, yTop)).toFixed(1)
      if (k === 0) d += `M${px},${py}`
      else if (o.step === true) d += `H${px}V${py}`
      else d += `L${px},${py}`
    })
    const last = s.points[idx[idx.length - 1]!]!
    parts.push(
      `<path class="line" d="${d}" fill="none" stroke="${color}" stroke-width="1.8"><title>${esc(`${s.name}: ${idx.length} points, last (${fmt(last[0])}, ${fmt(last[1])})`)}</title></path>`,
    )
    for (const i of idx) {
      const [a, b] = s.points[i]!
      const cx = x(a)
      const lo = s.lo?.[i]
      const hi = s.hi?.[i]
      if (lo !== undefined && hi !== undefined && Number.isFinite(lo)) {
        const y2 = Number.isFinite(hi) ? y(Math.min(hi, yTop)) : top
        parts.push(
          `<line x1="${cx}" x2="${cx}" y1="${y(Math.min(lo, yTop))}" y2="${y2}" stroke="${color}" stroke-width="1.2"/>`,
        )
      }
      if (o.markers === true) {
        parts.push(
          `<circle cx="${cx}" cy="${y(Math.min(b, yTop))}" r="3" fill="${color}"><title>${esc(
            `${s.name} at ${fmt(a)}: ${o.percentY === true ? `${(b * 100).toFixed(1)}%` : fmt(b)}${
              lo !== undefined && hi !== undefined ? ` [${fmt(lo)}, ${fmt(hi)}]` : ''
            }`,
          )}</title></circle>`,
        )
      }
    }
  })
  return finishChart(
    parts,
    W,
    bottom,
    o.title,
    o.series.map((s) => s.name),
    bottom + 50,
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
  const parts: string[] = []
  const top = titles(parts, W, o.title, o.subtitle)
  const baseY = top + (o.plotHeight ?? 230)
  const totals = o.groups.map((_, gi) => o.stacks.reduce((a, s) => a + (s.values[gi] ?? 0), 0))
  const maxT = Math.max(...totals, 0)
  const y = linear(0, maxT > 0 ? maxT * 1.1 : o.percent === true ? 0.01 : 1, baseY, top)
  const gw = (W - M.l - M.r) / Math.max(1, o.groups.length)
  const bw = Math.min(60, gw * 0.6)
  yGrid(parts, y, W, (t) => (o.percent === true ? `${(t * 100).toFixed(t < 0.1 ? 1 : 0)}%` : tickLabel(t)))
  parts.push(yTitle(o.yLabel, top, baseY))
  let labelRows = 1
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
        `<text x="${x + bw / 2}" y="${baseY - 6}" text-anchor="middle" class="tick">none</text><rect class="bar" x="${x}" y="${baseY - 1}" width="${bw}" height="1" fill="#999"><title>${esc(`${g}: no failures`)}</title></rect>`,
      )
    }
    const lines = wrapText(g, gw - 4)
    labelRows = Math.max(labelRows, lines.length)
    parts.push(multiline(lines, M.l + gi * gw + gw / 2, baseY + 16, 'tick'))
  })
  return finishChart(
    parts,
    W,
    baseY,
    o.title,
    o.stacks.map((s) => s.name),
    baseY + 16 + labelRows * 13 + 8,
  )
}

/** The legend of `names` from (`x0`, `y0`), wrapped to `width`; entries are never truncated. */
function legend(
  names: readonly string[],
  x0: number,
  y0: number,
  width: number,
  colors?: readonly string[],
): { svg: string; bottom: number } {
  let x = x0
  let y = y0
  const out: string[] = []
  names.forEach((n, i) => {
    const w = 18 + textWidth(n) + 10
    if (x + w > x0 + width && x > x0) {
      x = x0
      y += 15
    }
    out.push(
      `<rect x="${x}" y="${y - 8}" width="10" height="10" fill="${colors?.[i] ?? PALETTE[i % PALETTE.length]}"/><text x="${x + 14}" y="${y + 1}" class="tick">${esc(n)}</text>`,
    )
    x += w
  })
  return { svg: `<g class="legend">${out.join('')}</g>`, bottom: names.length === 0 ? y0 - 10 : y + 4 }
}

function svg(w: number, h: number, title: string, parts: readonly string[]): string {
  return `<svg class="chart" role="img" aria-label="${esc(title)}" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" xmlns="http://www.w3.org/2000/svg">${parts.join('')}</svg>`
}
