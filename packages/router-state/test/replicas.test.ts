import { InMemoryClusterStateStore, RouterError } from '@kvc/kvc-router'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ReplicatedStateStore } from '../src/index.js'
import { SimCluster, type TurnResult, sessionBlocks } from './support/cluster.js'
import { type StateServer, expectNoLoad, startStateServer } from '../src/testing/index.js'
import { BACKENDS, connectStore, expectConverged, sleep, uniqueNamespace } from './support/helpers.js'

const WORKERS = ['p0', 'd0', 'd1', 'd2']
const BUDGET = 2

/**
 * `sessions` sessions of `turns` turns each; the turns of one session follow each other, each on
 * a random replica, and sessions run concurrently; `races` sessions also get a duplicate of
 * their first turn on another replica at the same moment. Odd sessions start large (seeded
 * through P, so the pending-seed budget matters), even ones small; later turns append a little.
 */
async function workload(sim: SimCluster, sessions: number, turns: number, races: number, seed: number) {
  let x = seed
  const rnd = () => {
    x = (x * 1103515245 + 12345) % 2147483648
    return x / 2147483648
  }
  const R = sim.replicas.length
  await Promise.all(
    Array.from({ length: sessions }, async (_, s) => {
      let prompt = 0
      for (let k = 0; k < turns; k++) {
        // even sessions start small (fast path: racing claims meet at once), odd ones large (seeded)
        const first = s % 2 === 0 ? 2_000 + Math.floor(rnd() * 4_000) : 12_000 + Math.floor(rnd() * 8_000)
        prompt += k === 0 ? first : 200 + Math.floor(rnd() * 800)
        const turn = { sessionId: `s${s}`, promptTokens: prompt, blocks: sessionBlocks(s, prompt) }
        const r = Math.floor(rnd() * R)
        if (k === 0 && s < races) {
          await Promise.all([sim.runTurn(r, turn), sim.runTurn((r + 1) % R, { ...turn })])
        } else await sim.runTurn(r, turn)
        prompt += 100
      }
    }),
  )
}

function expectEveryTurnEnded(results: readonly TurnResult[]) {
  for (const r of results) {
    if (r.final.type === 'fail') {
      expect(r.final.error).toBeInstanceOf(RouterError)
      expect(r.final.error.message).toContain(r.final.cause)
    }
  }
}

for (const { kind, available } of BACKENDS) {
  describe.skipIf(!available)(`${kind}: several router replicas share one view`, () => {
    let server: StateServer
    const open: ReplicatedStateStore[] = []
    beforeAll(async () => {
      server = await startStateServer(kind)
    })
    afterAll(async () => {
      for (const s of open) await s.close({ graceful: false })
      await server?.stop()
    })
    const stores = async (n: number) => {
      const ns = uniqueNamespace('r')
      const out: ReplicatedStateStore[] = []
      for (let i = 0; i < n; i++) out.push(await connectStore(kind, server.port, ns, { heartbeatMs: 200 }))
      open.push(...out)
      return out
    }

    for (const R of [2, 3]) {
      it(`${R} replicas, interleaved turns of the same sessions: one binding per session everywhere, seed budgets and D capacity hold, no load left`, async () => {
        const st = await stores(R)
        const sim = new SimCluster(st, {
          nD: 3,
          params: { pendingSeedsPerD: BUDGET },
          sendMs: () => 15,
          seed: R,
        })
        // Replicas disagree at first: each has a stale capacity report saying "its" D is full,
        // so racing turns pick different D workers and their claims conflict.
        for (const [i, { router }] of sim.replicas.entries()) {
          router.cluster.reportCapacity(`d${i % 3}`, { freeTokens: 1_000, evictableTokens: 0 })
        }
        await workload(sim, 10, 4, 10, 7 * R)
        expectEveryTurnEnded(sim.results)
        const failed = sim.results.filter((r) => r.final.type === 'fail')
        expect(failed.map((r) => r.final.type === 'fail' && r.final.error.message)).toEqual([])
        expect(sim.world.violations).toEqual([])
        for (const [d, n] of sim.maxSeeding) expect(n, `seeds at once on ${d}`).toBeLessThanOrEqual(BUDGET)
        const sessions = Array.from({ length: 10 }, (_, s) => `s${s}`)
        const bound = await expectConverged(st, sessions)
        for (const s of sessions) {
          const served = new Set(
            sim.results
              .filter((r) => r.turn.sessionId === s && r.final.type === 'done')
              .map((r) => r.final.type === 'done' && r.final.workerId),
          )
          // bound to exactly one D, one that served the session
          expect(bound.get(s), s).toBeDefined()
          expect(served.has(bound.get(s)!), `${s} bound to ${bound.get(s)}, served by ${[...served]}`).toBe(
            true,
          )
        }
        await expectNoLoad(st, WORKERS)
        // Racing first turns really raced: some claims were lost and re-routed, none dropped.
        const lost = st.reduce((n, s) => n + s.metrics().bindingClaimsLost, 0)
        expect(lost).toBeGreaterThan(0)
      })
    }

    it('a session whose turns hop between replicas stays on one D and takes the fast path after its first turn', async () => {
      const st = await stores(3)
      const sim = new SimCluster(st, { nD: 3, sendMs: () => 2 })
      await Promise.all(
        Array.from({ length: 6 }, async (_, s) => {
          let prompt = 0
          for (let k = 0; k < 5; k++) {
            prompt += k === 0 ? 3_000 : 500
            // no flush between turns: a stale view is corrected by the claim
            await sim.runTurn((s + k) % 3, {
              sessionId: `h${s}`,
              promptTokens: prompt,
              blocks: sessionBlocks(100 + s, prompt),
            })
            prompt += 100
          }
        }),
      )
      for (let s = 0; s < 6; s++) {
        const mine = sim.results.filter((r) => r.turn.sessionId === `h${s}`)
        const ds = new Set(mine.map((r) => (r.final.type === 'done' ? r.final.workerId : 'failed')))
        expect([...ds], `h${s}`).toHaveLength(1)
        for (const r of mine.slice(1)) expect(r.final).toMatchObject({ type: 'done', path: 'fast' })
      }
      await expectConverged(
        st,
        Array.from({ length: 6 }, (_, s) => `h${s}`),
      )
    })
  })
}

describe('control: replicas with separate in-process stores', () => {
  it('over-commit the pending-seed budget on the same workload (what the shared store prevents)', async () => {
    const st = [0, 1, 2].map(() => new InMemoryClusterStateStore())
    const sim = new SimCluster(st, { nD: 3, params: { pendingSeedsPerD: BUDGET }, sendMs: () => 15, seed: 3 })
    // no claims: run the same workload shape without races
    await Promise.all(
      Array.from({ length: 10 }, (_, s) =>
        sim.runTurn(s % 3, {
          sessionId: `c${s}`,
          promptTokens: 16_000,
          blocks: sessionBlocks(200 + s, 16_000),
        }),
      ),
    )
    await sleep(0)
    expect(Math.max(...sim.maxSeeding.values())).toBeGreaterThan(BUDGET)
  })
})
