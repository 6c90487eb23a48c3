/**
 * Checks the sidebar of the generated API site (`docs/api`, written by `pnpm run docs`): its top
 * level must open with the guides and the design documents, in that order, before the packages.
 * typedoc lists a project's documents after its modules unless the project is sorted
 * (`sortEntryPoints: true` with `sort: ["documents-first"]` in `typedoc.json`, a stable sort that
 * leaves the packages in their given order); this keeps an upgrade from undoing that silently.
 *
 * Run after typedoc: `tsx docs/scripts/checkSidebar.ts [site folder]`. Exits 1 when the order is
 * wrong.
 */
import { readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { inflateSync } from 'node:zlib'

/** What the sidebar must start with: the titles of `typedoc.json`'s project documents. */
export const SIDEBAR_HEAD = ['Guides', 'Design'] as const

/**
 * The titles of the sidebar's top-level entries, from the site's `assets/navigation.js` (typedoc
 * 0.28 writes it as `window.navigationData = "<base64 of zlib-deflated JSON>"`).
 */
export function sidebarTopLevel(siteDir: string): string[] {
  const js = readFileSync(join(siteDir, 'assets', 'navigation.js'), 'utf8')
  const data = /window\.navigationData = "([^"]*)"/.exec(js)?.[1]
  if (data === undefined) throw new Error(`${siteDir}/assets/navigation.js: no navigationData`)
  const nav = JSON.parse(inflateSync(Buffer.from(data, 'base64')).toString('utf8')) as { text: string }[]
  return nav.map((e) => e.text)
}

/** Problems with the sidebar's order; empty when it opens with {@link SIDEBAR_HEAD}. */
export function checkSidebar(siteDir: string): string[] {
  const top = sidebarTopLevel(siteDir)
  const head = top.slice(0, SIDEBAR_HEAD.length)
  if (head.join('\n') === SIDEBAR_HEAD.join('\n')) return []
  return [`the sidebar starts with [${top.join(', ')}], expected [${SIDEBAR_HEAD.join(', ')}] first`]
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const site = process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'api')
  const problems = checkSidebar(site)
  for (const p of problems) console.error(p)
  if (problems.length > 0) process.exit(1)
  console.log(`sidebar order ok in ${site}`)
}
