/**
 * The simulated workers' host KV tier (`--host-tier`): what a worker's radix cache keeps when its
 * device evicts (SGLang HiCache's host pool, `@kvc/radix-cache`'s `hostTier`), how long a
 * load-back takes (the cost model's PCIe or disk bandwidth), and from what size a load-back pays
 * (the break-even against recomputing). `docs/guides/host-tier.md` walks through it.
 *
 * @module
 */
import { type CostModel, loadBackSeconds, transferSeconds } from '../adapters/router.js'
import type { HostTierOptions, HostWritePolicy } from '../adapters/sessionCache.js'
import { SimError, SimErrorCode } from '../errors/simError.js'

/**
 * A host tier per worker: its size (a multiple of the device pool, or tokens) and its medium.
 *
 * @example
 * ```ts
 * import type { HostTierSpec } from '@kvc/sim'
 * const twice: HostTierSpec = { ratio: 2 }
 * const nvme: HostTierSpec = { capacityTokens: 2_000_000, medium: 'disk' }
 * ```
 */
export interface HostTierSpec {
  /** Host capacity as a multiple of the worker's device KV pool (`2`: twice as many tokens). */
  readonly ratio?: number
  /** Host capacity in tokens per worker (instead of `ratio`). */
  readonly capacityTokens?: number
  /**
   * `host` (default): host DRAM, loaded back at the cost model's `hostLoadGBps` (PCIe);
   * `disk`: the same single tier on local NVMe, at `diskLoadGBps`.
   */
  readonly medium?: 'host' | 'disk'
  /** When device pages are copied to the tier (default `write_back`: on eviction). */
  readonly writePolicy?: HostWritePolicy
  /**
   * Peer fetch (`:peer`): when a session moves to another D, the P that seeds it reads the part of
   * the prompt its old D still holds (device or host tier) over the inter-worker link, at the cost
   * model's `linkGbps`, instead of recomputing it, as a shared KV store lets any worker read
   * another's offloaded KV (Mooncake Store, LMCache's peer-to-peer sharing, Dynamo KVBM's remote
   * tiers). Default off: each worker's tier is its own.
   */
  readonly peerFetch?: boolean
}

/**
 * A worker's host tier, resolved: capacity in tokens (a page multiple) and the load-back
 * threshold the engine applies (from {@link loadBackBreakEven}).
 *
 * @example
 * ```ts
 * import type { ResolvedHostTier } from '@kvc/sim'
 * const size = (t: ResolvedHostTier) => t.capacityTokens
 * ```
 */
export interface ResolvedHostTier {
  readonly capacityTokens: number
  readonly medium: 'host' | 'disk'
  readonly writePolicy: HostWritePolicy
  /** The engine loads a host hit back when it is longer than this many tokens. */
  readonly loadBackThreshold: number
  /** {@link HostTierSpec.peerFetch}. */
  readonly peerFetch: boolean
}

const bad = (flag: string, s: string, why: string) =>
  new SimError(SimErrorCode.InvalidOption, `${flag} ${JSON.stringify(s)}: ${why}`, s)

/**
 * Parse `--host-tier`: `none` (no tier), a multiple of the device pool (`2x`, `0.5x`), or tokens
 * per worker (`400000`, `400k`, `1.5M`), optionally followed by `:disk` (the tier on NVMe) or
 * `:host`, by `:write_through` / `:write_through_selective` / `:write_back`, and by `:peer`
 * (peer fetch, {@link HostTierSpec.peerFetch}); `+` works as the separator too, as in the policy
 * key `hostTier=2x+disk`.
 *
 * @throws SimError `INVALID_OPTION` naming the value.
 *
 * @example
 * ```ts
 * import { parseHostTier } from '@kvc/sim'
 * parseHostTier('2x') // { ratio: 2 }
 * parseHostTier('400k:disk') // { capacityTokens: 400000, medium: 'disk' }
 * parseHostTier('4x:peer') // { ratio: 4, peerFetch: true }
 * parseHostTier('none') // undefined
 * ```
 */
export function parseHostTier(s: string): HostTierSpec | undefined {
  const flag = '--host-tier'
  const parts = s.trim().toLowerCase().split(/[:+]/)
  const size = parts[0]!
  if (size === 'none' || size === 'off') {
    if (parts.length > 1) throw bad(flag, s, "'none' takes no further part")
    return undefined
  }
  const use =
    'use none, a multiple of the device pool (2x) or tokens per worker (400k), then :disk, a write policy or :peer'
  let spec: {
    ratio?: number
    capacityTokens?: number
    medium?: 'host' | 'disk'
    writePolicy?: HostWritePolicy
    peerFetch?: boolean
  }
  const ratio = /^(\d+(?:\.\d+)?)x$/.exec(size)
  const tokens = /^(\d+(?:\.\d+)?)([km]?)$/.exec(size)
  if (ratio !== null) {
    const r = Number(ratio[1])
    if (!(r > 0)) throw bad(flag, s, 'the multiple must be > 0')
    spec = { ratio: r }
  } else if (tokens !== null) {
    const v = Math.round(Number(tokens[1]) * (tokens[2] === 'k' ? 1e3 : tokens[2] === 'm' ? 1e6 : 1))
    if (v < 1) throw bad(flag, s, 'the capacity must be at least 1 token')
    spec = { capacityTokens: v }
  } else throw bad(flag, s, use)
  for (const p of parts.slice(1)) {
    if (p === 'disk' || p === 'host') spec.medium = p
    else if (p === 'peer') spec.peerFetch = true
    else if (p === 'write_back' || p === 'write_through' || p === 'write_through_selective')
      spec.writePolicy = p
    else throw bad(flag, s, `unknown part ${JSON.stringify(p)}: ${use}`)
  }
  return spec
}

/**
 * The smallest load-back (tokens) that the cost model finds strictly cheaper than recomputing the
 * same tokens at the start of a prefill that runs anyway (`n/τ + γ·n²/2`: no fixed cost, no
 * context: the cheapest a recompute can be, so a load-back at least this long pays in every
 * turn). `Infinity` when none does (a tier slower per token than prefill, with `γ = 0`).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, loadBackBreakEven } from '@kvc/sim'
 * loadBackBreakEven(DEFAULT_COST_MODEL, 'host') // 32: 1 ms of setup against 32 µs per recomputed token
 * ```
 */
export function loadBackBreakEven(cm: CostModel, medium: 'host' | 'disk'): number {
  const pays = (n: number) =>
    loadBackSeconds(cm, n, medium) < n / cm.prefillTokensPerS + (cm.prefillQuadraticS * n * n) / 2
  let hi = 1
  while (!pays(hi)) {
    hi *= 2
    if (hi > 2 ** 40) return Number.POSITIVE_INFINITY
  }
  let lo = hi / 2 // does not pay (or is below 1)
  if (lo < 1) return 1
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2)
    if (pays(mid)) hi = mid
    else lo = mid
  }
  return hi
}

/**
 * Resolve a worker's host tier against its device pool: capacity in tokens rounded down to pages
 * (at least one page), and the engine's load-back threshold: the break-even of
 * {@link loadBackBreakEven} in cache tokens (`tokenScale`: cost-model tokens per cache token).
 *
 * @throws SimError `INVALID_OPTION` on a bad spec (both or neither of `ratio` and `capacityTokens`,
 * a non-positive size, an unknown medium).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, resolveHostTier } from '@kvc/sim'
 * resolveHostTier({ ratio: 2 }, 200_000, 16, DEFAULT_COST_MODEL, 1).capacityTokens // 400000
 * ```
 */
export function resolveHostTier(
  spec: HostTierSpec,
  deviceCapacity: number,
  pageSize: number,
  cost: CostModel,
  tokenScale: number,
): ResolvedHostTier {
  const fail = (why: string, v: unknown): never => {
    throw new SimError(SimErrorCode.InvalidOption, `hostTier: ${why}`, v)
  }
  if (typeof spec !== 'object' || spec === null) fail('must be an object', spec)
  const { ratio, capacityTokens } = spec
  if ((ratio === undefined) === (capacityTokens === undefined)) {
    fail('give exactly one of ratio and capacityTokens', spec)
  }
  if (ratio !== undefined && !(Number.isFinite(ratio) && ratio > 0))
    fail(`ratio must be > 0, got ${ratio}`, ratio)
  if (capacityTokens !== undefined && !(Number.isInteger(capacityTokens) && capacityTokens >= 1)) {
    fail(`capacityTokens must be an integer >= 1, got ${capacityTokens}`, capacityTokens)
  }
  if (!Number.isFinite(deviceCapacity) && ratio !== undefined) {
    fail('a ratio needs a finite device capacity (give capacityTokens with --capacity unlimited)', ratio)
  }
  const medium = spec.medium ?? 'host'
  if (medium !== 'host' && medium !== 'disk')
    fail(`medium must be 'host' or 'disk', got ${String(medium)}`, medium)
  if (spec.peerFetch !== undefined && typeof spec.peerFetch !== 'boolean')
    fail(`peerFetch must be a boolean, got ${String(spec.peerFetch)}`, spec.peerFetch)
  const raw = ratio !== undefined ? ratio * deviceCapacity : capacityTokens!
  const cap = Math.max(pageSize, Math.floor(raw / pageSize) * pageSize)
  if (cap > 2 ** 31 - pageSize) fail(`a host tier of ${cap} tokens is above 2^31 tokens per worker`, raw)
  const even = loadBackBreakEven(cost, medium)
  return {
    capacityTokens: cap,
    medium,
    writePolicy: spec.writePolicy ?? 'write_back',
    peerFetch: spec.peerFetch === true,
    loadBackThreshold: Number.isFinite(even) ? Math.max(0, Math.ceil(even / tokenScale) - 1) : 2 ** 31,
  }
}

/**
 * The radix cache's `hostTier` option for a resolved tier (its events name the medium as SGLang
 * HiCache does: `CPU_TIER1` for host memory, `CPU_TIER2` for storage); with a `geometry`, in the
 * cache's units (`unitTokens` tokens each, pages of `pageUnits`).
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, hostTierOptions, resolveHostTier } from '@kvc/sim'
 * hostTierOptions(resolveHostTier({ ratio: 1 }, 4096, 16, DEFAULT_COST_MODEL, 1)).hostMedium // 'CPU_TIER1'
 * ```
 */
export function hostTierOptions(
  t: ResolvedHostTier,
  geometry?: { readonly unitTokens: number; readonly pageUnits: number },
): HostTierOptions {
  // Block-granular runs (`KvGeometry`) size the cache in units of `unitTokens` tokens.
  const u = geometry?.unitTokens ?? 1
  const page = geometry?.pageUnits ?? 1
  return {
    capacity: Math.max(page, Math.floor(t.capacityTokens / u / page) * page),
    writePolicy: t.writePolicy,
    loadBackThreshold: Math.floor(t.loadBackThreshold / u),
    hostMedium: t.medium === 'disk' ? 'CPU_TIER2' : 'CPU_TIER1',
  }
}

/**
 * The cost model a D's admission estimates load-backs with: `admit` reads a session's
 * host-resident tokens at `hostLoadGBps`, so a disk tier lends it the disk's bandwidth.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, admissionCostModel } from '@kvc/sim'
 * admissionCostModel(DEFAULT_COST_MODEL, 'disk').hostLoadGBps // 6
 * ```
 */
export function admissionCostModel(cost: CostModel, medium: 'host' | 'disk'): CostModel {
  return medium === 'disk' ? Object.freeze({ ...cost, hostLoadGBps: cost.diskLoadGBps }) : cost
}

/**
 * Seconds a worker spends loading `tokens` (cost-model tokens) back from its tier.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, tierLoadSeconds } from '@kvc/sim'
 * tierLoadSeconds(DEFAULT_COST_MODEL, undefined, 1_000) // 0: no tier
 * ```
 */
export function tierLoadSeconds(cost: CostModel, tier: ResolvedHostTier | undefined, tokens: number): number {
  return tier === undefined ? 0 : loadBackSeconds(cost, tokens, tier.medium)
}

/**
 * Seconds for a P to read `tokens` (cost-model tokens) of a session's KV from its old D over the
 * inter-worker link (peer fetch, {@link HostTierSpec.peerFetch}): a KV transfer at `linkGbps`.
 *
 * @example
 * ```ts
 * import { DEFAULT_COST_MODEL, peerFetchSeconds } from '@kvc/sim'
 * peerFetchSeconds(DEFAULT_COST_MODEL, 50_000).toFixed(3) // '0.103': 4.9 GB at 400 Gb/s + 5 ms
 * ```
 */
export function peerFetchSeconds(cost: CostModel, tokens: number): number {
  return transferSeconds(cost, tokens)
}
