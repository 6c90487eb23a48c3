/**
 * Every TypeScript sample in the guides (docs/guides/*.md) and in the package READMEs is
 * type-checked and executed here, so the docs cannot drift from the code.
 *
 * Fences: ```ts samples are type-checked and run; ```ts no-run samples are only type-checked
 * (for code that needs a live server); other languages are ignored.
 */
import { execFile } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'

const execFileAsync = promisify(execFile)

const docsDir = join(dirname(fileURLToPath(import.meta.url)), '..')
const repo = join(docsDir, '..')
// Not a dot-folder: TypeScript's include globs skip those.
const outDir = join(docsDir, 'generated-samples')

interface Sample {
  readonly source: string
  readonly line: number
  readonly run: boolean
  readonly file: string
}

function markdownFiles(): string[] {
  const files: string[] = []
  for (const f of readdirSync(join(docsDir, 'guides')))
    if (f.endsWith('.md')) files.push(join(docsDir, 'guides', f))
  for (const group of ['packages', 'examples']) {
    let entries: string[] = []
    try {
      entries = readdirSync(join(repo, group))
    } catch {
      continue
    }
    for (const p of entries) {
      const readme = join(repo, group, p, 'README.md')
      try {
        readFileSync(readme)
        files.push(readme)
      } catch {}
    }
  }
  return files.sort()
}

function extract(): Sample[] {
  rmSync(outDir, { recursive: true, force: true })
  mkdirSync(outDir, { recursive: true })
  const samples: Sample[] = []
  for (const md of markdownFiles()) {
    const lines = readFileSync(md, 'utf8').split('\n')
    const rel = relative(repo, md)
    const stem = rel.replace(/[^a-zA-Z0-9]+/g, '_')
    for (let i = 0; i < lines.length; i++) {
      const m = /^```(ts|typescript)(\s+no-run)?\s*$/.exec(lines[i]!)
      if (!m) continue
      const start = i + 1
      let end = start
      while (end < lines.length && !lines[end]!.startsWith('```')) end++
      const body = lines.slice(start, end).join('\n')
      const file = join(outDir, `${stem}_L${start}.ts`)
      // Each sample is its own module.
      writeFileSync(file, `// from ${rel}:${start}\n${body}\nexport {}\n`)
      samples.push({ source: rel, line: start, run: m[2] === undefined, file })
      i = end
    }
  }
  return samples
}

const samples = extract()

describe('documentation code samples', () => {
  it('found samples to check', () => {
    expect(samples.length).toBeGreaterThan(0)
  })

  // tsc over every package takes half a minute on an idle machine and several on a busy one: the
  // limit is the suite's widest (what is checked is that the samples type-check, not how fast).
  it('type-check', async () => {
    try {
      await execFileAsync(
        process.execPath,
        [join(repo, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', docsDir],
        {
          encoding: 'utf8',
          maxBuffer: 64 * 1024 * 1024,
        },
      )
    } catch (e) {
      const out = (e as { stdout?: string }).stdout ?? String(e)
      throw new Error(`documentation samples do not type-check:\n${out}`)
    }
  }, 900_000)

  for (const s of samples.filter((x) => x.run)) {
    it(`runs ${s.source}:${s.line}`, async () => {
      const log = console.log
      console.log = () => {}
      try {
        await import(s.file)
      } finally {
        console.log = log
      }
    })
  }
})
