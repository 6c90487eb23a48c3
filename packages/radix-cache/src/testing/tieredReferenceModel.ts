import { RadixReferenceModel } from './referenceModel.js'

/**
 * One cached page path of a {@link TieredReferenceModel}: on which tiers it lives, its lock and
 * host-reference counts, and its hit count (inserts that walked it, chunked ones excepted).
 *
 * @example
 * ```ts
 * import type { TieredPage } from '@kvc/radix-cache/testing'
 * const hostOnly = (p: TieredPage) => p.host && !p.dev
 * ```
 */
export interface TieredPage {
  dev: boolean
  host: boolean
  lock: number
  pin: number
  hits: number
}

/**
 * What a step may change, for {@link TieredReferenceModel.applyObserved}.
 *
 * @example
 * ```ts
 * import type { TierChangeRules } from '@kvc/radix-cache/testing'
 * const evictRules: TierChangeRules = { deviceEviction: true, hostWrites: 'demotion' }
 * ```
 */
export interface TierChangeRules {
  /** Unlocked pages may leave the device (`evict`, or the room-making of a load-back). */
  readonly deviceEviction?: boolean
  /**
   * Pages that may gain a host copy: `'demotion'` (pages that left the device in this step), an
   * explicit set of page keys (write-through, `protectHost`), or `'any'` (a composite step, such
   * as a serving engine's allocation that evicts and demotes sessions). Host eviction of
   * host-only, unlocked, unprotected pages is allowed whenever a step may write to the host.
   */
  readonly hostWrites?: 'demotion' | 'any' | ReadonlySet<string>
  /** Host eviction alone (`evictHost`). */
  readonly hostEviction?: boolean
  /** Pages that may come back onto the device (load-back). */
  readonly deviceGains?: ReadonlySet<string>
}

/**
 * Tokens moved by one observed step, as {@link TieredReferenceModel.applyObserved} counted them.
 *
 * @example
 * ```ts
 * import type { TierChangeCounts } from '@kvc/radix-cache/testing'
 * const lost = (c: TierChangeCounts) => c.discarded + c.hostEvicted
 * ```
 */
export interface TierChangeCounts {
  /** Tokens that left the device. */
  readonly leftDevice: number
  /** ... and are on the host after the step. */
  readonly demoted: number
  /** ... and are gone from both tiers after the step. */
  readonly discarded: number
  /** Tokens of pages that gained a host copy. */
  readonly hostWrites: number
  /** Host-only tokens that are gone. */
  readonly hostEvicted: number
  /** Tokens that came back onto the device. */
  readonly loaded: number
}

/**
 * A deliberately naive two-tier model of a paged prefix cache with a host tier: per namespace, a
 * map from page path to {@link TieredPage}. It predicts what is deterministic (match lengths on
 * each tier, insert's present length, adoption of host-only pages, lock and host-reference
 * counts, load-back and protect sizes and their refusals) and, like {@link RadixReferenceModel},
 * takes the choice of victims from the real cache after checking that every change was allowed
 * ({@link TieredReferenceModel.applyObserved}).
 *
 * @example
 * ```ts
 * import { TieredReferenceModel } from '@kvc/radix-cache/testing'
 * const m = new TieredReferenceModel(2, 64)
 * m.insert([1, 2, 3, 4], '', true) // 0 present
 * m.match([1, 2, 3, 4, 5], '')    // { device: 4, host: 0 }
 * ```
 */
export class TieredReferenceModel {
  readonly pageSize: number
  readonly hostCapacity: number
  readonly #pages = new Map<string, Map<string, TieredPage>>()

  constructor(pageSize: number, hostCapacity: number) {
    this.pageSize = pageSize
    this.hostCapacity = hostCapacity
  }

  #ns(ns: string): Map<string, TieredPage> {
    let m = this.#pages.get(ns)
    if (m === undefined) {
      m = new Map()
      this.#pages.set(ns, m)
    }
    return m
  }

  #key(tokens: ArrayLike<number>, pages: number): string {
    return RadixReferenceModel.pathKey(tokens, pages, this.pageSize)
  }

  /** Full keys (`ns|path`) of the first `length` tokens' pages. */
  pathKeys(tokens: ArrayLike<number>, length: number, ns: string): Set<string> {
    const out = new Set<string>()
    for (let p = 1; p * this.pageSize <= length; p++) out.add(`${ns}|${this.#key(tokens, p)}`)
    return out
  }

  /** The page of `tokens[0:pages·pageSize)`, if cached. */
  page(tokens: ArrayLike<number>, pages: number, ns: string): TieredPage | undefined {
    return this.#pages.get(ns)?.get(this.#key(tokens, pages))
  }

  /** Device-resident prefix, then the host-only pages after it (tokens). */
  match(tokens: ArrayLike<number>, ns: string): { device: number; host: number } {
    const m = this.#pages.get(ns)
    const pages = Math.floor(tokens.length / this.pageSize)
    let p = 0
    while (p < pages && m?.get(this.#key(tokens, p + 1))?.dev === true) p++
    const device = p
    while (p < pages && m?.has(this.#key(tokens, p + 1)) === true) p++
    return { device: device * this.pageSize, host: (p - device) * this.pageSize }
  }

  /**
   * Insert the page-aligned part: missing pages enter the device, host-only pages on the path
   * come back onto it (they take the caller's slots). Counts a hit on every page unless
   * `countHit` is false. Returns the tokens that were on the device before (a prefix).
   */
  insert(tokens: ArrayLike<number>, ns: string, countHit: boolean): number {
    const present = this.match(tokens, ns).device
    const m = this.#ns(ns)
    const pages = Math.floor(tokens.length / this.pageSize)
    for (let p = 1; p <= pages; p++) {
      const k = this.#key(tokens, p)
      const page = m.get(k)
      if (page === undefined) m.set(k, { dev: true, host: false, lock: 0, pin: 0, hits: countHit ? 1 : 0 })
      else {
        page.dev = true
        if (countHit) page.hits++
      }
    }
    return present
  }

  /** Add `delta` to the lock count of the first `length` tokens' pages. */
  lock(tokens: ArrayLike<number>, length: number, ns: string, delta: 1 | -1): void {
    this.#count(tokens, length, ns, delta, 'lock')
  }

  /** Add `delta` to the host-reference count of the first `length` tokens' pages. */
  pin(tokens: ArrayLike<number>, length: number, ns: string, delta: 1 | -1): void {
    this.#count(tokens, length, ns, delta, 'pin')
  }

  #count(tokens: ArrayLike<number>, length: number, ns: string, delta: 1 | -1, what: 'lock' | 'pin'): void {
    const m = this.#ns(ns)
    for (let p = 1; p * this.pageSize <= length; p++) {
      const page = m.get(this.#key(tokens, p))
      if (page === undefined) throw new Error(`model: ${what} on a page that is not cached`)
      if (page[what] + delta < 0) throw new Error(`model: ${what} count below zero`)
      page[what] += delta
    }
  }

  /** Device and host sizes in tokens. */
  sizes(): {
    total: number
    protected: number
    evictable: number
    host: number
    hostOnly: number
    hostEvictable: number
  } {
    let total = 0
    let prot = 0
    let host = 0
    let hostOnly = 0
    let hostEvictable = 0
    const ps = this.pageSize
    for (const m of this.#pages.values()) {
      for (const p of m.values()) {
        if (p.dev) {
          total += ps
          if (p.lock > 0) prot += ps
        }
        if (p.host) host += ps
        if (p.host && !p.dev) {
          hostOnly += ps
          if (p.lock === 0 && p.pin === 0) hostEvictable += ps
        }
      }
    }
    return { total, protected: prot, evictable: total - prot, host, hostOnly, hostEvictable }
  }

  /** Every cached page as `ns|path` → a copy of its state. */
  pages(): Map<string, TieredPage> {
    const out = new Map<string, TieredPage>()
    for (const [ns, m] of this.#pages) for (const [k, p] of m) out.set(`${ns}|${k}`, { ...p })
    return out
  }

  /**
   * Check that the real cache's tiers after a step (`observed`: `ns|path` → tiers) differ from the
   * model only as `rules` allow, then adopt them. Always: a locked page leaves no tier; a
   * host-protected page keeps its host copy; a page that stays on the device keeps its host copy;
   * no page appears, and every page's parent page exists. Returns what moved.
   */
  applyObserved(
    observed: ReadonlyMap<string, { readonly dev: boolean; readonly host: boolean }>,
    rules: TierChangeRules,
  ): TierChangeCounts {
    const ps = this.pageSize
    const hostWrites = rules.hostWrites
    const hostEvictionAllowed = rules.hostEviction === true || hostWrites !== undefined
    let leftDevice = 0
    let demoted = 0
    let discarded = 0
    let written = 0
    let hostEvicted = 0
    let loaded = 0
    for (const [ns, m] of this.#pages) {
      for (const [k, p] of m) {
        const full = `${ns}|${k}`
        const o = observed.get(full) ?? { dev: false, host: false }
        if (o.dev === p.dev && o.host === p.host) continue
        if (p.lock > 0 && ((p.dev && !o.dev) || (p.host && !o.host)))
          throw new Error(`model: locked page ${full} left a tier`)
        if (p.pin > 0 && !o.host) throw new Error(`model: host-protected page ${full} lost its host copy`)
        if (p.dev && !o.dev) {
          if (rules.deviceEviction !== true) throw new Error(`model: page ${full} left the device`)
          leftDevice += ps
          if (o.host) demoted += ps
          else discarded += ps
        }
        if (!p.dev && o.dev) {
          if (rules.deviceGains?.has(full) !== true)
            throw new Error(`model: page ${full} came onto the device`)
          loaded += ps
        }
        if (!p.host && o.host) {
          const ok =
            hostWrites === 'any' ||
            (hostWrites === 'demotion'
              ? p.dev && !o.dev
              : typeof hostWrites === 'object' && hostWrites.has(full))
          if (!ok) throw new Error(`model: page ${full} gained a host copy`)
          written += ps
        }
        if (p.host && !o.host) {
          // A host copy goes only with its page: host eviction of a host-only page (possibly one a
          // demotion of this very step put there).
          if (o.dev) throw new Error(`model: page ${full} lost its host copy while on the device`)
          if (!hostEvictionAllowed) throw new Error(`model: host page ${full} was evicted`)
          hostEvicted += ps
        }
      }
    }
    for (const k of observed.keys()) {
      const bar = k.indexOf('|')
      if (this.#pages.get(k.slice(0, bar))?.has(k.slice(bar + 1)) !== true)
        throw new Error(`model: page appeared from nowhere: ${k}`)
    }
    // Adopt.
    for (const [ns, m] of this.#pages) {
      for (const [k, p] of [...m]) {
        const o = observed.get(`${ns}|${k}`)
        if (o === undefined) m.delete(k)
        else {
          p.dev = o.dev
          p.host = o.host
        }
      }
    }
    for (const [ns, m] of this.#pages) {
      for (const k of m.keys()) {
        const toks = k.split(',')
        if (toks.length > ps && !m.has(toks.slice(0, toks.length - ps).join(',')))
          throw new Error(`model: page ${ns}|${k} has no parent page`)
      }
    }
    return { leftDevice, demoted, discarded, hostWrites: written, hostEvicted, loaded }
  }

  /** Drop everything. */
  reset(): void {
    this.#pages.clear()
  }
}
