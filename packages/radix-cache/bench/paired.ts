/**
 * Paired timing for ratios that must survive a busy machine: the two sides run alternately, a
 * short batch each, many rounds; each round gives one ratio, and the median (with the quartiles)
 * is reported. Slow drift (other processes, turbo, GC pressure) hits both sides of a round alike.
 */

export interface PairedResult {
  readonly name: string
  /** Median of (time of `b`) / (time of `a`) over the rounds. */
  readonly median: number
  readonly q1: number
  readonly q3: number
  readonly rounds: number
  /** Median time per call of each side, in microseconds. */
  readonly aMicros: number
  readonly bMicros: number
}

function time(fn: () => void, n: number): number {
  const t0 = performance.now()
  for (let i = 0; i < n; i++) fn()
  return performance.now() - t0
}

function quantile(sorted: readonly number[], q: number): number {
  const i = (sorted.length - 1) * q
  const lo = Math.floor(i)
  const hi = Math.ceil(i)
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (i - lo)
}

/** Time `b` against `a`: `rounds` rounds of about `batchMs` per side. */
export function paired(
  name: string,
  a: () => void,
  b: () => void,
  options: { readonly rounds?: number; readonly batchMs?: number } = {},
): PairedResult {
  const rounds = options.rounds ?? 60
  const batchMs = options.batchMs ?? 10
  // Warm up and calibrate the batch size on `a`.
  let n = 1
  for (let k = 0; k < 3; k++) time(b, 1)
  while (time(a, n) < batchMs && n < 1 << 24) n *= 2
  const ratios: number[] = []
  const ta: number[] = []
  const tb: number[] = []
  for (let r = 0; r < rounds; r++) {
    // Alternate which side goes first, so neither always runs on a warmer cache.
    let ya: number
    let yb: number
    if (r % 2 === 0) {
      ya = time(a, n)
      yb = time(b, n)
    } else {
      yb = time(b, n)
      ya = time(a, n)
    }
    ratios.push(yb / ya)
    ta.push(ya / n)
    tb.push(yb / n)
  }
  const s = ratios.slice().sort((p, q) => p - q)
  const sa = ta.slice().sort((p, q) => p - q)
  const sb = tb.slice().sort((p, q) => p - q)
  return {
    name,
    median: quantile(s, 0.5),
    q1: quantile(s, 0.25),
    q3: quantile(s, 0.75),
    rounds,
    aMicros: quantile(sa, 0.5) * 1000,
    bMicros: quantile(sb, 0.5) * 1000,
  }
}

export function formatPaired(r: PairedResult, aName: string, bName: string): string {
  return `${r.name}: ${bName} / ${aName} = ${r.median.toFixed(3)}x (quartiles ${r.q1.toFixed(3)}-${r.q3.toFixed(3)}, ${r.rounds} rounds; ${r.aMicros.toFixed(1)} vs ${r.bMicros.toFixed(1)} us per call)`
}
