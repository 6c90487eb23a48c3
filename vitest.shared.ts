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
      // Hang guards, not measurements: wide enough for a machine busy with other work.
      testTimeout: 180_000,
      hookTimeout: 180_000,
    },
  })
}
