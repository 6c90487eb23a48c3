import fc from 'fast-check'

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
