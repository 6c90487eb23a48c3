/**
 * The docs are self-contained: comments, READMEs, guides and changesets cite this repository's
 * design pages (`docs/design/<page>.md#<anchor>`), public papers or URLs, never a document a reader
 * who clones the repository does not have; and every citation of a page or heading of the
 * repository resolves. Also: the docs site (typedoc.json) covers every package and every page, in
 * the reading order of the indexes.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
const self = relative(repo, fileURLToPath(import.meta.url))

const SKIP_DIRS = new Set([
  'node_modules',
  'dist',
  'coverage',
  'api',
  'generated-samples',
  'kvc-sim-out',
  '.kvc-out',
  'kvc-replay-out',
])

function walk(dir: string, out: string[]): void {
  for (const name of readdirSync(dir)) {
    if (SKIP_DIRS.has(name) || name.startsWith('.')) continue
    const p = join(dir, name)
    if (statSync(p).isDirectory()) walk(p, out)
    else if (/\.(ts|tsx|mts|mjs|md)$/.test(name)) out.push(relative(repo, p))
  }
}

/** Every file whose text users or contributors read: sources, tests, benches, docs, changesets. */
function scannedFiles(): string[] {
  const files: string[] = ['README.md', 'CONTRIBUTING.md']
  for (const d of ['packages', 'examples', 'docs']) walk(join(repo, d), files)
  for (const f of readdirSync(join(repo, '.changeset'))) if (f.endsWith('.md')) files.push(`.changeset/${f}`)
  return files.filter((f) => f !== self).sort()
}

const read = (f: string) => readFileSync(join(repo, f), 'utf8')

/** What cites a document outside the repository. */
const FORBIDDEN: readonly [RegExp, string][] = [
  [/\bseed 00\d/i, 'a seed document of the research prototype'],
  [/\bseeds\/\w/, 'the seed documents folder'],
  [/\b(ALGORITHMS|SIMULATION|SOURCES|ARCHITECTURE|STYLE)\.md\b/, 'a design document outside the repository'],
  [
    /\bpeers\/|shared\/design|sglang\.md\b|routers-and-prefix-caches\.md|serving-facts-2026\.md/,
    'a peer study outside the repository',
  ],
  [
    /\bthe seeds['’]/i,
    'the seed documents (say "the research prototype", and cite docs/design/prototype.md)',
  ],
]

describe('the docs are self-contained', () => {
  const files = scannedFiles()

  it('scans the sources, READMEs, guides, design pages and changesets', () => {
    expect(files).toContain('packages/kvc-router/src/admission/admit.ts')
    expect(files).toContain('docs/guides/sim.md')
    expect(files).toContain('docs/design/algorithms.md')
    expect(files.some((f) => f.startsWith('.changeset/'))).toBe(true)
  })

  it('nothing cites a document outside the repository', () => {
    const found: string[] = []
    for (const f of files) {
      const lines = read(f).split('\n')
      lines.forEach((line, i) => {
        for (const [re, what] of FORBIDDEN)
          if (re.test(line)) found.push(`${f}:${i + 1}: ${what}: ${line.trim()}`)
        // Data may come from ../shared/traces in tests and benches; public APIs and guides must not
        // point there.
        if (/\.\.\/shared\//.test(line) && (/\/src\//.test(f) || f.startsWith('docs/guides/')))
          found.push(`${f}:${i + 1}: a path outside the repository: ${line.trim()}`)
      })
    }
    expect(found).toEqual([])
  })
})

/** The GitHub anchor of a heading (what `#anchor` in a link to the page must be). */
function githubSlug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/`/g, '')
    .replace(/<[^>]+>/g, '')
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-')
}

/** The anchor typedoc gives the same heading on the docs site (its `Slugger`, typedoc 0.28). */
function typedocSlug(heading: string): string {
  const text = heading.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/`/g, '')
  const s = text
    .trim()
    .replace(/[\u2000-\u206F\u2E00-\u2E7F\\'!"#$%&()*+,./:;<=>?@[\]^`{|}~]/g, '')
    .replace(/\s/g, '-')
    .replace(/--+/, '-')
  return (s || '_').toLocaleLowerCase()
}

/** The headings of a Markdown file (outside fenced code), in order. */
function headings(md: string): string[] {
  const out: string[] = []
  let fenced = false
  for (const line of md.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    else if (!fenced) {
      const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
      if (m) out.push(m[1]!)
    }
  }
  return out
}

/** The anchors of a Markdown file, with GitHub's `-1`, `-2`... for repeated headings. */
function anchors(md: string, slug = githubSlug): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const h of headings(md)) {
    const base = slug(h)
    const n = seen.get(base)
    out.add(n === undefined ? base : `${base}-${n + 1}`)
    seen.set(base, n === undefined ? 0 : n + 1)
  }
  return out
}

describe('citations of the repository’s pages resolve', () => {
  const files = scannedFiles()
  const anchorCache = new Map<string, Set<string>>()
  const anchorsOf = (f: string) => {
    let a = anchorCache.get(f)
    if (a === undefined) anchorCache.set(f, (a = anchors(read(f))))
    return a
  }
  const check = (from: string, line: number, target: string, anchor: string | undefined, bad: string[]) => {
    if (!existsSync(join(repo, target))) bad.push(`${from}:${line}: ${target} does not exist`)
    else if (anchor !== undefined && target.endsWith('.md') && !anchorsOf(target).has(anchor))
      bad.push(`${from}:${line}: ${target} has no heading with anchor #${anchor}`)
  }

  it('every docs/design/<page>.md#<anchor> names an existing page and heading', () => {
    const bad: string[] = []
    let count = 0
    for (const f of files) {
      read(f)
        .split('\n')
        .forEach((line, i) => {
          for (const m of line.matchAll(/(?<![\w./-])docs\/design\/([\w-]+\.md)(?:#([\w-]+))?/g)) {
            count++
            check(f, i + 1, `docs/design/${m[1]}`, m[2], bad)
          }
        })
    }
    expect(bad).toEqual([])
    expect(count).toBeGreaterThan(50)
  })

  it('every relative Markdown link to a .md file resolves, anchor included', () => {
    const bad: string[] = []
    let count = 0
    for (const f of files.filter((x) => x.endsWith('.md'))) {
      let fenced = false
      read(f)
        .split('\n')
        .forEach((line, i) => {
          if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
          if (fenced) return
          for (const m of line.matchAll(/\]\(([^)\s#]*\.md)(?:#([^)\s]+))?\)/g)) {
            if (/^[a-z]+:/i.test(m[1]!)) continue
            count++
            check(f, i + 1, relative(repo, resolve(repo, dirname(f), m[1]!)), m[2], bad)
          }
        })
    }
    expect(bad).toEqual([])
    expect(count).toBeGreaterThan(50)
  })

  it('design pages get the same anchors on GitHub and on the docs site', () => {
    for (const f of readdirSync(join(repo, 'docs/design')).filter((x) => x.endsWith('.md'))) {
      const md = read(`docs/design/${f}`)
      expect([...anchors(md, typedocSlug)], f).toEqual([...anchors(md)])
    }
  })

  it('the slug functions follow GitHub and typedoc on the awkward cases', () => {
    expect(githubSlug('Route (Algorithm 1)')).toBe('route-algorithm-1')
    expect(githubSlug('S5: cold D workers')).toBe('s5-cold-d-workers')
    expect(githubSlug("Mooncake FAST'25 traces")).toBe('mooncake-fast25-traces')
    expect(githubSlug('`RadixCache` → radix-cache')).toBe('radixcache--radix-cache')
    expect(typedocSlug('`RadixCache` → radix-cache')).toBe('radixcache-→-radix-cache')
    expect(typedocSlug('Route / Admit')).toBe('route-admit')
    expect(githubSlug('Route / Admit')).toBe('route--admit')
  })
})

describe('the docs site', () => {
  const typedoc = JSON.parse(read('typedoc.json')) as {
    entryPoints: string[]
    projectDocuments: string[]
    sortEntryPoints: boolean
    sort?: string[]
  }
  const frontmatterChildren = (f: string): string[] => {
    const fm = /^---\n([\s\S]*?)\n---/.exec(read(f))?.[1] ?? ''
    return [...fm.matchAll(/^\s+-\s+(\S+)$/gm)].map((m) => relative(repo, resolve(repo, dirname(f), m[1]!)))
  }

  it('documents every package, in the order of the README’s package table', () => {
    const packages = readdirSync(join(repo, 'packages')).filter((p) =>
      existsSync(join(repo, 'packages', p, 'package.json')),
    )
    expect([...typedoc.entryPoints].sort()).toEqual(packages.map((p) => `packages/${p}`).sort())
    // The project is sorted only to put the guides and design documents first (a stable sort that
    // compares nothing else), so the packages keep this order.
    expect(typedoc.sortEntryPoints).toBe(true)
    expect(typedoc.sort).toEqual(['documents-first'])
    const table = [...read('README.md').matchAll(/^\| \[`@kvc\/([\w-]+)`\]/gm)].map((m) => `packages/${m[1]}`)
    expect(typedoc.entryPoints).toEqual(table)
  })

  it('includes every guide and design page, each index listing its pages in reading order', () => {
    expect(typedoc.projectDocuments).toEqual(['docs/guides/index.md', 'docs/design/README.md'])
    for (const [index, dir] of [
      ['docs/guides/index.md', 'docs/guides'],
      ['docs/design/README.md', 'docs/design'],
    ] as const) {
      const children = frontmatterChildren(index)
      const pages = readdirSync(join(repo, dir))
        .filter((f) => f.endsWith('.md') && `${dir}/${f}` !== index)
        .map((f) => `${dir}/${f}`)
      expect([...children].sort(), index).toEqual(pages.sort())
      // The index's own list (its table, or its links) is in the same order as the sidebar.
      const linked = [...read(index).matchAll(/\]\(\.\/([\w-]+\.md)\)/g)].map((m) => `${dir}/${m[1]}`)
      expect(
        linked.filter((l, i) => linked.indexOf(l) === i),
        index,
      ).toEqual(children)
    }
  })
})
