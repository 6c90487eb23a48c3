/**
 * JSON helpers for SGLang bodies: `bootstrap_room` is a 63-bit integer, beyond what a JavaScript
 * number holds exactly, so bodies carry it as a `bigint` and are serialized with
 * {@link stringifyJson}, which writes every `bigint` as a plain JSON integer.
 *
 * @module
 */
import { randomBytes } from 'node:crypto'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'

/**
 * `JSON.stringify` that writes `bigint` values as JSON integers (exactly, any size) instead of
 * throwing.
 *
 * @throws {@link WorkerBindingsError} `INVALID_ARGUMENT` (never retried: the same value fails
 * again) when `value` cannot be written as JSON: it nests deeper than the engine's stack allows
 * (`cause` is the `RangeError`), holds a cycle (`cause` is the `TypeError`), or is not a JSON
 * value at all (`undefined`, a function).
 *
 * @example
 * ```ts
 * import { stringifyJson } from '@kvc/worker-bindings'
 * stringifyJson({ bootstrap_room: 9223372036854775807n }) // '{"bootstrap_room":9223372036854775807}'
 * ```
 */
export function stringifyJson(value: unknown): string {
  let marker: string | undefined
  let text: string | undefined
  try {
    text = JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v !== 'bigint') return v
      marker ??= `\u0000kvc-bigint-${randomBytes(8).toString('hex')}:`
      return `${marker}${v.toString()}`
    })
  } catch (cause) {
    const why =
      cause instanceof RangeError
        ? 'it nests arrays or objects too deeply'
        : `${(cause as Error)?.message ?? String(cause)}`
    throw new WorkerBindingsError('INVALID_ARGUMENT', `the value cannot be written as JSON: ${why}`, {
      cause,
    })
  }
  if (text === undefined) {
    throw new WorkerBindingsError(
      'INVALID_ARGUMENT',
      `the value cannot be written as JSON: a ${typeof value} is not a JSON value`,
      { value: typeof value },
    )
  }
  if (marker === undefined) return text
  // JSON.stringify escapes the NUL of the marker as \u0000.
  const escaped = JSON.stringify(marker).slice(1, -1)
  const re = new RegExp(`"${escapeRegExp(escaped)}(-?\\d+)"`, 'g')
  return text.replace(re, '$1')
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/**
 * Reads the integer (or list of integers) of a top-level field of a JSON object text exactly, as
 * `bigint`s, when `JSON.parse` would round it (above 2^53). Returns `undefined` when the field is
 * absent, `null`, or not an integer / list of integers.
 *
 * @example
 * ```ts
 * import { readBigIntField } from '@kvc/worker-bindings'
 * readBigIntField('{"bootstrap_room": 9223372036854775807}', 'bootstrap_room') // 9223372036854775807n
 * ```
 */
export function readBigIntField(text: string, field: string): bigint | bigint[] | undefined {
  const re = new RegExp(`"${escapeRegExp(field)}"\\s*:\\s*(\\[[-\\d\\s,]*\\]|-?\\d+)(?=\\s*[,}\\]])`)
  const m = re.exec(text)
  if (m === null) return undefined
  const raw = m[1]!
  if (raw.startsWith('[')) {
    const inner = raw.slice(1, -1).trim()
    if (inner.length === 0) return []
    return inner.split(',').map((s) => BigInt(s.trim()))
  }
  return BigInt(raw)
}
