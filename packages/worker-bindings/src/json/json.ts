/**
 * JSON helpers for SGLang bodies: `bootstrap_room` is a 63-bit integer, beyond what a JavaScript
 * number holds exactly, so bodies carry it as a `bigint` and are serialized with
 * {@link stringifyJson}, which writes every `bigint` as a plain JSON integer.
 *
 * @module
 */
import { randomBytes } from 'node:crypto'

/**
 * `JSON.stringify` that writes `bigint` values as JSON integers (exactly, any size) instead of
 * throwing.
 *
 * @example
 * ```ts
 * import { stringifyJson } from '@kvc/worker-bindings'
 * stringifyJson({ bootstrap_room: 9223372036854775807n }) // '{"bootstrap_room":9223372036854775807}'
 * ```
 */
export function stringifyJson(value: unknown): string {
  let marker: string | undefined
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== 'bigint') return v
    marker ??= `\u0000kvc-bigint-${randomBytes(8).toString('hex')}:`
    return `${marker}${v.toString()}`
  })
  if (text === undefined) {
    throw new TypeError('value is not serializable as JSON')
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
