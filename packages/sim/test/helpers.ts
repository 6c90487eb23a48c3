import { existsSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The repository root (tests run from anywhere). */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

/**
 * `../shared/traces` relative to the repository root: the traces' origin, licences and how to fetch
 * them are in docs/design/traces.md.
 */
export const TRACES = join(REPO_ROOT, '..', 'shared', 'traces')

/** A trace path, or undefined (with a visible message) when the shared traces are absent. */
export function tracePath(name: string): string | undefined {
  const p = join(TRACES, name)
  if (!existsSync(p)) {
    console.warn(
      `[sim tests] skipping: ${p} is absent (the shared traces are not checked out next to the repository)`,
    )
    return undefined
  }
  return p
}
