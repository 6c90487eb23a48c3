import type { KvEvent } from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  type AdmitRequest,
  type AdmitWorkerState,
  BlockKeys,
  type CostModel,
  DEFAULT_ADMIT_OPTIONS,
  DEFAULT_COST_MODEL,
  HostResidency,
  ResidencyIndex,
  Router,
  RouterError,
  type TieredHit,
  admit,
  admitWorkerState,
  chooseLoadBack,
  loadBackSeconds,
  makeCostModel,
  mediumTier,
  planPrefix,
  prefillSeconds,
  recommendedPauseMs,
  transferSeconds,
} from '../src/index.js'
import { tierCostOverrides } from './arbitraries.js'

const costModels = tierCostOverrides

/** A prompt split into device / host / disk / absent parts. */
const hits = fc
  .tuple(
    fc.integer({ min: 0, max: 60_000 }),
    fc.integer({ min: 0, max: 60_000 }),
    fc.integer({ min: 0, max: 60_000 }),
    fc.integer({ min: 0, max: 20_000 }),
  )
  .map(
    ([d, h, k, rest]): TieredHit => ({
      promptTokens: d + h + k + rest,
      deviceTokens: d,
      hostTokens: h,
      diskTokens: k,
    }),
  )

/** The naive reference: every plan written out, the cheapest taken, ties to the one loading less. */
function referencePlan(cm: CostModel, hit: TieredHit): { seconds: number; loadBackTokens: number } {
  const n = hit.promptTokens
  const d = hit.deviceTokens
  const h = hit.hostTokens
  const k = hit.diskTokens ?? 0
  const plans = [{ seconds: prefillSeconds(cm, n - d, d), loadBackTokens: 0 }]
  if (h > 0) {
    plans.push({
      seconds: loadBackSeconds(cm, h, 'host') + prefillSeconds(cm, n - d - h, d + h),
      loadBackTokens: h,
    })
  }
  if (k > 0) {
    plans.push({
      seconds:
        loadBackSeconds(cm, h, 'host') +
        loadBackSeconds(cm, k, 'disk') +
        prefillSeconds(cm, n - d - h - k, d + h + k),
      loadBackTokens: h + k,
    })
  }
  let best = plans[0]!
  for (const p of plans) if (p.seconds < best.seconds) best = p
  return best
}

describe('the cost model: load-back time', () => {
  it('copies at the tier bandwidth plus a setup; nothing costs nothing', () => {
    expect(loadBackSeconds(DEFAULT_COST_MODEL, 0)).toBe(0)
    expect(loadBackSeconds(DEFAULT_COST_MODEL, 50_000)).toBeCloseTo(0.001 + (50_000 * 98_304) / 50e9, 9)
    expect(loadBackSeconds(DEFAULT_COST_MODEL, 50_000, 'disk')).toBeCloseTo(
      0.001 + (50_000 * 98_304) / 6e9,
      9,
    )
    // A load-back is an order of magnitude cheaper than recomputing at the defaults.
    expect(loadBackSeconds(DEFAULT_COST_MODEL, 50_000) * 20).toBeLessThan(
      prefillSeconds(DEFAULT_COST_MODEL, 50_000, 0),
    )
  })
  it('refuses a zero or negative tier bandwidth, naming it', () => {
    for (const k of ['hostLoadGBps', 'diskLoadGBps'] as const) {
      const err = (() => {
        try {
          makeCostModel({ [k]: 0 })
        } catch (e) {
          return e
        }
      })() as RouterError
      expect(err).toBeInstanceOf(RouterError)
      expect(err.code).toBe('INVALID_OPTION')
      expect(err.message).toContain(k)
      expect(err.value).toBe(0)
    }
    expect(() => makeCostModel({ loadBackSetupS: -1 })).toThrow(/loadBackSetupS/)
  })
})

describe('planPrefix: load back or recompute', () => {
  it('is the cheapest plan of the naive reference, and loads back iff that is strictly cheaper', () => {
    fc.assert(
      fc.property(costModels, hits, (over, hit) => {
        const cm = makeCostModel(over)
        const p = planPrefix(cm, hit)
        const ref = referencePlan(cm, hit)
        expect(p.seconds).toBeCloseTo(ref.seconds, 9)
        expect(p.loadBackTokens).toBe(ref.loadBackTokens)
        expect(p.loadBack).toBe(p.loadBackTokens > 0)
        expect(p.loadBack).toBe(p.seconds < p.recomputeS)
        expect(p.seconds).toBeLessThanOrEqual(p.recomputeS)
        expect(p.recomputeTokens).toBe(hit.promptTokens - hit.deviceTokens - p.loadBackTokens)
        expect(p.hostLoadTokens + p.diskLoadTokens).toBe(p.loadBackTokens)
        expect(p.loadBackS + p.prefillS).toBeCloseTo(p.seconds, 12)
      }),
      { numRuns: 300 },
    )
  })

  it('host-resident tokens never make a turn slower than recomputing them', () => {
    fc.assert(
      fc.property(costModels, hits, (over, hit) => {
        const cm = makeCostModel(over)
        const tiered = planPrefix(cm, hit)
        const without = planPrefix(cm, { ...hit, hostTokens: 0, diskTokens: 0 })
        expect(tiered.seconds).toBeLessThanOrEqual(without.seconds + 1e-12)
      }),
      { numRuns: 300 },
    )
  })

  it('more host-resident tokens never make the estimate slower, while a token loads faster than it prefills', () => {
    fc.assert(
      fc.property(costModels, hits, fc.integer({ min: 1, max: 5_000 }), (over, hit0, more) => {
        const cm = makeCostModel(over)
        fc.pre(cm.kvBytesPerToken / (cm.hostLoadGBps * 1e9) <= 1 / cm.prefillTokensPerS)
        const hit = { ...hit0, diskTokens: 0 }
        const absent = hit.promptTokens - hit.deviceTokens - hit.hostTokens
        const add = Math.min(more, absent)
        const bigger = planPrefix(cm, { ...hit, hostTokens: hit.hostTokens + add })
        expect(bigger.seconds).toBeLessThanOrEqual(planPrefix(cm, hit).seconds + 1e-12)
      }),
      { numRuns: 300 },
    )
  })

  it('a few tokens are not worth a load-back setup; tens of thousands are', () => {
    const small = planPrefix(DEFAULT_COST_MODEL, { promptTokens: 1_000, deviceTokens: 960, hostTokens: 16 })
    expect(small.loadBack).toBe(false)
    const big = planPrefix(DEFAULT_COST_MODEL, {
      promptTokens: 42_000,
      deviceTokens: 6_000,
      hostTokens: 35_000,
    })
    expect(big).toMatchObject({ loadBack: true, loadBackTokens: 35_000, recomputeTokens: 1_000 })
    expect(big.seconds * 10).toBeLessThan(big.recomputeS)
  })

  it('a slow disk is skipped while the host part is still loaded', () => {
    const cm = makeCostModel({ diskLoadGBps: 0.05 }) // 2 ms per token: slower than prefilling
    const p = planPrefix(cm, { promptTokens: 30_000, deviceTokens: 0, hostTokens: 20_000, diskTokens: 9_000 })
    expect(p).toMatchObject({ hostLoadTokens: 20_000, diskLoadTokens: 0 })
  })

  it('refuses malformed hits with INVALID_OPTION naming the value', () => {
    const bad: unknown[] = [
      null,
      { promptTokens: -1, deviceTokens: 0, hostTokens: 0 },
      { promptTokens: 10, deviceTokens: 1.5, hostTokens: 0 },
      { promptTokens: 10, deviceTokens: 6, hostTokens: 6 },
      { promptTokens: 10, deviceTokens: 0, hostTokens: 0, diskTokens: Number.NaN },
    ]
    for (const h of bad) {
      expect(() => planPrefix(DEFAULT_COST_MODEL, h as TieredHit)).toThrow(RouterError)
    }
  })
})

describe('chooseLoadBack: the path decision on the session’s own D', () => {
  it('loads back iff the load-back plan is estimated strictly cheaper than the reseed', () => {
    fc.assert(
      fc.property(
        costModels,
        hits,
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 5, noNaN: true }),
        (over, hit, heldShare, queueS) => {
          const cm = makeCostModel(over)
          const held = Math.floor(heldShare * hit.promptTokens)
          const r = chooseLoadBack(cm, hit, { prefillHeldTokens: held, prefillQueueS: queueS })
          const ref = referencePlan(cm, hit)
          const reseedS =
            prefillSeconds(cm, hit.promptTokens - held, held) +
            queueS +
            transferSeconds(cm, hit.promptTokens - hit.deviceTokens)
          expect(r.reseedS).toBeCloseTo(reseedS, 9)
          const expected = ref.loadBackTokens > 0 && ref.seconds < reseedS ? 'loadBack' : 'reseed'
          // Equal estimates within rounding can go either way; elsewhere the choice is exact.
          if (Math.abs(ref.seconds - reseedS) > 1e-9) expect(r.choice).toBe(expected)
        },
      ),
      { numRuns: 300 },
    )
  })
  it('refuses a reseed estimate outside the prompt', () => {
    const hit = { promptTokens: 100, deviceTokens: 0, hostTokens: 50 }
    expect(() => chooseLoadBack(DEFAULT_COST_MODEL, hit, { prefillHeldTokens: 101 })).toThrow(
      /prefillHeldTokens/,
    )
    expect(() =>
      chooseLoadBack(DEFAULT_COST_MODEL, hit, { prefillHeldTokens: 0, prefillQueueS: -1 }),
    ).toThrow(/prefillQueueS/)
  })
})

describe('media and tiers', () => {
  it('maps media to tiers with Dynamo’s table, case-insensitively', () => {
    expect(mediumTier(undefined)).toBe('device')
    expect(mediumTier(null)).toBe('device')
    expect(mediumTier('GPU')).toBe('device')
    expect(mediumTier('cpu_tier1')).toBe('host')
    expect(mediumTier('CPU')).toBe('host')
    expect(mediumTier('CPU_TIER2')).toBe('disk')
    expect(mediumTier('remote')).toBe('external')
    expect(mediumTier('tape')).toBe(undefined)
  })
})

const stored = (id: number, hashes: bigint[], medium?: string): KvEvent => ({
  type: 'BlockStored',
  eventId: id,
  blockHashes: hashes,
  parentBlockHash: null,
  tokenIds: [],
  blockSize: medium === 'CPU' ? 0 : 16,
  extraKey: null,
  ...(medium === undefined ? {} : { medium }),
})
const removed = (id: number, hashes: bigint[], medium?: string): KvEvent => ({
  type: 'BlockRemoved',
  eventId: id,
  blockHashes: hashes,
  extraKey: null,
  ...(medium === undefined ? {} : { medium }),
})

describe('HostResidency against a naive model', () => {
  const media = ['CPU_TIER1', 'CPU', 'CPU_TIER2', 'GPU', undefined, 'REMOTE'] as const
  // Block ids as engines publish them: signed (SGLang, this project's hashers) or unsigned 64-bit,
  // so one block may arrive as -1n or as 2^64 - 1.
  const hash = fc.oneof(
    fc.bigInt({ min: 1n, max: 12n }),
    fc.constantFrom(-1n, -2n, 2n ** 64n - 1n, 2n ** 64n - 2n, -(2n ** 63n), 2n ** 63n),
  )
  const u64 = (h: bigint) => BigInt.asUintN(64, h)
  const op = fc.oneof(
    fc.record({
      kind: fc.constantFrom('store', 'remove'),
      worker: fc.constantFrom('d0', 'd1'),
      hashes: fc.array(hash, { maxLength: 6 }),
      medium: fc.constantFrom(...media),
    }),
    fc.record({ kind: fc.constant('clear'), worker: fc.constantFrom('d0', 'd1') }),
    fc.record({
      kind: fc.constant('query'),
      worker: fc.constantFrom('d0', 'd1'),
      keys: fc.array(hash, { maxLength: 10 }),
      from: fc.integer({ min: 0, max: 10 }),
    }),
  )
  it('follows every sequence of tier events, clears and queries', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const hr = new HostResidency()
        const model = new Map<string, { host: Set<bigint>; disk: Set<bigint> }>()
        const sets = (w: string) => {
          let s = model.get(w)
          if (s === undefined) model.set(w, (s = { host: new Set(), disk: new Set() }))
          return s
        }
        let id = 0
        for (const o of ops) {
          if (o.kind === 'clear') {
            hr.ingest(o.worker, { type: 'AllBlocksCleared', eventId: id++ })
            model.delete(o.worker)
          } else if (o.kind === 'query') {
            const keys = BlockKeys.fromHashes(o.keys)
            const s = sets(o.worker)
            let i = o.from
            let host = 0
            let disk = 0
            for (; i < o.keys.length && s.host.has(u64(o.keys[i]!)); i++) host++
            for (; i < o.keys.length && s.disk.has(u64(o.keys[i]!)); i++) disk++
            expect(hr.runFrom(o.worker, keys, o.from)).toEqual({ host, disk })
          } else {
            const e =
              o.kind === 'store' ? stored(id++, o.hashes, o.medium) : removed(id++, o.hashes, o.medium)
            const tier = mediumTier(o.medium)
            expect(hr.ingest(o.worker, e)).toBe(tier === 'host' || tier === 'disk')
            if (tier === 'host' || tier === 'disk') {
              const set = sets(o.worker)[tier]
              for (const h of o.hashes) o.kind === 'store' ? set.add(u64(h)) : set.delete(u64(h))
            }
          }
          // Invariant: the block count is the sum over workers and tiers, and each tier agrees.
          let total = 0
          for (const [w, s] of model) {
            total += s.host.size + s.disk.size
            expect(hr.tierBlocks(w)).toEqual({ host: s.host.size, disk: s.disk.size })
          }
          expect(hr.blockCount).toBe(total)
        }
      }),
      { numRuns: 200 },
    )
  })
  it('finds a block published with a signed id under its unsigned route key', () => {
    const hr = new HostResidency()
    hr.ingest('d0', stored(0, [-5n, 7n], 'CPU_TIER1'))
    expect(hr.runFrom('d0', BlockKeys.fromHashes([2n ** 64n - 5n, 7n]), 0)).toEqual({ host: 2, disk: 0 })
    hr.ingest('d0', removed(1, [2n ** 64n - 5n], 'CPU_TIER1'))
    expect(hr.tierBlocks('d0')).toEqual({ host: 1, disk: 0 })
  })
  it('refuses a tier event without a hash list, changing nothing', () => {
    const hr = new HostResidency()
    const bad = { ...removed(0, []), blockHashes: 'x', medium: 'CPU' } as unknown as KvEvent
    expect(() => hr.ingest('d0', bad)).toThrow(RouterError)
    expect(hr.blockCount).toBe(0)
  })
})

describe('the device residency index with tier events', () => {
  it('keeps the id sequence whole but changes no device residency on a host event', () => {
    const idx = new ResidencyIndex({ pageSize: 16 })
    idx.addWorker('d0')
    expect(idx.ingest('d0', stored(0, [1n, 2n]))).toBe('applied')
    // A demotion: stored on the host, then removed from the GPU.
    expect(idx.ingest('d0', stored(1, [2n], 'CPU_TIER1'))).toBe('applied')
    expect(idx.ingest('d0', removed(2, [2n], 'GPU'))).toBe('applied')
    // vLLM's offloading connector: CPU, block size 0.
    expect(idx.ingest('d0', stored(3, [1n], 'CPU'))).toBe('applied')
    // A host eviction of a page still on the device leaves the device residency alone.
    expect(idx.ingest('d0', removed(4, [1n], 'CPU'))).toBe('applied')
    expect(idx.overlap([1n, 2n], 'plain').get('d0')).toBe(1)
    expect(idx.workerStatus('d0').gaps).toBe(0)
  })
})

/** A router with one P and two D; session `s` bound to d0, which holds `dev` blocks on device. */
function demotedRouter(costModel?: CostModel) {
  const r = new Router({
    now: () => 0,
    random: () => 0.5,
    params: { pageSize: 16 },
    ...(costModel === undefined ? {} : { costModel }),
    workers: [
      { id: 'p0', role: 'prefill', capacityTokens: 1_000_000 },
      { id: 'd0', role: 'decode', capacityTokens: 1_000_000 },
      { id: 'd1', role: 'decode', capacityTokens: 1_000_000 },
    ],
  })
  const all = Array.from({ length: 2_000 }, (_, i) => BigInt(i + 1)) // 32,000 tokens
  r.cluster.store.setBinding('s', {
    workerId: 'd0',
    committedTokens: 32_000,
    verifiedBlocks: 2_000,
    updatedAt: 0,
  })
  r.ingest('d0', stored(0, all))
  // Demoted: everything past the first 400 blocks (a shared prefix) went to the host.
  r.ingest('d0', stored(1, all.slice(400), 'CPU_TIER1'))
  r.ingest('d0', removed(2, all.slice(400), 'GPU'))
  const turn = { sessionId: 's', promptTokens: 32_500, blocks: [...all, 2_001n] }
  return { r, turn }
}

describe('Route with a host tier', () => {
  it('keeps the session on its D on the fast path, loading its host part back, when that beats a reseed', () => {
    const { r, turn } = demotedRouter()
    const top = r.route(turn).candidates[0]!
    expect(top).toMatchObject({ workerId: 'd0', fast: true, prefixResident: true, loadBackTokens: 25_600 })
    expect(top.heldTokens).toBe(32_000)
    expect(top.appendTokens).toBe(500)
    // The loaded-back tokens take device slots.
    expect(top.needTokens).toBe(500 + 25_600 + 512)
  })
  it('without the host events the same session is not resident (a reseed)', () => {
    const r = new Router({
      now: () => 0,
      params: { pageSize: 16 },
      workers: [{ id: 'd0', role: 'decode', capacityTokens: 1_000_000 }],
    })
    const all = Array.from({ length: 2_000 }, (_, i) => BigInt(i + 1))
    r.cluster.store.setBinding('s', {
      workerId: 'd0',
      committedTokens: 32_000,
      verifiedBlocks: 2_000,
      updatedAt: 0,
    })
    r.ingest('d0', stored(0, all.slice(0, 400)))
    const top = r.route({ sessionId: 's', promptTokens: 32_500, blocks: [...all, 2_001n] }).candidates[0]!
    expect(top).toMatchObject({ fast: false, prefixResident: false, loadBackTokens: 0 })
  })
  it('prefers the reseed when the host link is too slow for loading back to pay', () => {
    const { r, turn } = demotedRouter(makeCostModel({ hostLoadGBps: 0.01 }))
    const d0 = r.route(turn).candidates.find((c) => c.workerId === 'd0')!
    expect(d0).toMatchObject({ loadBackTokens: 0, prefixResident: false, fast: false })
  })
  it('a host run that does not reach the verified prefix is not enough', () => {
    const { r, turn } = demotedRouter()
    r.ingest('d0', removed(3, [1_500n], 'CPU_TIER1')) // a hole in the host run
    const d0 = r.route(turn).candidates.find((c) => c.workerId === 'd0')!
    expect(d0).toMatchObject({ loadBackTokens: 0, prefixResident: false })
  })
  it('a worker reset clears its host tier too', () => {
    const { r, turn } = demotedRouter()
    r.ingest('d0', { type: 'AllBlocksCleared', eventId: 3 })
    expect(r.cluster.hostResidency.tierBlocks('d0')).toEqual({ host: 0, disk: 0 })
    expect(r.route(turn).candidates.find((c) => c.workerId === 'd0')!.loadBackTokens).toBe(0)
  })
})

const fastReq = (promptTokens: number): AdmitRequest => ({
  requestId: 'r1',
  sessionId: 's',
  path: 'fast',
  promptTokens,
  appendTokens: 500,
})
function demotedState(host: number, extra: Partial<AdmitWorkerState> = {}): AdmitWorkerState {
  return {
    capacityTokens: 100_000,
    usedTokens: 10_000,
    evictableTokens: 10_000,
    sessions: new Map([
      [
        's',
        {
          sessionId: 's',
          residentTokens: 6_000,
          hostResidentTokens: host,
          lastAccessTime: 0,
          idle: true,
          releasableTokens: 0,
        },
      ],
    ]),
    leases: [],
    transferQueueDepth: 0,
    retractedQueueDepth: 0,
    ...extra,
  }
}

describe('Admit with a host tier', () => {
  it('a demoted session’s host tokens leave the append and join the need', () => {
    const d = admit(demotedState(30_000), fastReq(36_500), { now: 0 })
    expect(d.response).toMatchObject({ admitted: true, reason: 'ok', needTokens: 500 + 30_000 + 512 })
    expect(d.loadBackTokens).toBe(30_000)
    // Without the host tier the same turn is an append too large for the fast path.
    const none = admit(demotedState(0), fastReq(36_500), { now: 0 })
    expect(none.response.reason).toBe('append_too_large')
    expect(none.loadBackTokens).toBe(0)
  })
  it('with a cost model, host tokens are loaded back only when that is cheaper than recomputing them', () => {
    const slow = makeCostModel({ hostLoadGBps: 0.001 })
    const d = admit(
      demotedState(2_000),
      fastReq(8_500),
      { now: 0 },
      { ...DEFAULT_ADMIT_OPTIONS, costModel: slow },
    )
    expect(d.loadBackTokens).toBe(0)
    expect(d.response.needTokens).toBe(2_500 + 512)
    const fast = admit(
      demotedState(2_000),
      fastReq(8_500),
      { now: 0 },
      { ...DEFAULT_ADMIT_OPTIONS, costModel: DEFAULT_COST_MODEL },
    )
    expect(fast.loadBackTokens).toBe(2_000)
  })
  it('the pause hint counts the queued load-backs', () => {
    const cm = DEFAULT_COST_MODEL
    // 400K tokens queued ≈ 0.79 s of PCIe copies.
    const d = admit(
      demotedState(30_000, { loadBackQueueTokens: 400_000 }),
      fastReq(36_500),
      { now: 0 },
      {
        ...DEFAULT_ADMIT_OPTIONS,
        costModel: cm,
      },
    )
    const expected = Math.ceil(loadBackSeconds(cm, 430_000) * 1000)
    expect(d.response.recommendedPauseMs).toBe(expected)
    expect(d.response.admitted).toBe(true)
    // Without a cost model the rule is off.
    expect(
      admit(demotedState(30_000, { loadBackQueueTokens: 400_000 }), fastReq(36_500), { now: 0 }).response
        .recommendedPauseMs,
    ).toBe(0)
    expect(
      recommendedPauseMs({
        retractedQueueDepth: 0,
        tokenUsageAfter: 0.1,
        transferQueueDepth: 0,
        loadBackMs: 499,
      }),
    ).toBe(0)
    expect(
      recommendedPauseMs({
        retractedQueueDepth: 0,
        tokenUsageAfter: 0.1,
        transferQueueDepth: 0,
        loadBackMs: 9_000,
      }),
    ).toBe(2_000)
  })
  it('a released session’s host match on the tree counts like its host-resident tokens', () => {
    // No slot for 's' on the D any more: the tree matches the system prompt on the device and
    // the rest of its history on the host.
    const released = { ...demotedState(0), sessions: new Map() }
    const ctx = { now: 0, matchedTokens: 6_000 }
    const without = admit(released, fastReq(36_500), ctx)
    expect(without.response.reason).toBe('append_too_large')
    const d = admit(released, fastReq(36_500), { ...ctx, hostMatchedTokens: 30_000 })
    expect(d.response).toMatchObject({ admitted: true, needTokens: 500 + 30_000 + 512 })
    expect(d.loadBackTokens).toBe(30_000)
    // Never beyond the prompt; a bad value is refused, naming it.
    expect(admit(released, fastReq(36_500), { ...ctx, hostMatchedTokens: 90_000 }).loadBackTokens).toBe(
      30_500,
    )
    expect(() => admit(released, fastReq(36_500), { ...ctx, hostMatchedTokens: -1 })).toThrow(
      /hostMatchedTokens/,
    )
  })
  it('a host match never lengthens the append, and loads back only what planPrefix would', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 40_000 }),
        fc.integer({ min: 0, max: 40_000 }),
        fc.integer({ min: 500, max: 60_000 }),
        (matched, host, prompt) => {
          const released = { ...demotedState(0), sessions: new Map() }
          const opts = { ...DEFAULT_ADMIT_OPTIONS, costModel: DEFAULT_COST_MODEL }
          const ctx = { now: 0, matchedTokens: matched }
          const a = admit(released, fastReq(prompt), ctx, opts)
          const b = admit(released, fastReq(prompt), { ...ctx, hostMatchedTokens: host }, opts)
          const m = Math.min(prompt, matched)
          const plan = planPrefix(DEFAULT_COST_MODEL, {
            promptTokens: prompt,
            deviceTokens: m,
            hostTokens: Math.min(host, prompt - m),
          })
          expect(b.response.needTokens - b.loadBackTokens).toBeLessThanOrEqual(a.response.needTokens)
          if (b.response.admitted) expect(b.loadBackTokens).toBe(plan.loadBackTokens)
        },
      ),
      { numRuns: 200 },
    )
  })
  it('refuses bad host fields as INVALID_STATE', () => {
    const bad = demotedState(-1)
    expect(() => admit(bad, fastReq(10_000), { now: 0 })).toThrow(/hostResidentTokens/)
    expect(() => admit(demotedState(0, { loadBackQueueTokens: 0.5 }), fastReq(10_000), { now: 0 })).toThrow(
      /loadBackQueueTokens/,
    )
  })
  it('admitWorkerState carries a session’s host-resident tokens and the load-back queue', () => {
    const state = admitWorkerState(
      {
        pool: { size: 1_000, availableSize: () => 1_000 },
        sessions: {
          cache: { evictableSize: () => 0 },
          listSessionStatuses: () => [
            { sessionId: 'a', residentTokens: 10, hostResidentTokens: 300, lastAccessTime: 0, active: false },
          ],
          releasableTokens: () => 0,
        },
        transferQueueDepth: 0,
        retractedQueueDepth: 0,
        loadBackQueueTokens: 64,
      },
      { now: 0, leases: [] },
    )
    expect(state.sessions.get('a')?.hostResidentTokens).toBe(300)
    expect(state.loadBackQueueTokens).toBe(64)
  })
})
