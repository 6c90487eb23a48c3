import { mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { SimError, SimErrorCode } from '../errors/simError.js'

/**
 * Makes sure `--out` names a folder the CLI can write, before any simulation runs: creates it
 * (with its parents) and writes then removes a probe file. A path that cannot be a folder
 * (`/dev/null/x`), a read-only or virtual file system (`/proc/...`) or a file in the way fails
 * at once with `INVALID_OPTION` naming the path and the reason, instead of after the whole run.
 * Returns the folder's absolute path.
 */
export function prepareOutDir(outDir: string): string {
  const dir = resolve(outDir)
  const fail = (why: string): never => {
    throw new SimError(SimErrorCode.InvalidOption, `--out ${JSON.stringify(outDir)}: ${why}`, outDir)
  }
  try {
    makeDirs(dir)
  } catch (err) {
    fail(`cannot create the output folder (${reason(err)})`)
  }
  let isDir = false
  try {
    isDir = statSync(dir).isDirectory()
  } catch (err) {
    fail(`cannot read the output folder (${reason(err)})`)
  }
  if (!isDir) fail('exists and is not a folder')
  const probe = join(dir, `.kvc-sim-write-probe-${process.pid}`)
  try {
    writeFileSync(probe, '')
  } catch (err) {
    fail(`the output folder is not writable (${reason(err)})`)
  } finally {
    rmSync(probe, { force: true })
  }
  return dir
}

function reason(err: unknown): string {
  const e = err as NodeJS.ErrnoException
  return e.code ?? e.message
}

/**
 * `mkdir -p` one level at a time. Node's `mkdirSync(…, { recursive: true })` loops forever on a
 * file system that refuses a new entry with `ENOENT` although the parent exists (`/proc`).
 */
function makeDirs(dir: string): void {
  const missing: string[] = []
  let d = dir
  for (;;) {
    try {
      statSync(d)
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      missing.push(d)
      const parent = dirname(d)
      if (parent === d) break
      d = parent
    }
  }
  for (let i = missing.length - 1; i >= 0; i--) mkdirSync(missing[i]!)
}
