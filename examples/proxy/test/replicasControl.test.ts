import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { type Cluster, type Conversation, startCluster } from './helpers.js'
import { BUDGET, type Replica, SeedMeter, interleavedWorkload, startReplica } from './replicas.js'

// The control of replicasNats / replicasRedis: the same two replicas and workload, each replica
// with its own in-process state (the default). Nothing stops them over-committing a D's
// pending-seed budget: what the shared store prevents, and what the seed meter detects.
describe('control: two proxy replicas without a shared state store', () => {
  let baseline: Record<string, number>
  let cluster: Cluster
  const meter = new SeedMeter()
  const replicas: Replica[] = []

  beforeAll(async () => {
    baseline = handleCounts()
    cluster = await startCluster({ prefill: 2, decode: 2, scale: 0.005 })
    replicas.push(await startReplica('A', cluster, undefined, meter))
    replicas.push(await startReplica('B', cluster, undefined, meter))
  })

  afterAll(async () => {
    for (const r of replicas) await r.proxy.close()
    await cluster?.close()
    expect(await leakedSince(baseline)).toEqual({})
  })

  it('over-commit the pending-seed budget of a D on the same workload', async () => {
    expect(replicas.every((r) => r.store === undefined)).toBe(true)
    await interleavedWorkload(replicas, new Map<string, Conversation>())
    expect(Math.max(...meter.max.values())).toBeGreaterThan(BUDGET)
  })
})
