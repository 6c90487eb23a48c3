/**
 * The tier a KV event's `medium` names, with Dynamo's table (`StorageTier::from_kv_medium`), the
 * one `@kvc/worker-bindings`' `kvEventTier` also reads. Pure.
 *
 * @module
 */

/**
 * A KV tier: the device (GPU memory), host memory, a disk, or an external store.
 *
 * @example
 * ```ts
 * import type { KvTierName } from '@kvc/kvc-router'
 * const t: KvTierName = 'host'
 * ```
 */
export type KvTierName = 'device' | 'host' | 'disk' | 'external'

const MEDIUM_TIERS: ReadonlyMap<string, KvTierName> = new Map([
  ['GPU', 'device'],
  ['DEVICE', 'device'],
  ['CPU', 'host'],
  ['CPU_PINNED', 'host'],
  ['CPU_TIER1', 'host'],
  ['HOST', 'host'],
  ['HOST_PINNED', 'host'],
  ['CPU_TIER2', 'disk'],
  ['DISK', 'disk'],
  ['NVME', 'disk'],
  ['STORAGE', 'disk'],
  ['EXTERNAL', 'external'],
  ['NETWORK', 'external'],
  ['REMOTE', 'external'],
  ['SHARED', 'external'],
])

/**
 * The tier of an event's `medium`, case-insensitively: absent (`undefined` or `null`), `GPU` and
 * `DEVICE` → `device`; `CPU`, `CPU_PINNED`, `CPU_TIER1` (SGLang HiCache's host tier), `HOST`,
 * `HOST_PINNED` → `host`; `CPU_TIER2`, `DISK`, `NVME`, `STORAGE` → `disk`; `EXTERNAL`,
 * `NETWORK`, `REMOTE`, `SHARED` → `external`; any other string → `undefined`.
 *
 * @example
 * ```ts
 * import { mediumTier } from '@kvc/kvc-router'
 * mediumTier(undefined)   // 'device'
 * mediumTier('CPU_TIER1') // 'host'
 * mediumTier('tape')      // undefined
 * ```
 */
export function mediumTier(medium: string | null | undefined): KvTierName | undefined {
  if (medium === undefined || medium === null) return 'device'
  return MEDIUM_TIERS.get(medium.toUpperCase())
}
