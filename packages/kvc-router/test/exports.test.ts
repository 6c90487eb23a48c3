import { describe, expect, it } from 'vitest'
import { exportSurface, valueNames } from '../../../exportSurface.shared.js'
import * as api from '../src/index.js'
import * as testing from '../src/testing/index.js'

// Pin the public surface (values and types): adding or removing an export is a deliberate,
// reviewed change to the snapshot beside this file.
describe('public surface', () => {
  it('of the entry point', async () => {
    const surface = exportSurface(new URL('../src/index.ts', import.meta.url).pathname)
    expect(valueNames(surface)).toEqual(Object.keys(api).sort())
    await expect(surface.join('\n')).toMatchFileSnapshot('__snapshots__/surface.index.snap')
  })

  it('of the /testing subpath', async () => {
    const surface = exportSurface(new URL('../src/testing/index.ts', import.meta.url).pathname)
    expect(valueNames(surface)).toEqual(Object.keys(testing).sort())
    await expect(surface.join('\n')).toMatchFileSnapshot('__snapshots__/surface.testing.snap')
  })
})
