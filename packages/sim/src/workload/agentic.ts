import { Prng } from '../engine/prng.js'
import { checkOption } from '../errors/simError.js'
import type { TurnSpec, Workload } from './types.js'

/**
 * Options of the built-in agentic session generator. Every default is calibrated to the research
 * prototype's SWE-bench trace (52 sessions, 4,449 requests, inter-turn gap p10/p50/p90/p99 =
 * 1.6/2.5/7.8/25.1 s, max 261 s, peak session inputs 30–60K tokens, a shared system prompt;
 * `docs/design/prototype.md#setup`); the README's "Workloads" section gives the reasoning for each.
 *
 * @example
 * ```ts
 * import type { AgenticWorkloadOptions } from '@kvc/sim'
 * const opts: AgenticWorkloadOptions = { seed: 7, sessions: 10 }
 * ```
 */
export interface AgenticWorkloadOptions {
  /** Seed of the workload's own random streams (the trial seed). */
  readonly seed: number
  /** Sessions (default 52). */
  readonly sessions?: number
  /** Tokens of the system prompt and tool schemas every session starts with (default 6,000). */
  readonly sharedPrefixTokens?: number
  /** Median / log-sd of the first turn's task description (default 1,500 / 0.6). */
  readonly taskTokensMedian?: number
  readonly taskTokensSigma?: number
  /** Median / log-sd / bounds of a later turn's append: tool output, observations (default 190 / 1.1 / [8, 12,000]). */
  readonly appendMedian?: number
  readonly appendSigma?: number
  readonly appendMin?: number
  readonly appendMax?: number
  /** Median / log-sd / bounds of a turn's output (default 60 / 0.9 / [1, 2,048]). */
  readonly outputMedian?: number
  readonly outputSigma?: number
  readonly outputMin?: number
  readonly outputMax?: number
  /** A session ends before its prompt would exceed a peak drawn uniformly in this range (default 30,000–60,000). */
  readonly peakInputMin?: number
  readonly peakInputMax?: number
  /** Hard cap on turns per session (default 400). */
  readonly maxTurnsPerSession?: number
  /**
   * Every session has exactly this many turns (a fixed-shape benchmark such as 2,200 sessions ×
   * 20 turns); the peak input and `maxTurnsPerSession` then do not end a session. Default: unset,
   * sessions end at their drawn peak.
   */
  readonly turnsPerSession?: number
  /**
   * Think time between turns, seconds, as an inverse CDF: `[quantile, seconds]` points,
   * interpolated log-linearly (default `[[0, 0.8], [0.1, 1.6], [0.5, 2.5], [0.9, 7.8], [0.99, 25.1], [1, 261]]`).
   */
  readonly gapQuantiles?: readonly (readonly [number, number])[]
  /** Mean spacing of session starts, seconds (Poisson; default 5). */
  readonly sessionStartMeanS?: number
  /** Token ids are drawn in `[0, vocabSize)` (default 151,936, Qwen3's vocabulary). */
  readonly vocabSize?: number
}

/**
 * The default think-time quantiles (seconds), from the research prototype's SWE-bench trace
 * (`docs/design/prototype.md#time-scale`):
 * p10/p50/p90/p99 = 1.6/2.5/7.8/25.1 s and max 261 s; the 0.8 s floor is a choice.
 *
 * @example
 * ```ts
 * import { DEFAULT_GAP_QUANTILES } from '@kvc/sim'
 * DEFAULT_GAP_QUANTILES[2] // [0.5, 2.5]
 * ```
 */
export const DEFAULT_GAP_QUANTILES: readonly (readonly [number, number])[] = Object.freeze([
  [0, 0.8],
  [0.1, 1.6],
  [0.5, 2.5],
  [0.9, 7.8],
  [0.99, 25.1],
  [1, 261],
] as const)

/**
 * Draw from an inverse CDF given as `[quantile, value]` points with log-linear interpolation.
 *
 * @example
 * ```ts
 * import { DEFAULT_GAP_QUANTILES, sampleQuantiles } from '@kvc/sim'
 * sampleQuantiles(DEFAULT_GAP_QUANTILES, 0.5) // 2.5
 * ```
 */
export function sampleQuantiles(points: readonly (readonly [number, number])[], u: number): number {
  for (let i = 1; i < points.length; i++) {
    const [q1, v1] = points[i]!
    if (u <= q1 || i === points.length - 1) {
      const [q0, v0] = points[i - 1]!
      const f = q1 === q0 ? 0 : Math.min(1, Math.max(0, (u - q0) / (q1 - q0)))
      return Math.exp(Math.log(v0) + f * (Math.log(v1) - Math.log(v0)))
    }
  }
  return points[points.length - 1]![1]
}

function clampRound(x: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, Math.round(x)))
}

/**
 * The built-in agentic workload (the default of `kvc-sim`, so the main command needs no
 * download): sessions that share a system prompt, then grow turn by turn — each prompt is the
 * previous prompt, its output, and an append (tool output) — with think times between turns.
 * Deterministic in `seed`: the same seed gives the same sessions, tokens and think times.
 *
 * @example
 * ```ts
 * import { generateAgenticWorkload } from '@kvc/sim'
 * const w = generateAgenticWorkload({ seed: 1 })
 * console.log(w.sessions, w.turns.length) // 52 sessions, ≈4,400 turns
 * ```
 */
export function generateAgenticWorkload(options: AgenticWorkloadOptions): Workload {
  const o = {
    sessions: 52,
    sharedPrefixTokens: 6_000,
    taskTokensMedian: 1_500,
    taskTokensSigma: 0.6,
    appendMedian: 190,
    appendSigma: 1.1,
    appendMin: 8,
    appendMax: 12_000,
    outputMedian: 60,
    outputSigma: 0.9,
    outputMin: 1,
    outputMax: 2_048,
    peakInputMin: 30_000,
    peakInputMax: 60_000,
    maxTurnsPerSession: 400,
    gapQuantiles: DEFAULT_GAP_QUANTILES,
    sessionStartMeanS: 5,
    vocabSize: 151_936,
    ...options,
  }
  const intOpt = (name: string, v: number, min: number) =>
    checkOption(
      Number.isInteger(v) && v >= min,
      `agentic workload: ${name} must be an integer >= ${min}, got ${v}`,
      v,
    )
  intOpt('sessions', o.sessions, 1)
  intOpt('sharedPrefixTokens', o.sharedPrefixTokens, 0)
  intOpt('maxTurnsPerSession', o.maxTurnsPerSession, 1)
  intOpt('vocabSize', o.vocabSize, 2)
  const fixedTurns = options.turnsPerSession
  if (fixedTurns !== undefined) intOpt('turnsPerSession', fixedTurns, 1)
  checkOption(
    o.peakInputMin > 0 && o.peakInputMax >= o.peakInputMin,
    'agentic workload: need 0 < peakInputMin <= peakInputMax',
    [o.peakInputMin, o.peakInputMax],
  )
  checkOption(
    o.appendMin >= 1 && o.appendMax >= o.appendMin,
    'agentic workload: bad append bounds',
    o.appendMin,
  )
  checkOption(
    o.outputMin >= 1 && o.outputMax >= o.outputMin,
    'agentic workload: bad output bounds',
    o.outputMin,
  )
  checkOption(
    o.sessionStartMeanS >= 0,
    'agentic workload: sessionStartMeanS must be >= 0',
    o.sessionStartMeanS,
  )
  checkOption(
    o.gapQuantiles.length >= 2,
    'agentic workload: gapQuantiles needs at least two points',
    o.gapQuantiles,
  )

  const root = new Prng(o.seed, 'workload/agentic')
  const tokRng = root.fork('tokens')
  const shared = new Uint32Array(o.sharedPrefixTokens)
  for (let i = 0; i < shared.length; i++) shared[i] = tokRng.int(o.vocabSize)

  const turns: TurnSpec[] = []
  const streams: Uint32Array[] = []
  const promptEnd: number[] = []
  const outputEnd: number[] = []
  const streamOf: number[] = []
  const labels: string[] = []
  const startRng = root.fork('starts')
  let start = 0
  for (let s = 0; s < o.sessions; s++) {
    const rng = root.fork(`session/${s}`)
    if (s > 0) start += startRng.exponential(o.sessionStartMeanS * 1000)
    const peak = rng.uniform(o.peakInputMin, o.peakInputMax)
    // Plan the session's lengths first, then fill one token stream.
    const appends: number[] = []
    const outputs: number[] = []
    const gaps: number[] = []
    let len =
      o.sharedPrefixTokens + clampRound(rng.lognormal(o.taskTokensMedian, o.taskTokensSigma), 1, 64_000)
    appends.push(len - o.sharedPrefixTokens)
    for (;;) {
      const out = clampRound(rng.lognormal(o.outputMedian, o.outputSigma), o.outputMin, o.outputMax)
      outputs.push(out)
      gaps.push(sampleQuantiles(o.gapQuantiles, rng.next()) * 1000)
      const next = clampRound(rng.lognormal(o.appendMedian, o.appendSigma), o.appendMin, o.appendMax)
      if (
        fixedTurns === undefined
          ? appends.length >= o.maxTurnsPerSession || len + out + next > peak
          : appends.length >= fixedTurns
      )
        break
      len += out + next
      appends.push(next)
    }
    const total = len + outputs[outputs.length - 1]!
    const stream = new Uint32Array(total)
    stream.set(shared)
    for (let i = o.sharedPrefixTokens; i < total; i++) stream[i] = rng.int(o.vocabSize)
    streams.push(stream)
    labels.push(`s${s}`)
    let p = o.sharedPrefixTokens
    let prevEnd = 0
    for (let t = 0; t < appends.length; t++) {
      p += appends[t]!
      const input = p
      const out = outputs[t]!
      const id = turns.length
      turns.push({
        id,
        session: s,
        turnIndex: t,
        arrivalMs: t === 0 ? Math.round(start) : 0,
        thinkMs: t === 0 ? 0 : Math.round(gaps[t - 1]!),
        inputLength: input,
        outputLength: out,
        appendTokens: t === 0 ? input : appends[t]!,
        reuseFraction: t === 0 ? (s === 0 ? 0 : o.sharedPrefixTokens / input) : prevEnd / input,
      })
      streamOf.push(s)
      promptEnd.push(input)
      outputEnd.push(input + out)
      p = input + out
      prevEnd = p
    }
  }
  return {
    name: 'agentic',
    source: 'built-in generator (calibrated to the research prototype’s SWE-bench trace)',
    arrivalMode: 'closed',
    sessions: o.sessions,
    sessionLabels: labels,
    turns,
    notes: [],
    tokenScale: 1,
    suggestedPageSize: undefined,
    promptTokens: (id) => streams[streamOf[id]!]!.subarray(0, promptEnd[id]!),
    outputTokens: (id) => streams[streamOf[id]!]!.subarray(promptEnd[id]!, outputEnd[id]!),
  }
}
