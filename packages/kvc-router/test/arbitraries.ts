import fc from 'fast-check'
import type { RetractionSignals } from '../src/index.js'

/**
 * Overrides of the cost model's prefill and tier fields (`makeCostModel` takes them), over ranges
 * from a fast to a slow prefill and from a disk to a fast PCIe host link: what the host-tier
 * properties quantify over.
 */
export const tierCostOverrides = fc.record({
  prefillFixedS: fc.double({ min: 0, max: 0.1, noNaN: true }),
  prefillTokensPerS: fc.double({ min: 1_000, max: 100_000, noNaN: true }),
  prefillQuadraticS: fc.double({ min: 0, max: 1e-8, noNaN: true }),
  hostLoadGBps: fc.double({ min: 0.01, max: 200, noNaN: true }),
  diskLoadGBps: fc.double({ min: 0.01, max: 50, noNaN: true }),
  loadBackSetupS: fc.double({ min: 0, max: 0.05, noNaN: true }),
  kvBytesPerToken: fc.integer({ min: 1_000, max: 400_000 }),
})

/** The capacity, in tokens, of the D in {@link retractionSignals}. */
export const RETRACTION_CAP = 200_000

/**
 * Retraction signals of one D of {@link RETRACTION_CAP} tokens: up to ten sessions (the
 * `recentlyMoved` flag drawn only when `withRecentlyMoved`), a token usage from `minUsage` to 1.3,
 * and an optional requester that may name no session.
 */
export function retractionSignals(
  minUsage: number,
  withRecentlyMoved = false,
): fc.Arbitrary<RetractionSignals> {
  const session = fc.record({
    residentTokens: fc.integer({ min: 0, max: 80_000 }),
    idle: fc.boolean(),
    lastAccessTime: fc.integer({ min: 0, max: 1_000 }),
    ...(withRecentlyMoved ? { recentlyMoved: fc.boolean() } : {}),
  })
  return fc
    .record({
      sessions: fc.array(session, { maxLength: 10 }),
      usage: fc.double({ min: minUsage, max: 1.3, noNaN: true }),
      requester: fc.option(fc.integer({ min: 0, max: 12 }), { nil: undefined }),
    })
    .map(
      ({ sessions, usage, requester }): RetractionSignals => ({
        capacityTokens: RETRACTION_CAP,
        tokenUsageAfter: usage,
        sessions: sessions.map((x, i) => ({ ...x, sessionId: `s${i}` })),
        ...(requester === undefined ? {} : { requester: `s${requester}` }),
      }),
    )
}
