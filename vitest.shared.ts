import { defineProject } from 'vitest/config'

/**
 * Shared vitest project settings: resolve workspace packages to `src` (the `@kvc/source`
 * export condition) and keep property tests deterministic unless a seed is given.
 */
export function kvcProject(name: string): ReturnType<typeof defineProject> {
  return defineProject({
    resolve: { conditions: ['@kvc/source'] },
    ssr: { resolve: { conditions: ['@kvc/source'] } },
    test: {
      name,
      include: ['test/**/*.test.ts'],
      testTimeout: 60_000,
      hookTimeout: 60_000,
    },
  })
}
