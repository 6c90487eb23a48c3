import { SimError, SimErrorCode } from '../errors/simError.js'
import { DEFAULT_SLO, type Slo } from '../metrics/slo.js'

/**
 * Parse `--seeds`: a count (`3` → 1, 2, 3), a list (`1,5,9`) or a range (`1..5`, `1-5`).
 *
 * @example
 * ```ts
 * import { parseSeeds } from '@kvc/sim'
 * parseSeeds('3') // [1, 2, 3]
 * parseSeeds('7,9') // [7, 9]
 * parseSeeds('2..4') // [2, 3, 4]
 * ```
 */
export function parseSeeds(s: string): number[] {
  const t = s.trim()
  const bad = () =>
    new SimError(
      SimErrorCode.InvalidOption,
      `--seeds ${JSON.stringify(s)}: use a count (3), a list (1,5,9) or a range (1..5)`,
      s,
    )
  if (/^\d+$/.test(t)) {
    const n = Number(t)
    if (n < 1 || n > 1000)
      throw new SimError(SimErrorCode.InvalidOption, `--seeds ${t}: give 1 to 1000 seeds`, s)
    return Array.from({ length: n }, (_, i) => i + 1)
  }
  const range = /^(\d+)\s*(?:\.\.|-)\s*(\d+)$/.exec(t)
  if (range !== null) {
    const a = Number(range[1])
    const b = Number(range[2])
    if (b < a || b - a >= 1000) throw bad()
    return Array.from({ length: b - a + 1 }, (_, i) => a + i)
  }
  const parts = t.split(',').map((x) => x.trim())
  if (parts.length === 0 || parts.some((x) => !/^\d+$/.test(x))) throw bad()
  const list = parts.map(Number)
  if (new Set(list).size !== list.length)
    throw new SimError(SimErrorCode.InvalidOption, `--seeds ${t}: seeds repeat`, s)
  return list
}

/**
 * Parse `--capacity`: tokens per worker (`200000`, `200k`, `1.5M`) or `unlimited` (`Infinity`).
 *
 * @example
 * ```ts
 * import { parseCapacity } from '@kvc/sim'
 * parseCapacity('200k') // 200000
 * parseCapacity('unlimited') // Infinity
 * ```
 */
export function parseCapacity(s: string): number {
  const t = s.trim().toLowerCase()
  if (t === 'unlimited' || t === 'inf' || t === 'infinity') return Number.POSITIVE_INFINITY
  const m = /^(\d+(?:\.\d+)?)\s*([km]?)$/.exec(t)
  if (m === null) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `--capacity ${JSON.stringify(s)}: use tokens per worker (200000, 200k, 1.5M) or unlimited`,
      s,
    )
  }
  const v = Math.round(Number(m[1]) * (m[2] === 'k' ? 1e3 : m[2] === 'm' ? 1e6 : 1))
  if (v < 1) throw new SimError(SimErrorCode.InvalidOption, `--capacity ${s}: must be at least 1 token`, s)
  return v
}

/**
 * Parse a positive finite number option (`--time-scale 10`).
 *
 * @example
 * ```ts
 * import { parsePositive } from '@kvc/sim'
 * parsePositive('--time-scale', '10') // 10
 * ```
 */
export function parsePositive(flag: string, s: string): number {
  const v = Number(s)
  if (s.trim() === '' || !Number.isFinite(v) || v <= 0) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `${flag} ${JSON.stringify(s)}: must be a positive number`,
      s,
    )
  }
  return v
}

/**
 * Parse a non-negative integer option (`--bootstrap 200`).
 *
 * @example
 * ```ts
 * import { parseCount } from '@kvc/sim'
 * parseCount('--bootstrap', '200') // 200
 * ```
 */
export function parseCount(flag: string, s: string, min = 0): number {
  const t = s.trim()
  if (!/^\d+$/.test(t) || Number(t) < min) {
    throw new SimError(
      SimErrorCode.InvalidOption,
      `${flag} ${JSON.stringify(s)}: must be an integer >= ${min}`,
      s,
    )
  }
  return Number(t)
}

/**
 * Parse `--slo`: `ttft=<time>,tpot=<time>` in either order, each optional (the other keeps its
 * default, {@link DEFAULT_SLO}); a time is seconds (`2`, `2s`) or milliseconds (`25ms`).
 *
 * @example
 * ```ts
 * import { parseSlo } from '@kvc/sim'
 * parseSlo('ttft=2s,tpot=25ms') // { ttftS: 2, tpotS: 0.025 }
 * parseSlo('tpot=50ms') // { ttftS: 2, tpotS: 0.05 }
 * ```
 */
export function parseSlo(s: string): Slo {
  const bad = (why: string) =>
    new SimError(
      SimErrorCode.InvalidOption,
      `--slo ${JSON.stringify(s)}: ${why} (use ttft=<time>,tpot=<time>, e.g. ttft=2s,tpot=25ms)`,
      s,
    )
  let ttftS = DEFAULT_SLO.ttftS
  let tpotS = DEFAULT_SLO.tpotS
  const seen = new Set<string>()
  const parts = s
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '')
  if (parts.length === 0) throw bad('empty')
  for (const part of parts) {
    const m = /^(ttft|tpot)\s*=\s*(\d+(?:\.\d+)?)\s*(ms|s)?$/i.exec(part)
    if (m === null) throw bad(`"${part}" not understood`)
    const key = m[1]!.toLowerCase()
    if (seen.has(key)) throw bad(`${key} given twice`)
    seen.add(key)
    const v = Number(m[2]) / (m[3]?.toLowerCase() === 'ms' ? 1000 : 1)
    if (!(v > 0)) throw bad(`${key} must be positive`)
    if (key === 'ttft') ttftS = v
    else tpotS = v
  }
  return { ttftS, tpotS }
}
