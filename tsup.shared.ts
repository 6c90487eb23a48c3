import type { Options } from 'tsup'

/**
 * The build every kvc package shares: ESM + CJS + `.d.ts` for its entry points, one shared chunk
 * for all of them (so classes are identical across `.` and `./testing` in CJS too), ES2022.
 */
export function packageBuild(entry: Record<string, string>, extra: Options = {}): Options {
  return {
    entry,
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    clean: true,
    splitting: true,
    target: 'es2022',
    external: ['fast-check'],
    ...extra,
  }
}
