import type { Parameters } from 'fast-check'

/**
 * How many cases each fuzz property runs: a few hundred by default (fixed seeds, every `pnpm
 * test`), `KVC_FUZZ_RUNS` for a longer run (`KVC_FUZZ_RUNS=20000 pnpm --filter
 * @kvc/example-fuzz test`, what the parsers were attacked with). `KVC_FUZZ_SEED` replaces the
 * fixed seed (to explore; a failure prints the seed and path that reproduce it).
 */
export function fuzzParams<T>(defaultRuns: number, seed: number): Parameters<T> {
  const runs = Number(process.env.KVC_FUZZ_RUNS ?? defaultRuns)
  const s = process.env.KVC_FUZZ_SEED === undefined ? seed : Number(process.env.KVC_FUZZ_SEED)
  if (!Number.isInteger(runs) || runs < 1)
    throw new Error(`KVC_FUZZ_RUNS must be a positive integer, got ${runs}`)
  if (!Number.isInteger(s)) throw new Error(`KVC_FUZZ_SEED must be an integer, got ${s}`)
  return { numRuns: runs, seed: s }
}

/** Test time limit that grows with the run count (a hang guard, not a measurement). */
export function fuzzTimeoutMs(defaultRuns: number, msPerRun: number): number {
  const runs = Number(process.env.KVC_FUZZ_RUNS ?? defaultRuns)
  return Math.max(180_000, runs * msPerRun)
}

/**
 * Runs `f` and returns what it threw (or `undefined`): the fuzz properties accept a typed error
 * of the parser's package and nothing else.
 */
export function thrownBy(f: () => unknown): unknown {
  try {
    f()
    return undefined
  } catch (e) {
    return e
  }
}
