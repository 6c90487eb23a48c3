import { describe, expect, it } from 'vitest'
import { runExperiment, toStableJson } from '../src/index.js'

describe('determinism', () => {
  it('the same configuration gives byte-identical JSON', async () => {
    const config = {
      workload: { kind: 'agentic' as const, options: { sessions: 6, maxTurnsPerSession: 8 } },
      topology: '1P2D',
      policies: ['kvc', 'round-robin'],
      seeds: [1, 2, 3],
      bootstrapResamples: 30,
      faults: [{ kind: 'admit-timeout' as const, probability: 0.05 }],
    }
    const a = toStableJson(await runExperiment(config))
    const b = toStableJson(await runExperiment(config))
    expect(a).toBe(b)
    expect(a).not.toMatch(/wallMs/)
    const c = toStableJson(await runExperiment({ ...config, seeds: [4, 5, 6] }))
    expect(c).not.toBe(a)
  })
})

describe('determinism with lazy release and the v5 switches', () => {
  it('release=reaper and seedAdmission=off runs give byte-identical JSON', async () => {
    const config = {
      workload: { kind: 'agentic' as const, options: { sessions: 6, maxTurnsPerSession: 12 } },
      topology: '1P2D',
      policies: [
        'kvc-capacity-blind:granularity=session:release=reaper:idleTtlS=5:backpressure=off:seedAdmission=off:pendingSeedsPerD=1000',
        'kvc:release=reaper:idleTtlS=5',
      ],
      seeds: [1, 2],
      timeScale: 10,
      costModel: { capacityTokens: 30_000 },
      bootstrapResamples: 20,
    }
    const a = toStableJson(await runExperiment(config))
    expect(toStableJson(await runExperiment(config))).toBe(a)
    expect(a).toMatch(/"sessionsReaped": [1-9]/)
  })
})
