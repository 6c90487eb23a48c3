/**
 * Serialize a result as stable, readable JSON: numbers rounded to 6 significant digits,
 * `Infinity` written as the string `"inf"` (a percentile reached by failed turns) and `NaN` as
 * `null` (no data). The same result always gives the same bytes.
 *
 * @example
 * ```ts
 * import { toStableJson } from '@kvc/sim'
 * toStableJson({ a: 1 / 3, b: Infinity, c: Number.NaN }) // '{\n  "a": 0.333333,\n  "b": "inf",\n  "c": null\n}\n'
 * ```
 */
export function toStableJson(value: unknown): string {
  return `${JSON.stringify(
    value,
    (_k, v) => {
      if (typeof v !== 'number') return v
      if (Number.isNaN(v)) return null
      if (v === Number.POSITIVE_INFINITY) return 'inf'
      if (v === Number.NEGATIVE_INFINITY) return '-inf'
      if (Number.isInteger(v)) return v
      return Number(v.toPrecision(6))
    },
    2,
  )}\n`
}
