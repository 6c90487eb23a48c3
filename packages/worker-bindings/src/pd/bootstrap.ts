/**
 * PD disaggregation: the bootstrap fields a router injects into a request before sending the same
 * body to a prefill and a decode worker.
 *
 * @module
 */
import { randomBytes } from 'node:crypto'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import type { BootstrapRoom } from '../sglang/types.js'

/**
 * `2^63`: bootstrap rooms lie in `[0, 2^63)`.
 *
 * @example
 * ```ts
 * import { BOOTSTRAP_ROOM_LIMIT } from '@kvc/worker-bindings'
 * BOOTSTRAP_ROOM_LIMIT === 2n ** 63n // true
 * ```
 */
export const BOOTSTRAP_ROOM_LIMIT = 1n << 63n

/**
 * `FAKE_BOOTSTRAP_HOST` of SGLang (`2.2.2.2`): a fake transfer used by warmup and health checks
 * (it skips the radix-cache insert). Never inject it into real traffic.
 *
 * @example
 * ```ts
 * import { FAKE_BOOTSTRAP_HOST } from '@kvc/worker-bindings'
 * const isWarmup = (host: string) => host === FAKE_BOOTSTRAP_HOST
 * ```
 */
export const FAKE_BOOTSTRAP_HOST = '2.2.2.2'

/**
 * SGLang's default `--disaggregation-bootstrap-port`.
 *
 * @example
 * ```ts
 * import { DEFAULT_BOOTSTRAP_PORT } from '@kvc/worker-bindings'
 * const url = `http://10.0.0.5:${DEFAULT_BOOTSTRAP_PORT}` // port 8998
 * ```
 */
export const DEFAULT_BOOTSTRAP_PORT = 8998

/**
 * A random bootstrap room as SGLang's router draws it: a uniform 64-bit value with the top bit
 * cleared (`rand_u64 & i64::MAX`, "to match Python's random.randint(0, 2**63-1)"), so it lies in
 * `[0, 2^63)`. Returned as a `bigint` because rooms above 2^53 do not fit a `number`;
 * {@link stringifyJson} (used by every client here) writes it as a JSON integer.
 *
 * @param randomU64 source of 64 random bits (default `crypto.randomBytes`).
 *
 * @example
 * ```ts
 * import { generateBootstrapRoom } from '@kvc/worker-bindings'
 * const room = generateBootstrapRoom()
 * room >= 0n && room < 2n ** 63n // true
 * ```
 */
export function generateBootstrapRoom(randomU64: () => bigint = cryptoU64): bigint {
  return BigInt.asUintN(64, randomU64()) & (BOOTSTRAP_ROOM_LIMIT - 1n)
}

function cryptoU64(): bigint {
  return randomBytes(8).readBigUInt64BE(0)
}

/**
 * Whether `room` is a valid bootstrap room: an integer in `[0, 2^63)` (a `bigint`, or a
 * safe-integer `number`).
 *
 * @example
 * ```ts
 * import { isBootstrapRoom } from '@kvc/worker-bindings'
 * isBootstrapRoom(0) // true
 * isBootstrapRoom(2n ** 63n) // false
 * ```
 */
export function isBootstrapRoom(room: unknown): room is BootstrapRoom {
  if (typeof room === 'bigint') return room >= 0n && room < BOOTSTRAP_ROOM_LIMIT
  return typeof room === 'number' && Number.isSafeInteger(room) && room >= 0
}

/**
 * Where the prefill worker's bootstrap server is.
 *
 * @example
 * ```ts
 * import { injectBootstrap, type BootstrapTarget } from '@kvc/worker-bindings'
 * const target: BootstrapTarget = { host: '10.0.0.5', port: 8998 }
 * const body = injectBootstrap({ text: 'hi' }, target)
 * ```
 */
export interface BootstrapTarget {
  /** Host of the prefill worker (SGLang's router uses the hostname of its URL). */
  readonly host: string
  /** The prefill's `--disaggregation-bootstrap-port` (`null`: none, as the router sends for non-prefill workers). */
  readonly port: number | null
  /** Room to use (default: a fresh {@link generateBootstrapRoom}). For a batch: one per item. */
  readonly room?: BootstrapRoom | readonly BootstrapRoom[]
  /** Source of random 64-bit values for fresh rooms. */
  readonly randomU64?: () => bigint
}

/**
 * The number of items of a request if it is a batch (`text: string[]`, `input_ids: number[][]`,
 * `prompt: string[]`, or chat with `n > 1`), else `undefined`.
 *
 * @example
 * ```ts
 * import { batchSizeOf } from '@kvc/worker-bindings'
 * batchSizeOf({ text: ['a', 'b'] }) // 2
 * batchSizeOf({ text: 'a' }) // undefined
 * ```
 */
export function batchSizeOf(request: Readonly<Record<string, unknown>>): number | undefined {
  if (Array.isArray(request.text)) return request.text.length
  if (Array.isArray(request.prompt) && request.prompt.every((p) => typeof p === 'string'))
    return request.prompt.length
  const ids = request.input_ids
  if (Array.isArray(ids) && ids.length > 0 && Array.isArray(ids[0])) return ids.length
  if (Array.isArray(request.messages) && typeof request.n === 'number' && request.n > 1) return request.n
  return undefined
}

/**
 * Returns a copy of `request` with `bootstrap_host`, `bootstrap_port` and `bootstrap_room` set as
 * SGLang's PD router sets them: scalars for a single request; for a batch, per-item lists with
 * distinct rooms. The input is not modified.
 *
 * @throws WorkerBindingsError `INVALID_ARGUMENT` for a room outside `[0, 2^63)`, or a room list
 *   whose length differs from the batch size.
 *
 * @example
 * ```ts
 * import { injectBootstrap } from '@kvc/worker-bindings'
 * const body = injectBootstrap({ text: 'hi' }, { host: '10.0.0.5', port: 8998 })
 * body.bootstrap_host // '10.0.0.5'
 * typeof body.bootstrap_room // 'bigint'
 * ```
 */
export function injectBootstrap<T extends object>(
  request: T,
  target: BootstrapTarget,
): T & {
  bootstrap_host: string | string[]
  bootstrap_port: number | null | (number | null)[]
  bootstrap_room: BootstrapRoom | BootstrapRoom[]
} {
  if (typeof target.host !== 'string' || target.host.length === 0) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'bootstrap host must be a non-empty string', {
      value: target.host,
    })
  }
  if (target.port !== null && !(Number.isInteger(target.port) && target.port > 0 && target.port < 65536)) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', `bootstrap port must be a TCP port or null`, {
      value: target.port,
    })
  }
  const n = batchSizeOf(request as Record<string, unknown>)
  const fresh = (): bigint => generateBootstrapRoom(target.randomU64)
  if (n === undefined) {
    if (Array.isArray(target.room)) {
      throw new WorkerBindingsError('INVALID_ARGUMENT', 'a list of rooms for a single request', {
        value: target.room,
      })
    }
    const room = (target.room as BootstrapRoom | undefined) ?? fresh()
    checkRoom(room)
    return { ...request, bootstrap_host: target.host, bootstrap_port: target.port, bootstrap_room: room }
  }
  let rooms: BootstrapRoom[]
  if (target.room === undefined) {
    const seen = new Set<bigint>()
    rooms = []
    while (rooms.length < n) {
      const r = fresh()
      if (seen.has(r)) continue
      seen.add(r)
      rooms.push(r)
    }
  } else {
    if (!Array.isArray(target.room) || target.room.length !== n) {
      throw new WorkerBindingsError('INVALID_ARGUMENT', `a batch of ${n} needs ${n} rooms`, {
        value: target.room,
      })
    }
    rooms = [...(target.room as BootstrapRoom[])]
    rooms.forEach(checkRoom)
  }
  return {
    ...request,
    bootstrap_host: Array.from({ length: n }, () => target.host),
    bootstrap_port: Array.from({ length: n }, () => target.port),
    bootstrap_room: rooms,
  }
}

function checkRoom(room: unknown): void {
  if (!isBootstrapRoom(room)) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', 'bootstrap_room must be an integer in [0, 2^63)', {
      value: room,
    })
  }
}

/**
 * The host part of a worker URL, as SGLang's router takes `bootstrap_host` from a prefill URL.
 *
 * @example
 * ```ts
 * import { bootstrapHostOf } from '@kvc/worker-bindings'
 * bootstrapHostOf('http://10.0.0.5:30000') // '10.0.0.5'
 * ```
 */
export function bootstrapHostOf(url: string): string {
  try {
    return new URL(url).hostname.replace(/^\[(.*)\]$/, '$1')
  } catch (cause) {
    throw new WorkerBindingsError('INVALID_ARGUMENT', `not a URL: ${url}`, { value: url, cause })
  }
}
