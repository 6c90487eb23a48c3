import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  BOOTSTRAP_ROOM_LIMIT,
  batchSizeOf,
  bootstrapHostOf,
  generateBootstrapRoom,
  injectBootstrap,
  isBootstrapRoom,
  stringifyJson,
} from '../src/index.js'

describe('bootstrap injection', () => {
  it('rooms lie in [0, 2^63), drawn from 64 random bits with the top bit cleared', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), (u) => {
        const r = generateBootstrapRoom(() => u)
        expect(r >= 0n && r < BOOTSTRAP_ROOM_LIMIT).toBe(true)
        expect(r).toBe(u & (2n ** 63n - 1n))
      }),
    )
    for (let i = 0; i < 100; i++) expect(isBootstrapRoom(generateBootstrapRoom())).toBe(true)
    expect(isBootstrapRoom(-1)).toBe(false)
    expect(isBootstrapRoom(2n ** 63n)).toBe(false)
  })

  it('single requests get scalars, batches per-item lists with distinct rooms; input untouched', () => {
    const req = { text: 'hi', sampling_params: { max_new_tokens: 1 } }
    const one = injectBootstrap(req, { host: '10.0.0.5', port: 8998 })
    expect(one).toMatchObject({ bootstrap_host: '10.0.0.5', bootstrap_port: 8998 })
    expect(typeof one.bootstrap_room).toBe('bigint')
    expect(req).not.toHaveProperty('bootstrap_room')
    const batch = injectBootstrap({ input_ids: [[1], [2], [3]] }, { host: 'p', port: null })
    expect(batch.bootstrap_host).toEqual(['p', 'p', 'p'])
    expect(batch.bootstrap_port).toEqual([null, null, null])
    expect(new Set(batch.bootstrap_room as bigint[]).size).toBe(3)
    expect(batchSizeOf({ messages: [], n: 2 })).toBe(2)
    expect(batchSizeOf({ prompt: ['a', 'b'] })).toBe(2)
    // A room above 2^53 is serialized exactly.
    const body = stringifyJson(injectBootstrap(req, { host: 'h', port: 1, room: 2n ** 63n - 1n }))
    expect(body).toContain('"bootstrap_room":9223372036854775807')
    expect(() => injectBootstrap(req, { host: 'h', port: 1, room: 2n ** 63n })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    )
    expect(() => injectBootstrap({ text: ['a', 'b'] }, { host: 'h', port: 1, room: [1] })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    )
    expect(() => injectBootstrap(req, { host: '', port: 1 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    )
    expect(bootstrapHostOf('http://[::1]:30000')).toBe('::1')
  })
})
