import { defineConfig } from 'vitest/config'

// Benchmarks run one file at a time (the machines have two cores) and never gate CI.
//
// The packages' sources are loaded by Node itself (through tsx, with the `@kvc/source` condition),
// not through Vite's module runner: the runner turns every imported binding into a getter on a
// namespace object, so a hot loop that reads an imported constant or calls an imported helper
// paid a getter per access (ResidencyIndex ingest ran 1.85× slower than its tsup build). Native
// ESM is what users run; the bench files and their in-file baselines still go through Vite.
export default defineConfig({
  resolve: { conditions: ['@kvc/source'] },
  ssr: { resolve: { conditions: ['@kvc/source'] } },
  test: {
    include: ['packages/*/bench/**/*.bench.ts'],
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 600_000,
    execArgv: ['--conditions=@kvc/source', '--import', 'tsx'],
    server: { deps: { external: [/\/packages\/[^/]+\/src\//] } },
  },
})
