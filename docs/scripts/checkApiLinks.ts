/**
 * Checks the generated API site (`docs/api`, written by `pnpm run docs`) for dead links: every
 * relative `href`/`src` must name a file of the site and, with a `#fragment`, an element id in it;
 * every same-page `#fragment` must exist; and no external link may be a file name that Markdown
 * turned into a web address (a bare `NOTES.md` in a comment becomes `http://NOTES.md`).
 *
 * Run after typedoc: `tsx docs/scripts/checkApiLinks.ts [site folder]`. Exits 1 and lists every
 * dead link when there is one.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** One dead link: the page it is on, the link as written, and why it is dead. */
export interface DeadLink {
  readonly page: string
  readonly href: string
  readonly reason: string
}

/** Hosts that look like file names but are real sites. */
const FILE_LIKE_SITES = new Set(['docs.rs'])
const FILE_LIKE_HOST = /^[^./]+\.(md|ts|tsx|js|mjs|cjs|json|jsonl|csv|txt|py|rs|sh|ya?ml|toml|html)$/i

function htmlFiles(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name)
    if (statSync(p).isDirectory()) htmlFiles(p, out)
    else if (name.endsWith('.html')) out.push(p)
  }
  return out
}

function decode(s: string): string {
  return s
    .replace(/&amp;/g, '&')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
}

/** The dead links of the site in `siteDir` (an empty list when there are none). */
export function findDeadLinks(siteDir: string): DeadLink[] {
  const root = resolve(siteDir)
  const ids = new Map<string, Set<string>>()
  const idsOf = (file: string): Set<string> => {
    let s = ids.get(file)
    if (s === undefined) {
      s = new Set()
      for (const m of readFileSync(file, 'utf8').matchAll(/\s(?:id|name)="([^"]*)"/g)) s.add(decode(m[1]!))
      ids.set(file, s)
    }
    return s
  }
  const dead: DeadLink[] = []
  for (const file of htmlFiles(root)) {
    const page = relative(root, file)
    const html = readFileSync(file, 'utf8')
    for (const m of html.matchAll(/\s(?:href|src)="([^"]*)"/g)) {
      const href = decode(m[1]!)
      if (href === '' || href === '#') continue
      const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(href)
      if (scheme) {
        if (!/^https?$/i.test(scheme[1]!)) continue
        const host = /^https?:\/\/([^/?#]*)/i.exec(href)?.[1] ?? ''
        if (FILE_LIKE_HOST.test(host) && !FILE_LIKE_SITES.has(host.toLowerCase()))
          dead.push({ page, href, reason: 'a file name turned into a web address' })
        continue
      }
      const hash = href.indexOf('#')
      const path = (hash < 0 ? href : href.slice(0, hash)).replace(/\?.*$/, '')
      const fragment = hash < 0 ? '' : decodeURIComponent(href.slice(hash + 1))
      const target = path === '' ? file : resolve(dirname(file), decodeURIComponent(path))
      if (!target.startsWith(root) || !existsSync(target) || statSync(target).isDirectory()) {
        dead.push({ page, href, reason: 'no such file in the site' })
        continue
      }
      if (fragment !== '' && target.endsWith('.html') && !idsOf(target).has(fragment))
        dead.push({ page, href, reason: `no element with id "${fragment}" in ${relative(root, target)}` })
    }
  }
  return dead
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const site = process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'api')
  const dead = findDeadLinks(site)
  for (const d of dead) console.error(`${d.page}: ${d.href} (${d.reason})`)
  if (dead.length > 0) {
    console.error(`${dead.length} dead link(s) in ${site}`)
    process.exit(1)
  }
  console.log(`no dead links in ${site}`)
}
