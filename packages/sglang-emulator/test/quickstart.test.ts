import { expect, it } from 'vitest'
import { main } from '../examples/quickstart.js'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'

it('the README quickstart runs end to end and leaves nothing open', async () => {
  const baseline = handleCounts()
  const lines: string[] = []
  await main((...args) => lines.push(args.map(String).join(' ')))
  expect(lines.some((l) => l.startsWith('cached tokens 0 →'))).toBe(true)
  expect(lines).toContain('prefill ready true')
  expect(lines.find((l) => l.startsWith('kv events ingested'))).not.toBe('kv events ingested 0')
  expect(await leakedSince(baseline)).toEqual({})
})
