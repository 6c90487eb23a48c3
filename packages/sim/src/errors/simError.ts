/**
 * Error codes raised by `@kvc/sim`.
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | a configuration value is out of range or malformed (topology, seeds, capacity, a cost parameter...) |
 * | `INVALID_TRACE` | a trace file is malformed: the error names the file, the line and the field |
 * | `TRACE_NOT_FOUND` | a trace path does not exist or cannot be read |
 * | `INVALID_FAULT` | a fault specification cannot be parsed |
 * | `UNAVAILABLE` | a policy needs a package API that is not available in this build |
 * | `ACCOUNTING` | a run ended with a turn neither completed nor failed (a simulator bug; never expected) |
 *
 * @example
 * ```ts
 * import { SimErrorCode } from '@kvc/sim'
 * SimErrorCode.InvalidTrace // 'INVALID_TRACE'
 * ```
 */
export const SimErrorCode = {
  InvalidOption: 'INVALID_OPTION',
  InvalidTrace: 'INVALID_TRACE',
  TraceNotFound: 'TRACE_NOT_FOUND',
  InvalidFault: 'INVALID_FAULT',
  Unavailable: 'UNAVAILABLE',
  Accounting: 'ACCOUNTING',
} as const

/**
 * One of the string codes of {@link SimErrorCode}.
 *
 * @example
 * ```ts
 * import type { SimErrorCode } from '@kvc/sim'
 * const code: SimErrorCode = 'INVALID_TRACE'
 * ```
 */
export type SimErrorCode = (typeof SimErrorCode)[keyof typeof SimErrorCode]

/** Where in a trace file a problem was found. *
 * @example
 * ```ts
 * import type { TraceLocation } from '@kvc/sim'
 * const where: TraceLocation = { file: 'trace.jsonl', line: 12, field: 'hash_ids' }
 * ```
 */
export interface TraceLocation {
  /** The file as given by the caller. */
  readonly file: string
  /** 1-based line number (CSV: the header is line 1). */
  readonly line: number
  /** The offending field (`hash_ids`, `timestamp`, `ContextTokens`...). */
  readonly field: string
}

/**
 * The only error type `@kvc/sim` throws for bad input. `code` says what went wrong, `value`
 * carries the offending value, and trace errors carry `location` (file, line, field), which the
 * message also spells out.
 *
 * @example
 * ```ts
 * import { SimError, parseTopology } from '@kvc/sim'
 * try {
 *   parseTopology('2P0D')
 * } catch (err) {
 *   if (err instanceof SimError) console.log(err.code, err.message) // INVALID_OPTION ...
 * }
 * ```
 */
export class SimError extends Error {
  override readonly name = 'SimError'
  /** Machine-readable reason. */
  readonly code: SimErrorCode
  /** The offending value. */
  readonly value: unknown
  /** For `INVALID_TRACE`: file, line and field. */
  readonly location: TraceLocation | undefined

  constructor(code: SimErrorCode, message: string, value?: unknown, location?: TraceLocation) {
    super(message)
    this.code = code
    this.value = value
    this.location = location
  }
}

/**
 * A trace error naming the file, the line and the field.
 *
 * @example
 * ```ts
 * import { traceError } from '@kvc/sim'
 * const err = traceError('t.jsonl', 3, 'hash_ids', 'must be an array of non-negative integers', 'x')
 * err.message // 't.jsonl:3: field "hash_ids": must be an array of non-negative integers (got "x")'
 * ```
 */
export function traceError(
  file: string,
  line: number,
  field: string,
  what: string,
  value?: unknown,
): SimError {
  const shown = value === undefined ? '' : ` (got ${preview(value)})`
  return new SimError(
    SimErrorCode.InvalidTrace,
    `${file}:${line}: field "${field}": ${what}${shown}`,
    value,
    {
      file,
      line,
      field,
    },
  )
}

/**
 * A value shown in an error message as its source text, unquoted: a trace's `1e400`, which
 * JSON reads as `Infinity` and would otherwise print as `null`.
 *
 * @example
 * ```ts
 * import { RawText, traceError } from '@kvc/sim'
 * traceError('t.jsonl', 3, 'input_length', 'is too large', new RawText('1e400')).message
 * // 't.jsonl:3: field "input_length": is too large (got 1e400)'
 * ```
 */
export class RawText {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text
  }
}

function preview(value: unknown): string {
  let s: string
  if (value instanceof RawText || (typeof value === 'number' && !Number.isFinite(value))) {
    s = String(value)
  } else {
    try {
      s = typeof value === 'string' ? JSON.stringify(value) : (JSON.stringify(value) ?? String(value))
    } catch {
      s = String(value)
    }
  }
  return s.length > 60 ? `${s.slice(0, 57)}...` : s
}

/**
 * Throws `INVALID_OPTION` unless `ok`.
 *
 * @example
 * ```ts
 * import { checkOption } from '@kvc/sim'
 * checkOption(3 > 0, 'seeds must be positive', 3) // no throw
 * ```
 */
export function checkOption(ok: boolean, message: string, value: unknown): asserts ok {
  if (!ok) throw new SimError(SimErrorCode.InvalidOption, message, value)
}
