import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  type ExperimentResult,
  type SweepResult,
  renderComparisonTable,
  renderHtmlReport,
  renderSweepReport,
  runExperiment,
  runSweep,
} from '../src/index.js'

const CHROMIUM = '/usr/bin/chromium'
const OUT = join(import.meta.dirname, '..', '.kvc-out', 'report-test')

let result: ExperimentResult
let clean: ExperimentResult
let sweep: SweepResult
let html: string

const POLICIES = ['kvc', 'dp-cache-aware:defaults=rust', 'sglang-cache-aware:defaults=rust', 'round-robin']

beforeAll(async () => {
  const base = {
    workload: { kind: 'agentic' as const, options: { sessions: 6, maxTurnsPerSession: 10 } },
    topology: '1P2D',
    policies: POLICIES,
    seeds: [1, 2, 3],
    bootstrapResamples: 30,
  }
  // Small KV pools: long prompts fail (kv_capacity), so the report shows failures and failed percentiles.
  result = await runExperiment({
    ...base,
    costModel: { capacityTokens: 12_000 },
    faults: [{ kind: 'admit-timeout', probability: 0.1 }],
  })
  clean = await runExperiment(base)
  sweep = await runSweep({
    ...base,
    policies: POLICIES.slice(0, 3),
    seeds: [1, 2],
    axis: 'time-scale',
    values: [1, 2, 4],
  })
  html = renderHtmlReport(result, { sweep })
  mkdirSync(OUT, { recursive: true })
  writeFileSync(join(OUT, 'report.html'), html)
  writeFileSync(join(OUT, 'clean.html'), renderHtmlReport(clean))
  writeFileSync(join(OUT, 'sweep.html'), renderSweepReport(sweep))
})

describe('per-session fast-path views', () => {
  it('leave out the policies without a fast path instead of calling all their sessions starved', () => {
    const table = html.slice(html.indexOf('<h2>Starved sessions</h2>'), html.indexOf('<h2>Strata</h2>'))
    expect(table).toMatch(/<td class="name">kvc<\/td>/)
    expect(table).not.toContain('round-robin</td>')
    expect(table).toMatch(
      /Left out: dp-cache-aware:defaults=rust, sglang-cache-aware:defaults=rust, round-robin, which have no fast path/,
    )
    expect(html).toMatch(/without a fast path, left out: dp-cache-aware:defaults=rust/)
  })
})

describe('paired differences against a reference that failed', () => {
  it('read "reference failed" in the table and the report, never -Infinity', () => {
    // Where the reference failed at TTFT p90 and a policy did not, the difference is −∞.
    const lost = Number.NEGATIVE_INFINITY
    const r: ExperimentResult = {
      ...result,
      paired: result.paired.map((p) => ({
        ...p,
        metrics: { ...p.metrics, ttft_p90: { ...p.metrics.ttft_p90, diff: lost, lo: lost, hi: lost } },
      })),
    }
    const table = renderComparisonTable(r)
    expect(table).toContain('reference failed [−∞, −∞]')
    expect(table).not.toMatch(/Infinity/)
    const page = renderHtmlReport(r)
    expect(page).toContain('reference failed<br>')
    expect(page).not.toMatch(/Infinity/)
  })
})

describe('HTML report', () => {
  it('opens with the verdict, its conditions and the sweep’s crossovers', () => {
    const top = html.slice(0, html.indexOf('<h2>'))
    expect(top).toMatch(
      /<div class="verdict"><p><b>(.+? serves this workload best|No policy wins on goodput)/,
    )
    expect(top).toMatch(/Conditions: built-in agentic workload/)
    expect(top).toContain('the same 3 GPUs')
    for (const x of sweep.crossovers.filter((c) => result.config.policies.includes(c.other)))
      expect(top).toContain(x.text.replace(/</g, '&lt;'))
    const lo = Math.min(...result.config.turnsPerTrial)
    const hi = Math.max(...result.config.turnsPerTrial)
    expect(top).toContain(lo === hi ? `${lo} turns per trial` : `${lo}–${hi} turns per trial`)
    expect(html).toMatch(/<code>defaults=rust<\/code>: the baseline runs with the defaults of sgl-router/)
  })

  it('draws failures by cause only when a turn failed', () => {
    expect(result.policies.some((p) => p.failed > 0)).toBe(true)
    expect(html).toContain('aria-label="Failed turns by cause"')
    const quiet = renderHtmlReport(clean)
    if (clean.policies.every((p) => p.failed === 0)) {
      expect(quiet).not.toContain('aria-label="Failed turns by cause"')
      expect(quiet).toContain('No turn failed under any policy')
    }
  })

  it('is self-contained: no script, no external resource', () => {
    for (const page of [html, renderSweepReport(sweep)]) {
      expect(page).not.toMatch(/<script/i)
      expect(page).not.toMatch(/(src|href)="(https?:)?\/\//i)
      expect(page).not.toMatch(/NaN|undefined|Infinity/)
    }
    expect(html).toMatch(/How to read this report/)
    for (const p of result.config.policies) expect(html).toContain(p.replace(/:/g, ':<wbr>'))
  })

  if (!existsSync(CHROMIUM)) {
    it.skip(`opens in headless Chromium (skipped: ${CHROMIUM} is absent; apt-get install chromium)`, () => {})
    return
  }

  /** What the layout checks find on one page at one width. */
  interface Layout {
    scrollWidth: number
    tables: { right: number; text: string }[]
    charts: {
      title: string
      w: number
      h: number
      marks: number
      /** Text boxes that stick out of their chart. */
      outside: string[]
      /** Pairs of text boxes that overlap. */
      overlaps: string[]
    }[]
    /** x tick labels of each KV-usage panel. */
    usageTicks: string[]
  }

  const LAYOUT = `(() => {
    const box = (e) => e.getBoundingClientRect()
    const tables = [...document.querySelectorAll('table')].map((t) => ({ right: box(t).right, text: t.innerText.slice(0, 40) }))
    const charts = [...document.querySelectorAll('svg.chart')].map((s) => {
      const r = box(s)
      const texts = [...s.querySelectorAll('text')].filter((t) => t.textContent.trim() !== '').map((t) => ({ t: t.textContent, b: box(t) }))
      const outside = texts.filter(({ b }) => b.left < r.left - 1 || b.right > r.right + 1 || b.top < r.top - 1 || b.bottom > r.bottom + 1).map(({ t }) => t)
      const overlaps = []
      for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
        const a = texts[i].b, c = texts[j].b
        const w = Math.min(a.right, c.right) - Math.max(a.left, c.left)
        const h = Math.min(a.bottom, c.bottom) - Math.max(a.top, c.top)
        if (w > 2 && h > 2) overlaps.push(texts[i].t + ' / ' + texts[j].t)
      }
      return { title: s.getAttribute('aria-label'), w: r.width, h: r.height, marks: s.querySelectorAll('rect.bar, path.line').length, outside, overlaps }
    })
    const usageTicks = [...document.querySelectorAll('.grid-usage svg')].map((s) => [...s.querySelectorAll('text.xtick')].map((t) => t.textContent).join(' '))
    return { scrollWidth: document.documentElement.scrollWidth, tables, charts, usageTicks }
  })()`

  async function inChromium(
    file: string,
    widths: readonly number[],
    check: (layout: Layout, width: number) => void,
  ): Promise<void> {
    const { chromium } = await import('playwright-core')
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--no-first-run',
      ],
    })
    try {
      for (const width of widths) {
        const page = await browser.newPage({ viewport: { width, height: 900 } })
        const errors: string[] = []
        page.on('console', (m) => {
          if (m.type() === 'error') errors.push(m.text())
        })
        page.on('pageerror', (e) => errors.push(String(e)))
        page.on('requestfailed', (r) => errors.push(`request failed: ${r.url()}`))
        await page.goto(`file://${join(OUT, file)}`)
        // A string expression: the page's DOM types are not part of this package's compile.
        const layout = (await page.evaluate(LAYOUT)) as Layout
        expect(errors).toEqual([])
        check(layout, width)
        const shot = join(OUT, `${file.replace(/\.html$/, '')}-${width}.png`)
        await page.screenshot({ path: shot, fullPage: true })
        expect(statSync(shot).size).toBeGreaterThan(50_000)
        await page.close()
      }
    } finally {
      await browser.close()
    }
  }

  /** Nothing scrolls sideways, no table is cut, no chart text overflows its chart or overlaps another. */
  function fits(layout: Layout, width: number, minCharts: number): void {
    expect(layout.scrollWidth, `page width at ${width}px`).toBeLessThanOrEqual(width)
    for (const t of layout.tables)
      expect(t.right, `table "${t.text}" at ${width}px`).toBeLessThanOrEqual(width)
    expect(layout.charts.length).toBeGreaterThanOrEqual(minCharts)
    for (const c of layout.charts) {
      expect(c.w, c.title).toBeGreaterThan(200)
      expect(c.h, c.title).toBeGreaterThan(150)
      expect(c.marks, c.title).toBeGreaterThan(0)
      expect(c.outside, `${c.title}: text outside the chart at ${width}px`).toEqual([])
      expect(c.overlaps, `${c.title}: overlapping text at ${width}px`).toEqual([])
    }
  }

  it('fits 1280 and 1400 px in headless Chromium: tables, charts, legends, shared KV-usage axes', async () => {
    await inChromium('report.html', [1280, 1400], (layout, width) => {
      fits(layout, width, 14)
      expect(layout.usageTicks).toHaveLength(POLICIES.length)
      expect(new Set(layout.usageTicks).size, 'KV-usage panels share their x axis').toBe(1)
    })
  })

  it('the sweep report fits 1280 and 1400 px too', async () => {
    await inChromium('sweep.html', [1280, 1400], (layout, width) => fits(layout, width, 4))
  })
})
