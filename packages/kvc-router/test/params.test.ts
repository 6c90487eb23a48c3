import { sglangBlockHasher } from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  BlockKeys,
  ClusterView,
  DEFAULT_ROUTER_PARAMS,
  MAX_PAGE_SIZE,
  ResidencyIndex,
  Router,
  RouterError,
  resolveRouterParams,
} from '../src/index.js'

/** The error a call throws (`undefined` if it returns). */
function thrown(f: () => unknown): RouterError | undefined {
  try {
    f()
  } catch (err) {
    if (err instanceof RouterError) return err
    throw err
  }
  return undefined
}

describe('one owner for pageSize', () => {
  it('every place that takes a page size applies the same rule', () => {
    const places: ((ps: number) => unknown)[] = [
      (ps) => resolveRouterParams({ pageSize: ps }),
      (ps) => new ResidencyIndex({ pageSize: ps }),
      (ps) => new Router({ now: () => 0, residency: { pageSize: ps } }),
      (ps) => BlockKeys.fromTokens(sglangBlockHasher(), [1, 2, 3], ps),
    ]
    const values = fc.sample(
      fc.oneof(
        fc.integer({ min: -5, max: MAX_PAGE_SIZE + 5 }),
        fc.constantFrom(0, 1, MAX_PAGE_SIZE, MAX_PAGE_SIZE + 1, 1.5, Number.NaN, Number.POSITIVE_INFINITY),
      ),
      { numRuns: 200, seed: 7 },
    )
    for (const ps of values) {
      const valid = Number.isInteger(ps) && ps >= 1 && ps <= MAX_PAGE_SIZE
      for (const place of places) {
        const e = thrown(() => place(ps))
        expect(e === undefined, `page size ${ps}`).toBe(valid)
        if (e !== undefined) {
          expect(e.code).toBe('INVALID_OPTION')
          expect(e.value).toBe(ps)
          expect(e.message).toMatch(/pageSize must be an integer in \[1, 4096\], got /)
        }
      }
    }
  })

  it('the router has one page size: residency.pageSize gives it, or must equal params.pageSize', () => {
    const only = new Router({ now: () => 0, residency: { pageSize: 64 } })
    expect(only.params.pageSize).toBe(64)
    expect(only.cluster.residency.pageSize).toBe(64)
    const both = new Router({ now: () => 0, params: { pageSize: 32 }, residency: { pageSize: 32 } })
    expect(both.params.pageSize).toBe(32)
    const e = thrown(
      () => new Router({ now: () => 0, params: { pageSize: 16 }, residency: { pageSize: 64 } }),
    )
    expect(e?.code).toBe('INVALID_OPTION')
    expect(e?.message).toMatch(/residency\.pageSize 64 disagrees with params\.pageSize 16/)
    expect(e?.value).toEqual({ paramsPageSize: 16, residencyPageSize: 64 })
    // Without a residency page size the index checks no block size (events of any size apply).
    const plain = new Router({ now: () => 0, params: { pageSize: 16 } })
    expect(plain.cluster.residency.pageSize).toBeUndefined()
    const bad = thrown(() => new Router({ now: () => 0, residency: { pageSize: 0 } }))
    expect(bad?.message).toMatch(/^residency\.pageSize must be/)
  })
})

describe('one rule per router parameter', () => {
  it('the residency index and the cluster view default to the router parameters and refuse what the router refuses', () => {
    expect(thrown(() => resolveRouterParams({ thetaShared: 0 }))?.message).toMatch(
      /^thetaShared must be a number in \(0, 1\], got 0$/,
    )
    expect(thrown(() => new ResidencyIndex({ thetaShared: 0 }))?.message).toMatch(
      /^thetaShared must be a number in \(0, 1\], got 0$/,
    )
    for (const [name, bad] of [
      ['linkFailureThreshold', 0],
      ['linkFailureThreshold', 1.5],
      ['linkCooldownMs', -1],
    ] as const) {
      const a = thrown(() => resolveRouterParams({ [name]: bad }))
      const b = thrown(() => new ClusterView({ now: () => 0, [name]: bad }))
      expect(a?.message).toBe(b?.message)
      expect(a?.value).toBe(bad)
    }
    // The defaults are the router's: a link is avoided after linkFailureThreshold failures.
    const view = new ClusterView({ now: () => 0 })
    view.addWorker({ id: 'p0', role: 'prefill', capacityTokens: 1 })
    view.addWorker({ id: 'd0', role: 'decode', capacityTokens: 1 })
    for (let i = 0; i < DEFAULT_ROUTER_PARAMS.linkFailureThreshold; i++) {
      expect(view.linkHealthy('p0', 'd0')).toBe(true)
      view.recordTransfer('p0', 'd0', false)
    }
    expect(view.linkHealthy('p0', 'd0')).toBe(false)
  })

  it('an error names the first bad field, its rule and the value, and nothing else is resolved', () => {
    const e = thrown(() => resolveRouterParams({ tauReject: 0, maxWalks: 0 }))
    expect(e?.message).toBe('tauReject must be an integer >= 1, got 0')
    expect(thrown(() => resolveRouterParams({ backoffBaseMs: 100, backoffCapMs: 50 }))?.message).toBe(
      'backoffCapMs must be a number >= backoffBaseMs, got 50',
    )
    expect(thrown(() => resolveRouterParams({ overlapMode: 'x' as never }))?.message).toBe(
      `overlapMode must be 'plain', 'exclusive' or 'sole', got "x"`,
    )
  })
})
