import { defineConfig } from 'vitest/config'

// One vitest project per workspace package/example; each resolves sibling packages to their
// TypeScript sources through the `@kvc/source` export condition, so `pnpm test` needs no build.
export default defineConfig({
  test: {
    projects: ['packages/*', 'examples/*', 'docs'],
  },
})
