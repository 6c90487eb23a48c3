import { defineConfig } from 'tsup'

export default defineConfig([
  {
    entry: { index: 'src/index.ts' },
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    clean: true,
    target: 'es2022',
    external: ['fast-check'],
  },
  {
    // The kvc-sim command (ESM only: its worker threads resolve their entry with import.meta.url).
    entry: { 'cli/main': 'src/cli/main.ts', 'cli/runWorker': 'src/cli/runWorker.ts' },
    format: ['esm'],
    dts: false,
    sourcemap: true,
    clean: false,
    target: 'es2022',
    splitting: false,
  },
])
