import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  type ExperimentResult,
  renderComparisonTable,
  renderHtmlReport,
  runExperiment,
} from '../src/index.js'

const CHROMIUM = '/usr/bin/chromium'
const OUT = join(import.meta.dirname, '..', '.kvc-out', 'report-test')

let result: ExperimentResult
let html: string

beforeAll(async () => {
  result = await runExperiment({
    workload: { kind: 'agentic', options: { sessions: 6, maxTurnsPerSession: 10 } },
    topology: '1P2D',
    policies: ['kvc', 'dp-cache-aware:defaults=rust', 'round-robin'],
    seeds: [1, 2, 3],
    bootstrapResamples: 30,
    faults: [{ kind: 'admit-timeout', probability: 0.1 }],
  })
  html = renderHtmlReport(result)
  mkdirSync(OUT, { recursive: true })
  writeFileSync(join(OUT, 'report.html'), html)
})

describe('per-session fast-path views', () => {
  it('leave out the policies without a fast path instead of calling all their sessions starved', () => {
    const table = html.slice(html.indexOf('<h2>Starved sessions</h2>'), html.indexOf('<h2>Strata</h2>'))
    expect(table).toContain('<td>kvc</td>')
    expect(table).not.toContain('<td>round-robin</td>')
    expect(table).not.toContain('<td>dp-cache-aware:defaults=rust</td>')
    expect(table).toMatch(/Left out: dp-cache-aware:defaults=rust, round-robin, which have no fast path/)
    expect(html).toContain('round-robin (no fast path)')
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
  it('is self-contained: no script, no external resource', () => {
    expect(html).not.toMatch(/<script/i)
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//i)
    expect(html).toMatch(/How to read this report/)
    for (const p of result.config.policies) expect(html).toContain(p)
  })

  if (!existsSync(CHROMIUM)) {
    it.skip(`opens in headless Chromium (skipped: ${CHROMIUM} is absent; apt-get install chromium)`, () => {})
    return
  }

  it('opens in headless Chromium without console errors, shows its charts, and screenshots', async () => {
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
      const page = await browser.newPage({ viewport: { width: 1360, height: 900 } })
      const errors: string[] = []
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text())
      })
      page.on('pageerror', (e) => errors.push(String(e)))
      page.on('requestfailed', (r) => errors.push(`request failed: ${r.url()}`))
      await page.goto(`file://${join(OUT, 'report.html')}`)
      // A string expression: the page's DOM types are not part of this package's compile.
      const charts = (await page.evaluate(`[...document.querySelectorAll('svg.chart')].map((s) => {
        const r = s.getBoundingClientRect()
        return { w: r.width, h: r.height, marks: s.querySelectorAll('rect.bar, path.line').length, title: s.getAttribute('aria-label') }
      })`)) as { w: number; h: number; marks: number; title: string | null }[]
      expect(errors).toEqual([])
      expect(charts.length).toBeGreaterThanOrEqual(10)
      for (const c of charts) {
        expect(c.w, c.title ?? '').toBeGreaterThan(200)
        expect(c.h, c.title ?? '').toBeGreaterThan(150)
        expect(c.marks, c.title ?? '').toBeGreaterThan(0)
      }
      const shot = join(OUT, 'report.png')
      await page.screenshot({ path: shot, fullPage: true })
      expect(statSync(shot).size).toBeGreaterThan(50_000)
    } finally {
      await browser.close()
    }
  })
})
