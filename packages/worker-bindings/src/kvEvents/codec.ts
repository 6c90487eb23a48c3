/**
 * The KV-event wire format of vLLM, SGLang and the Mooncake master: msgpack batches
 * `[ts, [events...], data_parallel_rank?]` (msgspec `array_like=True`) or maps
 * `{ts, events, data_parallel_rank}`; each event `[tag, fields...]` or `{type: tag, ...}`.
 *
 * Tiered caches tag `BlockStored` / `BlockRemoved` with the `medium` they concern: vLLM's GPU
 * blocks `"GPU"` and its offloading connector's CPU tier `"CPU"`; SGLang HiCache `"GPU"` (L1),
 * `"CPU_TIER1"` (L2 host) and `"CPU_TIER2"` (L3 storage). A block is stored on and removed from
 * each medium separately: a demotion is `BlockStored(host)` then `BlockRemoved(GPU)`, a load-back
 * `BlockStored(GPU)`. {@link kvEventTier} maps the strings to tiers as Dynamo's router does.
 *
 * @module
 */
import { mediumTier } from '@kvc/kvc-router'
import type { KvEvent } from '@kvc/radix-cache'
import { decode, encode } from '@msgpack/msgpack'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * A page range entered a worker's cache (`BlockStored`), on `medium`. Hashes are normalized to
 * `bigint`: integers keep their sign as sent (SGLang: signed int64; vLLM, Dynamo: unsigned),
 * byte-string hashes (newer vLLM) become the unsigned value of their last 8 bytes, big-endian
 * (llm-d's convention). `tokenIds` covers all the blocks (`blockSize` tokens each); events of an
 * offloading tier may send no tokens and, in vLLM, `block_size` 0 (then `blockSize` is 0).
 *
 * @example
 * ```ts
 * import type { WireBlockStored } from '@kvc/worker-bindings'
 * const pages = (e: WireBlockStored) => e.tokenIds.length / e.blockSize
 * ```
 */
export interface WireBlockStored {
  readonly type: 'BlockStored'
  readonly blockHashes: readonly bigint[]
  readonly parentBlockHash: bigint | null
  readonly tokenIds: readonly number[]
  /** Tokens per block; 0 when the publisher did not say (vLLM's offloading events). */
  readonly blockSize: number
  readonly loraId: number | null
  /** `"GPU"`, `"CPU"`, `"CPU_TIER1"`, `"DISK"`... (`null`: not sent, meaning the device). See {@link kvEventTier}. */
  readonly medium: string | null
  readonly loraName: string | null
}

/**
 * Pages left a worker's cache.
 *
 * @example
 * ```ts
 * import type { WireBlockRemoved } from '@kvc/worker-bindings'
 * const n = (e: WireBlockRemoved) => e.blockHashes.length
 * ```
 */
export interface WireBlockRemoved {
  readonly type: 'BlockRemoved'
  readonly blockHashes: readonly bigint[]
  /** The medium the blocks left (`null`: not sent, meaning the device); other media may keep them. */
  readonly medium: string | null
}

/**
 * A worker cleared its whole cache (`reset()`, `/flush_cache`).
 *
 * @example
 * ```ts
 * import type { WireAllBlocksCleared } from '@kvc/worker-bindings'
 * const e: WireAllBlocksCleared = { type: 'AllBlocksCleared' }
 * ```
 */
export interface WireAllBlocksCleared {
  readonly type: 'AllBlocksCleared'
}

/**
 * One decoded KV event.
 *
 * @example
 * ```ts
 * import type { WireKvEvent } from '@kvc/worker-bindings'
 * const isStore = (e: WireKvEvent) => e.type === 'BlockStored'
 * ```
 */
export type WireKvEvent = WireBlockStored | WireBlockRemoved | WireAllBlocksCleared

/**
 * One decoded event batch (`KVEventBatch`).
 *
 * @example
 * ```ts
 * import type { KvEventBatch } from '@kvc/worker-bindings'
 * const count = (b: KvEventBatch) => b.events.length
 * ```
 */
export interface KvEventBatch {
  /** Publisher timestamp (seconds since the epoch, float). */
  readonly ts: number
  readonly events: readonly WireKvEvent[]
  readonly dataParallelRank: number | null
}

/**
 * msgpack layout of a batch: msgspec `array_like` (positional) or a map of named fields.
 *
 * @example
 * ```ts
 * import { encodeKvEventBatch, type KvEventEncoding } from '@kvc/worker-bindings'
 * const layout: KvEventEncoding = 'map'
 * encodeKvEventBatch({ ts: 0, events: [], dataParallelRank: null }, layout)
 * ```
 */
export type KvEventEncoding = 'array' | 'map'

/**
 * Decodes one msgpack event-batch payload (the third frame of a KV-event message), accepting
 * both the array and the map encodings, and the Mooncake/Dynamo envelope (`event_type:
 * stored|removed|cleared` with `seq_hashes`).
 *
 * @throws WorkerBindingsError `KV_EVENT_DECODE` naming what is wrong.
 *
 * @example
 * ```ts
 * import { decodeKvEventBatch, encodeKvEventBatch } from '@kvc/worker-bindings'
 * const bytes = encodeKvEventBatch({ ts: 1, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null })
 * decodeKvEventBatch(bytes).events[0]?.type // 'AllBlocksCleared'
 * ```
 */
export function decodeKvEventBatch(payload: Uint8Array): KvEventBatch {
  let raw: unknown
  try {
    raw = decode(payload, { useBigInt64: true })
  } catch (cause) {
    throw bad('payload is not msgpack', payload.subarray(0, 64), cause)
  }
  let ts: unknown
  let events: unknown
  let dp: unknown
  if (Array.isArray(raw)) {
    const a = typeof raw[0] === 'string' ? raw.slice(1) : raw // a tagged batch struct
    ;[ts, events, dp] = a
  } else if (isMap(raw)) {
    ts = raw.ts ?? raw.timestamp
    events = raw.events
    dp = raw.data_parallel_rank ?? raw.dp_rank
  } else {
    throw bad('a batch must be an array or a map', raw)
  }
  const tsNum = toNumber(ts)
  if (tsNum === undefined) throw bad('batch ts must be a number', ts)
  if (!Array.isArray(events)) throw bad('batch events must be an array', events)
  const dpNum = dp === undefined || dp === null ? null : toNumber(dp)
  if (dpNum === undefined) throw bad('data_parallel_rank must be an integer or null', dp)
  return { ts: tsNum, events: events.map(decodeEvent), dataParallelRank: dpNum }
}

function decodeEvent(raw: unknown): WireKvEvent {
  if (Array.isArray(raw)) {
    const [tag, ...f] = raw
    switch (tag) {
      case 'BlockStored':
        return stored(f[0], f[1], f[2], f[3], f[4], f[5], f[6])
      case 'BlockRemoved':
        return removed(f[0], f[1])
      case 'AllBlocksCleared':
        return { type: 'AllBlocksCleared' }
      default:
        throw bad(`unknown event tag ${String(tag)}`, raw)
    }
  }
  if (!isMap(raw)) throw bad('an event must be an array or a map', raw)
  const tag = raw.type ?? raw.event_type
  switch (tag) {
    case 'BlockStored':
    case 'stored':
      return stored(
        raw.block_hashes ?? raw.seq_hashes,
        raw.parent_block_hash ?? raw.parent_hash,
        raw.token_ids ?? [],
        raw.block_size,
        raw.lora_id,
        raw.medium ?? raw.storage_tier,
        raw.lora_name,
      )
    case 'BlockRemoved':
    case 'removed':
      return removed(raw.block_hashes ?? raw.seq_hashes, raw.medium ?? raw.storage_tier)
    case 'AllBlocksCleared':
    case 'cleared':
      return { type: 'AllBlocksCleared' }
    default:
      throw bad(`unknown event type ${String(tag)}`, raw)
  }
}

function stored(
  hashes: unknown,
  parent: unknown,
  tokens: unknown,
  blockSize: unknown,
  loraId: unknown,
  medium: unknown,
  loraName: unknown,
): WireBlockStored {
  if (
    !Array.isArray(tokens) ||
    !tokens.every((t) => typeof t === 'number' && Number.isInteger(t) && t >= 0)
  ) {
    throw bad('BlockStored token_ids must be a list of non-negative integers', tokens)
  }
  const bs = toNumber(blockSize)
  // vLLM's offloading connector sends block_size 0 (and no tokens) for its CPU-tier events.
  if (bs === undefined || !Number.isInteger(bs) || bs < 0 || (bs === 0 && tokens.length > 0))
    throw bad('BlockStored block_size must be >= 1 (or 0 without token ids)', blockSize)
  const lid = loraId === undefined || loraId === null ? null : toNumber(loraId)
  if (lid === undefined) throw bad('BlockStored lora_id must be an integer or null', loraId)
  return {
    type: 'BlockStored',
    blockHashes: hashList(hashes),
    parentBlockHash: parent === undefined || parent === null ? null : toHash(parent),
    tokenIds: tokens as number[],
    blockSize: bs,
    loraId: lid,
    medium: optString(medium, 'medium'),
    loraName: optString(loraName, 'lora_name'),
  }
}

function removed(hashes: unknown, medium: unknown): WireBlockRemoved {
  return { type: 'BlockRemoved', blockHashes: hashList(hashes), medium: optString(medium, 'medium') }
}

function hashList(x: unknown): bigint[] {
  if (!Array.isArray(x)) throw bad('block_hashes must be a list', x)
  return x.map(toHash)
}

/** Hashes are 64-bit: signed (SGLang, Dynamo) or unsigned (vLLM, byte strings) spellings. */
const HASH_MIN = -(2n ** 63n)
const HASH_END = 2n ** 64n

function toHash(x: unknown): bigint {
  if (typeof x === 'bigint') return inRange(x)
  if (typeof x === 'number' && Number.isInteger(x)) {
    // A float past 2^53 has lost bits: it names some other block.
    if (!Number.isSafeInteger(x))
      throw bad('a block hash number beyond 2^53 is not exact (send it as a 64-bit integer)', x)
    return BigInt(x)
  }
  if (x instanceof Uint8Array) {
    if (x.length === 0) throw bad('empty byte-string block hash', x)
    let v = 0n
    for (const b of x.subarray(Math.max(0, x.length - 8))) v = (v << 8n) | BigInt(b)
    return v
  }
  if (typeof x === 'string' && /^(-?\d+|0x[0-9a-fA-F]+)$/.test(x)) return inRange(BigInt(x))
  throw bad('a block hash must be an integer or a byte string', x)
}

function inRange(h: bigint): bigint {
  if (h < HASH_MIN || h >= HASH_END) throw bad('a block hash must fit in 64 bits', h)
  return h
}

function toNumber(x: unknown): number | undefined {
  if (typeof x === 'number' && Number.isFinite(x)) return x
  if (typeof x === 'bigint') return Number(x)
  return undefined
}

function optString(x: unknown, what: string): string | null {
  if (x === undefined || x === null) return null
  if (typeof x !== 'string') throw bad(`${what} must be a string or null`, x)
  return x
}

function isMap(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x) && !(x instanceof Uint8Array)
}

function bad(why: string, value: unknown, cause?: unknown): WorkerBindingsError {
  return new WorkerBindingsError('KV_EVENT_DECODE', `invalid KV event batch: ${why}`, { value, cause })
}

/**
 * Encodes a batch as msgpack, in the array layout (msgspec `array_like=True, omit_defaults=True,
 * tag=True`, what SGLang and recent vLLM send) or the map layout (`{ts, events, ...}` with
 * `type` tags). `bigint` hashes are written as 64-bit integers.
 *
 * @example
 * ```ts
 * import { encodeKvEventBatch } from '@kvc/worker-bindings'
 * const bytes = encodeKvEventBatch(
 *   { ts: Date.now() / 1000, events: [{ type: 'BlockRemoved', blockHashes: [42n], medium: null }], dataParallelRank: null },
 *   'map',
 * )
 * ```
 */
export function encodeKvEventBatch(batch: KvEventBatch, encoding: KvEventEncoding = 'array'): Uint8Array {
  const events = batch.events.map((e) => (encoding === 'array' ? eventArray(e) : eventMap(e)))
  const body =
    encoding === 'array'
      ? batch.dataParallelRank === null
        ? [batch.ts, events]
        : [batch.ts, events, batch.dataParallelRank]
      : { ts: batch.ts, events, data_parallel_rank: batch.dataParallelRank }
  return encode(body, { useBigInt64: true })
}

function eventArray(e: WireKvEvent): unknown[] {
  switch (e.type) {
    case 'BlockStored': {
      const f: unknown[] = [
        'BlockStored',
        [...e.blockHashes],
        e.parentBlockHash,
        [...e.tokenIds],
        e.blockSize,
        e.loraId,
        e.medium,
        e.loraName,
      ]
      while (f.length > 5 && f[f.length - 1] === null) f.pop() // omit_defaults: trailing defaults
      return f
    }
    case 'BlockRemoved':
      return e.medium === null
        ? ['BlockRemoved', [...e.blockHashes]]
        : ['BlockRemoved', [...e.blockHashes], e.medium]
    default:
      return ['AllBlocksCleared']
  }
}

function eventMap(e: WireKvEvent): Record<string, unknown> {
  switch (e.type) {
    case 'BlockStored':
      return {
        type: 'BlockStored',
        block_hashes: [...e.blockHashes],
        parent_block_hash: e.parentBlockHash,
        token_ids: [...e.tokenIds],
        block_size: e.blockSize,
        lora_id: e.loraId,
        medium: e.medium,
        lora_name: e.loraName,
      }
    case 'BlockRemoved':
      return { type: 'BlockRemoved', block_hashes: [...e.blockHashes], medium: e.medium }
    default:
      return { type: 'AllBlocksCleared' }
  }
}

/**
 * Converts `@kvc/radix-cache` events (what a `RadixCache` emits through `onEvent`) to wire
 * events, e.g. to publish a cache's changes. An event's own `medium` (a cache with a host tier
 * sets it) wins over the `medium` argument.
 *
 * @example
 * ```ts
 * import { fromRadixKvEvent } from '@kvc/worker-bindings'
 * fromRadixKvEvent({ type: 'AllBlocksCleared', eventId: 0 }) // { type: 'AllBlocksCleared' }
 * ```
 */
export function fromRadixKvEvent(e: KvEvent, medium: string | null = null): WireKvEvent {
  switch (e.type) {
    case 'BlockStored':
      return {
        type: 'BlockStored',
        blockHashes: e.blockHashes,
        parentBlockHash: e.parentBlockHash,
        tokenIds: e.tokenIds,
        blockSize: e.blockSize,
        loraId: null,
        medium: e.medium ?? medium,
        loraName: null,
      }
    case 'BlockRemoved':
      return { type: 'BlockRemoved', blockHashes: e.blockHashes, medium: e.medium ?? medium }
    default:
      return { type: 'AllBlocksCleared' }
  }
}

/**
 * Converts a batch's wire events into `@kvc/radix-cache` `KvEvent`s (the shape `kvc-router`'s
 * residency index ingests), numbering them from `firstEventId`. One wire event becomes one
 * `KvEvent` (a multi-block `BlockStored` stays one event with all its hashes). `extraKey` is the
 * LoRA name when the publisher sent one; `medium` is carried over when sent (so a consumer can
 * keep one residency per tier, see {@link kvEventTier}).
 *
 * @example
 * ```ts
 * import { toRadixKvEvents } from '@kvc/worker-bindings'
 * const events = toRadixKvEvents({ ts: 0, events: [{ type: 'AllBlocksCleared' }], dataParallelRank: null }, 7)
 * events[0]?.eventId // 7
 * ```
 */
export function toRadixKvEvents(batch: KvEventBatch, firstEventId: number): KvEvent[] {
  let id = firstEventId
  return batch.events.map((e): KvEvent => {
    const eventId = id++
    switch (e.type) {
      case 'BlockStored':
        return {
          type: 'BlockStored',
          eventId,
          blockHashes: e.blockHashes,
          parentBlockHash: e.parentBlockHash,
          tokenIds: e.tokenIds,
          blockSize: e.blockSize,
          extraKey: e.loraName,
          ...(e.medium !== null ? { medium: e.medium } : {}),
        }
      case 'BlockRemoved':
        return {
          type: 'BlockRemoved',
          eventId,
          blockHashes: e.blockHashes,
          ...(e.medium !== null ? { medium: e.medium } : {}),
        }
      default:
        return { type: 'AllBlocksCleared', eventId }
    }
  })
}

/**
 * The storage tier a KV event concerns. `device`: GPU memory (SGLang's L1); `host`: pinned CPU
 * memory (SGLang HiCache's L2, vLLM's offloading CPU tier, Dynamo KVBM's G2); `disk`: local disk
 * or storage (SGLang's L3 as `CPU_TIER2`, KVBM's G3); `external`: a shared or remote store.
 *
 * @example
 * ```ts
 * import type { KvTier } from '@kvc/worker-bindings'
 * const loadable = (t: KvTier) => t === 'device' || t === 'host'
 * ```
 */
export type KvTier = 'device' | 'host' | 'disk' | 'external'

/**
 * Every {@link KvTier}, fastest first.
 *
 * @example
 * ```ts
 * import { KV_TIERS } from '@kvc/worker-bindings'
 * KV_TIERS[0] // 'device'
 * ```
 */
export const KV_TIERS: readonly KvTier[] = ['device', 'host', 'disk', 'external']

/**
 * The tier of an event's `medium`, with Dynamo's table (`StorageTier::from_kv_medium`) read
 * case-insensitively: `null` (not sent) and `GPU`/`DEVICE` → `device`; `CPU`, `CPU_PINNED`,
 * `CPU_TIER1` (SGLang HiCache L2), `HOST`, `HOST_PINNED` → `host`; `CPU_TIER2` (SGLang HiCache
 * L3), `DISK`, `NVME`, `STORAGE` → `disk`; `EXTERNAL`, `NETWORK`, `REMOTE`, `SHARED` →
 * `external` (kvc-router's `mediumTier`, one table for both). An unknown string gives
 * `undefined` (Dynamo would count it as the device; a consumer should rather skip it and say so).
 *
 * @example
 * ```ts
 * import { kvEventTier } from '@kvc/worker-bindings'
 * kvEventTier(null)        // 'device'
 * kvEventTier('CPU_TIER1') // 'host'
 * kvEventTier('cpu')       // 'host'
 * kvEventTier('tape')      // undefined
 * ```
 */
export function kvEventTier(medium: string | null | undefined): KvTier | undefined {
  return mediumTier(medium)
}
