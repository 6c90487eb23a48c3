/**
 * The admission wire contract (Algorithm 2, "worker mode"): what a router sends to a D worker's
 * admission endpoint and what the worker answers. These types are carried over HTTP as JSON by
 * `@kvc/worker-bindings`, so every field is a string, a finite number or a boolean (no bigint, no
 * `undefined` inside arrays) and field names are stable: adding an optional field is compatible,
 * renaming or removing one needs a new {@link ADMIT_PROTOCOL_VERSION}.
 *
 * @module
 */
import { RouterError } from '../errors/routerError.js'

/**
 * Version of the admission contract. A request may carry it in `v`; a worker answers requests of
 * the same major version.
 *
 * @example
 * ```ts
 * import { ADMIT_PROTOCOL_VERSION } from '@kvc/kvc-router'
 * const body = { v: ADMIT_PROTOCOL_VERSION } // 1
 * ```
 */
export const ADMIT_PROTOCOL_VERSION = 1

/**
 * Suggested HTTP path of the admission endpoint on a D worker's sidecar (`POST`, JSON body
 * {@link AdmitRequest}, JSON answer {@link AdmitResponse}).
 *
 * @example
 * ```ts
 * import { ADMIT_HTTP_PATH } from '@kvc/kvc-router'
 * const url = new URL(ADMIT_HTTP_PATH, 'http://127.0.0.1:30001') // .../kvc/v1/admit
 * ```
 */
export const ADMIT_HTTP_PATH = '/kvc/v1/admit'

/**
 * Service-level classes, highest priority first. Lower classes yield first under pressure: they
 * get a smaller share of a D's pending-seed budget, a lower ceiling of token usage on the D, and
 * a longer wait budget (see `SloBudget`).
 *
 * @example
 * ```ts
 * import { SLO_CLASSES } from '@kvc/kvc-router'
 * SLO_CLASSES.includes('batch') // true
 * ```
 */
export const SLO_CLASSES = ['interactive', 'batch', 'background'] as const

/**
 * One of {@link SLO_CLASSES}.
 *
 * @example
 * ```ts
 * import type { SloClass } from '@kvc/kvc-router'
 * const cls: SloClass = 'interactive'
 * ```
 */
export type SloClass = (typeof SLO_CLASSES)[number]

/**
 * How the turn would reach the D worker: `fast` (direct-to-D, the D append-prefills the tokens it
 * does not hold) or `seed` (a P worker prefills and transfers the KV to the D).
 *
 * @example
 * ```ts
 * import { ADMIT_PATHS } from '@kvc/kvc-router'
 * ADMIT_PATHS // ['fast', 'seed']
 * ```
 */
export const ADMIT_PATHS = ['fast', 'seed'] as const

/**
 * One of {@link ADMIT_PATHS}.
 *
 * @example
 * ```ts
 * import type { AdmitPath } from '@kvc/kvc-router'
 * const path: AdmitPath = 'fast'
 * ```
 */
export type AdmitPath = (typeof ADMIT_PATHS)[number]

/**
 * Why a worker answered as it did.
 *
 * | reason | admitted | meaning |
 * |---|---|---|
 * | `ok` | yes | a reservation (lease) was taken |
 * | `capacity` | no | free + evictable tokens (after releasing idle sessions) do not cover the need |
 * | `append_too_large` | no | fast path only: the tokens the D would prefill itself exceed its `maxAppendTokens`; take the seed path |
 * | `slo_budget` | no | the request fits, but not under its SLO class's usage ceiling (lower classes yield first) |
 * | `draining` | no | the worker is shutting down or drained by an operator |
 *
 * @example
 * ```ts
 * import { ADMIT_REASONS } from '@kvc/kvc-router'
 * ADMIT_REASONS.length // 5
 * ```
 */
export const ADMIT_REASONS = ['ok', 'capacity', 'append_too_large', 'slo_budget', 'draining'] as const

/**
 * One of {@link ADMIT_REASONS}.
 *
 * @example
 * ```ts
 * import type { AdmitReason } from '@kvc/kvc-router'
 * const r: AdmitReason = 'capacity'
 * ```
 */
export type AdmitReason = (typeof ADMIT_REASONS)[number]

/**
 * Body of an admission RPC: "can you take this turn of this session, by this path?".
 *
 * @example
 * ```ts
 * import type { AdmitRequest } from '@kvc/kvc-router'
 * const req: AdmitRequest = {
 *   requestId: 's1/t7/a0',
 *   sessionId: 's1',
 *   path: 'fast',
 *   promptTokens: 41_000,
 *   appendTokens: 1_200,
 *   expectedOutputTokens: 512,
 *   sloClass: 'interactive',
 * }
 * ```
 */
export interface AdmitRequest {
  /** Contract version ({@link ADMIT_PROTOCOL_VERSION}); absent means 1. */
  readonly v?: number
  /** Unique per attempt; the idempotency key and the id of the lease the worker grants. */
  readonly requestId: string
  /** The session the turn belongs to. */
  readonly sessionId: string
  /** The path the router intends to use. */
  readonly path: AdmitPath
  /** Length of the turn's whole prompt, in tokens. */
  readonly promptTokens: number
  /**
   * The router's estimate of the tokens beyond what the session holds on this worker. Advisory:
   * the worker recomputes it from its own state (`promptTokens − resident`).
   */
  readonly appendTokens: number
  /** The request's `max_tokens`: the decode reserve. Absent: the worker's default (512). */
  readonly expectedOutputTokens?: number
  /** Absent: `interactive`. */
  readonly sloClass?: SloClass
  /** Requested reservation lifetime in ms. Absent: the worker's default (5,000). */
  readonly leaseMs?: number
}

/**
 * Answer of an admission RPC. The fields after `reason` are the worker's ground truth at decision
 * time and feed the router's cluster view and backpressure.
 *
 * @example
 * ```ts
 * import type { AdmitResponse } from '@kvc/kvc-router'
 * const res: AdmitResponse = {
 *   requestId: 's1/t7/a0',
 *   admitted: false,
 *   reason: 'capacity',
 *   residentTokens: 39_800,
 *   needTokens: 1_712,
 *   tokenUsageAfter: 1.02,
 *   transferQueueDepth: 2,
 *   retractedQueueDepth: 0,
 *   recommendedPauseMs: 2_000,
 * }
 * ```
 */
export interface AdmitResponse {
  /** Echo of {@link AdmitRequest.requestId}. */
  readonly requestId: string
  readonly admitted: boolean
  readonly reason: AdmitReason
  /** Tokens of this session resident on the worker (from its session cache / radix tree). */
  readonly residentTokens: number
  /** Tokens the worker had to find room for: what it prefills or receives, plus the decode reserve. */
  readonly needTokens: number
  /** `(used + reserved + need) / capacity`: the usage if this request is (or had been) admitted. */
  readonly tokenUsageAfter: number
  /** KV transfers queued or in flight towards this worker. */
  readonly transferQueueDepth: number
  /** Requests the worker retracted (preempted) and has not resumed. */
  readonly retractedQueueDepth: number
  /** Backpressure: the router should not send new work here for this long (0: no pause). */
  readonly recommendedPauseMs: number
  /** Lifetime of the granted reservation in ms (admitted answers only). */
  readonly leaseMs?: number
  /** Sessions whose locks the worker released (idle, least recently used first) to make room. */
  readonly releasedSessions?: readonly string[]
  /**
   * Hot sessions the worker retracts under memory pressure (`planRetraction`): each finishes its
   * running turn, then its lock goes; the router places its next turn on another worker.
   */
  readonly retractedSessions?: readonly string[]
  /**
   * Tokens idle sessions still hold that the worker would release on demand; `tokenUsageAfter`
   * already counts them as available. Lets the router keep them apart (absent: 0).
   */
  readonly releasableTokens?: number
}

function bad(path: string, why: string, value: unknown): never {
  throw new RouterError('INVALID_MESSAGE', `${path}: ${why}`, value)
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x)
}

function str(o: Record<string, unknown>, k: string, where: string): string {
  const v = o[k]
  if (typeof v !== 'string' || v.length === 0) bad(`${where}.${k}`, 'must be a non-empty string', v)
  return v
}

/** An optional array of strings (copied). */
function strings(o: Record<string, unknown>, k: string, where: string): string[] | undefined {
  const v = o[k]
  if (v === undefined) return undefined
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) {
    bad(`${where}.${k}`, 'must be an array of strings', v)
  }
  return v.slice() as string[]
}

function count(o: Record<string, unknown>, k: string, where: string, optional: boolean): number | undefined {
  const v = o[k]
  if (v === undefined && optional) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    bad(`${where}.${k}`, 'must be a non-negative integer', v)
  }
  return v
}

function oneOf<T extends string>(
  o: Record<string, unknown>,
  k: string,
  values: readonly T[],
  where: string,
  optional: boolean,
): T | undefined {
  const v = o[k]
  if (v === undefined && optional) return undefined
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
    bad(`${where}.${k}`, `must be one of ${values.join(', ')}`, v)
  }
  return v as T
}

/**
 * Validates a decoded JSON value as an {@link AdmitRequest} (unknown fields are dropped) and
 * returns it. Use at the HTTP boundary.
 *
 * @throws RouterError `INVALID_MESSAGE` naming the first bad field.
 *
 * @example
 * ```ts
 * import { parseAdmitRequest } from '@kvc/kvc-router'
 * const req = parseAdmitRequest(JSON.parse('{"requestId":"r1","sessionId":"s1","path":"seed","promptTokens":900,"appendTokens":900}'))
 * req.path // 'seed'
 * ```
 */
export function parseAdmitRequest(x: unknown): AdmitRequest {
  const where = 'AdmitRequest'
  if (!isRecord(x)) bad(where, 'must be an object', x)
  const v = count(x, 'v', where, true)
  if (v !== undefined && v !== ADMIT_PROTOCOL_VERSION) bad(`${where}.v`, `unsupported version`, v)
  const requestId = str(x, 'requestId', where)
  const sessionId = str(x, 'sessionId', where)
  const path = oneOf(x, 'path', ADMIT_PATHS, where, false)!
  const promptTokens = count(x, 'promptTokens', where, false)!
  const appendTokens = count(x, 'appendTokens', where, false)!
  if (appendTokens > promptTokens) bad(`${where}.appendTokens`, 'must not exceed promptTokens', appendTokens)
  const expectedOutputTokens = count(x, 'expectedOutputTokens', where, true)
  const sloClass = oneOf(x, 'sloClass', SLO_CLASSES, where, true)
  const leaseMs = count(x, 'leaseMs', where, true)
  // Optional fields by assignment, in the declared order: spreading one small object per field
  // cost ~15 µs per request (a router's admission call, once per turn).
  const req: { -readonly [K in keyof AdmitRequest]: AdmitRequest[K] } =
    v === undefined
      ? { requestId, sessionId, path, promptTokens, appendTokens }
      : { v, requestId, sessionId, path, promptTokens, appendTokens }
  if (expectedOutputTokens !== undefined) req.expectedOutputTokens = expectedOutputTokens
  if (sloClass !== undefined) req.sloClass = sloClass
  if (leaseMs !== undefined) req.leaseMs = leaseMs
  return req
}

/**
 * Validates a decoded JSON value as an {@link AdmitResponse} (unknown fields are dropped).
 *
 * @throws RouterError `INVALID_MESSAGE` naming the first bad field.
 *
 * @example
 * ```ts
 * import { parseAdmitResponse } from '@kvc/kvc-router'
 * const res = parseAdmitResponse({
 *   requestId: 'r1', admitted: true, reason: 'ok', residentTokens: 0, needTokens: 1412,
 *   tokenUsageAfter: 0.4, transferQueueDepth: 0, retractedQueueDepth: 0, recommendedPauseMs: 0, leaseMs: 5000,
 * })
 * res.admitted // true
 * ```
 */
export function parseAdmitResponse(x: unknown): AdmitResponse {
  const where = 'AdmitResponse'
  if (!isRecord(x)) bad(where, 'must be an object', x)
  const requestId = str(x, 'requestId', where)
  const admitted = x.admitted
  if (typeof admitted !== 'boolean') bad(`${where}.admitted`, 'must be a boolean', admitted)
  const reason = oneOf(x, 'reason', ADMIT_REASONS, where, false)!
  if (admitted !== (reason === 'ok')) bad(`${where}.reason`, `'ok' if and only if admitted`, reason)
  const residentTokens = count(x, 'residentTokens', where, false)!
  const needTokens = count(x, 'needTokens', where, false)!
  const u = x.tokenUsageAfter
  if (typeof u !== 'number' || !Number.isFinite(u) || u < 0) {
    bad(`${where}.tokenUsageAfter`, 'must be a finite number >= 0', u)
  }
  const transferQueueDepth = count(x, 'transferQueueDepth', where, false)!
  const retractedQueueDepth = count(x, 'retractedQueueDepth', where, false)!
  const recommendedPauseMs = count(x, 'recommendedPauseMs', where, false)!
  const leaseMs = count(x, 'leaseMs', where, true)
  const releasableTokens = count(x, 'releasableTokens', where, true)
  const releasedSessions = strings(x, 'releasedSessions', where)
  const retractedSessions = strings(x, 'retractedSessions', where)
  // Optional fields by assignment, in the declared order (as parseAdmitRequest): Dispatch checks
  // every admission answer it is given with this parser.
  const res: { -readonly [K in keyof AdmitResponse]: AdmitResponse[K] } = {
    requestId,
    admitted,
    reason,
    residentTokens,
    needTokens,
    tokenUsageAfter: u,
    transferQueueDepth,
    retractedQueueDepth,
    recommendedPauseMs,
  }
  if (leaseMs !== undefined) res.leaseMs = leaseMs
  if (releasedSessions !== undefined) res.releasedSessions = releasedSessions
  if (retractedSessions !== undefined) res.retractedSessions = retractedSessions
  if (releasableTokens !== undefined) res.releasableTokens = releasableTokens
  return res
}

/**
 * JSON Schema (draft 2020-12) of {@link AdmitRequest}, for HTTP frameworks that validate bodies
 * with a schema. {@link parseAdmitRequest} enforces the same rules plus `appendTokens <= promptTokens`.
 *
 * @example
 * ```ts
 * import { admitRequestJsonSchema } from '@kvc/kvc-router'
 * admitRequestJsonSchema.required // ['requestId', 'sessionId', 'path', 'promptTokens', 'appendTokens']
 * ```
 */
export const admitRequestJsonSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  title: 'AdmitRequest',
  type: 'object',
  required: ['requestId', 'sessionId', 'path', 'promptTokens', 'appendTokens'],
  properties: {
    v: { const: ADMIT_PROTOCOL_VERSION },
    requestId: { type: 'string', minLength: 1 },
    sessionId: { type: 'string', minLength: 1 },
    path: { enum: [...ADMIT_PATHS] },
    promptTokens: { type: 'integer', minimum: 0 },
    appendTokens: { type: 'integer', minimum: 0 },
    expectedOutputTokens: { type: 'integer', minimum: 0 },
    sloClass: { enum: [...SLO_CLASSES] },
    leaseMs: { type: 'integer', minimum: 0 },
  },
} as const

/**
 * JSON Schema (draft 2020-12) of {@link AdmitResponse}.
 *
 * @example
 * ```ts
 * import { admitResponseJsonSchema } from '@kvc/kvc-router'
 * admitResponseJsonSchema.properties.reason.enum.includes('capacity') // true
 * ```
 */
export const admitResponseJsonSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  title: 'AdmitResponse',
  type: 'object',
  required: [
    'requestId',
    'admitted',
    'reason',
    'residentTokens',
    'needTokens',
    'tokenUsageAfter',
    'transferQueueDepth',
    'retractedQueueDepth',
    'recommendedPauseMs',
  ],
  properties: {
    requestId: { type: 'string', minLength: 1 },
    admitted: { type: 'boolean' },
    reason: { enum: [...ADMIT_REASONS] },
    residentTokens: { type: 'integer', minimum: 0 },
    needTokens: { type: 'integer', minimum: 0 },
    tokenUsageAfter: { type: 'number', minimum: 0 },
    transferQueueDepth: { type: 'integer', minimum: 0 },
    retractedQueueDepth: { type: 'integer', minimum: 0 },
    recommendedPauseMs: { type: 'integer', minimum: 0 },
    leaseMs: { type: 'integer', minimum: 0 },
    releasedSessions: { type: 'array', items: { type: 'string' } },
    retractedSessions: { type: 'array', items: { type: 'string' } },
    releasableTokens: { type: 'integer', minimum: 0 },
  },
} as const
