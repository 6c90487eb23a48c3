import { defineConfig } from 'tsup'

export default defineConfig({
  entry: { index: 'src/index.ts', 'testing/index': 'src/testing/index.ts' },
  format: ['esm', 'cjs'],
  dts: true,
  sourcemap: true,
  clean: true,
  // One shared chunk for both entries, so classes (RouterError, ResidencyIndex, Router...) are
  // identical across '.' and './testing' in CJS too.
  splitting: true,
  target: 'es2022',
  external: ['fast-check'],
})
