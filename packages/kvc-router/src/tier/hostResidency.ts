import type { KvEvent } from '@kvc/radix-cache'
import { RouterError, describeValue } from '../errors/routerError.js'
import type { BlockKeys } from '../residency/blockKeys.js'
import { mediumTier } from './medium.js'

interface TierSets {
  readonly host: Set<bigint>
  readonly disk: Set<bigint>
}

/**
 * The blocks each D worker holds below the device (host tier, disk tier), fed by the KV events
 * whose `medium` names such a tier (SGLang HiCache's `CPU_TIER1` / `CPU_TIER2`, vLLM's `CPU`,
 * Dynamo's storage tiers; {@link mediumTier}). The device residency index skips those events;
 * `ClusterView.ingest` routes them here. Route reads it for the session's own D only, walking
 * on from the end of the device match ({@link HostResidency.runFrom}).
 *
 * @example
 * ```ts
 * import { BlockKeys, HostResidency } from '@kvc/kvc-router'
 * const host = new HostResidency()
 * host.ingest('d0', { type: 'BlockStored', eventId: 1, blockHashes: [2n, 3n], parentBlockHash: 1n, tokenIds: [], blockSize: 16, extraKey: null, medium: 'CPU_TIER1' })
 * host.runFrom('d0', BlockKeys.fromHashes([1n, 2n, 3n, 4n]), 1) // { host: 2, disk: 0 }
 * ```
 */
export class HostResidency {
  readonly #workers = new Map<string, TierSets>()
  #blocks = 0

  /** Blocks held below the device, all workers and tiers together. */
  get blockCount(): number {
    return this.#blocks
  }

  #sets(workerId: string): TierSets {
    let s = this.#workers.get(workerId)
    if (s === undefined) {
      s = { host: new Set(), disk: new Set() }
      this.#workers.set(workerId, s)
    }
    return s
  }

  /**
   * Applies one KV event of `workerId`: `BlockStored` / `BlockRemoved` on a host or disk medium
   * add or drop those blocks on that tier; an `AllBlocksCleared` without a medium (a worker that
   * restarted or reset its cache) clears every tier of the worker. Device events, external media
   * and unknown media change nothing. Returns whether the event was a host or disk one.
   *
   * @throws RouterError `INVALID_MESSAGE` when a tier event's `blockHashes` is not a bigint list.
   *
   * @example
   * ```ts
   * import { HostResidency } from '@kvc/kvc-router'
   * const host = new HostResidency()
   * host.ingest('d0', { type: 'BlockRemoved', eventId: 4, blockHashes: [9n], extraKey: null }) // false: a device event
   * ```
   */
  ingest(workerId: string, event: KvEvent): boolean {
    if (event.type === 'AllBlocksCleared') {
      const tier = mediumTier((event as { medium?: string }).medium)
      if (tier === 'device') this.clearWorker(workerId)
      else if (tier === 'host' || tier === 'disk') this.#clearTier(workerId, tier)
      return tier === 'host' || tier === 'disk'
    }
    const tier = mediumTier(event.medium)
    if (tier !== 'host' && tier !== 'disk') return false
    const hashes = event.blockHashes
    if (!Array.isArray(hashes)) {
      throw new RouterError(
        'INVALID_MESSAGE',
        `${event.type}.blockHashes must be a list of bigints, got ${describeValue(hashes)}`,
        hashes,
      )
    }
    for (const h of hashes) {
      if (typeof h !== 'bigint') {
        throw new RouterError(
          'INVALID_MESSAGE',
          `${event.type}.blockHashes: ${describeValue(h)} is not a bigint`,
          h,
        )
      }
    }
    const set = this.#sets(workerId)[tier]
    // Engines publish block ids as signed or unsigned 64-bit integers (SGLang's and this
    // project's hashers: signed); `BlockKeys.hashAt` spells them unsigned, so the sets do too.
    if (event.type === 'BlockStored') {
      for (const h of hashes) {
        const u = BigInt.asUintN(64, h)
        if (!set.has(u)) {
          set.add(u)
          this.#blocks++
        }
      }
    } else {
      for (const h of hashes) if (set.delete(BigInt.asUintN(64, h))) this.#blocks--
    }
    return true
  }

  #clearTier(workerId: string, tier: 'host' | 'disk'): void {
    const s = this.#workers.get(workerId)
    if (s === undefined) return
    this.#blocks -= s[tier].size
    s[tier].clear()
  }

  /**
   * Forgets everything held below the device by `workerId` (removed, restarted).
   *
   * @example
   * ```ts
   * import { HostResidency } from '@kvc/kvc-router'
   * new HostResidency().clearWorker('d0') // nothing to forget
   * ```
   */
  clearWorker(workerId: string): void {
    this.#clearTier(workerId, 'host')
    this.#clearTier(workerId, 'disk')
    this.#workers.delete(workerId)
  }

  /**
   * Blocks of `workerId` held on each tier, for inspection.
   *
   * @example
   * ```ts
   * import { HostResidency } from '@kvc/kvc-router'
   * new HostResidency().tierBlocks('d0') // { host: 0, disk: 0 }
   * ```
   */
  tierBlocks(workerId: string): { readonly host: number; readonly disk: number } {
    const s = this.#workers.get(workerId)
    return { host: s?.host.size ?? 0, disk: s?.disk.size ?? 0 }
  }

  /**
   * The run of `keys` from block `from` on that `workerId` holds below the device: first the
   * blocks on its host tier, then, where the host run stops, those on its disk tier (a tiered
   * cache holds a path's device part, then its host part, then its disk part). Counts in blocks;
   * at most `keys.length − from`.
   *
   * @example
   * ```ts
   * import { BlockKeys, HostResidency } from '@kvc/kvc-router'
   * const host = new HostResidency()
   * host.ingest('d0', { type: 'BlockStored', eventId: 1, blockHashes: [5n], parentBlockHash: null, tokenIds: [], blockSize: 16, extraKey: null, medium: 'CPU_TIER2' })
   * host.runFrom('d0', BlockKeys.fromHashes([5n, 6n]), 0) // { host: 0, disk: 1 }
   * ```
   */
  runFrom(workerId: string, keys: BlockKeys, from: number): { readonly host: number; readonly disk: number } {
    const s = this.#workers.get(workerId)
    if (s === undefined || (s.host.size === 0 && s.disk.size === 0)) return { host: 0, disk: 0 }
    const n = keys.length
    let i = Math.max(0, from)
    let host = 0
    while (i < n && s.host.has(keys.hashAt(i))) {
      host++
      i++
    }
    let disk = 0
    while (i < n && s.disk.has(keys.hashAt(i))) {
      disk++
      i++
    }
    return { host, disk }
  }
}
