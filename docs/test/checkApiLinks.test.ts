import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { findDeadLinks } from '../scripts/checkApiLinks.js'

describe('findDeadLinks (the check pnpm run docs runs on the generated site)', () => {
  const site = mkdtempSync(join(tmpdir(), 'kvc-site-'))
  afterAll(() => rmSync(site, { recursive: true, force: true }))
  mkdirSync(join(site, 'documents'))
  writeFileSync(
    join(site, 'documents', 'Design.html'),
    '<h2 id="route-algorithm-1">Route</h2><a name="old"></a>',
  )
  writeFileSync(
    join(site, 'index.html'),
    [
      '<a href="documents/Design.html#route-algorithm-1">ok</a>',
      '<a href="documents/Design.html#old">ok, by name</a>',
      '<a href="#top">same page</a><div id="top"></div>',
      '<a href="https://arxiv.org/abs/2407.00079">external</a>',
      '<a href="https://docs.rs/">a real site that looks like a file</a>',
      '<a href="" class="x"></a><a href="#"></a><a href="mailto:x@y.z">mail</a>',
      '<a href="documents/Design.html#no-such-anchor">bad anchor</a>',
      '<a href="documents/Missing.html">missing page</a>',
      '<a href="#nowhere">missing same-page anchor</a>',
      '<a href="http://NOTES.md">linkified file name</a>',
      '<img src="assets/logo.svg">',
    ].join('\n'),
  )

  it('reports every dead link with its page and reason, and nothing else', () => {
    const dead = findDeadLinks(site)
    expect(dead.map((d) => d.href)).toEqual([
      'documents/Design.html#no-such-anchor',
      'documents/Missing.html',
      '#nowhere',
      'http://NOTES.md',
      'assets/logo.svg',
    ])
    expect(dead.every((d) => d.page === 'index.html')).toBe(true)
    expect(dead[0]!.reason).toContain('no element with id "no-such-anchor"')
    expect(dead[3]!.reason).toContain('file name')
  })

  it('finds nothing in a site without dead links', () => {
    const clean = mkdtempSync(join(tmpdir(), 'kvc-site-'))
    writeFileSync(join(clean, 'index.html'), '<a href="index.html#a" id="a">self</a>')
    expect(findDeadLinks(clean)).toEqual([])
    rmSync(clean, { recursive: true, force: true })
  })
})
