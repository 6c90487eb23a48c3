import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { deflateSync } from 'node:zlib'
import { afterAll, describe, expect, it } from 'vitest'
import { checkSidebar, sidebarTopLevel } from '../scripts/checkSidebar.js'

/** A site folder whose `assets/navigation.js` holds `entries`, encoded as typedoc 0.28 does. */
function site(root: string, name: string, entries: readonly string[]): string {
  const dir = join(root, name)
  mkdirSync(join(dir, 'assets'), { recursive: true })
  const json = JSON.stringify(entries.map((text) => ({ text, path: `${text}.html` })))
  const data = deflateSync(Buffer.from(json)).toString('base64')
  writeFileSync(join(dir, 'assets', 'navigation.js'), `window.navigationData = "${data}"`)
  return dir
}

describe('checkSidebar (run by pnpm run docs on the generated site)', () => {
  const root = mkdtempSync(join(tmpdir(), 'kvc-sidebar-'))
  afterAll(() => rmSync(root, { recursive: true, force: true }))

  it('reads the top-level titles typedoc wrote', () => {
    expect(sidebarTopLevel(site(root, 'read', ['Guides', 'Design', '@kvc']))).toEqual([
      'Guides',
      'Design',
      '@kvc',
    ])
  })

  it('accepts guides, then design, then the packages', () => {
    expect(checkSidebar(site(root, 'ok', ['Guides', 'Design', '@kvc']))).toEqual([])
  })

  it('reports the packages first (typedoc’s order without the project sort), or the documents swapped', () => {
    expect(checkSidebar(site(root, 'late', ['@kvc', 'Guides', 'Design']))).toHaveLength(1)
    expect(checkSidebar(site(root, 'swapped', ['Design', 'Guides', '@kvc']))).toHaveLength(1)
  })

  it('refuses a navigation file without data', () => {
    const dir = join(root, 'empty')
    mkdirSync(join(dir, 'assets'), { recursive: true })
    writeFileSync(join(dir, 'assets', 'navigation.js'), 'window.navigationData = 1')
    expect(() => sidebarTopLevel(dir)).toThrow(/no navigationData/)
  })
})
