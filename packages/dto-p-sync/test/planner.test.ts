import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  blockBytesForTest,
  DEFAULT_PRIORITY_WEIGHTS,
  messageBytes,
  OfferBuilder,
  type PlanInput,
  type PlanSession,
  planSync,
  priorityScore,
} from './helpers.js'

const PS = 4
const KVB = 100
const KV_BLOCK = blockBytesForTest(PS, true, KVB) // 16 + 16 + 400
const HASH_BLOCK = blockBytesForTest(PS, false, KVB)

function session(id: string, tokens: number, extra: Partial<PlanSession> = {}): PlanSession {
  const offers = new OfferBuilder({ pageSize: PS })
  const h = Array.from({ length: tokens }, (_, i) => (i * 31 + id.charCodeAt(0)) % 1000)
  offers.commitTurn(id, h)
  const s = offers.session(id)!
  return {
    sessionId: id,
    version: s.version,
    committedTokens: s.committedTokens,
    blocks: s.blocks,
    confirmedPages: 0,
    ...extra,
  }
}

function input(sessions: PlanSession[], extra: Partial<PlanInput> = {}): PlanInput {
  return {
    sessions,
    pageSize: PS,
    beta: 8,
    bandwidth: { bytesPerSecond: 1e9, kvBytesPerToken: KVB },
    horizonMs: 1000,
    ...extra,
  }
}

describe('planSync', () => {
  it('brings every session within β when bandwidth allows, sending only what is needed', () => {
    const plan = planSync(input([session('a', 41), session('b', 17)]))
    expect(plan.overBudget).toEqual([])
    for (const s of plan.sessions) {
      expect(s.withinBudget).toBe(true)
      expect(s.projectedStaleness).toBeLessThanOrEqual(8)
      // Minimal: one page less and it would be over β.
      expect(s.projectedStaleness + PS).toBeGreaterThan(8)
    }
    const a = plan.transfers.filter((t) => t.sessionId === 'a')
    expect(a.reduce((n, t) => n + t.blocks.length, 0)).toBe(Math.ceil((41 - 8) / PS))
    expect(
      plan.transfers.every((t) => t.phase === 'budget' && t.bytes === messageBytes({ ...t, seq: 0 }, KVB)),
    ).toBe(true)
  })

  it('orders transfers by priority: D pressure, idle time, history size, reseed likelihood', () => {
    const plan = planSync(
      input([
        session('calm', 41),
        session('pressured', 41, { hints: { dPressure: 0.95 } }),
        session('idle', 41, { hints: { idleMs: 120_000 } }),
        session('reseed', 41, { hints: { reseedLikelihood: 0.9 } }),
      ]),
    )
    const order = [...new Set(plan.transfers.map((t) => t.sessionId))]
    expect(order).toEqual(['reseed', 'idle', 'pressured', 'calm'])
    expect(plan.sessions.map((s) => s.sessionId)).toEqual(order)
    // Larger histories first, other things equal.
    const bySize = planSync(input([session('small', 20), session('large', 400)]))
    expect(bySize.transfers[0]!.sessionId).toBe('large')
    // A custom score replaces the default one.
    const custom = planSync(
      input([session('a', 41), session('b', 41)], { score: (s) => (s.sessionId === 'b' ? 1 : 0) }),
    )
    expect(custom.transfers[0]!.sessionId).toBe('b')
  })

  it('priorityScore weighs each reason and is monotone in each', () => {
    expect(priorityScore(undefined, 0)).toBe(0)
    expect(priorityScore({ dPressure: 1 }, 0)).toBe(1)
    expect(priorityScore({ reseedLikelihood: 1 }, 0)).toBe(2)
    expect(priorityScore({}, DEFAULT_PRIORITY_WEIGHTS.historyScaleTokens)).toBeCloseTo(0.5)
    expect(priorityScore({ idleMs: 1e9 }, 0)).toBeCloseTo(1)
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.nat({ max: 1e6 }),
        fc.nat({ max: 1e6 }),
        (p, r, idle, hist) => {
          const base = priorityScore({ dPressure: p / 2, reseedLikelihood: r / 2, idleMs: idle }, hist)
          expect(
            priorityScore({ dPressure: p, reseedLikelihood: r / 2, idleMs: idle }, hist),
          ).toBeGreaterThanOrEqual(base)
          expect(
            priorityScore({ dPressure: p / 2, reseedLikelihood: r, idleMs: idle }, hist),
          ).toBeGreaterThanOrEqual(base)
          expect(
            priorityScore({ dPressure: p / 2, reseedLikelihood: r / 2, idleMs: idle + 1 }, hist),
          ).toBeGreaterThanOrEqual(base)
          expect(
            priorityScore({ dPressure: p / 2, reseedLikelihood: r / 2, idleMs: idle }, hist + 1),
          ).toBeGreaterThanOrEqual(base)
        },
      ),
    )
  })

  it('respects the bandwidth budget, minus the link backlog', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 200 }), { minLength: 1, maxLength: 6 }),
        fc.integer({ min: 0, max: 20_000 }),
        fc.integer({ min: 0, max: 5_000 }),
        fc.boolean(),
        fc.integer({ min: 1, max: 8 }),
        (sizes, bps, backlog, eager, maxBlocks) => {
          const sessions = sizes.map((n, i) => session(`s${i}`, n))
          const plan = planSync(
            input(sessions, {
              bandwidth: { bytesPerSecond: bps + 1, kvBytesPerToken: KVB },
              backlogBytes: backlog,
              eager,
              maxBlocksPerTransfer: maxBlocks,
            }),
          )
          expect(plan.budgetBytes).toBe(Math.max(0, bps + 1 - backlog))
          expect(plan.plannedBytes).toBeLessThanOrEqual(plan.budgetBytes)
          expect(plan.transfers.reduce((n, t) => n + t.bytes, 0)).toBe(plan.plannedBytes)
          for (const t of plan.transfers) {
            expect(t.blocks.length).toBeLessThanOrEqual(maxBlocks)
            expect(t.bytes).toBe(messageBytes({ ...t, seq: 0 }, KVB))
          }
          // When the whole need fits, nobody is over budget.
          const need = plan.sessions.reduce((n, s) => n + (s.neededBytes ?? 0), 0)
          if (need <= plan.budgetBytes) expect(plan.overBudget).toEqual([])
          // Over-budget sessions are reported with a reason; within-budget ones are truly within β.
          for (const s of plan.sessions) {
            expect(s.withinBudget).toBe(s.projectedStaleness <= 8)
            expect(s.withinBudget ? s.reason === null : s.reason === 'bandwidth').toBe(true)
          }
        },
      ),
      { numRuns: 200 },
    )
  })

  it('without holdings views plans exactly what the page-by-page walk plans (its fast path)', () => {
    // A view that holds nothing forces the walk; no view at all takes the closed-form costs.
    const none = { has: () => false }
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 80 })), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.boolean(),
        fc.integer({ min: 1, max: 8 }),
        fc.option(fc.integer({ min: 0, max: 600 }), { nil: undefined }),
        (sizes, bps, eager, maxBlocks, maxHeld) => {
          const sessions = sizes.map(([n, confirmed], i) =>
            session(`s${i}`, n, { confirmedPages: confirmed, hints: { idleMs: i * 7 } }),
          )
          const base = input(sessions, {
            bandwidth: { bytesPerSecond: bps + 1, kvBytesPerToken: KVB },
            eager,
            maxBlocksPerTransfer: maxBlocks,
            ...(maxHeld === undefined ? {} : { maxHeldTokens: maxHeld }),
          })
          expect(planSync(base)).toEqual(planSync({ ...base, inFlight: none }))
        },
      ),
      { numRuns: 300 },
    )
  })

  it('skips a session that does not fit for ones that do, then spends the rest on its progress', () => {
    const big = session('big', 400, { hints: { reseedLikelihood: 1 } })
    const small = session('small', 41)
    const smallNeed = Math.ceil((41 - 8) / PS) * KV_BLOCK + 64
    const plan = planSync(
      input([big, small], {
        bandwidth: { bytesPerSecond: smallNeed + 3 * KV_BLOCK + 64, kvBytesPerToken: KVB },
      }),
    )
    expect(plan.overBudget).toEqual(['big'])
    const b = plan.sessions.find((s) => s.sessionId === 'big')!
    expect(b.reason).toBe('bandwidth')
    expect(b.plannedBytes).toBeGreaterThan(0)
    expect(plan.transfers.find((t) => t.sessionId === 'small')!.phase).toBe('budget')
    expect(plan.transfers.find((t) => t.sessionId === 'big')!.phase).toBe('progress')
    expect(plan.transfers[0]!.sessionId).toBe('small')
  })

  it('deduplicates against P holdings: held blocks go without KV', () => {
    const s = session('a', 41)
    const held = new Set(s.blocks.slice(0, 5).map((b) => b.hash))
    const plan = planSync(input([s], { prefillHolds: { has: (h) => held.has(h) } }))
    const blocks = plan.transfers.flatMap((t) => t.blocks)
    expect(blocks.length).toBe(9)
    for (const b of blocks) expect(b.withKv).toBe(!held.has(b.hash))
    expect(plan.transfers.reduce((n, t) => n + t.kvBlocks, 0)).toBe(4)
    expect(plan.plannedBytes).toBe(64 + 5 * HASH_BLOCK + 4 * KV_BLOCK)
  })

  it('does not resend blocks in flight and counts them as arriving', () => {
    const s = session('a', 41)
    const flying = new Set(s.blocks.slice(2, 4).map((b) => b.hash))
    const plan = planSync(input([s], { inFlight: { has: (h) => flying.has(h) } }))
    const sent = plan.transfers.flatMap((t) => t.blocks.map((b) => b.hash))
    expect(sent.some((h) => flying.has(h))).toBe(false)
    expect(plan.transfers.map((t) => t.startPage)).toEqual([0, 4])
    expect(plan.sessions[0]!.withinBudget).toBe(true)
  })

  it('starts after the confirmed pages', () => {
    const plan = planSync(input([session('a', 41, { confirmedPages: 6 })]))
    expect(plan.transfers.map((t) => [t.startPage, t.blocks.length])).toEqual([[6, 3]])
    expect(plan.transfers[0]!.blocks[0]!.parentHash).not.toBeNull()
    const done = planSync(input([session('a', 41, { confirmedPages: 9 })]))
    expect(done.transfers).toEqual([])
    expect(done.sessions[0]!.withinBudget).toBe(true)
  })

  it('reports sessions it cannot keep within β: unavailable on D, or β below the unsyncable tail', () => {
    const s = session('a', 41)
    const lost = s.blocks[3]!.hash
    const plan = planSync(input([s], { available: { has: (h) => h !== lost } }))
    expect(plan.overBudget).toEqual(['a'])
    expect(plan.sessions[0]!.reason).toBe('unavailable')
    expect(plan.sessions[0]!.neededBytes).toBeNull()
    // It still makes progress up to the lost block.
    expect(plan.transfers.flatMap((t) => t.blocks).length).toBe(3)
    // A block D lost but P holds can be confirmed without KV.
    const ok = planSync(
      input([s], { available: { has: (h) => h !== lost }, prefillHolds: { has: (h) => h === lost } }),
    )
    expect(ok.overBudget).toEqual([])
    // 43 tokens: 10 full pages of 42 materialised ones + a tail of 3 tokens > β = 2.
    const tail = planSync(input([session('t', 43)], { beta: 2 }))
    expect(tail.sessions[0]!.reason).toBe('unreachable')
    expect(tail.transfers.flatMap((t) => t.blocks).length).toBe(10)
  })

  it('eager mode spends spare bandwidth on the rest of the chain', () => {
    const lazy = planSync(input([session('a', 41)]))
    const eager = planSync(input([session('a', 41)], { eager: true }))
    expect(lazy.sessions[0]!.projectedPages).toBe(9)
    expect(eager.sessions[0]!.projectedPages).toBe(10)
    expect(eager.transfers.at(-1)!.phase).toBe('eager')
  })

  it('is pure and deterministic', () => {
    const sessions = [
      session('a', 100, { hints: { dPressure: 0.5 } }),
      session('b', 100, { hints: { dPressure: 0.5 } }),
    ]
    const i = input(sessions, { bandwidth: { bytesPerSecond: 3000, kvBytesPerToken: KVB } })
    expect(planSync(i)).toEqual(planSync(i))
    // Ties are broken by session id.
    expect(planSync(i).sessions.map((s) => s.sessionId)).toEqual(['a', 'b'])
  })
})

describe('planSync: room on P (maxHeldTokens)', () => {
  it('plans, in rank order, only the sessions whose pages fit in P’s room; the rest are reported `capacity`', () => {
    // Three sessions of 41 tokens: each needs 9 pages (36 tokens) to be within β = 8.
    const ss = ['a', 'b', 'c'].map((id, i) =>
      session(id, 41, { hints: { dPressure: 0, idleMs: 0, reseedLikelihood: 1 - i / 4 } }),
    )
    const all = planSync(input(ss))
    expect(all.overBudget).toEqual([])
    const room = planSync(input(ss, { maxHeldTokens: 80 })) // two sessions' 72 tokens fit, not three
    const planned = new Set(room.transfers.map((t) => t.sessionId))
    expect(planned.size).toBe(2)
    const left = room.sessions.find((s) => !planned.has(s.sessionId))!
    expect(left).toMatchObject({ withinBudget: false, reason: 'capacity', plannedBytes: 0 })
    expect(left.score).toBeLessThanOrEqual(
      Math.min(...room.sessions.filter((s) => planned.has(s.sessionId)).map((s) => s.score)),
    )
    // With eager a session counts with its whole chain (10 pages, 40 tokens): one fits in 79.
    const eager = planSync(input(ss, { maxHeldTokens: 79, eager: true }))
    expect(new Set(eager.transfers.map((t) => t.sessionId)).size).toBe(1)
    expect(() => planSync(input(ss, { maxHeldTokens: -1 }))).toThrow(/maxHeldTokens/)
  })
})
