import type { KvAllocator } from '../allocator/kvAllocator.js'
import { PagedAllocator } from '../allocator/pagedAllocator.js'
import { RadixCacheError, RadixCacheErrorCode } from '../errors/radixCacheError.js'
import { EVICTION_POLICIES } from '../tree/types.js'
import {
  HOST_WRITE_POLICIES,
  type HostTierConfig,
  type HostTierOptions,
  type KvSlotAllocator,
  type KvTransfer,
} from './types.js'

/** A validated host tier: its configuration, host pool (value-tracking caches) and copy hook. @internal */
export interface ResolvedHostTier {
  readonly config: HostTierConfig
  readonly allocator: KvSlotAllocator | undefined
  readonly onTransfer: ((transfer: KvTransfer) => void) | undefined
}

function invalid(message: string, value: unknown): RadixCacheError {
  return new RadixCacheError(RadixCacheErrorCode.InvalidOption, `hostTier: ${message}`, value)
}

function isSlotAllocator(a: unknown): a is KvSlotAllocator {
  const x = a as Partial<KvSlotAllocator> | null
  return (
    typeof x === 'object' &&
    x !== null &&
    typeof x.free === 'function' &&
    typeof x.alloc === 'function' &&
    typeof x.availableSize === 'function' &&
    Number.isInteger(x.size)
  )
}

/**
 * Validate the `hostTier` option of a cache (everything checked before anything is built).
 * @internal
 */
export function resolveHostTier(
  options: HostTierOptions,
  pageSize: number,
  trackValues: boolean,
  deviceAllocator: KvAllocator | undefined,
): ResolvedHostTier {
  if (options === null || typeof options !== 'object') throw invalid('must be an object', options)
  const writePolicy = options.writePolicy ?? 'write_back'
  if (!HOST_WRITE_POLICIES.includes(writePolicy)) {
    throw invalid(
      `writePolicy must be one of ${HOST_WRITE_POLICIES.join(', ')}, got ${String(writePolicy)}`,
      writePolicy,
    )
  }
  const evictionPolicy = options.evictionPolicy ?? 'lru'
  if (!EVICTION_POLICIES.includes(evictionPolicy)) {
    throw invalid(
      `evictionPolicy must be one of ${EVICTION_POLICIES.join(', ')}, got ${String(evictionPolicy)}`,
      evictionPolicy,
    )
  }
  const threshold = options.writeThroughThreshold ?? (writePolicy === 'write_through_selective' ? 2 : 1)
  if (!Number.isInteger(threshold) || threshold < 1) {
    throw invalid(`writeThroughThreshold must be a positive integer, got ${String(threshold)}`, threshold)
  }
  const loadBackThreshold = options.loadBackThreshold ?? 10
  if (typeof loadBackThreshold !== 'number' || !(loadBackThreshold >= 0)) {
    throw invalid(
      `loadBackThreshold must be a non-negative number, got ${String(loadBackThreshold)}`,
      loadBackThreshold,
    )
  }
  for (const key of ['deviceMedium', 'hostMedium'] as const) {
    const m = options[key]
    if (m !== undefined && (typeof m !== 'string' || m.length === 0)) {
      throw invalid(`${key} must be a non-empty string, got ${String(m)}`, m)
    }
  }
  if (options.onTransfer !== undefined && typeof options.onTransfer !== 'function') {
    throw invalid('onTransfer must be a function', options.onTransfer)
  }
  if (options.allocator !== undefined && !isSlotAllocator(options.allocator)) {
    throw invalid('allocator must have size, alloc, availableSize and free', options.allocator)
  }
  if (options.allocator !== undefined && !trackValues) {
    throw invalid('a length-only cache (trackValues: false) takes no host allocator', options.allocator)
  }
  if (trackValues && !isSlotAllocator(deviceAllocator)) {
    throw invalid(
      'a value-tracking cache with a host tier needs an allocator with size, alloc, availableSize and free (loadBack allocates device slots from it)',
      deviceAllocator,
    )
  }
  if (options.capacity !== undefined && options.ratio !== undefined) {
    throw invalid('give capacity or ratio, not both', options)
  }
  let capacity: number
  if (options.ratio !== undefined) {
    const ratio = options.ratio
    if (typeof ratio !== 'number' || !(ratio > 0) || !Number.isFinite(ratio)) {
      throw invalid(`ratio must be a positive number, got ${String(ratio)}`, ratio)
    }
    const deviceSize = (deviceAllocator as Partial<KvSlotAllocator> | undefined)?.size
    if (!Number.isInteger(deviceSize)) {
      throw invalid('ratio needs an allocator with a size (the device pool) to scale', ratio)
    }
    capacity = Math.floor((deviceSize! * ratio) / pageSize) * pageSize
  } else if (options.capacity !== undefined) {
    capacity = options.capacity
  } else if (options.allocator !== undefined) {
    capacity = options.allocator.size
  } else {
    throw invalid('give a capacity (tokens), a ratio or a host allocator', options)
  }
  if (!Number.isInteger(capacity) || capacity < 0 || capacity % pageSize !== 0 || capacity > 2 ** 31 - 1) {
    throw invalid(
      `capacity must be a non-negative multiple of pageSize (${pageSize}) below 2^31, got ${String(capacity)}`,
      capacity,
    )
  }
  if (options.allocator !== undefined && options.allocator.size < capacity) {
    throw invalid(
      `the host allocator holds ${options.allocator.size} slots, fewer than capacity ${capacity}`,
      options.allocator,
    )
  }
  const allocator = trackValues
    ? (options.allocator ?? new PagedAllocator({ size: capacity, pageSize }))
    : undefined
  return {
    config: Object.freeze({
      capacity,
      writePolicy,
      writeThroughThreshold: threshold,
      evictionPolicy,
      loadBackThreshold,
      deviceMedium: options.deviceMedium ?? 'GPU',
      hostMedium: options.hostMedium ?? 'CPU_TIER1',
    }),
    allocator,
    onTransfer: options.onTransfer,
  }
}
