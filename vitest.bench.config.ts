import { defineConfig } from 'vitest/config'

// Benchmarks run one file at a time (the machines have two cores) and never gate CI.
export default defineConfig({
  resolve: { conditions: ['@kvc/source'] },
  ssr: { resolve: { conditions: ['@kvc/source'] } },
  test: {
    include: ['packages/*/bench/**/*.bench.ts'],
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 600_000,
  },
})
