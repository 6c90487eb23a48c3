#!/usr/bin/env node
// `pnpm kvc-sim`: run the kvc-sim command from the workspace sources without a build step.
//
// Loading some 300 TypeScript modules through tsx's loader costs about a second of CPU on every
// start, in the main thread and again in each worker thread of `compare` and `sweep`. Instead, the
// command and its worker entry are bundled once with esbuild (tsx's own transpiler) into
// node_modules/.cache/kvc-sim/<fingerprint>/, where the fingerprint covers every source file of
// the workspace packages (path, size, modification time), the lockfile and the esbuild version;
// an edit makes the next start bundle again (≈ 0.3 s). If bundling fails for any reason, the
// command says so on stderr and runs through tsx as before. The code is the same either way
// (esbuild transpiles for tsx too), so the results are the same.
import { createHash } from 'node:crypto'
import {
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const simSrc = join(root, 'packages/sim/src')
const argv = process.argv.slice(2)

/** Every `.ts` file under each workspace package's `src`, with its size and modification time. */
function fingerprint(esbuildVersion) {
  const h = createHash('sha256')
  h.update(`${process.version}\0${esbuildVersion}\0`)
  const walk = (dir) => {
    const entries = readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))
    for (const e of entries) {
      const p = join(dir, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.name.endsWith('.ts') || e.name === 'package.json') {
        const s = statSync(p)
        h.update(`${p}\0${s.size}\0${s.mtimeMs}\0`)
      }
    }
  }
  for (const pkg of readdirSync(join(root, 'packages')).sort()) {
    const src = join(root, 'packages', pkg, 'src')
    if (existsSync(src)) walk(src)
    const manifest = join(root, 'packages', pkg, 'package.json')
    if (existsSync(manifest)) {
      const s = statSync(manifest)
      h.update(`${manifest}\0${s.size}\0${s.mtimeMs}\0`)
    }
  }
  const lock = statSync(join(root, 'pnpm-lock.yaml'))
  h.update(`lock\0${lock.size}\0${lock.mtimeMs}`)
  return h.digest('hex').slice(0, 20)
}

/** The bundled command's folder, bundling it first when the sources changed. */
function bundled() {
  // esbuild comes with tsx (its transpiler): resolve it from there. Its version is read from its
  // manifest; the module itself (≈ 25 ms to load) only when a bundle must be built.
  const fromTsx = createRequire(createRequire(join(root, 'package.json')).resolve('tsx'))
  const { version } = JSON.parse(readFileSync(fromTsx.resolve('esbuild/package.json'), 'utf8'))
  const cacheRoot = join(root, 'node_modules/.cache/kvc-sim')
  const dir = join(cacheRoot, fingerprint(version))
  if (existsSync(join(dir, 'main.js'))) return dir
  const esbuild = fromTsx('esbuild')
  const tmp = `${dir}.${process.pid}.tmp`
  rmSync(tmp, { recursive: true, force: true })
  esbuild.buildSync({
    entryPoints: { main: join(simSrc, 'cli/main.ts'), runWorker: join(simSrc, 'cli/runWorker.ts') },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: `node${process.versions.node.split('.')[0]}`,
    conditions: ['@kvc/source'],
    outdir: tmp,
    logLevel: 'silent',
    // CommonJS dependencies (commander, cli-progress) call require() for Node's modules.
    banner: {
      js: "import { createRequire as __kvcRequire } from 'node:module'; const require = __kvcRequire(import.meta.url);",
    },
  })
  writeFileSync(join(tmp, 'package.json'), '{ "type": "module" }\n')
  // Bundles of older sources go after a day (a run may still use one until then).
  if (existsSync(cacheRoot)) {
    const dayAgo = Date.now() - 86_400_000
    for (const old of readdirSync(cacheRoot)) {
      const p = join(cacheRoot, old)
      if (statSync(p).mtimeMs < dayAgo) rmSync(p, { recursive: true, force: true })
    }
  }
  mkdirSync(cacheRoot, { recursive: true })
  try {
    renameSync(tmp, dir)
  } catch {
    rmSync(tmp, { recursive: true, force: true })
  }
  return dir
}

let dir
try {
  dir = bundled()
} catch (err) {
  dir = undefined
  // Same results either way; only the start is slower (each thread loads the sources).
  const first = err?.errors?.[0]
  const why = first?.text
    ? `${first.text}${first.location ? ` at ${first.location.file}:${first.location.line}` : ''}`
    : String(err?.message ?? err).split('\n')[0]
  process.stderr.write(
    `kvc-sim: could not bundle the sources (${why}); running through tsx, which starts about a second slower\n`,
  )
}
if (dir !== undefined) {
  const { runCli } = await import(pathToFileURL(join(dir, 'main.js')).href)
  process.exitCode = await runCli(argv)
} else {
  // Fallback: through tsx's loader, as a separate process (the loader must be registered first).
  const { spawnSync } = await import('node:child_process')
  const r = spawnSync(
    process.execPath,
    ['--conditions=@kvc/source', '--import', 'tsx', join(simSrc, 'cli/main.ts'), ...argv],
    { stdio: 'inherit' },
  )
  process.exitCode = r.status ?? 70
}
